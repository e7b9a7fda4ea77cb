"""Load simulation: what an engine's loader does with every tensor of a draft checkpoint (headers only).

For each checkpoint tensor its fate (loaded into a parameter, as a shard of a stacked one, converted,
skipped by design, silently dropped, or raising with the engine's message); for each engine parameter
its source or the value it keeps when nothing writes it; shape mismatches; whether the config is
recognised; option flags and aux ids the engine ignores. Nothing reads tensor bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..checkpoint import FLAG_NAMES, Checkpoint, DraftSpec
from ..engines import EngineProfile, ParamSpec, resolve
from ..errors import UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable

CRITICAL_ROLES = ("decoder", "fc", "norm", "lm_head")
FATE_ORDER = ("raises", "dropped", "loaded-shard", "loaded", "converted", "skipped")
FLAG_TENSORS = {"norm_before_fc": "input_norm.weight", "fc_norm": "fc_norm."}
FLAG_SEVERITY = {"norm_before_fc": Severity.CRITICAL, "fc_norm": Severity.CRITICAL,
                 "norm_before_residual": Severity.CRITICAL, "norm_output": Severity.WARNING}


@dataclass(frozen=True)
class TensorFate:
    """One checkpoint tensor under the engine's loader."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    fate: str  # loaded | loaded-shard | converted | skipped | dropped | raises
    param: str | None = None
    shard: str | None = None
    reason: str = ""
    role: str = "other"
    expected_shape: tuple[int, ...] | None = None

    @property
    def shape_mismatch(self) -> bool:
        return self.expected_shape is not None and tuple(self.expected_shape) != tuple(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "dtype": self.dtype, "shape": list(self.shape), "fate": self.fate,
                "param": self.param, "shard": self.shard, "reason": self.reason, "role": self.role,
                "expected_shape": list(self.expected_shape) if self.expected_shape is not None else None,
                "shape_mismatch": self.shape_mismatch}


@dataclass(frozen=True)
class ParamSource:
    """One engine parameter and what fills it."""

    param: ParamSpec
    sources: tuple[str, ...]  # checkpoint keys written into it
    missing_shards: tuple[str, ...] = ()
    by_design: str | None = None  # why staying unwritten is expected (shared from the target, ...)

    @property
    def status(self) -> str:
        if self.sources and not self.missing_shards:
            return "loaded"
        if self.by_design and not self.sources:
            return "by-design"
        return "partial" if self.sources else "left-at-init"

    def to_dict(self) -> dict[str, Any]:
        return {**self.param.to_dict(), "sources": list(self.sources), "missing_shards": list(self.missing_shards),
                "status": self.status, "by_design": self.by_design}


@dataclass(frozen=True)
class LoadResult:
    """The simulated load of one checkpoint by one engine profile."""

    checkpoint: str
    engine: str
    label: str
    source: str
    recognised: bool
    fates: tuple[TensorFate, ...]
    params: tuple[ParamSource, ...]
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    mapping: dict[str, str] = field(default_factory=dict)  # checkpoint key -> engine parameter it is written into

    # -- views --------------------------------------------------------------------------
    def by_fate(self, fate: str) -> tuple[TensorFate, ...]:
        return tuple(f for f in self.fates if f.fate == fate)

    @property
    def dropped(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.by_fate("dropped"))

    @property
    def left_at_init(self) -> tuple[str, ...]:
        return tuple(p.param.name for p in self.params if p.status in ("left-at-init", "partial"))

    @property
    def loaded_keys(self) -> tuple[str, ...]:
        """Checkpoint keys whose bytes reach the engine (loaded, shard or converted)."""
        return tuple(f.key for f in self.fates if f.fate in ("loaded", "loaded-shard", "converted"))

    def loaded_state(self, ckpt: Checkpoint) -> dict[str, Any]:
        """The checkpoint tensors the engine actually takes, under their checkpoint names.

        Load it with ``strict=False`` into a reference draft that uses checkpoint names: what the
        engine drops stays at the module's init, as it would in the engine.
        """
        return {key: ckpt.read(key) for key in self.loaded_keys}

    def to_dict(self) -> dict[str, Any]:
        counts = {fate: len(self.by_fate(fate)) for fate in FATE_ORDER}
        return to_jsonable({
            "engine": self.engine, "label": self.label, "source": self.source, "recognised": self.recognised,
            "counts": counts, "tensors": [f.to_dict() for f in self.fates],
            "parameters": [p.to_dict() for p in self.params], "mapping": self.mapping, "notes": list(self.notes),
        })


def role_of(name: str) -> str:
    """Which part of the draft a tensor or parameter name belongs to."""
    leaf = name.split(".")[-1]
    if leaf in ("d2t", "t2d", "draft_id_to_target_id", "hot_token_id"):
        return "vocab"
    if "verifier_" in name:
        return "verifier"
    if "embed_tokens" in name:
        return "embed"
    if "lm_head" in name:
        return "lm_head"
    if "input_norm." in name or "fc_norm." in name or "aux_norm" in name:
        return "aux-norm"
    if name.startswith("fc.") or ".fc." in name:
        return "fc"
    if "midlayer." in name or "layers." in name:
        return "decoder"
    if name in ("norm.weight", "model.norm.weight"):
        return "norm"
    return "other"


def simulate_load(ckpt: Checkpoint, engine: EngineProfile | str, num_target_layers: int | None = None) -> LoadResult:
    """Run ``engine``'s key-to-parameter rule over ``ckpt``'s headers; findings for what goes wrong silently."""
    if num_target_layers is not None and (not isinstance(num_target_layers, int) or num_target_layers < 1):
        raise UsageError(f"--target-layers must be a positive number of target layers (got {num_target_layers})")
    profile = resolve(engine)
    spec = ckpt.spec
    params = profile.parameters(spec, ckpt.path)
    fates: list[TensorFate] = []
    written: dict[str, list[tuple[str, str | None]]] = {}
    for info in ckpt.tensors.values():
        route = profile.route(info.name, params, spec)
        expected = None
        if route.param in params:
            target = params[route.param]
            expected = target.shards.get(route.shard, target.shape) if route.shard else target.shape
            written.setdefault(route.param, []).append((info.name, route.shard))
        fates.append(TensorFate(info.name, info.dtype, info.shape, route.fate, route.param, route.shard,
                                route.reason, role_of(info.name), expected))
    sources = tuple(_param_source(p, written.get(p.name, []), profile, spec) for p in params.values())
    recognised = profile.recognises(ckpt.config)
    mapping = {f.key: f.param for f in fates if f.param and f.fate in ("loaded", "loaded-shard", "converted")}
    findings = _findings(ckpt, profile, spec, fates, sources, recognised, num_target_layers)
    return LoadResult(str(ckpt.path), profile.spec, profile.label, profile.source, recognised, tuple(fates),
                      sources, tuple(findings), profile.notes, mapping)


def _param_source(param: ParamSpec, writes: list[tuple[str, str | None]], profile: EngineProfile,
                  spec: DraftSpec) -> ParamSource:
    keys = tuple(k for k, _ in writes)
    missing = tuple(s for s in param.shards if s not in {sh for _, sh in writes}) if param.shards and writes else ()
    by_design = profile.shared(param.role, spec)
    if param.role == "vocab":
        by_design = by_design or "reported as vocab/d2t-missing when the mapping is needed"
    return ParamSource(param, keys, missing, by_design)


# -- findings --------------------------------------------------------------------------------
def _fix(ckpt: Checkpoint, profile: EngineProfile) -> str:
    return fix_command("convert", ckpt.path, "--to", profile.spec, "OUT")


def _findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
              sources: tuple[ParamSource, ...], recognised: bool, num_target_layers: int | None) -> list[Finding]:
    out: list[Finding] = []
    label, fix = profile.spec, _fix(ckpt, profile)
    missing = profile.speculators_missing(ckpt.config or {}) if spec.flavour == "speculators" else ()
    if not recognised and missing:
        out.append(Finding(
            "config/unrecognized", Severity.CRITICAL,
            f"{label} rejects this speculators config: it does not give {', '.join(missing)}",
            "vLLM validates a speculators config before serving it and stops with 'Invalid speculators config "
            "structure' (or 'Speculators verifier must name a remote model repository') when the speculative "
            "token count or the verifier's name is missing.",
            evidence={"flavour": spec.flavour, "missing": list(missing)}))
    elif not recognised:
        archs = list(spec.architectures)
        out.append(Finding(
            "config/unrecognized", Severity.CRITICAL,
            f"{label} does not recognise this config as an EAGLE-3 draft (architectures {archs})",
            profile.unrecognized_effect,
            evidence={"architectures": archs, "flavour": spec.flavour,
                      "accepted": sorted(profile.architectures) or None,
                      "speculators_types": sorted(profile.speculators_types) or None},
            fix=fix))
    layers = spec.num_hidden_layers or spec.num_decoder_layers
    if profile.max_layers and profile.too_many_layers and layers and layers > profile.max_layers:
        out.append(Finding("keys/raises", Severity.CRITICAL, f"{label} refuses a {layers}-layer draft",
                           profile.too_many_layers, evidence={"num_hidden_layers": layers, "max": profile.max_layers,
                                                              "message": profile.too_many_layers}))
    raising = [f for f in fates if f.fate == "raises"]
    if raising:
        out.append(Finding(
            "keys/raises", Severity.CRITICAL, f"{label} stops loading at {raising[0].key!r}",
            f"The loader raises: {raising[0].reason}",
            evidence={"tensors": [f.key for f in raising], "message": raising[0].reason}, fix=fix))
    dropped = [f for f in fates if f.fate == "dropped"]
    if dropped:
        severe = any(f.role in CRITICAL_ROLES for f in dropped)
        out.append(Finding(
            "keys/dropped", Severity.CRITICAL if severe else Severity.WARNING,
            f"{label} silently drops {len(dropped)} tensor{'s' if len(dropped) != 1 else ''}"
            + f" ({', '.join(sorted({f.role for f in dropped}))})",
            "These weights never reach the engine; the parameters they were meant for keep their init values "
            "and nothing is logged.",
            evidence={"tensors": [f.key for f in dropped], "reasons": {f.key: f.reason for f in dropped}},
            fix=fix))
    at_init = [s for s in sources if s.status in ("left-at-init", "partial") and s.param.role != "vocab"]
    if at_init:
        severe = any(s.param.role in CRITICAL_ROLES for s in at_init)
        out.append(Finding(
            "keys/left-at-init", Severity.CRITICAL if severe else Severity.WARNING,
            f"{len(at_init)} {label} parameter{'s' if len(at_init) != 1 else ''} never written: they keep their init values",
            "No checkpoint tensor maps to these parameters and the engine does not check.",
            evidence={"parameters": {s.param.name: {"init": s.param.init, "shape": list(s.param.shape),
                                                    "missing_shards": list(s.missing_shards)} for s in at_init}},
            fix=fix))
    mismatched = [f for f in fates if f.shape_mismatch and f.fate in ("loaded", "loaded-shard")]
    if mismatched:
        first = mismatched[0]
        out.append(Finding(
            "keys/shape-mismatch", Severity.CRITICAL,
            f"{len(mismatched)} tensor shape{'s' if len(mismatched) != 1 else ''} differ from {label}'s parameters",
            profile.shape_message.format(got=list(first.shape), want=list(first.expected_shape or ())),
            evidence={"tensors": {f.key: {"checkpoint": list(f.shape), "engine": list(f.expected_shape or ()),
                                          "param": f.param, "shard": f.shard} for f in mismatched},
                      "num_aux_engine": profile.num_aux(spec), "target_hidden_size": spec.target_hidden_size}))
    out += _vocab_shape_findings(ckpt, spec)
    out += _flag_findings(ckpt, profile, spec, fates, fix)
    out += _d2t_findings(ckpt, profile, spec)
    out += _aux_findings(ckpt, profile, num_target_layers)
    return out


def _vocab_shape_findings(ckpt: Checkpoint, spec: DraftSpec) -> list[Finding]:
    out = []
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    for leaf, want, what in (("d2t", n, "draft vocab N"), ("t2d", v, "target vocab V")):
        key = next((k for k in ckpt.tensors if k.split(".")[-1] == leaf), None)
        if key and want and ckpt.tensors[key].shape and ckpt.tensors[key].shape[0] != want:
            out.append(Finding(
                "keys/shape-mismatch", Severity.CRITICAL if leaf == "d2t" else Severity.WARNING,
                f"{key} has {ckpt.tensors[key].shape[0]} entries, the {what} is {want}",
                "A mapping of another length belongs to another vocabulary (stale mapping).",
                evidence={"tensor": key, "shape": list(ckpt.tensors[key].shape), "expected": want}))
    return out


def _flag_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
                   fix: str) -> list[Finding]:
    out = []
    for flag in FLAG_NAMES:
        marker = FLAG_TENSORS.get(flag)
        tensors = [k for k in ckpt.tensors if marker and (k.endswith(marker) if marker.endswith("weight") else marker in k)]
        on = spec.flag(flag) or bool(tensors)
        if not on:
            continue
        dropped = [f.key for f in fates if f.key in tensors and f.fate == "dropped"]
        if flag in profile.honoured_flags and not dropped:
            continue
        why = (f"{profile.spec} does not implement {flag}" if flag not in profile.honoured_flags else
               f"{profile.spec} implements {flag} only when the config sets it; the trained tensors are dropped")
        out.append(Finding(
            "config/flag-ignored", FLAG_SEVERITY[flag],
            f"{flag} is {'set' if spec.flag(flag) else 'implied by ' + ', '.join(tensors[:2])} but ignored by {profile.spec}",
            why + ": the draft computes something other than what it was trained to compute.",
            evidence={"flag": flag, "config_value": spec.flags.get(flag), "tensors": tensors, "dropped": dropped,
                      "honoured_flags": sorted(profile.honoured_flags)},
            fix=fix if flag in profile.honoured_flags else None))
    for flag, default in profile.flag_defaults.items():
        if spec.flavour != "speculators" or spec.flags.get(flag) is not None or default == spec.flag(flag):
            continue
        out.append(Finding(
            "config/flag-ignored", Severity.WARNING,
            f"{flag} is absent: {profile.spec} reads it as {str(default).lower()}",
            f"{profile.spec} defaults {flag} to {str(default).lower()} for speculators configs; the speculators "
            f"class default is {str(spec.flag(flag)).lower()}.",
            evidence={"flag": flag, "config_value": None, "engine_default": default},
            fix=fix))
    return out


def _d2t_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec) -> list[Finding]:
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if spec.has_d2t or not n or not v or n >= v:
        return []
    return [Finding(
        "vocab/d2t-missing", Severity.CRITICAL,
        f"draft vocab N={n} < V={v} but the checkpoint has no d2t",
        f"Under {profile.spec}: {profile.missing_d2t_use or profile.missing_d2t}; only ids below N can ever be "
        "proposed and almost none are right.",
        evidence={"draft_vocab_size": n, "vocab_size": v, "has_t2d": spec.has_t2d,
                  "engine_handling": profile.missing_d2t},
        fix=(fix_command("convert", ckpt.path, "--repair-d2t", "OUT") if spec.has_t2d else None))]


def _aux_findings(ckpt: Checkpoint, profile: EngineProfile, num_target_layers: int | None) -> list[Finding]:
    """config/aux-ids-ignored and config/aux-ids-shifted, from the aux-layer resolver (one source of truth)."""
    if not profile.aux_ids_sources and profile.kind == "training":
        return []
    from .aux_layers import resolve_aux_layers

    resolution = resolve_aux_layers(ckpt.spec, num_target_layers, profile, checkpoint=ckpt.path)
    return [f for f in resolution.findings if f.code in ("config/aux-ids-ignored", "config/aux-ids-shifted")]

"""Load simulation: what an engine's loader does with every tensor of a draft checkpoint (headers only).

For each checkpoint tensor its fate (loaded into a parameter, as a shard of a stacked one, converted,
skipped by design, silently dropped, or raising with the engine's message); for each engine parameter
its source or the value it keeps when nothing writes it; shape mismatches; whether the config is
recognised; option flags and aux ids the engine ignores. Nothing reads tensor bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..checkpoint import (
    FLAG_NAMES,
    Checkpoint,
    CheckpointLike,
    DraftSpec,
    as_checkpoint,
)
from ..engines import EngineProfile, ParamSpec, all_profiles, resolve
from ..errors import UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable
from ..engines.construct import ROPE_INCOMPLETE, config_rope_error, construct_error, layers_error
from ..engines.shard_order import SHARD_LISTING, listing_note, loader_order
from ..engines.stops import ServerStop, class_absent, config_rewrite

CRITICAL_ROLES = ("decoder", "fc", "norm", "lm_head")
FATE_ORDER = ("raises", "dropped", "loaded-shard", "loaded", "converted", "skipped", "not-reached")
FLAG_TENSORS = {"norm_before_fc": "input_norm.weight", "fc_norm": "fc_norm."}
FLAG_SEVERITY = {"norm_before_fc": Severity.CRITICAL, "fc_norm": Severity.CRITICAL,
                 "norm_before_residual": Severity.CRITICAL, "norm_output": Severity.WARNING}


@dataclass(frozen=True)
class TensorFate:
    """One checkpoint tensor under the engine's loader."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    fate: str  # loaded | loaded-shard | converted | skipped | dropped | raises | not-reached (executed, after a raise)
    param: str | None = None
    shard: str | None = None
    reason: str = ""
    role: str = "other"
    expected_shape: tuple[int, ...] | None = None
    log: str = ""  # what the engine logs for this key ("" when it says nothing)
    finding: str | None = None

    @property
    def shape_mismatch(self) -> bool:
        return self.expected_shape is not None and tuple(self.expected_shape) != tuple(self.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "dtype": self.dtype, "shape": list(self.shape), "fate": self.fate,
                "param": self.param, "shard": self.shard, "reason": self.reason, "role": self.role,
                "expected_shape": list(self.expected_shape) if self.expected_shape is not None else None,
                "shape_mismatch": self.shape_mismatch, "log": self.log}


@dataclass(frozen=True)
class ParamSource:
    """One engine parameter and what fills it."""

    param: ParamSpec
    sources: tuple[str, ...]  # checkpoint keys written into it
    missing_shards: tuple[str, ...] = ()
    by_design: str | None = None  # why staying unwritten is expected (shared from the target, ...)
    target: str | None = None  # the proposer installs the target's module here after load: how (None: it does not)

    @property
    def source(self) -> str:
        """What the served draft holds here: ``target`` (installed from it), ``checkpoint`` or ``init``."""
        if self.target:
            return "target"
        return "checkpoint" if self.sources and not self.missing_shards else "init"

    @property
    def status(self) -> str:
        if self.sources and not self.missing_shards:
            return "loaded"
        if self.by_design and not self.sources:
            return "by-design"
        return "partial" if self.sources else "left-at-init"

    def to_dict(self) -> dict[str, Any]:
        return {**self.param.to_dict(), "sources": list(self.sources), "missing_shards": list(self.missing_shards),
                "status": self.status, "by_design": self.by_design, "source": self.source, "target": self.target}


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
    missing_d2t: str | None = None  # no d2t although N < V: what the engine does with draft ids, in words
    draft_class: str = ""  # the engine class that loads this config
    release: str | None = None  # the release simulated (None: unversioned)
    path: str | None = None  # the runtime path assumed (vLLM v1/v2, SGLang cuda-graph/eager)
    origin: str = "simulated"  # simulated (the profile's rules) | executed (the engine's own load_weights ran)
    stand_ins: tuple[dict[str, str], ...] = ()  # executed: what replaced modules / state this machine lacks
    execution: dict[str, Any] | None = None  # executed: engine, root, module, phase, error, logs, seconds
    # the engine's error that stops the server without any key raising: transformers reading config.json ("config"),
    # the class's constructor ("construct") or the loader's strict check on unwritten parameters after load_weights ("strict-check")
    refused: str | None = None
    refused_at: str | None = None

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
    def report_notes(self) -> tuple[str, ...]:
        """The notes a report shows beside the findings: where the runtime paths differ, and the order a glob gave
        the shard files (the rest stay in the result)."""
        return tuple(n for n in self.notes if n.startswith("the runtime paths differ") or SHARD_LISTING in n)

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
            "missing_d2t": self.missing_d2t,
            "draft_class": self.draft_class, "release": self.release, "path": self.path,
            "origin": self.origin, "stand_ins": list(self.stand_ins), "execution": self.execution,
            "refused": self.refused, "refused_at": self.refused_at,
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


def simulate_load(draft: CheckpointLike, engine: EngineProfile | str | None = None, *,
                  target: CheckpointLike | None = None, num_target_layers: int | None = None,
                  shard_files: Sequence[str] = ()) -> LoadResult:
    """Run ``engine``'s key-to-parameter rule over the draft's headers; findings for what goes wrong silently.

    The target (or ``num_target_layers``) gives the layer count the engine's default aux layers depend on.
    ``shard_files``: the shard files in the order a loader elsewhere listed them (default: the release's order here).
    """
    if engine is None:
        raise UsageError("the load simulation needs an engine, e.g. engine='sglang==0.5.11'")
    if num_target_layers is not None and (not isinstance(num_target_layers, int) or num_target_layers < 1):
        raise UsageError(f"--target-layers must be a positive number of target layers (got {num_target_layers})")
    ckpt = as_checkpoint(draft)
    if num_target_layers is None and target is not None:
        num_target_layers = as_checkpoint(target).spec.num_hidden_layers
    profile = resolve(engine).for_config(ckpt.config)
    spec = ckpt.spec
    params = profile.parameters(spec, ckpt.path)
    fates: list[TensorFate] = []
    written: dict[str, list[tuple[str, str | None]]] = {}
    refused = construct_error(profile, ckpt.config) or layers_error(profile, spec)
    at_config = config_rope_error(ckpt.config) is not None  # transformers reads config.json before the class
    # the config is read (and vLLM may rewrite its architecture) before the class is resolved
    absent = None if at_config else config_rewrite(profile, spec) or class_absent(profile, spec)
    stopped = ("transformers refused config.json before the draft class was built" if at_config else
               "the draft class's constructor raised before load_weights" if refused else "")
    # a server that stops before the class exists has no parameter to fill; a class the release does not ship is
    # still walked with the class it would fall back to (what --execute runs), its one finding the stop
    built = not stopped
    for info in loader_order(ckpt, profile.shard_order, profile.tensor_order, shard_files):  # as the loader yields
        if stopped:
            fates.append(TensorFate(info.name, info.dtype, info.shape, "not-reached", reason=f"never read: {stopped}",
                                    role=role_of(info.name)))
            continue
        route = profile.route(info.name, params, spec)
        if route.fate == "raises":
            stopped = f"the loader raised at {info.name!r} first"
        expected = None
        if route.param in params:
            param = params[route.param]
            expected = param.shards.get(route.shard, param.shape) if route.shard else param.shape
            written.setdefault(route.param, []).append((info.name, route.shard))
        fates.append(TensorFate(info.name, info.dtype, info.shape, route.fate, route.param, route.shard,
                                route.reason, role_of(info.name), expected, route.log, route.finding))
    sources = tuple(_param_source(p, written.get(p.name, []), profile, spec) for p in params.values()) if built else ()
    recognised = profile.recognises(ckpt.config)
    mapping = {f.key: f.param for f in fates if f.param and f.fate in ("loaded", "loaded-shard", "converted")}
    refused_at = ("config" if at_config else "construct") if refused else None
    if refused is None and profile.strict_load and not any(f.fate == "raises" for f in fates):
        refused = strict_refusal(fates, sources)
        refused_at = "strict-check" if refused else None
    if absent is not None:
        findings = [_class_absent(profile, spec, absent)]
    elif refused_at in ("config", "construct"):
        findings = [_refused(ckpt, profile, refused or "", refused_at or "")]
    else:
        findings = _findings(ckpt, profile, spec, fates, sources, recognised, num_target_layers, refused)
    if profile.path:  # every finding says which runtime path it assumed
        findings = [replace(f, detail=f"{f.detail} (Assumed runtime path: {profile.path_label}.)".strip(),
                            evidence={**f.evidence, "runtime_path": profile.path_label}) for f in findings]
    listing = listing_note(ckpt, profile.shard_order, profile.spec, shard_files)
    notes = (profile.notes + _release_notes(profile) + _path_notes(ckpt, profile, num_target_layers)
             + ((listing,) if listing else ()))
    return LoadResult(str(ckpt.path), profile.spec, profile.label, profile.source, recognised, tuple(fates),
                      sources, tuple(findings), notes, mapping, missing_d2t(profile, spec), profile.draft_class,
                      profile.release, profile.path, refused=refused, refused_at=refused_at)


def strict_refusal(fates: Sequence[TensorFate], sources: Sequence[ParamSource]) -> str | None:
    """vLLM 0.9.0's model loader after load_weights: every parameter the returned names miss stops the server (a
    d2t taken and then dropped counts as loaded)."""
    discarded = any(f.finding == "keys/d2t-discarded" for f in fates)
    unwritten = [s.param.name for s in sources if not s.sources and not (discarded and s.param.role == "vocab")]
    return f"ValueError: Following weights were not initialized from checkpoint: {set(unwritten)}" if unwritten else None


def _refused(ckpt: Checkpoint, profile: EngineProfile, error: str, stage: str) -> Finding:
    """transformers refuses the config, or the draft class's constructor raises for it: the server stops, no key is
    read."""
    if stage == "config":
        title, detail = (f"{profile.spec} cannot build the draft: transformers refuses its config.json",
                         f"Reading config.json (AutoConfig) raises before {profile.draft_class} is built: {error}")
    else:
        title, detail = (f"{profile.spec} cannot build the draft: its constructor raises",
                         f"{profile.draft_class} raises while it is built, before load_weights reads any key: {error}")
    return Finding("keys/raises", Severity.CRITICAL, title, detail,
                   evidence={"message": error, "stage": stage, "draft_class": profile.draft_class},
                   fix=_fix(ckpt, profile))


def _class_absent(profile: EngineProfile, spec: DraftSpec, stop: ServerStop) -> Finding:
    """The release does not ship the draft's class: the server stops, nothing is loaded (what would be dropped or
    left at init is moot, and no key renaming fixes it)."""
    arch = spec.architectures[0] if spec.architectures else None
    evidence = {"architectures": list(spec.architectures), "error": stop.error, "stage": stop.stage,
                "accepted": sorted(profile.all_architectures())}
    if "rewritten_to" in stop.details:
        return Finding(
            "config/unrecognized", Severity.CRITICAL,
            f"{profile.spec} rewrites the draft's {stop.details['model_type']} config to {stop.details['resolved']}: "
            "the server stops at start",
            f"The speculative config rewrites a draft of model_type {stop.details['model_type']!r} to "
            f"{stop.details['rewritten_to']} (whatever architecture it names: {arch}), the EAGLE-3 method prefixes "
            f"it, and the release has no such class: {stop.error}",
            evidence={**evidence, **stop.details}, fix=stop.remedy)
    return Finding(
        "config/unrecognized", Severity.CRITICAL, f"{profile.spec} does not ship the draft class {arch}: the server "
        "stops at start", f"The draft worker resolves config.architectures and stops: {stop.error}",
        evidence=evidence, fix=stop.remedy)


def _release_notes(profile: EngineProfile) -> tuple[str, ...]:
    out = []
    if profile.assumed:
        out.append(profile.assumed)
    if profile.path:
        how = profile.path_notes.get(profile.path, "")
        out.append(f"runtime path {profile.path_label}" + (f": {how}" if how else ""))
    return tuple(out)


def _path_notes(ckpt: Checkpoint, profile: EngineProfile, num_target_layers: int | None) -> tuple[str, ...]:
    """Where another runtime path of the same release captures other aux layers, say so."""
    if not profile.path or profile.kind != "serving":
        return ()
    from .aux_layers import resolve_aux_layers

    mine = resolve_aux_layers(ckpt.spec, num_target_layers, profile, checkpoint=ckpt.path)
    out = []
    for other in profile.other_paths():
        theirs = resolve_aux_layers(ckpt.spec, num_target_layers, other, checkpoint=ckpt.path)
        if (theirs.source, theirs.requested) != (mine.source, mine.requested):
            def said(r: Any) -> str:
                got = f"HF {list(r.captured)}" if r.captured or r.num_target_layers else "its default layers"
                return f"{got} (from {r.source})"
            out.append(f"the runtime paths differ: on {profile.path} the engine captures {said(mine)}; on "
                       f"{other.path} ({other.path_notes.get(other.path or '', '')}) it captures {said(theirs)}")
    return tuple(out)


def compare_engines(draft: CheckpointLike, *, target: CheckpointLike | None = None,
                    engines: Iterable[EngineProfile | str] | None = None) -> list[dict[str, Any]]:
    """The load simulation under each engine (default: every known profile), one summary row per engine:
    recognised, tensors dropped, parameters left at init, finding codes."""
    ckpt, tgt = as_checkpoint(draft), as_checkpoint(target)
    rows = []
    for engine in all_profiles() if engines is None else engines:
        r = simulate_load(ckpt, engine, target=tgt)
        rows.append({"engine": r.engine, "recognised": r.recognised, "dropped": len(r.dropped),
                     "left at init": len(r.left_at_init), "findings": [f.code for f in r.findings]})
    return rows


def _param_source(param: ParamSpec, writes: list[tuple[str, str | None]], profile: EngineProfile,
                  spec: DraftSpec) -> ParamSource:
    keys = tuple(k for k, _ in writes)
    missing = tuple(s for s in param.shards if s not in {sh for _, sh in writes}) if param.shards and writes else ()
    target = profile.shares(param, spec, bool(keys) and not missing)
    by_design = target
    if param.role == "vocab":
        by_design = by_design or "judged by the vocab probe (vocab/d2t-missing when the mapping is needed)"
    return ParamSource(param, keys, missing, by_design, target)


# -- findings --------------------------------------------------------------------------------
def _fix(ckpt: Checkpoint, profile: EngineProfile) -> str:
    """``convert --to`` when it can write a checkpoint the engine loads; else why not, and what serves the draft."""
    blocker = convert_blocker(ckpt, profile)
    if blocker is None:
        return fix_command("convert", ckpt.path, "--to", profile.spec, "OUT")
    if blocker.startswith(ROPE_INCOMPLETE):
        return f"no release loads this draft: {blocker}"
    return f"no conversion makes {profile.spec} load this draft ({blocker}): serve it with another release"


def convert_blocker(ckpt: Checkpoint, profile: EngineProfile) -> str | None:
    """Why ``convert --to`` cannot write a checkpoint ``profile`` loads faithfully (None: it can), from the config
    it would write and the engine's route for every renamed key (what convert refuses, decided before writing)."""
    from ..checkpoint import build_spec
    from ..convert_config import convert_config

    config, _, refusals, _ = convert_config(ckpt.config or {}, ckpt.spec, profile)
    if refusals:
        return refusals[0]
    names = {k: profile.native_name(k) for k in ckpt.tensors}
    spec = build_spec(config, {names[k]: replace(info, name=names[k]) for k, info in ckpt.tensors.items()})
    if not profile.recognises(config):
        return "it does not recognise any config convert writes"
    params = profile.parameters(spec, ckpt.path)
    for key, new in names.items():
        route = profile.route(new, params, spec)
        full_vocab = (spec.draft_vocab_size or spec.vocab_size) == spec.vocab_size
        if route.fate in ("dropped", "raises") and not (key.split(".")[-1] in ("d2t", "t2d") and full_vocab):
            return f"{key} would be {route.fate}: {route.reason[:120]}"
    return None


def _findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
              sources: tuple[ParamSource, ...], recognised: bool, num_target_layers: int | None,
              refused: str | None = None) -> list[Finding]:
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
    if not profile.verified:
        from ..engines.versions import newest_release

        newest = newest_release(profile.name)
        out.append(Finding(
            "engine/unverified-version", Severity.WARNING,
            f"{profile.name}=={profile.release} is newer than the newest release read ({newest}): simulated as "
            f"{profile.name} {profile.range_label}",
            f"eagle3lens has read every {profile.name} release up to {newest}; this one may load drafts differently.",
            evidence={"release": profile.release, "newest_verified": str(newest), "simulated_as": profile.label}))
    for what, message in profile.missing_required(spec):
        out.append(Finding("keys/raises", Severity.CRITICAL, f"{label} cannot build the draft: the config has no {what}",
                           f"The engine's constructor reads config.{what}: {message}",
                           evidence={"config_field": what, "message": message}, fix=fix))
    if profile.missing_d2t == "raises" and not spec.has_d2t:
        out.append(Finding("keys/raises", Severity.CRITICAL, f"{label} stops at start: the checkpoint has no d2t",
                           profile.missing_d2t_error, evidence={"message": profile.missing_d2t_error},
                           fix=fix_command("convert", ckpt.path, "--repair-d2t", "OUT") if spec.has_t2d else None))
    if refused:
        out.append(Finding(
            "keys/raises", Severity.CRITICAL, f"{label} stops after load_weights: parameters no key wrote",
            f"load_weights returns the names it loaded and the model loader's strict check refuses the rest: {refused}",
            evidence={"message": refused, "stage": "strict-check",
                      "parameters": [s.param.name for s in sources if not s.sources]},
            fix=fix_command("convert", ckpt.path, "--repair-d2t", "OUT") if _repairable(spec) and all(
                s.param.role == "vocab" for s in sources if not s.sources) else
            f"serve with another {profile.name} release (0.9.1 and later keep an unwritten parameter at its init)"))
    raising = [f for f in fates if f.fate == "raises"]
    if raising:
        out.append(Finding(
            "keys/raises", Severity.CRITICAL, f"{label} stops loading at {raising[0].key!r}",
            f"The loader raises: {raising[0].reason}",
            evidence={"tensors": [f.key for f in raising], "message": raising[0].reason}, fix=fix))
    discarded = [f for f in fates if f.finding == "keys/d2t-discarded"]
    n_draft, n_target = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if discarded and n_draft and n_target and n_draft < n_target:
        out.append(Finding(
            "keys/d2t-discarded", Severity.CRITICAL,
            f"{label} discards d2t: draft ids {0}..{n_draft - 1} are used raw as target ids",
            discarded[0].reason + f"; with N={n_draft} < V={n_target} every proposal is the wrong token.",
            evidence={"tensors": [f.key for f in discarded], "draft_vocab_size": n_draft, "vocab_size": n_target},
            fix=f"serve with another {profile.name} release (d2t is kept from 0.9.1)"))
    dropped = [f for f in fates if f.fate == "dropped" and f not in discarded]
    if dropped:
        severe = any(f.role in CRITICAL_ROLES for f in dropped)
        logged = {f.key: f.log for f in dropped if f.log}
        silent = len(logged) < len(dropped)
        how = "" if not logged else " (a warning logged for some)" if silent else " with a logged warning"
        out.append(Finding(
            "keys/dropped", Severity.CRITICAL if severe else Severity.WARNING,
            f"{label} {'silently ' if not logged else ''}drops {len(dropped)} tensor{'s' if len(dropped) != 1 else ''}"
            + f" ({', '.join(sorted({f.role for f in dropped}))}){how}",
            "These weights never reach the engine; the parameters they were meant for keep their init values"
            + (" and nothing is logged." if not logged else
               "; the engine logs a warning for each" + (" of some" if silent else "") + " (look for it in the log)."),
            evidence={"tensors": [f.key for f in dropped], "reasons": {f.key: f.reason for f in dropped},
                      "logged": logged},
            fix=fix))
    out += _served_mapping_findings(ckpt, profile, spec, sources, bool(refused))
    at_init = [s for s in sources if s.status in ("left-at-init", "partial") and s.param.role != "vocab"]
    if at_init and not raising and not refused:  # a load that stops leaves nothing to serve
        severe = any(s.param.role in CRITICAL_ROLES for s in at_init)
        renamed = suppliable(ckpt, profile, spec)
        absent = [s.param.name for s in at_init if s.param.name not in renamed]
        out.append(Finding(
            "keys/left-at-init", Severity.CRITICAL if severe else Severity.WARNING,
            f"{len(at_init)} {label} parameter{'s' if len(at_init) != 1 else ''} never written: they keep their init values",
            "No checkpoint tensor maps to these parameters and the engine does not check."
            + (f" The checkpoint holds no tensor for {', '.join(absent[:4])}{' ...' if len(absent) > 4 else ''} "
               "under any name: renaming keys cannot supply it." if absent else ""),
            evidence={"parameters": {s.param.name: {"init": s.param.init, "shape": list(s.param.shape),
                                                    "missing_shards": list(s.missing_shards)} for s in at_init},
                      "absent_from_checkpoint": absent},
            fix=_absent_fix(absent, profile) if absent else fix))
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
    out += _aux_findings(ckpt, profile, num_target_layers)
    return out


def _repairable(spec: DraftSpec) -> bool:
    """No d2t under a reduced vocabulary, but a t2d ``convert --repair-d2t`` rebuilds it from."""
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    return spec.has_t2d and not spec.has_d2t and bool(n and v and n < v)


def _served_mapping_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec,
                             sources: tuple[ParamSource, ...], refused: bool) -> list[Finding]:
    """What the served draft maps its ids and scores with when the checkpoint leaves it to the engine: a mapping at
    its init although a t2d holds the real one, a target head installed under a reduced draft vocabulary."""
    out = []
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if _repairable(spec) and not refused and profile.missing_d2t in ("identity", "raw-index"):
        out.append(Finding(
            "keys/d2t-unwritten", Severity.CRITICAL,
            f"{profile.spec} serves this draft without its vocabulary mapping: the checkpoint has t2d but no d2t",
            f"{profile.missing_d2t_use or profile.missing_d2t}: with N = {n} < V = {v} only target ids below {n} are "
            "ever proposed, each for the wrong draft token. The loader skips t2d; the mapping it holds is "
            "recoverable from it.",
            evidence={"draft_vocab_size": n, "vocab_size": v, "t2d": True, "d2t": False,
                      "engine_mapping": profile.missing_d2t},
            fix=fix_command("convert", ckpt.path, "--repair-d2t", "OUT")))
    for s in sources:
        if s.param.role == "lm_head" and s.target and not s.sources and n and v and n < v:
            out.append(Finding(
                "keys/head-vocab-mismatch", Severity.CRITICAL,
                f"{profile.spec} gives this reduced-vocabulary draft the target's {v}-row lm_head",
                f"The checkpoint has no lm_head, so the proposer installs the target's ({s.target}). The draft's "
                f"logits processor is built for N = {n}: it keeps the first {n} of the head's {v} logits (target ids "
                f"0..{n - 1}) and scatters them to arange(N) + draft_id_to_target_id, so each draft id is scored by "
                "another token's logit.",
                evidence={"parameter": s.param.name, "draft_vocab_size": n, "vocab_size": v, "shared": s.target},
                fix="the checkpoint has no lm_head.weight: re-export it from training (a speculators draft: the "
                    "target's lm_head rows nonzero(t2d))"))
    return out


def _absent_fix(absent: list[str], profile: EngineProfile) -> str:
    """A parameter no checkpoint tensor can fill: re-export it; a bias no trainer writes: another release."""
    if all(name.endswith(".bias") for name in absent):
        return (f"no trainer writes {absent[0]}: serve with a {profile.name} release whose draft class does not "
                "create it")
    return f"the checkpoint has no tensor for {absent[0]}{' (and more)' if len(absent) > 1 else ''}: re-export it " \
           "from training"


def suppliable(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec) -> set[str]:
    """The parameters (whole, every shard) the checkpoint's tensors would fill under the engine's native names, as
    ``convert --to`` renames them: what a conversion can supply and what only a re-export can."""
    params = profile.parameters(spec, ckpt.path)
    shards: dict[str, set[str | None]] = {}
    for key in ckpt.tensors:
        route = profile.route(profile.native_name(key), params, spec)
        if route.param in params and route.fate in ("loaded", "loaded-shard", "converted"):
            shards.setdefault(route.param, set()).add(route.shard)
    return {name for name, got in shards.items() if not params[name].shards or set(params[name].shards) <= got}


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
        alias = [a for a in profile.flag_aliases.get(flag, ("use_aux_norm",) if flag == "fc_norm" else ())
                 if spec.aliases.get(a)]
        where = [w for w, v in (("top-level", spec.flags.get(flag)), ("eagle_config", spec.nested_flags.get(flag)))
                 if v] + alias
        on = bool(where) or bool(tensors)
        if not on:
            continue
        read = profile.flag_on(spec, flag)
        dropped = [f.key for f in fates if f.key in tensors and f.fate == "dropped"]
        if flag in profile.honoured_flags and read and not dropped:
            continue
        sources = profile.flag_sources.get(flag, ("top-level",))
        if flag not in profile.honoured_flags:
            why = f"{profile.spec} ({profile.draft_class}) does not implement {flag}"
        elif where and not read:
            why = (f"{profile.spec} reads {flag} only from the {' / '.join(sources)} config; this config sets it in "
                   f"{', '.join(where)}")
            if spec.flavour == "speculators" and profile.speculators_forwards is not None \
                    and flag not in profile.speculators_forwards:
                why = f"{profile.spec}'s speculators adapter does not forward {flag} to the config it builds"
        else:
            why = f"{profile.spec} implements {flag} only when the config sets it; the trained tensors are dropped"
        shown = ("set in " + ", ".join(where)) if where else "implied by " + ", ".join(tensors[:2])
        out.append(Finding(
            "config/flag-ignored", FLAG_SEVERITY[flag],
            f"{flag} is {shown} but ignored by {profile.spec}",
            why + ": the draft computes something other than what it was trained to compute.",
            evidence={"flag": flag, "config_value": spec.flags.get(flag), "eagle_config_value": spec.nested_flags.get(flag),
                      "set_in": where, "engine_reads": list(sources) if flag in profile.honoured_flags else [],
                      "tensors": tensors, "dropped": dropped, "honoured_flags": sorted(profile.honoured_flags)},
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


def missing_d2t(profile: EngineProfile, spec: DraftSpec) -> str | None:
    """What ``profile`` does with draft ids when the checkpoint has no d2t although N < V (None otherwise).

    An observation, not a finding: the vocab probe owns ``vocab/d2t-missing`` and reports it with each
    engine's consequence and the repair.
    """
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if spec.has_d2t or not n or not v or n >= v:
        return None
    return profile.missing_d2t_use or profile.missing_d2t


def _aux_findings(ckpt: Checkpoint, profile: EngineProfile, num_target_layers: int | None) -> list[Finding]:
    """config/aux-ids-ignored and config/aux-ids-shifted, from the aux-layer resolver (one source of truth)."""
    if not profile.aux_ids_sources and profile.kind == "training":
        return []
    from .aux_layers import resolve_aux_layers

    resolution = resolve_aux_layers(ckpt, num_target_layers, profile)
    return [f for f in with_convert_fix(resolution.findings, ckpt, profile)
            if f.code in ("config/aux-ids-ignored", "config/aux-ids-shifted")]


def with_convert_fix(findings: Iterable[Finding], ckpt: Checkpoint, profile: EngineProfile) -> tuple[Finding, ...]:
    """``findings`` whose fix is the plain ``convert --to`` given the fix that works (see :func:`_fix`)."""
    plain = fix_command("convert", ckpt.path, "--to", profile.spec, "OUT")
    fix = _fix(ckpt, profile) if any(f.fix == plain for f in findings) else plain
    return tuple(replace(f, fix=fix) if f.fix == plain else f for f in findings)

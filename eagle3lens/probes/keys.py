"""The keys probe: a release's load walk (``served.load``) turned into ``keys/*`` and ``config/*`` findings.

What goes wrong silently when the loader meets the checkpoint: tensors dropped, parameters left at init, a load
that raises, shapes that differ, option flags and aux ids the engine ignores. Nothing reads tensor bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..checkpoint import FLAG_NAMES, Checkpoint, CheckpointLike, DraftSpec, as_checkpoint
from ..engines import EngineProfile, all_profiles
from ..engines.config_writer import convert_blocker, convert_fix, with_convert_fix
from ..engines.stops import ServerStop
from ..findings import Finding, Severity, fix_command
from ..served.aux_layers import resolve_aux_layers
from ..served.load import (CRITICAL_ROLES, FATE_ORDER, LoadResult, ParamSource, TensorFate, load_inputs, missing_d2t,
                           missing_d2t_fix, repairable, role_of, stop_before_build, strict_fix, strict_refusal, walk)

FLAG_TENSORS = {"norm_before_fc": "input_norm.weight", "fc_norm": "fc_norm."}
FLAG_SEVERITY = {"norm_before_fc": Severity.CRITICAL, "fc_norm": Severity.CRITICAL,
                 "norm_before_residual": Severity.CRITICAL, "norm_output": Severity.WARNING}


def simulate_load(draft: CheckpointLike, engine: EngineProfile | str | None = None, *,
                  target: CheckpointLike | None = None, num_target_layers: int | None = None,
                  shard_files: Sequence[str] = ()) -> LoadResult:
    """Run ``engine``'s key-to-parameter rule over the draft's headers; findings for what goes wrong silently.

    The target (or ``num_target_layers``) gives the layer count the engine's default aux layers depend on.
    ``shard_files``: the shard files in the order a loader elsewhere listed them (default: the release's order here).
    """
    ckpt, profile, num_target_layers = load_inputs(draft, engine, target, num_target_layers)
    load = walk(ckpt, profile, num_target_layers, shard_files)
    return replace(load, findings=tuple(judge_load(ckpt, profile, load, num_target_layers)))


def judge_load(ckpt: Checkpoint, profile: EngineProfile, load: LoadResult,
               num_target_layers: int | None) -> list[Finding]:
    """The findings of one walk: the stop before the class is built, the refusal, or what the load leaves wrong."""
    spec = ckpt.spec
    absent = stop_before_build(ckpt, profile)
    if absent is not None:
        findings = [_class_absent(profile, spec, absent)]
    elif load.refused_at in ("config", "construct"):
        findings = [_refused(ckpt, profile, load.refused or "", load.refused_at or "")]
    else:
        findings = _findings(ckpt, profile, spec, list(load.fates), load.params, load.recognised, num_target_layers,
                             load.refused)
    if profile.path:  # every finding says which runtime path it assumed
        findings = [replace(f, detail=f"{f.detail} (Assumed runtime path: {profile.path_label}.)".strip(),
                            evidence={**f.evidence, "runtime_path": profile.path_label}) for f in findings]
    return findings


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
                   fix=convert_fix(ckpt, profile))


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


# -- findings --------------------------------------------------------------------------------
def _findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
              sources: tuple[ParamSource, ...], recognised: bool, num_target_layers: int | None,
              refused: str | None = None) -> list[Finding]:
    """The keys/* and config/* findings of one walk, in the order a reader meets them."""
    fix = convert_fix(ckpt, profile)
    out = _recognition_findings(ckpt, profile, spec, recognised, fix)
    out += _raise_findings(ckpt, profile, spec, fates, sources, refused, fix)
    out += _fate_findings(ckpt, profile, spec, fates, sources, refused, fix)
    out += _vocab_shape_findings(ckpt, spec)
    out += _flag_findings(ckpt, profile, spec, fates, fix)
    out += _aux_findings(ckpt, profile, num_target_layers)
    return out


def _recognition_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, recognised: bool,
                          fix: str) -> list[Finding]:
    """The release does not recognise the config; the release is newer than any read."""
    out: list[Finding] = []
    label = profile.spec
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
    return out


def _raise_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
                    sources: tuple[ParamSource, ...], refused: str | None, fix: str) -> list[Finding]:
    """Where the load stops: a config field the constructor needs, no d2t, the strict check, a raising key."""
    out: list[Finding] = []
    label = profile.spec
    for what, message in profile.missing_required(spec):
        out.append(Finding("keys/raises", Severity.CRITICAL, f"{label} cannot build the draft: the config has no {what}",
                           f"The engine's constructor reads config.{what}: {message}",
                           evidence={"config_field": what, "message": message}, fix=fix))
    if profile.missing_d2t == "raises" and not spec.has_d2t:
        out.append(Finding("keys/raises", Severity.CRITICAL, f"{label} stops at start: the checkpoint has no d2t",
                           profile.missing_d2t_error, evidence={"message": profile.missing_d2t_error},
                           fix=missing_d2t_fix(ckpt)))
    if refused:
        out.append(Finding(
            "keys/raises", Severity.CRITICAL, f"{label} stops after load_weights: parameters no key wrote",
            f"load_weights returns the names it loaded and the model loader's strict check refuses the rest: {refused}",
            evidence={"message": refused, "stage": "strict-check",
                      "parameters": [s.param.name for s in sources if not s.sources]},
            fix=strict_fix(ckpt, profile, sources)))
    raising = [f for f in fates if f.fate == "raises"]
    if raising:
        out.append(Finding(
            "keys/raises", Severity.CRITICAL, f"{label} stops loading at {raising[0].key!r}",
            f"The loader raises: {raising[0].reason}",
            evidence={"tensors": [f.key for f in raising], "message": raising[0].reason}, fix=fix))
    return out


def _fate_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec, fates: list[TensorFate],
                   sources: tuple[ParamSource, ...], refused: str | None, fix: str) -> list[Finding]:
    """What a load that goes through leaves wrong: d2t discarded, tensors dropped, parameters never written,
    shapes that differ."""
    out: list[Finding] = []
    label = profile.spec
    raising = [f for f in fates if f.fate == "raises"]
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
    return out


def _served_mapping_findings(ckpt: Checkpoint, profile: EngineProfile, spec: DraftSpec,
                             sources: tuple[ParamSource, ...], refused: bool) -> list[Finding]:
    """What the served draft maps its ids and scores with when the checkpoint leaves it to the engine: a mapping at
    its init although a t2d holds the real one, a target head installed under a reduced draft vocabulary."""
    out = []
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if repairable(spec) and not refused and profile.missing_d2t in ("identity", "raw-index"):
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


def _aux_findings(ckpt: Checkpoint, profile: EngineProfile, num_target_layers: int | None) -> list[Finding]:
    """config/aux-ids-ignored and config/aux-ids-shifted, from the aux-layer resolver (one source of truth)."""
    if not profile.aux_ids_sources and profile.kind == "training":
        return []
    resolution = resolve_aux_layers(ckpt, num_target_layers, profile)
    return [f for f in with_convert_fix(resolution.findings, ckpt, profile)
            if f.code in ("config/aux-ids-ignored", "config/aux-ids-shifted")]


# moved to served.load / engines.config_writer; kept here for one release
__all__ = ["CRITICAL_ROLES", "FATE_ORDER", "FLAG_SEVERITY", "FLAG_TENSORS", "LoadResult", "ParamSource", "TensorFate",
           "compare_engines", "convert_blocker", "judge_load", "missing_d2t", "role_of", "simulate_load",
           "strict_refusal", "suppliable", "with_convert_fix"]

"""The load walk: what a release's loader does with every tensor of a draft checkpoint (headers only, served layer).

For each checkpoint tensor its fate (loaded into a parameter, as a shard of a stacked one, converted, skipped by
design, silently dropped, or raising with the engine's message); for each engine parameter its source or the value it
keeps when nothing writes it; whether the config is recognised; where the server stops first. Facts only: the keys
probe (``probes.keys``) turns a walk into ``keys/*`` findings. Nothing reads tensor bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint import Checkpoint, CheckpointLike, DraftSpec, as_checkpoint
from ..engines import EngineProfile, ParamSpec, resolve
from ..engines.config_writer import convert_fix
from ..engines.construct import config_rope_error, construct_error, layers_error
from ..engines.shard_order import SHARD_LISTING, listing_note, loader_order
from ..engines.stops import ServerStop, class_absent, config_rewrite
from ..errors import UsageError
from ..findings import Finding, fix_command, to_jsonable

CRITICAL_ROLES = ("decoder", "fc", "norm", "lm_head")
FATE_ORDER = ("raises", "dropped", "loaded-shard", "loaded", "converted", "skipped", "not-reached")


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


def load_inputs(draft: CheckpointLike, engine: EngineProfile | str | None, target: CheckpointLike | None,
                num_target_layers: int | None) -> tuple[Checkpoint, EngineProfile, int | None]:
    """The checkpoint, the release's profile for its config and the target's layer count, checked."""
    if engine is None:
        raise UsageError("the load simulation needs an engine, e.g. engine='sglang==0.5.11'")
    if num_target_layers is not None and (not isinstance(num_target_layers, int) or num_target_layers < 1):
        raise UsageError(f"--target-layers must be a positive number of target layers (got {num_target_layers})")
    ckpt = as_checkpoint(draft)
    if num_target_layers is None and target is not None:
        num_target_layers = as_checkpoint(target).spec.num_hidden_layers
    return ckpt, resolve(engine).for_config(ckpt.config), num_target_layers


def walk_load(draft: CheckpointLike, engine: EngineProfile | str | None = None, *,
              target: CheckpointLike | None = None, num_target_layers: int | None = None,
              shard_files: Sequence[str] = ()) -> LoadResult:
    """Run ``engine``'s key-to-parameter rule over the draft's headers (facts: ``findings`` stays empty).

    The target (or ``num_target_layers``) gives the layer count the engine's default aux layers depend on.
    ``shard_files``: the shard files in the order a loader elsewhere listed them (default: the release's order here).
    """
    ckpt, profile, num_target_layers = load_inputs(draft, engine, target, num_target_layers)
    return walk(ckpt, profile, num_target_layers, shard_files)


def walk(ckpt: Checkpoint, profile: EngineProfile, num_target_layers: int | None,
         shard_files: Sequence[str] = ()) -> LoadResult:
    """:func:`walk_load` on inputs already checked."""
    spec = ckpt.spec
    params = profile.parameters(spec, ckpt.path)
    fates: list[TensorFate] = []
    written: dict[str, list[tuple[str, str | None]]] = {}
    refused = construct_error(profile, ckpt.config) or layers_error(profile, spec)
    at_config = config_rope_error(ckpt.config) is not None  # transformers reads config.json before the class
    # the config is read (and vLLM may rewrite its architecture) before the class is resolved
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
    listing = listing_note(ckpt, profile.shard_order, profile.spec, shard_files)
    notes = (profile.notes + _release_notes(profile) + _path_notes(ckpt, profile, num_target_layers)
             + ((listing,) if listing else ()))
    return LoadResult(str(ckpt.path), profile.spec, profile.label, profile.source, recognised, tuple(fates),
                      sources, (), notes, mapping, missing_d2t(profile, spec), profile.draft_class,
                      profile.release, profile.path, refused=refused, refused_at=refused_at)


def stop_before_build(ckpt: Checkpoint, profile: EngineProfile) -> ServerStop | None:
    """The release rewrites the draft's config to a class it lacks, or ships no class for it: the server stops at
    start, before the class is built (None: it builds a class, or transformers refuses config.json first)."""
    if config_rope_error(ckpt.config) is not None:  # transformers reads config.json before the class is resolved
        return None
    return config_rewrite(profile, ckpt.spec) or class_absent(profile, ckpt.spec)


def strict_refusal(fates: Sequence[TensorFate], sources: Sequence[ParamSource]) -> str | None:
    """vLLM 0.9.0's model loader after load_weights: every parameter the returned names miss stops the server (a
    d2t taken and then dropped counts as loaded)."""
    discarded = any(f.finding == "keys/d2t-discarded" for f in fates)
    unwritten = [s.param.name for s in sources if not s.sources and not (discarded and s.param.role == "vocab")]
    return f"ValueError: Following weights were not initialized from checkpoint: {set(unwritten)}" if unwritten else None


def strict_fix(ckpt: Checkpoint, profile: EngineProfile, sources: Sequence[ParamSource]) -> str:
    """What removes the strict check's refusal: rebuild d2t when only the mapping is unwritten, else a release that
    keeps an unwritten parameter at its init."""
    if repairable(ckpt.spec) and all(s.param.role == "vocab" for s in sources if not s.sources):
        return fix_command("convert", ckpt.path, "--repair-d2t", "OUT")
    return f"serve with another {profile.name} release (0.9.1 and later keep an unwritten parameter at its init)"


def missing_d2t_fix(ckpt: Checkpoint) -> str | None:
    """A release that stops without d2t: rebuilt from t2d when the checkpoint has one."""
    return fix_command("convert", ckpt.path, "--repair-d2t", "OUT") if ckpt.spec.has_t2d else None


def raises_fix(ckpt: Checkpoint, profile: EngineProfile, load: LoadResult) -> str | None:
    """The fix of the first ``keys/raises`` finding the keys probe gives this load (None: none raises), in its order:
    a refusal before the class is built, a config field the constructor needs, no d2t, the strict check, a key."""
    if load.refused_at not in ("config", "construct") and stop_before_build(ckpt, profile) is not None:
        return None
    spec = ckpt.spec
    if load.refused_at in ("config", "construct") or profile.missing_required(spec):
        return convert_fix(ckpt, profile)
    if profile.missing_d2t == "raises" and not spec.has_d2t:
        return missing_d2t_fix(ckpt)
    if load.refused:
        return strict_fix(ckpt, profile, load.params)
    return convert_fix(ckpt, profile) if load.by_fate("raises") else None


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
    from ..served.aux_layers import resolve_aux_layers

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


def _param_source(param: ParamSpec, writes: list[tuple[str, str | None]], profile: EngineProfile,
                  spec: DraftSpec) -> ParamSource:
    keys = tuple(k for k, _ in writes)
    missing = tuple(s for s in param.shards if s not in {sh for _, sh in writes}) if param.shards and writes else ()
    target = profile.shares(param, spec, bool(keys) and not missing)
    by_design = target
    if param.role == "vocab":
        by_design = by_design or "judged by the vocab probe (vocab/d2t-missing when the mapping is needed)"
    return ParamSource(param, keys, missing, by_design, target)


def missing_d2t(profile: EngineProfile, spec: DraftSpec) -> str | None:
    """What ``profile`` does with draft ids when the checkpoint has no d2t although N < V (None otherwise).

    An observation, not a finding: the vocab probe owns ``vocab/d2t-missing`` and reports it with each
    engine's consequence and the repair.
    """
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    if spec.has_d2t or not n or not v or n >= v:
        return None
    return profile.missing_d2t_use or profile.missing_d2t


def repairable(spec: DraftSpec) -> bool:
    """No d2t under a reduced vocabulary, but a t2d ``convert --repair-d2t`` rebuilds it from."""
    n, v = spec.draft_vocab_size or spec.lm_head_rows, spec.vocab_size
    return spec.has_t2d and not spec.has_d2t and bool(n and v and n < v)


__all__ = ["CRITICAL_ROLES", "FATE_ORDER", "LoadResult", "ParamSource", "TensorFate", "load_inputs", "missing_d2t",
           "raises_fix", "repairable", "role_of", "strict_refusal", "walk", "walk_load"]

"""Aux-layer resolver: which target layers an engine actually captures for a draft, vs the ones it was trained with.

Everything is stated in HF ``hidden_states`` indexing: index k is the stream entering decoder layer k
(0 = embeddings, k = output of layer k-1). Engines capture only inputs of decoder layers, so an index
outside ``0 .. L-1`` captures nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..aux_ids import trained_with
from ..checkpoint import CheckpointLike, DraftSpec, as_checkpoint
from ..engines import EngineProfile, own_loader, resolve
from ..findings import Finding, Severity, fix_command, to_jsonable

# Which convention each config source is written in (FACTS §5): dflash ids are output-of-layer (+1).
SOURCE_CONVENTION = {"dflash": "output"}


def describe_layer(index: int, num_layers: int | None) -> str:
    """Human wording of an HF hidden_states index."""
    if num_layers is None:
        return f"input of decoder layer {index}" if index else "embeddings (input of decoder layer 0)"
    if index == 0:
        return "embeddings (input of decoder layer 0)"
    if 0 < index < num_layers:
        return f"input of decoder layer {index} (output of layer {index - 1})"
    if index == num_layers:
        return f"output of the last layer {num_layers - 1} (pre-norm): no engine captures it"
    return f"no such layer (target has {num_layers})"


@dataclass(frozen=True)
class AuxResolution:
    """The aux layers an engine captures for a draft, the layers it was trained with, and what disagrees."""

    engine: str
    num_target_layers: int | None
    source: str  # config source the engine read ("top-level", "eagle_config", "dflash") or "default" / "disabled"
    ids_read: tuple[int, ...]  # ids as written in that source
    convention: str  # "input" | "output" (how the engine reads them)
    requested: tuple[int, ...]  # HF indices the engine asks for (after its convention), in list order
    captured: tuple[int, ...]  # HF indices actually captured: in range, deduplicated, layer order
    trained_with: tuple[int, ...]  # HF indices the draft was trained with (from its own flavour's convention)
    trained_source: str
    target_hidden_size: int | None
    fc_in_features: int | None
    findings: tuple[Finding, ...] = field(default=())

    @property
    def feature_width(self) -> int | None:
        """Width of the concatenated aux feature the engine will feed (n_captured · H_t)."""
        return len(self.captured) * self.target_hidden_size if self.target_hidden_size else None

    def captured_as_inputs(self) -> tuple[str, ...]:
        return tuple(describe_layer(k, self.num_target_layers) for k in self.captured)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "engine": self.engine, "num_target_layers": self.num_target_layers, "source": self.source,
            "ids_read": self.ids_read, "convention": self.convention, "requested": self.requested,
            "captured": self.captured, "captured_as": self.captured_as_inputs(), "trained_with": self.trained_with,
            "trained_source": self.trained_source, "target_hidden_size": self.target_hidden_size,
            "fc_in_features": self.fc_in_features, "feature_width": self.feature_width,
            "findings": [f.to_dict() for f in self.findings]})


def _ignored_fix(profile: EngineProfile, checkpoint: str | Path) -> str:
    """convert when the engine reads some config field (it writes the ids there); else only the launch can help."""
    if profile.aux_ids_sources:
        return fix_command("convert", checkpoint, "--to", profile.spec, "OUT")
    eager = [p for p, over in profile.paths.items() if dict(over).get("aux_ids_sources")]
    return (f"launch with --disable-cuda-graph ({profile.name}'s {eager[0]} path reads the ids), or serve with a "
            "release that reads them" if eager else "serve with a release that reads the config's aux ids")


def resolve_aux_layers(draft: CheckpointLike | DraftSpec, num_target_layers: int | None = None,
                       engine: EngineProfile | str | None = None, *, target: CheckpointLike | None = None,
                       checkpoint: str | Path | None = None) -> AuxResolution:
    """The target layers ``engine`` captures for a draft (a checkpoint, its path or its ``DraftSpec``), with findings.

    ``engine`` None: the loader the draft's config flavour is written for. ``target`` (or ``num_target_layers``)
    gives the target's layer count; without either (no target at hand) defaults and range checks cannot be
    computed, only the ids the engine reads and the convention it reads them in.
    ``checkpoint`` is the draft's path as the findings' fix commands should name it (default: the draft's own
    path, ``CKPT`` for a bare spec).
    """
    if isinstance(draft, DraftSpec):
        spec, where = draft, "CKPT"
    else:
        ckpt = as_checkpoint(draft)
        spec, where = ckpt.spec, str(ckpt.path)
    checkpoint = where if checkpoint is None else checkpoint
    if num_target_layers is None and target is not None:
        num_target_layers = as_checkpoint(target).spec.num_hidden_layers
    profile = own_loader(spec.flavour) if engine is None else resolve(engine)
    label = profile.spec
    L = num_target_layers
    trained, trained_source = trained_with(spec, L)

    source, convention, ids_read, requested = _requested(spec, profile, L)
    captured = tuple(sorted({k for k in requested if 0 <= k and (L is None or k < L)}))
    res = AuxResolution(label, L, source, ids_read, convention, requested, captured, trained, trained_source,
                        spec.target_hidden_size, spec.fc_in_features)
    findings = _ignored(res, spec, profile, checkpoint) + _malformed(res) + _shifted(res, checkpoint) + _width(res)
    return replace(res, findings=tuple(findings))


def _requested(spec: DraftSpec, profile: EngineProfile,
               L: int | None) -> tuple[str, str, tuple[int, ...], tuple[int, ...]]:
    """Where the release reads the ids (a config source, its default, or capture disabled), in which convention,
    the ids read and the HF indices they request."""
    source = "default"
    convention: str = profile.aux_id_convention
    ids_read: tuple[int, ...] = ()
    if spec.use_aux_hidden_state is False:
        return "disabled", convention, (), ()
    visible = profile.visible_aux_ids(spec)
    for candidate in profile.aux_ids_sources:
        if candidate in visible:
            source, ids_read = candidate, tuple(visible[candidate])
            convention = SOURCE_CONVENTION.get(candidate, convention)
            break
    if source == "default":
        return source, convention, ids_read, tuple(profile.default_aux_ids(L)) if L is not None else ()
    return source, convention, ids_read, tuple(i + 1 for i in ids_read) if convention == "output" else ids_read


def _ignored(res: AuxResolution, spec: DraftSpec, profile: EngineProfile, checkpoint: str | Path) -> list[Finding]:
    """The config writes ids the release never reads: it captures its default layers."""
    label, L, captured, trained = res.engine, res.num_target_layers, res.captured, res.trained_with
    findings: list[Finding] = []
    written = {s: list(v) for s, v in spec.aux_ids_by_source.items()}
    if res.source == "default" and spec.aux_ids_by_source:
        harmless = L is not None and captured == tuple(sorted(set(trained)))
        findings.append(Finding(
            "config/aux-ids-ignored",
            Severity.INFO if harmless else Severity.WARNING if L is None else Severity.CRITICAL,
            f"{label} ignores the aux layer ids in this config and captures its default layers",
            f"The config writes ids in {', '.join(written)}; {label} reads only "
            f"{', '.join(profile.aux_ids_sources) or 'no config field'} and falls back to "
            + (f"{list(captured)}." if L is not None else "its default (target layer count unknown).")
            + (" The default happens to match the trained layers." if harmless
               else f" The draft was trained with {list(trained) or 'unknown layers'}."),
            evidence={"ids_by_source": written, "engine_reads": list(profile.aux_ids_sources),
                      "captured_hf": list(captured), "trained_with_hf": list(trained)},
            fix=None if harmless else _ignored_fix(profile, checkpoint)))
    return findings


def _malformed(res: AuxResolution) -> list[Finding]:
    """Ids out of layer order, repeated, or outside the target's decoder layers."""
    L, requested, ids_read, label, convention = (res.num_target_layers, res.requested, res.ids_read, res.engine,
                                                 res.convention)
    findings: list[Finding] = []
    if requested and requested != tuple(sorted(requested)):
        findings.append(Finding(
            "config/aux-ids-unsorted", Severity.INFO, "aux layer ids are not in layer order",
            "Engines concatenate the captured states in layer order, not list order.",
            evidence={"ids": list(ids_read or requested)}))
    if len(set(requested)) != len(requested):
        findings.append(Finding(
            "config/aux-ids-duplicate", Severity.WARNING, "aux layer ids repeat a layer",
            "A layer is captured once, so the engine feeds fewer states than the list length.",
            evidence={"ids": list(ids_read or requested)}))
    outside = [k for k in requested if k < 0 or L is not None and k >= L]
    if outside:
        findings.append(Finding(
            "config/aux-ids-out-of-range", Severity.CRITICAL,
            f"aux layer ids capture nothing: HF indices {outside} are not inputs of any of the {L} decoder layers",
            f"{label} reads {list(ids_read)} ({convention}-of-layer convention) -> HF indices {list(requested)}; "
            "an index of L or more is never captured, so fewer states than fc expects arrive.",
            evidence={"ids_read": list(ids_read), "requested_hf": list(requested), "num_target_layers": L}))
    return findings


def _shifted(res: AuxResolution, checkpoint: str | Path) -> list[Finding]:
    """Every id read one layer off: the trainer wrote them in the other convention."""
    source, captured, trained, ids_read, label = res.source, res.captured, res.trained_with, res.ids_read, res.engine
    convention, trained_source = res.convention, res.trained_source
    findings: list[Finding] = []
    if source not in ("disabled", "default") and trained and captured != tuple(sorted(set(trained))):
        if len(captured) == len(trained) and {c - t for c, t in zip(captured, sorted(trained), strict=True)} in ({1}, {-1}):
            shift = captured[0] - sorted(trained)[0]
            findings.append(Finding(
                "config/aux-ids-shifted", Severity.CRITICAL,
                f"{label} captures every aux layer {abs(shift)} layer{'s' if abs(shift) != 1 else ''} "
                f"{'early' if shift < 0 else 'late'}: not the layers the draft was trained with",
                f"The ids {list(ids_read)} in {source} are read {convention}-of-layer by {label}, but the draft's "
                f"trainer wrote them in the other convention ({trained_source}).",
                evidence={"ids_read": list(ids_read), "source": source, "captured_hf": list(captured),
                          "trained_with_hf": list(trained)},
                fix=fix_command("convert", checkpoint, "--to", label, "OUT")))
    return findings


def _width(res: AuxResolution) -> list[Finding]:
    """The captured layers times the target width is not fc's input width."""
    th, fc_in, captured = res.target_hidden_size, res.fc_in_features, res.captured
    known = res.source != "disabled" and (res.num_target_layers is not None or res.source != "default")
    findings: list[Finding] = []
    if th and fc_in and known and len(captured) * th != fc_in:
        findings.append(Finding(
            "trace/aux-width-mismatch", Severity.CRITICAL,
            f"{len(captured)} captured layers x {th} = {len(captured) * th}, but fc expects {fc_in}",
            "The concatenated aux feature does not match fc's in-features.",
            evidence={"captured_hf": list(captured), "target_hidden_size": th, "fc_in_features": fc_in}))
    return findings

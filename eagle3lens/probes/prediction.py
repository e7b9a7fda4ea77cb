"""Predict the EAGLE-3 wiring from the launch: will the target's aux states reach the draft's fc?

    predict_wiring("kimi-eagle3", target="kimi-target/config.json", engine="sglang==0.5.9",
                   launch=parse_launch("python -m sglang.launch_server ... --speculative-algorithm EAGLE"))

Decided before any GPU runs, from the target's ``config.json`` (architecture, text widths, layer count),
the draft's config and headers, the engine release and the launch: whether the server captures aux states
at all (SGLang and vLLM switch capture on only for the EAGLE-3 algorithm), whether the target class can
capture them in that release (else start-up fails with the engine's error), which layers it captures, and
the width the draft receives against fc's in-features (the width gate that skips fc silently). No weights,
no torch: it runs for a 1T-parameter target on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..engines import EngineProfile
from ..engines.target_support import CaptureSupport, capture_support
from ..findings import Finding, to_jsonable
from ..launch import Launch
from ..served import ServedDraft, serve_draft
from ..engines.target_shape import TargetShape
from ..served.aux_layers import AuxResolution

@dataclass(frozen=True)
class WiringPrediction:
    """The predicted wiring of one launch, and the live observation beside it when a trace was run."""

    engine: str
    launch: Launch
    target: TargetShape
    algorithm: str | None  # as the engine reads it (aliases resolved)
    aux_capture: bool  # the server switches aux capture on
    support: CaptureSupport | None  # the target class's capture support (when capture is on)
    outcome: str  # "wired" | "fc-bypassed" | "fails-at-start" | "fails-at-first-decode" | "no-speculation"
    resolution: AuxResolution | None  # the layers captured and their checks (when capture is on)
    received_width: int | None  # width of the feature the draft receives at its first step
    fc_in_features: int | None
    draft_hidden_size: int | None
    error: str | None  # the engine's error, for the outcomes that fail
    observed: dict[str, Any] | None = None  # from a live wiring check: fc_ran, feature width
    notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "engine": self.engine, "launch": self.launch.to_dict(), "target": self.target.to_dict(),
            "algorithm": self.algorithm, "aux_capture": self.aux_capture,
            "support": self.support.to_dict() if self.support else None, "outcome": self.outcome,
            "resolution": self.resolution.to_dict() if self.resolution else None,
            "received_width": self.received_width, "fc_in_features": self.fc_in_features,
            "draft_hidden_size": self.draft_hidden_size, "error": self.error, "observed": self.observed,
            "notes": list(self.notes), "findings": [f.to_dict() for f in self.findings]})


def predict_wiring(draft: str | Path | Checkpoint, *, target: str | Path | Checkpoint,
                   engine: str | EngineProfile | None = None, launch: Launch,
                   observed: Any = None, headers_only: bool = False) -> WiringPrediction:
    """Predict what ``launch`` feeds ``draft`` on ``target`` under ``engine`` (default: the launch's engine, newest
    release), as :func:`~eagle3lens.served.serve_draft` derives it. ``observed``: a
    :class:`~eagle3lens.probes.wiring.WiringResult` from a live trace, shown beside. ``headers_only`` (the
    ``wiring`` command): no tensor byte is read, so a d2t past the target vocabulary is not seen (the doctor reads
    its N ids and predicts that crash)."""
    served = serve_draft(draft, engine=engine if engine is not None else launch.engine, target=target, launch=launch,
                         headers_only=headers_only)
    return from_served(served, launch, observed)


def from_served(served: ServedDraft, launch: Launch, observed: Any = None) -> WiringPrediction:
    """The wiring view of a served draft."""
    assert served.target is not None
    support = (capture_support(launch.engine, served.release, served.target.architecture)
               if served.aux_capture and served.algorithm is not None else None)
    resolution = served.aux if served.stops is None else None
    findings = (*served.findings, *(resolution.findings if resolution is not None else ()))
    return WiringPrediction(served.engine, launch, served.target, served.algorithm, served.aux_capture, support,
                            served.outcome, resolution, served.received_width if served.stops is None else None,
                            served.fc_in_features, served.hidden_size, served.error, _observed(observed),
                            served.notes, tuple(findings))


def _observed(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    feature = getattr(result, "feature", None)
    return {"fc_ran": getattr(result, "fc_ran", None), "scenario": getattr(result, "scenario", None),
            "feature_width": feature.shape[-1] if feature is not None and getattr(feature, "shape", None) else None,
            "layers_used": list(getattr(result, "layers_used", ()))}

"""Result types of the offline-acceptance probe (plain data, no torch: views import them cheaply)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engines.measure import Measurement
from ..findings import Finding, to_jsonable
from .traffic_result import PerStart, Traffic

VIEW_NAMES = ("metrics", "as_trained", "as_served", "fixed")
CAUSE_LABELS = {"keys": "keys fixed alone", "aux-ids": "aux ids fixed alone", "aux-capture": "aux capture on alone",
                "d2t": "d2t as trained alone", "shared-tables": "embed / lm_head as trained alone"}


# what a view's accept_len / full_acc / cond_acc count (JSON ``count``)
PER_ROUND = "per-round"  # over the drafting rounds the engine runs: what its log and counters report
TEACHER_FORCED = "teacher-forced"  # speculators' validation metrics (the ``metrics`` view)


@dataclass(frozen=True)
class AcceptanceView:
    """One way of running the draft over the data, and what it accepts.

    Serving views (``as_trained``, ``as_served``, ``fixed``) count per drafting round as the engine does
    (``count`` = ``per-round``; :mod:`.rounds`); ``per_start`` holds the same chain averaged over every start
    position (training's step accuracy). The ``metrics`` view is speculators' own, teacher-forced."""

    name: str
    full_acc: tuple[float, ...]
    cond_acc: tuple[float, ...]
    accept_len: float | None
    positions: int  # verify starts scored
    setup: dict[str, Any] = field(default_factory=dict)  # weights, layers, fc gate, scenario
    engine: str | None = None
    log_lines: dict[str, str] = field(default_factory=dict)  # engine family -> the line its log would print
    error: str | None = None  # the engine would stop here (e.g. fc's shape check) instead of serving
    unavailable: str | None = None  # the data cannot score this view (e.g. a layer the dump does not hold)
    count: str = PER_ROUND
    rounds: int = 0  # drafting rounds the engine's walk runs over the samples
    per_start: PerStart | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"full_acc": list(self.full_acc), "cond_acc": list(self.cond_acc),
                            "accept_len": self.accept_len, "positions": self.positions, "engine": self.engine,
                            "setup": self.setup, "log_lines": self.log_lines, "error": self.error,
                            "unavailable": self.unavailable, "count": self.count, "rounds": self.rounds,
                            "per_start": self.per_start.to_dict() if self.per_start is not None else None})


@dataclass(frozen=True)
class AcceptanceResult:
    """The views side by side, the per-cause toggles (cause -> accept len with that cause fixed alone), findings."""

    draft: str
    data: str
    engine: str | None
    steps: int
    samples: int
    views: dict[str, AcceptanceView]
    toggles: dict[str, float | None] = field(default_factory=dict)
    greedy_agreement: float | None = None
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    traffic: Traffic | None = None  # sampling as served and the served vocabulary, when asked for
    measured: Measurement | None = None  # the real engine's own count on the same prompts (``--measure``)
    # the as-trained greedy chain per round checked against the target's greedy token over the draft vocabulary
    # (what training's metrics check); ``as_trained`` checks it against the full vocabulary, as the server does
    in_vocab_accept_len: float | None = None

    def accept_len(self, view: str) -> float | None:
        v = self.views.get(view)
        return v.accept_len if v is not None else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: view.to_dict() for name, view in self.views.items()}
        out.update(toggles=dict(self.toggles), draft=self.draft, data=self.data, engine=self.engine, steps=self.steps,
                   samples=self.samples, greedy_agreement=self.greedy_agreement, notes=list(self.notes),
                   in_vocab_accept_len=self.in_vocab_accept_len)
        if self.traffic is not None:
            out["traffic"] = self.traffic.to_dict()
        if self.measured is not None:
            out["measured"] = self.measured.to_dict()
        return to_jsonable(out)


def within_noise(value: float | None, trained: float) -> bool:
    """Two accept lengths that offline estimation cannot tell apart (0.05 or 5 %, the larger)."""
    return value is not None and abs(value - trained) <= max(0.05, 0.05 * trained)

"""The acceptance budget: what training promised, then what each lever outside the checkpoint costs, down to what the
server logged or measured.

    budget = acceptance_budget(traffic, promise=dump_result, logged=1.60, log="server.log")
    [(row.name, row.value, row.delta, row.code) for row in budget.rows]

Rows, each an accept length per drafting round at the same K (the engine's count), each measured on its own:

1. ``promised``: the draft as trained on its training dump, its chain checked against the target's greedy token
   over the draft vocabulary, as training's metrics check it; else the ``expected`` figure training reported.
2. ``template``: the same, on the served traffic (conversations rendered with the served chat template).
3. ``vocabulary``: the same chain checked against the target's greedy token over its whole vocabulary, as the
   server verifies: the chains the draft vocabulary cannot continue.
4. ``sampling``: under the served sampling (the draft's greedy token accepted with the target's probability).
5. ``engine``: as the engine loads and wires the draft (its keys, aux layers, vocabulary mapping).
6. ``served``: what the engine measured on the same traffic (``--measure``), else what its log says.

The vocabulary is priced on greedy tokens, before sampling: a sampled row's figure already holds the target's mass
outside the draft vocabulary, so only greedily does a chain checked against the draft vocabulary exist.

A row whose input is absent is not measured (it says which flag gives it) and the next delta is taken from the
last measured row; values are rounded to 0.01 and deltas taken between rounded values, so the deltas add up to
``served - promised`` exactly. A cost beyond noise is a finding naming the lever (``budget/*-cost``); the engine
row is named by ``acceptance/gap`` and the served row by ``acceptance/served-vs-log-mismatch`` (or
``engine/served-disagrees``), the acceptance probe's own findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ..findings import Finding, Severity, to_jsonable
from .acceptance_result import AcceptanceResult, within_noise

ROWS = ("promised", "template", "vocabulary", "sampling", "engine", "served")


@dataclass(frozen=True)
class BudgetRow:
    """One row: its accept length (None: not measured), the change from the last measured row, the finding that
    names that change and what removes it; ``source`` says where the value came from, or which flag gives it."""

    name: str
    label: str
    value: float | None
    delta: float | None
    source: str
    code: str | None = None
    fix: str | None = None

    @property
    def measured(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "value": self.value, "delta": self.delta,
                "measured": self.measured, "source": self.source, "code": self.code, "fix": self.fix}


@dataclass(frozen=True)
class Budget:
    """The rows in order, at ``steps`` draft steps, with the cost findings and notes."""

    steps: int
    rows: tuple[BudgetRow, ...]
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def row(self, name: str) -> BudgetRow:
        return next(r for r in self.rows if r.name == name)

    @property
    def first(self) -> BudgetRow | None:
        return next((r for r in self.rows if r.measured), None)

    @property
    def last(self) -> BudgetRow | None:
        return next((r for r in reversed(self.rows) if r.measured), None)

    @property
    def total(self) -> float | None:
        """Last measured row minus the first (the deltas' sum)."""
        first, last = self.first, self.last
        if first is None or last is None or first is last:
            return None
        return float(_dec(last.value) - _dec(first.value))

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"steps": self.steps, "rows": [r.to_dict() for r in self.rows], "total": self.total,
                            "notes": list(self.notes)})


def _dec(value: float | None) -> Decimal:
    assert value is not None
    return Decimal(f"{value:.2f}")


@dataclass
class _Rows:
    """The rows as they are added: each measured one's delta from the last measured one."""

    rows: list[BudgetRow] = field(default_factory=list)
    last: float | None = None

    def add(self, name: str, label: str, value: float | None, source: str, code: str | None = None,
            fix: str | None = None) -> BudgetRow:
        value = None if value is None else float(_dec(value))
        delta = None if value is None or self.last is None else float(_dec(value) - _dec(self.last))
        row = BudgetRow(name, label, value, delta, source, code if delta is not None else None,
                        fix if delta is not None else None)
        self.rows.append(row)
        if value is not None:
            self.last = value
        return row


COST_FIXES = {
    "template": "regenerate the training data with the served chat template (the target tokenizer's "
                "apply_chat_template, generation prompt on, as the server renders a request) and retrain the draft",
    "vocabulary": "rebuild the draft vocabulary from token counts of traffic rendered as the server renders it (or "
                  "make it larger) and retrain the draft",
    "sampling": "the cost of sampling at the served temperature: a request sent with temperature 0 is verified "
                "greedily; otherwise train the draft toward the target's sampled distribution",
}
COST_WHAT = {"template": "the served traffic (its chat template)", "vocabulary": "the served vocabulary",
             "sampling": "the served sampling"}


def acceptance_budget(traffic: AcceptanceResult, *, promise: AcceptanceResult | None = None,
                      expected: float | None = None, logged: float | None = None, log: str | None = None
                      ) -> Budget:
    """The budget from the acceptance probe's results: ``traffic`` scored on the served traffic (or the dump), with
    its served vocabulary, sampled views and findings (``acceptance/gap``, the log comparison); ``promise`` the
    same draft scored on its training dump at the same K, else ``expected`` the accept length training reported;
    ``logged`` the server log's mean accept length (``log`` its path), unless ``traffic`` carries a measurement."""
    rows = _Rows()
    live = traffic.traffic is not None and traffic.traffic.source in ("chat", "prompts")
    if promise is not None and promise.steps != traffic.steps:
        raise ValueError(f"budget rows at different K: promise {promise.steps}, traffic {traffic.steps}")
    if promise is not None or not live:
        dump = promise or traffic
        stated = f"; training reported {expected:.2f}" if expected is not None else ""
        rows.add("promised", "promised: the dump as trained", dump.in_vocab_accept_len,
                 f"{dump.data}: as trained, checked against the target's choice within the draft vocabulary, as "
                 f"training's metrics check it{stated}")
    else:
        rows.add("promised", "promised: as training reported", expected,
                 "--expected-accept-len" if expected is not None else
                 "not measured: give --data D (the training dump) or --expected-accept-len X")
    source = traffic.traffic.source if traffic.traffic is not None else None
    served = live or promise is not None  # beside its own promise, a dump is the served traffic (a served capture)
    template_label = ("served-template traffic (chat)" if source == "chat" else
                      "served traffic (prompts, no chat template)" if source == "prompts" else
                      "served traffic (a dump of it)")
    what = {"chat": "the served conversations", "prompts": "the served prompts"}.get(source or "", f"{traffic.data}")
    rows.add("template", template_label, traffic.in_vocab_accept_len if served else None,
             f"{what}: as trained, within the draft vocabulary" if served else
             "not measured: give --chat FILE.jsonl (the served conversations)")
    rows.add("vocabulary", "with the served vocabulary", traffic.accept_len("as_trained"),
             "as trained, checked against the target's whole vocabulary as the server verifies")
    sampled = traffic.traffic.sampled if traffic.traffic is not None else {}
    at = sampled.get("as_trained")
    rows.add("sampling", f"under the served sampling ({at.sampling.label()})" if at is not None else
             "under the served sampling", at.accept_len if at is not None else None,
             "as trained, speculative sampling" if at is not None else
             "not measured: give --temperature T or --request FILE.json (greedy otherwise)")
    _engine_row(rows, traffic, sampled)
    _served_row(rows, traffic, logged, log)
    findings = tuple(_cost_findings(tuple(rows.rows), traffic.steps))
    # a lever's row names its cost finding and that finding's fix; one within noise (or a gain) names neither
    raised = {f.evidence["row"]: f for f in findings}
    budget_rows = tuple(replace(r, code=raised[r.name].code, fix=raised[r.name].fix) if r.name in raised else r
                        for r in rows.rows)
    return Budget(traffic.steps, budget_rows, findings, tuple(_notes(budget_rows, promise, traffic)))


def _engine_row(rows: _Rows, traffic: AcceptanceResult, sampled: dict[str, Any]) -> None:
    if traffic.engine is None or "as_served" not in traffic.views:
        rows.add("engine", "as the engine serves it", None, "not measured: give --engine NAME==VERSION")
        return
    view = sampled.get("as_served")
    value = view.accept_len if view is not None else traffic.accept_len("as_served")
    gap = next((f for f in traffic.findings if f.code == "acceptance/gap"), None)
    rows.add("engine", f"as {traffic.engine} serves it", value,
             f"as served by {traffic.engine}: its load, aux layers and vocabulary mapping"
             + (", sampled" if view is not None else "") if value is not None else
             f"not measured: {traffic.views['as_served'].error or traffic.views['as_served'].unavailable}",
             gap.code if gap is not None else None, gap.fix if gap is not None else None)


def _served_row(rows: _Rows, traffic: AcceptanceResult, logged: float | None, log: str | None) -> None:
    measured = traffic.measured.accept_len if traffic.measured is not None else None
    codes = {f.code: f for f in traffic.findings}
    if measured is not None:
        finding = codes.get("engine/served-disagrees")
        rows.add("served", f"measured by {traffic.measured.engine}" if traffic.measured else "measured", measured,
                 "the real engine's counters on the same traffic (--measure)",
                 finding.code if finding is not None else None, finding.fix if finding is not None else None)
    elif logged is not None:
        finding = codes.get("acceptance/served-vs-log-mismatch")
        rows.add("served", "what the server logged", logged, f"{log or 'the log'}: mean accept len",
                 finding.code if finding is not None else None, finding.fix if finding is not None else None)
    else:
        rows.add("served", "what the server logged or measured", None,
                 "not measured: give --log FILE (the server's log) or --engine installed --measure")


def _cost_findings(rows: tuple[BudgetRow, ...], steps: int) -> list[Finding]:
    """``budget/<lever>-cost`` for each lever that costs more than noise."""
    out = []
    before: BudgetRow | None = None
    for row in rows:
        if not row.measured:
            continue
        if row.name in COST_FIXES and before is not None and row.delta is not None and row.delta < 0 \
                and not within_noise(row.value, before.value or 0.0):
            out.append(Finding(
                "budget/template-cost" if row.name == "template" else
                "budget/vocabulary-cost" if row.name == "vocabulary" else "budget/sampling-cost", Severity.WARNING,
                f"{COST_WHAT[row.name]} costs {-row.delta:.2f} accept length ({before.value:.2f} -> {row.value:.2f})",
                f"Offline, at K = {steps}, tokens per drafting round: {before.value:.2f} ({before.label}), then "
                f"{row.value:.2f} ({row.label}; {row.source}).",
                evidence={"row": row.name, "before": before.value, "after": row.value, "delta": row.delta,
                          "steps": steps},
                fix=COST_FIXES[row.name]))
        before = row
    return out


def _notes(rows: tuple[BudgetRow, ...], promise: AcceptanceResult | None, traffic: AcceptanceResult) -> list[str]:
    notes = []
    gains = [r for r in rows if r.delta is not None and r.delta > 0 and r.name in COST_FIXES]
    for r in gains:
        notes.append(f"budget: {r.label} accepts {r.delta:.2f} more than the row before it: the traffic or draft is "
                     "easier there, not a cost")
    if promise is not None and promise.in_vocab_accept_len is not None and traffic.traffic is not None \
            and traffic.traffic.source == "dump":
        notes.append("budget: the traffic scored is the dump itself: give --chat FILE.jsonl for the served traffic")
    return notes

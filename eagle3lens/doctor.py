"""Doctor: run every probe the inputs allow, merge their findings and rank the likely causes.

Causal order follows the path a draft token takes: the weights must load (keys), the target's
aux states must reach fc (trace), the decoder must be trained (weights), its ids must map to the
target vocabulary (vocab), the right layers must be captured (aux ids); ignored flags only lower
the rate, and the server log is the symptom, not a cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .checkpoint import Checkpoint
from .findings import Finding, Report, Severity, sort_findings

# code prefixes in causal order; the first matching entry gives a finding's place
# Silent causes lead: a server that logs accept len 1.00 did load the draft, so loud failures
# (an unrecognised config, a load that raises) come after the silent ones they would have hidden.
CAUSAL_ORDER: tuple[tuple[str, str], ...] = (
    ("keys/dropped", "weights the engine never loads"),
    ("trace/fc-bypassed", "the target's aux states never reach fc"),
    ("keys/shape-mismatch", "weights whose shape the engine rejects"),
    ("config/missing", "no config.json: nothing can build the draft"),
    ("config/unrecognized", "the engine does not recognise the draft's config"),
    ("keys/raises", "the engine refuses to load the checkpoint"),
    ("trace/aux-width-mismatch", "the aux feature has the wrong width"),
    ("weights/nan", "non-finite weights"),
    ("weights/inf", "non-finite weights"),
    ("weights/all-zero", "weights that are all zero"),
    ("weights/init-like", "weights still at their initial values"),
    ("weights/norm-at-init", "norms still at their initial values"),
    ("vocab/", "draft ids mapped to the wrong target tokens"),
    ("keys/left-at-init", "engine parameters nothing writes"),
    ("weights/target-copy-mismatch", "embeddings or head differ from the target's"),
    ("config/aux-ids-ignored", "aux layer ids the engine ignores"),
    ("config/aux-ids-shifted", "aux layer ids read in the other convention"),
    ("trace/aux-layers-mismatch", "the engine captures other layers than training used"),
    ("config/", "config the engine reads differently"),
    ("trace/", "hidden-state wiring"),
    ("weights/", "weight statistics"),
    ("acceptance/", "the offline acceptance estimate (the causes above, measured)"),
    ("logs/", "the symptom in the server log"),
)


# the engine each config flavour is written for (used when no --engine is given)
OWN_LOADER = {"speculators": "speculators", "sglang": "sglang", "eagle": "eagle"}


def causal_rank(code: str) -> int:
    for rank, (prefix, _) in enumerate(CAUSAL_ORDER):
        if code == prefix or (prefix.endswith("/") and code.startswith(prefix)):
            return rank
    return len(CAUSAL_ORDER)


@dataclass(frozen=True)
class Cause:
    """A finding promoted to a likely cause of the symptom, with what it explains."""

    rank: int
    finding: Finding
    explains: str  # "zero acceptance" | "lower acceptance"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "code": self.finding.code, "severity": self.finding.severity.value,
                "title": self.finding.title, "explains": self.explains, "fix": self.finding.fix}


@dataclass(frozen=True)
class Triage:
    """The doctor's own result: ranked causes, probes that ran, probes skipped and why."""

    causes: tuple[Cause, ...]
    ran: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()  # the probes' findings are already in the report

    def to_dict(self) -> dict[str, Any]:
        return {"causes": [c.to_dict() for c in self.causes], "ran": list(self.ran), "skipped": dict(self.skipped)}

    def __rich__(self):
        from .plots.doctor import triage_table

        return triage_table(self)

    def _repr_html_(self) -> str:
        from .plots.doctor import triage_html

        return triage_html(self)


# the probe that owns each finding area: when it reported a code, another probe's copy of that code is dropped
AREA_OWNER = {"vocab": "vocab", "weights": "weights", "logs": "logs", "keys": "keys", "trace": "wiring"}


def owned_findings_only(findings: list[Finding], results: dict[str, Any]) -> list[Finding]:
    """Drop a finding another probe also reported when the probe owning its area reported the same code
    (e.g. the load simulation's ``vocab/d2t-missing`` beside the vocab probe's own)."""
    kept = []
    for f in findings:
        owner = results.get(AREA_OWNER.get(f.area, ""))
        owned = getattr(owner, "findings", ())
        if f.code in {g.code for g in owned} and f not in owned:
            continue
        kept.append(f)
    return kept


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Severity first, then causal order; stable otherwise."""
    return sorted(sort_findings(findings), key=lambda f: (-f.severity.rank, causal_rank(f.code)))


def rank_causes(findings: list[Finding]) -> tuple[Cause, ...]:
    causes = []
    for f in rank_findings(findings):
        if f.severity == Severity.INFO or f.area in ("logs", "acceptance"):  # symptoms and measurements, not causes
            continue
        explains = "zero acceptance" if f.severity == Severity.CRITICAL else "lower acceptance"
        causes.append(Cause(len(causes) + 1, f, explains))
    return tuple(causes)


def diagnose(
    checkpoint: str | Path | Checkpoint,
    engine: str | None = None,
    target: str | Path | Checkpoint | None = None,
    log: str | Path | None = None,
    baseline_tps: float | None = None,
    num_draft_tokens: int | None = None,
    scenario: str | None = None,
    weights: bool = True,
    progress: bool | None = None,
    device_map: str | None = None,
    dtype: str = "float32",
    data: str | Path | None = None,
    prompts: str | Path | None = None,
) -> Report:
    """Run the applicable probes on a draft and return a Report whose findings are ranked causes first.

    ``device_map`` / ``dtype`` place the target for the wiring check (accelerate's ``auto`` spreads a large
    target over GPUs and CPU; ``dtype="auto"`` keeps the checkpoint's dtype). ``data`` (a hidden-state dump) or
    ``prompts`` with ``target`` add the offline acceptance estimate, held against the log's accept len.
    """
    from .engines import resolve
    from .probes.aux_layers import resolve_aux_layers
    from .probes.keys import simulate_load
    from .probes.logs import ENGINES as LOG_ENGINES
    from .probes.logs import parse_log
    from .probes.vocab import inspect_vocab
    from .probes.weights import weight_stats
    from .probes.wiring import check_wiring

    ckpt = (checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.open(checkpoint)).require_draft()
    tgt = None if target is None else target if isinstance(target, Checkpoint) else Checkpoint.open(target)
    profile = resolve(engine) if engine else None
    report = Report(checkpoint=ckpt.summary(), engine=profile.spec if profile else None)
    ran: list[str] = []
    skipped: dict[str, str] = {}
    num_target_layers = tgt.spec.num_hidden_layers if tgt is not None else None

    def run(name: str, fn, *args, **kwargs) -> None:
        report.add(name, fn(*args, **kwargs))
        ran.append(name)

    if ckpt.config is None:
        report.findings.append(Finding(
            "config/missing", Severity.CRITICAL, "no config.json beside the weights",
            "Engines build the draft module from config.json (architecture, sizes, vocab sizes, aux layer ids); "
            "without it no engine can load this draft and none of the config checks can run.",
            evidence={"files": [f.name for f in ckpt.files]},
            fix="copy the training run's config.json next to the weights"))
        skipped["keys"] = skipped["aux_layers"] = skipped["wiring"] = "no config.json: nothing to build the draft from"
    elif profile is not None:
        run("keys", simulate_load, ckpt, profile, num_target_layers=num_target_layers)
    else:
        skipped["keys"] = "no --engine given: load simulation not run"
    run("vocab", inspect_vocab, ckpt, target=tgt)
    if weights:
        run("weights", weight_stats, ckpt, target=tgt, progress=progress)
    else:
        skipped["weights"] = "weights statistics switched off"
    if ckpt.config is not None:
        # without --engine, aux layers and wiring are judged as the loader the layout is written for
        wiring_profile = profile or resolve(OWN_LOADER.get(ckpt.spec.flavour, "vllm"))
        if profile is None:
            report.notes.append(f"no --engine given: aux layers and wiring judged as {wiring_profile.spec} loads the draft")
        if tgt is not None:  # the wiring check resolves the aux layers itself and reports them
            run("wiring", check_wiring, tgt, ckpt, wiring_profile, scenario=scenario, device_map=device_map,
                dtype=dtype)
        else:
            run("aux_layers", resolve_aux_layers, ckpt.spec, None, wiring_profile, checkpoint=ckpt.path)
            skipped["wiring"] = "no --target given: wiring not checked"
    if log is not None:
        # the log's format and accept-rate formula depend on the serving engine's version; a trainer profile says nothing
        log_engine = profile.spec if profile is not None and profile.name in LOG_ENGINES else None
        run("logs", parse_log, log, engine=log_engine, num_draft_tokens=num_draft_tokens, baseline_tps=baseline_tps)
    else:
        skipped["logs"] = "no --log given: acceptance not read"
    if (data is not None or prompts is not None) and tgt is not None and ckpt.config is not None:
        from .probes.acceptance import doctor_acceptance

        logs = report.results.get("logs")
        logged = logs.summary.mean_accept_len if logs is not None else None
        result, note = doctor_acceptance(ckpt, tgt, profile, data=data, prompts=prompts, logged_accept_len=logged,
                                         log_path=str(log) if log is not None else None, scenario=scenario)
        run("acceptance", lambda: result)
        if note:
            report.notes.append(note)
    elif data is not None or prompts is not None:
        skipped["acceptance"] = "needs --target (its final norm and lm_head are the teacher) and a config.json"

    # the log probe's own fix is "run the doctor": here the causes above are the fix
    findings = owned_findings_only(report.findings, report.results)
    report.findings = rank_findings([replace(f, fix=None) if f.area == "logs" else f for f in findings])
    triage = Triage(rank_causes(report.findings), tuple(ran), skipped)
    report.results = {"doctor": triage, **report.results}
    return report

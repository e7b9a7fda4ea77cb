"""Doctor: run every probe the inputs allow, merge their findings and rank the likely causes.

Causal order is the finding catalogue's rank (see :mod:`eagle3lens.catalogue` for why it runs
keys -> trace -> weights -> vocab -> aux ids -> flags -> logs).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import catalogue
from .checkpoint import Checkpoint, CheckpointLike, as_checkpoint
from .engines import EngineProfile, as_profile, own_loader
from .errors import UsageError
from .findings import Finding, Report, Severity, fix_command, sort_findings
from .launch import Launch, launch_from_log, parse_launch
from .progress import Progress


def causal_rank(code: str) -> int:
    """Where ``code`` sits in the causal order (the catalogue's rank; lower = earlier cause)."""
    return catalogue.rank(code)


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


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Severity first, then causal order; stable otherwise."""
    return sorted(sort_findings(findings), key=lambda f: (-f.severity.rank, causal_rank(f.code)))


def rank_causes(findings: list[Finding], measured: tuple[float, float] | None = None) -> tuple[Cause, ...]:
    """The findings that are causes, ranked. ``measured``: (as served, as trained) accept lengths computed offline;
    when they agree within noise no cause explains zero acceptance, whatever its severity."""
    from .probes.acceptance_result import within_noise

    calm = measured is not None and within_noise(measured[0], measured[1])
    causes: list[Cause] = []
    for f in rank_findings(findings):
        if f.severity == Severity.INFO or f.area in ("logs", "acceptance"):  # symptoms and measurements, not causes
            continue
        if f.evidence.get("stage"):  # the server stops before the draft runs
            explains = "no speculation: the server does not start"
        elif f.area == "budget":  # a lever outside the checkpoint, priced on the served traffic
            explains = f"lower acceptance: {-float(f.evidence.get('delta') or 0):.2f} of the budget"
        elif calm and measured is not None:
            explains = f"no measured loss (offline: as served {measured[0]:.2f}, as trained {measured[1]:.2f})"
        else:
            explains = "zero acceptance" if f.severity == Severity.CRITICAL else "lower acceptance"
        causes.append(Cause(len(causes) + 1, f, explains))
    return tuple(causes)


# short phrases for the engine sweep's summary; a critical code not listed here is named by its code
SWEEP_PHRASES = {"config/unrecognized": "config not recognised", "keys/raises": "the load raises",
                 "keys/shape-mismatch": "shapes rejected", "config/aux-ids-shifted": "aux layers one off",
                 "config/missing": "no config.json", "keys/d2t-discarded": "d2t discarded",
                 "config/aux-ids-ignored": "aux ids ignored", "config/flag-ignored": "a flag ignored",
                 "keys/left-at-init": "parameters left at init"}


def _sweep_phrases(findings: tuple[Finding, ...]) -> tuple[str, ...]:
    critical = [f for f in findings if f.severity == Severity.CRITICAL]
    codes = {f.code for f in critical}
    phrases = []
    for f in critical:
        if f.code == "keys/dropped":
            n = len(f.evidence.get("tensors", ()))
            phrases.append(f"{n} tensor{'s' if n != 1 else ''} dropped")
        elif f.code == "keys/left-at-init" and "keys/dropped" in codes:
            continue  # the dropped tensors' parameters: the same cause said twice
        else:
            phrases.append(SWEEP_PHRASES.get(f.code, f.code))
    return tuple(dict.fromkeys(phrases))


def engine_sweep(ckpt: Checkpoint, num_target_layers: int | None = None) -> Finding | None:
    """Without ``--engine``: the load simulation under every serving-engine profile, summarised in one info
    finding naming the releases that would drop tensors, refuse or misread the draft (None when none would)."""
    from .engines import all_profiles
    from .probes.keys import simulate_load

    runs: list[tuple[str, tuple[str, ...], str, str]] = []  # (engine, phrases, first release, last release)
    first_broken: str | None = None
    for profile in all_profiles():
        if profile.kind != "serving":
            continue
        phrases = _sweep_phrases(simulate_load(ckpt, profile, num_target_layers=num_target_layers).findings)
        first, last = profile.releases[0], profile.releases[-1]
        if runs and runs[-1][:2] == (profile.name, phrases):  # adjacent groups that break the same way: one range
            runs[-1] = (profile.name, phrases, runs[-1][2], last)
        else:
            runs.append((profile.name, phrases, first, last))
        if phrases:
            first_broken = first_broken or profile.spec
    broken: dict[tuple[str, ...], list[str]] = {}
    clean: list[str] = []
    for name, phrases, first, last in runs:
        label = f"{name} {first}" if first == last else f"{name} {first}–{last}"
        (broken.setdefault(phrases, []) if phrases else clean).append(label)
    if not broken:
        return None
    parts = [f"under {', '.join(labels)}: {', '.join(phrases)}" for phrases, labels in broken.items()]
    return Finding(
        "keys/engine-sweep", Severity.INFO, "; ".join(parts) + "; pass --engine",
        "No --engine was given, so the load was judged as the trainer that wrote this layout loads it. The load "
        "simulation was also run under every serving-engine profile: the releases named here would serve this "
        "draft broken. Pass the server's --engine NAME==VERSION to judge it as served."
        + (f" Loads cleanly under: {', '.join(clean)}." if clean else ""),
        evidence={"broken": {", ".join(labels): list(phrases) for phrases, labels in broken.items()},
                  "clean": clean},
        fix=fix_command("doctor", ckpt.path, "--engine", first_broken or ""))


@dataclass(frozen=True)
class DoctorInputs:
    """Everything the doctor is given (:func:`diagnose`'s arguments, documented there)."""

    draft: CheckpointLike
    target: CheckpointLike | None = None
    engine: str | EngineProfile | None = None
    log: str | Path | None = None
    baseline_tps: float | None = None
    num_draft_tokens: int | None = None
    scenario: str | None = None
    weights: bool = True
    device_map: str | None = None
    dtype: str = "float32"
    progress: Progress | None = None
    launch: "str | Launch | None" = None
    data: str | Path | None = None
    prompts: str | Path | None = None
    execute: bool = False
    chat: str | Path | None = None
    engine_root: str | Path | None = None
    execution: Any = None
    steps: int | None = None
    measure: Callable[[Any, Any, Any], Any] | None = None
    execute_timeout: float | None = None
    sampling: Any = None  # the served sampling (a probes.traffic_result.Sampling) the estimate also scores
    expected_accept_len: float | None = None  # what training promised: the budget's first row, the log's yardstick
    budget: bool = False  # build the acceptance budget (promise -> template -> ... -> served)

    @property
    def live(self) -> bool:
        """Samples are captured live from the target (prompts or served conversations), not read from a dump."""
        return self.prompts is not None or self.chat is not None


@dataclass
class DoctorState:
    """What the steps share: the opened inputs, the engine judged as, the report they fill, what ran and why not."""

    report: Report
    ckpt: Checkpoint
    tgt: Checkpoint | None
    config_target: Path | None  # a target holding only config.json: the wiring is traced on meta
    num_target_layers: int | None
    profile: EngineProfile | None
    executed: Any = None
    ran: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    launch: "Launch | None" = None  # the launch parsed (or read from the log) by the prediction step

    def run(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run one probe and attach its result (and findings) under ``name``."""
        self.report.add(name, fn(*args, **kwargs))
        self.ran.append(name)

    @property
    def has_config(self) -> bool:
        return self.ckpt.config is not None


@dataclass(frozen=True)
class Step:
    """One named step of the doctor. ``applies`` says why it does not run: None, it runs; a reason, it is recorded
    in the triage's ``skipped``; an empty reason, it was not asked for (nothing is recorded)."""

    name: str
    applies: Callable[[DoctorInputs, DoctorState], str | None]
    run: Callable[[DoctorInputs, DoctorState], None]


def _always(_inputs: DoctorInputs, _state: DoctorState) -> str | None:
    return None


NOT_ASKED = ""  # a skip reason that is not recorded: the inputs never asked for the step
NO_CONFIG = "no config.json: nothing to build the draft from"


def _config_missing(_inputs: DoctorInputs, state: DoctorState) -> None:
    state.report.findings.append(Finding(
        "config/missing", Severity.CRITICAL, "no config.json beside the weights",
        "Engines build the draft module from config.json (architecture, sizes, vocab sizes, aux layer ids); "
        "without it no engine can load this draft and none of the config checks can run.",
        evidence={"files": [f.name for f in state.ckpt.files]},
        fix="copy the training run's config.json next to the weights"))
    state.skipped["keys"] = state.skipped["aux_layers"] = state.skipped["wiring"] = NO_CONFIG


def _keys_applies(_inputs: DoctorInputs, state: DoctorState) -> str | None:
    if not state.has_config:
        return NOT_ASKED  # the config step said why
    return None if state.profile is not None else "no --engine given: load simulation not run (see keys/engine-sweep)"


def _keys(_inputs: DoctorInputs, state: DoctorState) -> None:
    """The served draft under the engine: its load fate, and the server stopping before the draft runs."""
    from .probes.keys import simulate_load
    from .served import serve_draft

    report, tgt = state.report, state.tgt
    assert state.profile is not None  # applies: keys runs under an engine
    load = state.executed if state.executed is not None else \
        simulate_load(state.ckpt, state.profile, num_target_layers=state.num_target_layers)
    served = serve_draft(state.ckpt, engine=state.profile, num_target_layers=state.num_target_layers,
                         load=load, target=state.config_target or (tgt.root if tgt is not None else None))
    if state.executed is not None:
        from .probes.executed import stand_ins_note

        report.notes.append(stand_ins_note(state.executed))
    state.run("keys", lambda: served.load)
    report.findings.extend(served.findings)  # the server stopping before the draft runs
    report.notes.extend(served.load.report_notes)


def _sweep(_inputs: DoctorInputs, state: DoctorState) -> None:
    sweep = engine_sweep(state.ckpt, state.num_target_layers)
    if sweep is not None:
        state.report.findings.append(sweep)


def _vocab(_inputs: DoctorInputs, state: DoctorState) -> None:
    from .probes.vocab import inspect_vocab

    state.run("vocab", inspect_vocab, state.ckpt, target=state.tgt)


def _weights(inputs: DoctorInputs, state: DoctorState) -> None:
    from .probes.weights import weight_stats

    state.run("weights", weight_stats, state.ckpt, target=state.tgt, progress=inputs.progress)


def _wiring_profile(state: DoctorState) -> EngineProfile:
    """Without --engine, aux layers and wiring are judged as the loader the layout is written for."""
    return state.profile or own_loader(state.ckpt.spec.flavour)


def _judged_as(_inputs: DoctorInputs, state: DoctorState) -> None:
    profile = _wiring_profile(state)
    state.report.judged_as = profile.spec
    state.report.notes.append(f"no --engine given: aux layers and wiring judged as {profile.spec} loads the draft")


def _traced(state: DoctorState) -> bool:
    """A target (or its config.json alone) to trace the wiring through."""
    return state.tgt is not None or state.config_target is not None


def _wiring_applies(_inputs: DoctorInputs, state: DoctorState) -> str | None:
    if not state.has_config:
        return NOT_ASKED  # the config step said why
    return None if _traced(state) else "no --target given: wiring not checked"


def _wiring(inputs: DoctorInputs, state: DoctorState) -> None:
    """The wiring check resolves the aux layers itself and reports them."""
    from .probes.wiring import check_wiring

    shapes_only = state.config_target is not None
    state.run("wiring", check_wiring, state.ckpt, target=state.tgt or inputs.target, engine=_wiring_profile(state),
              scenario=inputs.scenario, device="meta" if shapes_only else "cpu", device_map=inputs.device_map,
              dtype=inputs.dtype)


def _aux_layers(_inputs: DoctorInputs, state: DoctorState) -> None:
    from .served import serve_draft

    state.run("aux_layers", lambda: serve_draft(state.ckpt, engine=_wiring_profile(state)).aux)


def _logs(inputs: DoctorInputs, state: DoctorState) -> None:
    """The log's format and accept-rate formula depend on the serving engine's version; a trainer profile says
    nothing about them."""
    from .probes.logs import ENGINES as LOG_ENGINES
    from .probes.logs import parse_log

    profile = state.profile
    log_engine = profile.spec if profile is not None and profile.name in LOG_ENGINES else None
    state.run("logs", parse_log, inputs.log, engine=log_engine, num_draft_tokens=inputs.num_draft_tokens,
              baseline_tps=inputs.baseline_tps, expected_accept_len=inputs.expected_accept_len)


def _prediction_applies(inputs: DoctorInputs, state: DoctorState) -> str | None:
    """A target config and a launch (or a log recording one) give the launch-based wiring prediction."""
    state.launch = parse_launch(inputs.launch) if isinstance(inputs.launch, str) else inputs.launch
    if state.launch is None and inputs.log is not None:
        state.launch = launch_from_log(inputs.log)
    return None if state.launch is not None and _traced(state) and state.has_config else NOT_ASKED


def _prediction(_inputs: DoctorInputs, state: DoctorState) -> None:
    from .probes.prediction import predict_wiring

    parsed, profile = state.launch, state.profile
    assert parsed is not None
    if profile is not None and profile.name != parsed.engine:
        state.report.notes.append(f"the launch ({parsed.source}) starts {parsed.engine}, not {profile.spec}: "
                                  "wiring not predicted from it")
        return
    state.run("prediction", predict_wiring, state.ckpt, target=state.tgt or state.config_target, engine=profile,
              launch=parsed, observed=state.report.results.get("wiring"))


def _acceptance_applies(inputs: DoctorInputs, state: DoctorState) -> str | None:
    if inputs.data is None and not inputs.live:
        return NOT_ASKED
    if state.tgt is None or not state.has_config:
        return "needs --target (its final norm and lm_head are the teacher) and a config.json"
    return None


def _acceptance(inputs: DoctorInputs, state: DoctorState) -> None:
    """The offline acceptance estimate, scored at the K the server drafts and held against the log's accept len."""
    report = state.report
    scenario = inputs.scenario or (_launch_scenario(report) if state.profile is not None else None)
    logs = report.results.get("logs")
    served_k, k_note = _served_k(logs, state.launch)
    if inputs.steps is None and k_note is not None:
        report.notes.append(k_note)
    result, note = _doctor_acceptance(inputs, state, scenario, logs, served_k)
    state.run("acceptance", lambda: result)
    if note:
        report.notes.append(note)


def _doctor_acceptance(inputs: DoctorInputs, state: DoctorState, scenario: str | None, logs: Any,
                       served_k: int | None) -> tuple[Any, str | None]:
    """The acceptance probe's doctor entry point: (result, note)."""
    from .convert import fixed_draft
    from .probes.acceptance import doctor_acceptance

    assert state.tgt is not None
    log, chat = inputs.log, inputs.chat
    apart = _traffic_apart(inputs)  # the budget scores the served traffic apart: it, not the dump, meets the log
    return doctor_acceptance(state.ckpt, state.tgt, state.profile, data=inputs.data, prompts=inputs.prompts,
                             logged_accept_len=logs.summary.mean_accept_len if logs is not None and not apart
                             else None,
                             log_path=str(log) if log is not None else None, scenario=scenario,
                             chat=_chat_samples(state.ckpt, state.tgt, chat, state.profile) if inputs.data is None
                             and chat is not None else None, steps=inputs.steps or served_k, log_steps=served_k,
                             measure=None if apart else inputs.measure, fixed=fixed_draft,
                             sampling=None if apart else inputs.sampling)


def _traffic_apart(inputs: DoctorInputs) -> bool:
    """The budget's served traffic is scored apart from the dump: a dump and served conversations both given."""
    return inputs.budget and inputs.data is not None and inputs.chat is not None


def _budget(inputs: DoctorInputs, state: DoctorState) -> None:
    """The acceptance budget over the estimate above (the dump its promise where it scored one), or over the served
    conversations scored apart at the same K, with the dump as trained as the promise."""
    from .probes.budget import acceptance_budget

    report = state.report
    acceptance = report.results["acceptance"]
    logs = report.results.get("logs")
    logged = logs.summary.mean_accept_len if logs is not None else None
    promise = None
    traffic = acceptance
    if _traffic_apart(inputs):
        from .probes.acceptance import doctor_acceptance

        assert state.tgt is not None and inputs.chat is not None
        traffic, note = doctor_acceptance(
            state.ckpt, state.tgt, state.profile, chat=_chat_samples(state.ckpt, state.tgt, inputs.chat, state.profile),
            logged_accept_len=logged, log_path=str(inputs.log) if inputs.log is not None else None,
            steps=acceptance.steps, log_steps=_served_k(logs, state.launch)[0], measure=inputs.measure, fixed=False,
            sampling=inputs.sampling)
        promise = acceptance
        report.findings.extend(f for f in traffic.findings
                               if f.code in ("acceptance/served-vs-log-mismatch", "engine/served-disagrees"))
        if note:
            report.notes.append(note)
    state.run("budget", acceptance_budget, traffic, promise=promise, expected=inputs.expected_accept_len,
              logged=logged, log=str(inputs.log) if inputs.log is not None else None)
    report.notes.extend(report.results["budget"].notes)


def _chain_applies(_inputs: DoctorInputs, state: DoctorState) -> str | None:
    results = state.report.results
    return None if "acceptance" in state.ran and results.get("logs") is not None else NOT_ASKED


def _chain(inputs: DoctorInputs, state: DoctorState) -> None:
    """Where the served chain breaks, from the estimate held against the log's per-position rates."""
    from .probes.chain_break import chain_note, compare_with_log

    results = state.report.results
    comparison = compare_with_log(results["acceptance"], results["logs"], path=str(inputs.log))
    if comparison is not None:
        state.run("chain", lambda: comparison)
        state.report.notes.append(chain_note(comparison))


def _provenance_applies(inputs: DoctorInputs, state: DoctorState) -> str | None:
    if inputs.data is None:
        return NOT_ASKED
    return None if state.tgt is not None else "needs --target: the dump's states are matched against the target's layers"


def _provenance(inputs: DoctorInputs, state: DoctorState) -> None:
    from .probes.provenance import trace_provenance

    state.run("provenance", trace_provenance, inputs.data, state.tgt, draft=state.ckpt, engine=state.profile)


def _template_applies(inputs: DoctorInputs, state: DoctorState) -> str | None:
    return None if inputs.data is not None and state.tgt is not None else NOT_ASKED


def _template(inputs: DoctorInputs, state: DoctorState) -> None:
    """The dump's chat template held against the served conversations (or the target's own template)."""
    from .probes.chat import served_template_check, template_note

    assert inputs.data is not None and state.tgt is not None
    template = served_template_check(inputs.data, state.tgt.root, chat=inputs.chat)
    if template is not None:
        state.run("template", lambda: template)
    if (note := template_note(template)) is not None:
        state.report.notes.append(note)


STEPS: tuple[Step, ...] = (
    Step("config", lambda _i, s: NOT_ASKED if s.has_config else None, _config_missing),
    Step("keys", _keys_applies, _keys),
    Step("sweep", lambda _i, s: None if s.has_config and s.profile is None else NOT_ASKED, _sweep),
    Step("vocab", _always, _vocab),
    Step("weights", lambda i, _s: None if i.weights else "weights statistics switched off", _weights),
    Step("judged_as", lambda _i, s: None if s.has_config and s.profile is None else NOT_ASKED, _judged_as),
    Step("wiring", _wiring_applies, _wiring),
    Step("aux_layers", lambda _i, s: None if s.has_config and not _traced(s) else NOT_ASKED, _aux_layers),
    Step("logs", lambda i, _s: None if i.log is not None else "no --log given: acceptance not read", _logs),
    Step("prediction", _prediction_applies, _prediction),
    Step("acceptance", _acceptance_applies, _acceptance),
    Step("chain", _chain_applies, _chain),
    Step("provenance", _provenance_applies, _provenance),
    Step("template", _template_applies, _template),
    Step("budget", lambda i, s: None if i.budget and "acceptance" in s.ran else NOT_ASKED, _budget),
)


def diagnose(
    draft: CheckpointLike,
    *,
    target: CheckpointLike | None = None,
    engine: str | EngineProfile | None = None,
    log: str | Path | None = None,
    baseline_tps: float | None = None,
    num_draft_tokens: int | None = None,
    scenario: str | None = None,
    weights: bool = True,
    device_map: str | None = None,
    dtype: str = "float32",
    progress: Progress | None = None,
    launch: "str | Launch | None" = None,
    data: str | Path | None = None,
    prompts: str | Path | None = None,
    execute: bool = False,
    chat: str | Path | None = None,
    engine_root: str | Path | None = None,
    execution: Any = None,
    steps: int | None = None,
    measure: Callable[[Any, Any, Any], Any] | None = None,
    execute_timeout: float | None = None,
    sampling: Any = None,
    expected_accept_len: float | None = None,
    budget: bool = False,
) -> Report:
    """Run the applicable probes on a draft and return a Report whose findings are ranked causes first.

    The arguments are gathered into one :class:`DoctorInputs` and :data:`STEPS` run over it (:func:`run_doctor`).
    ``device_map`` / ``dtype`` place the target for the wiring check (accelerate's ``auto`` spreads a large
    target over GPUs and CPU; ``dtype="auto"`` keeps the checkpoint's dtype). ``progress`` goes to the probes
    that stream tensor bytes (weights). ``launch``: the server command
    line (or a parsed :class:`~eagle3lens.launch.Launch`); without it, a ``log``'s start-up lines are read for one.
    With a target, the launch gives the predicted wiring beside the traced one. ``data`` (a hidden-state dump) or
    ``prompts`` with ``target`` add the offline acceptance estimate, held against the log's accept len.
    ``execute``: the keys fate is the installed engine's own loader run on meta tensors (``keys --execute``), or
    the engine package in ``engine_root``, or an ``execution`` already recorded elsewhere (``--host``); the other
    probes then judge as the release that ran. The engine runs in a child process stopped after
    ``execute_timeout`` seconds (default: ``$EAGLE3LENS_EXECUTE_TIMEOUT``, else 300).
    ``chat`` (served conversations, JSONL) with ``target``: without ``data``, the live acceptance estimate over
    them as the server renders them; with ``data``, the dump's template is checked against them.
    ``steps``: K the acceptance estimate drafts (default: the K the launch or log states, else the draft's config).
    ``measure``: ``(result, samples, teacher) -> result`` puts the real engine's count on the same samples beside
    the estimate (``--measure``). ``sampling`` (a :class:`~eagle3lens.probes.traffic_result.Sampling`): the
    estimate also scores the served sampling. ``expected_accept_len``: what training promised (the log is judged
    against it). ``budget``: add the acceptance budget (:mod:`eagle3lens.probes.budget`) over the estimate.
    """
    return run_doctor(DoctorInputs(
        draft, target=target, engine=engine, log=log, baseline_tps=baseline_tps, num_draft_tokens=num_draft_tokens,
        scenario=scenario, weights=weights, device_map=device_map, dtype=dtype, progress=progress, launch=launch,
        data=data, prompts=prompts, execute=execute, chat=chat, engine_root=engine_root, execution=execution,
        steps=steps, measure=measure, execute_timeout=execute_timeout, sampling=sampling,
        expected_accept_len=expected_accept_len, budget=budget))


def run_doctor(inputs: DoctorInputs) -> Report:
    """:data:`STEPS` in order over ``inputs``, then the findings ranked and the triage on top."""
    state = _prepare(inputs)
    for step in STEPS:
        reason = step.applies(inputs, state)
        if reason is None:
            step.run(inputs, state)
        elif reason:
            state.skipped[step.name] = reason
    report = state.report
    measured = _measured(report)
    # the log probe's own fix is "run the doctor": here the causes above are the fix; low acceptance's fix, the
    # doctor with the budget's inputs, stays until the budget is shown
    report.findings = rank_findings([replace(f, fix=None) if f.area == "logs" and (f.fix or "").startswith(
        "eagle3lens doctor") and (f.code != "logs/low-acceptance" or "budget" in report.results) else f
        for f in report.findings])
    triage = Triage(rank_causes(report.findings, measured), tuple(state.ran), state.skipped)
    report.results = {"doctor": triage, **report.results}
    return report


def _prepare(inputs: DoctorInputs) -> DoctorState:
    """Check the inputs, open the draft and target, run the engine's own loader when asked, start the report."""
    from .probes.wiring import config_only, config_spec

    if inputs.data is not None and inputs.prompts is not None:
        raise UsageError("give --data D (a hidden-state dump) or --prompts F (live capture), not both")
    if inputs.prompts is not None and inputs.chat is not None:
        raise UsageError("give --prompts F or --chat FILE.jsonl (live capture over served conversations), not both")
    ckpt = as_checkpoint(inputs.draft).require_draft()
    target = inputs.target
    # a target holding only config.json (a model not downloaded): the wiring is traced on meta, nothing else reads it
    config_target = Path(target) if isinstance(target, (str, Path)) and config_only(Path(target)) else None
    tgt = None if config_target is not None else as_checkpoint(target)
    num_target_layers = (config_spec(config_target).num_hidden_layers if config_target is not None
                         else tgt.spec.num_hidden_layers if tgt is not None else None)
    executed, profile = _engine(inputs, ckpt, num_target_layers)
    report = Report(checkpoint=ckpt.summary(), engine=profile.spec if profile else None)
    if profile is not None:
        from .engines import engine_notes

        report.notes.extend(engine_notes(profile))
    if config_target is not None:
        report.notes.append(f"{target} holds only config.json: the wiring is traced on the meta device (shapes "
                            "only); the target's embedding and head copies are not checked")
    return DoctorState(report, ckpt, tgt, config_target, num_target_layers, profile, executed)


def _engine(inputs: DoctorInputs, ckpt: Checkpoint, num_target_layers: int | None
            ) -> tuple[Any, EngineProfile | None]:
    """(the engine's own load, when it was executed; the profile every probe judges as)."""
    engine = inputs.engine
    if not (inputs.execute or inputs.engine_root is not None or inputs.execution is not None):
        return None, as_profile(engine or None)
    from .probes.executed import execute_load

    if not isinstance(engine, (str, type(None))) or (engine or "installed").strip().lower() != "installed":
        raise UsageError(f"execute runs the installed engine's own loader: engine='installed', not {engine!r}")
    executed = None
    if ckpt.config is not None:
        executed = execute_load(ckpt, root=inputs.engine_root, num_target_layers=num_target_layers,
                                execution=inputs.execution, timeout=inputs.execute_timeout)
    return executed, as_profile(executed.engine if executed is not None else engine or "installed")


def _served_k(logs: Any, parsed: "Launch | None") -> tuple[int | None, str | None]:
    """K the server drafts, from the launch or the log (the acceptance estimate counts the same rounds), and the
    note saying where it was read; (None, None) when neither says."""
    from .probes.chain_break import served_steps
    from .probes.limits import check_steps

    k, source = served_steps(logs, parsed)
    if k is None:
        return None, None
    return check_steps(k, f"K from {source}"), f"acceptance scored at K = {k} draft steps, from {source}"


def _chat_samples(ckpt: Checkpoint, target: Checkpoint, chat: str | Path, profile: EngineProfile | None
                  ) -> tuple[list, Any]:
    """The served conversations continued by the target, the layers the draft and engine read captured."""
    from .probes.chat import chat_samples

    return chat_samples(ckpt, target, chat, profile)


def _measured(report: Report) -> tuple[float, float] | None:
    """(as served, as trained) from the acceptance probe; the aux-layer mismatch of provenance, priced by it: at
    warning with both figures when the engine's layers cost nothing measurable, critical beyond noise; every other
    cause priced by its fix's estimate (``probes.priced``)."""
    from .probes.priced import price
    from .probes.provenance import priced_mismatch

    acceptance = report.results.get("acceptance")
    if acceptance is None:
        return None
    served, trained = acceptance.accept_len("as_served"), acceptance.accept_len("as_trained")
    if served is None or trained is None:
        return None
    with_data_layers = acceptance.toggles.get("aux-ids")
    report.findings = price([priced_mismatch(f, served, with_data_layers if with_data_layers is not None else trained)
                             if f.code == "data/aux-layers-mismatch" else f for f in report.findings], acceptance)
    return served, trained


def _launch_scenario(report: Report) -> str | None:
    """``aux-off`` when the launch's predicted wiring captures no aux states and the draft still runs (fc bypassed):
    the offline acceptance then scores the draft as that launch serves it."""
    prediction = report.results.get("prediction")
    if prediction is None or prediction.aux_capture or prediction.outcome != "fc-bypassed":
        return None
    report.notes.append(f"acceptance scored under the aux-off scenario: the launch ({prediction.launch.source}) "
                        "captures no aux states")
    return "aux-off"

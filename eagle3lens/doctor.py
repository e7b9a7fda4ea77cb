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
) -> Report:
    """Run the applicable probes on a draft and return a Report whose findings are ranked causes first.

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
    the estimate (``--measure``).
    """
    from .probes.logs import ENGINES as LOG_ENGINES
    from .probes.logs import parse_log
    from .probes.vocab import inspect_vocab
    from .probes.weights import weight_stats
    from .probes.keys import simulate_load
    from .probes.wiring import check_wiring
    from .served import serve_draft

    if data is not None and prompts is not None:
        raise UsageError("give --data D (a hidden-state dump) or --prompts F (live capture), not both")
    if prompts is not None and chat is not None:
        raise UsageError("give --prompts F or --chat FILE.jsonl (live capture over served conversations), not both")
    ckpt = as_checkpoint(draft).require_draft()
    from .probes.wiring import config_only, config_spec

    # a target holding only config.json (a model not downloaded): the wiring is traced on meta, nothing else reads it
    config_target = Path(target) if isinstance(target, (str, Path)) and config_only(Path(target)) else None
    shapes_only = config_target is not None
    tgt = None if shapes_only else as_checkpoint(target)
    num_target_layers = (config_spec(config_target).num_hidden_layers if config_target is not None
                         else tgt.spec.num_hidden_layers if tgt is not None else None)
    executed = None
    if execute or engine_root is not None or execution is not None:
        from .probes.executed import execute_load

        if not isinstance(engine, (str, type(None))) or (engine or "installed").strip().lower() != "installed":
            raise UsageError(f"execute runs the installed engine's own loader: engine='installed', not {engine!r}")
        if ckpt.config is not None:
            executed = execute_load(ckpt, root=engine_root, num_target_layers=num_target_layers, execution=execution,
                                    timeout=execute_timeout)
        profile = as_profile(executed.engine if executed is not None else engine or "installed")
    else:
        profile = as_profile(engine or None)
    report = Report(checkpoint=ckpt.summary(), engine=profile.spec if profile else None)
    if profile is not None:
        from .engines import engine_notes

        report.notes.extend(engine_notes(profile))
    ran: list[str] = []
    skipped: dict[str, str] = {}
    if config_target is not None:
        report.notes.append(f"{target} holds only config.json: the wiring is traced on the meta device (shapes "
                            "only); the target's embedding and head copies are not checked")

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
        load = executed if executed is not None else simulate_load(ckpt, profile, num_target_layers=num_target_layers)
        served = serve_draft(ckpt, engine=profile, num_target_layers=num_target_layers, load=load,
                             target=config_target or (tgt.root if tgt is not None else None))
        if executed is not None:
            from .probes.executed import stand_ins_note

            report.notes.append(stand_ins_note(executed))
        run("keys", lambda: served.load)
        report.findings.extend(served.findings)  # the server stopping before the draft runs
        report.notes.extend(served.load.report_notes)
    else:
        skipped["keys"] = "no --engine given: load simulation not run (see keys/engine-sweep)"
        sweep = engine_sweep(ckpt, num_target_layers)
        if sweep is not None:
            report.findings.append(sweep)
    run("vocab", inspect_vocab, ckpt, target=tgt)
    if weights:
        run("weights", weight_stats, ckpt, target=tgt, progress=progress)
    else:
        skipped["weights"] = "weights statistics switched off"
    if ckpt.config is not None:
        # without --engine, aux layers and wiring are judged as the loader the layout is written for
        wiring_profile = profile or own_loader(ckpt.spec.flavour)
        if profile is None:
            report.judged_as = wiring_profile.spec
            report.notes.append(f"no --engine given: aux layers and wiring judged as {wiring_profile.spec} loads the draft")
        if tgt is not None or shapes_only:  # the wiring check resolves the aux layers itself and reports them
            run("wiring", check_wiring, ckpt, target=tgt or target, engine=wiring_profile, scenario=scenario,
                device="meta" if shapes_only else "cpu", device_map=device_map, dtype=dtype)
        else:
            run("aux_layers", lambda: serve_draft(ckpt, engine=wiring_profile).aux)
            skipped["wiring"] = "no --target given: wiring not checked"
    if log is not None:
        # the log's format and accept-rate formula depend on the serving engine's version; a trainer profile says nothing
        log_engine = profile.spec if profile is not None and profile.name in LOG_ENGINES else None
        run("logs", parse_log, log, engine=log_engine, num_draft_tokens=num_draft_tokens, baseline_tps=baseline_tps)
    else:
        skipped["logs"] = "no --log given: acceptance not read"
    _predict(report, run, ckpt, tgt or config_target, profile, launch, log)
    live = prompts is not None or chat is not None
    if (data is not None or live) and tgt is not None and ckpt.config is not None:
        from .probes.acceptance import doctor_acceptance

        scenario = scenario or (_launch_scenario(report) if profile is not None else None)

        logs = report.results.get("logs")
        logged = logs.summary.mean_accept_len if logs is not None else None
        served_k, k_note = _served_k(logs, launch, log)
        if steps is None and k_note is not None:
            report.notes.append(k_note)
        result, note = doctor_acceptance(ckpt, tgt, profile, data=data, prompts=prompts, logged_accept_len=logged,
                                         log_path=str(log) if log is not None else None, scenario=scenario,
                                         chat=_chat_samples(ckpt, tgt, chat, profile) if data is None and chat
                                         is not None else None, steps=steps or served_k, log_steps=served_k,
                                         measure=measure)
        run("acceptance", lambda: result)
        if note:
            report.notes.append(note)
        if logs is not None:
            from .probes.chain_break import chain_note, compare_with_log

            comparison = compare_with_log(result, logs, path=str(log))
            if comparison is not None:
                run("chain", lambda: comparison)
                report.notes.append(chain_note(comparison))
    elif data is not None or live:
        skipped["acceptance"] = "needs --target (its final norm and lm_head are the teacher) and a config.json"
    if data is not None and tgt is not None:
        from .probes.provenance import trace_provenance

        run("provenance", trace_provenance, data, tgt, draft=ckpt, engine=profile)
        from .probes.chat import served_template_check, template_note

        template = served_template_check(data, tgt.root, chat=chat)
        if template is not None:
            run("template", lambda: template)
        if (note := template_note(template)) is not None:
            report.notes.append(note)
    elif data is not None:
        skipped["provenance"] = "needs --target: the dump's states are matched against the target's layers"

    measured = _measured(report)
    # the log probe's own fix is "run the doctor": here the causes above are the fix (the low-acceptance budget,
    # `acceptance --chat ... --log`, stays: it prices what the doctor does not)
    report.findings = rank_findings([replace(f, fix=None) if f.area == "logs" and (f.fix or "").startswith(
        "eagle3lens doctor") else f for f in report.findings])
    triage = Triage(rank_causes(report.findings, measured), tuple(ran), skipped)
    report.results = {"doctor": triage, **report.results}
    return report


def _served_k(logs: Any, launch: "str | Launch | None", log: str | Path | None) -> tuple[int | None, str | None]:
    """K the server drafts, from the launch or the log (the acceptance estimate counts the same rounds), and the
    note saying where it was read; (None, None) when neither says."""
    from .probes.chain_break import served_steps
    from .probes.limits import check_steps

    parsed = parse_launch(launch) if isinstance(launch, str) else launch
    if parsed is None and log is not None:
        parsed = launch_from_log(log)
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


def _predict(report: Report, run: Any, ckpt: Any, tgt: Any, profile: EngineProfile | None,
             launch: "str | Launch | None", log: str | Path | None) -> None:
    """The launch-based wiring prediction, when a target config and a launch (or a log recording one) are given."""
    from .probes.prediction import predict_wiring

    parsed = parse_launch(launch) if isinstance(launch, str) else launch
    if parsed is None and log is not None:
        parsed = launch_from_log(log)
    if parsed is None or tgt is None or ckpt.config is None:
        return
    if profile is not None and profile.name != parsed.engine:
        report.notes.append(f"the launch ({parsed.source}) starts {parsed.engine}, not {profile.spec}: "
                            "wiring not predicted from it")
        return
    run("prediction", predict_wiring, ckpt, target=tgt, engine=profile, launch=parsed,
        observed=report.results.get("wiring"))

"""Judging a read log: zero / low acceptance, speculation slower than its baseline, a log that is not the engine
named or has no acceptance lines; each finding spells out the arithmetic of the release's convention.

Accept len always counts the bonus token, so accepted drafts per step = len - 1: ``logs/zero-acceptance`` when the
mean accept len is <= ``ZERO_ACCEPT_LEN``; ``logs/low-acceptance`` when len - 1 is under ``EXPECTED_SHORTFALL`` of
what the expected accept len promises, or speculation is measured slower than the baseline, or (no baseline) len
is under the break-even heuristic 1 + ``DRAFT_STEP_COST``·K.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..findings import Finding, Severity, fix_command
from .log_result import LogResult

ZERO_ACCEPT_LEN = 1.05  # ≤ 1 accepted draft token per 20 verify steps: "zero"
EXPECTED_SHORTFALL = 0.5  # low when < half the accepted drafts the training promised
DRAFT_STEP_COST = 0.1  # break-even heuristic: each draft step costs ~10% of a target step
DEFAULT_DRAFT_STEPS = 3  # K assumed for break-even when nothing pins it (SGLang 0.5.23 auto, non-Llama)


def _fmt_rates(values: Iterable[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def _era_sentence(result: LogResult) -> str:
    """The worked arithmetic of FACTS §6.4 for the formula and K this log implies."""
    s, inf = result.summary, result.inference
    length, rate = s.mean_accept_len, s.mean_accept_rate
    if length is None:
        return ""
    if result.engine == "vllm":
        logged = [x.logged_accept_len for x in result.samples if x.logged_accept_len is not None]
        if logged:
            parts = [(f"vLLM 0.8.5-0.8.5.post1 logs mean acceptance length = accepted/drafts without the bonus "
                      f"token (logged {length - 1:.2f}), so accept len = {length - 1:.2f} + 1 = {length:.2f}")]
        else:
            parts = [f"vLLM mean acceptance length {length:.2f} = 1 + accepted/drafts"]
        if rate is not None:
            parts.append(f"avg draft acceptance rate {100 * rate:.1f}%")
        if s.mean_per_position:
            parts.append(f"per-position rates {_fmt_rates(s.mean_per_position)}")
        return "; ".join(parts) + "."
    ndt = inf.denominator or inf.num_draft_tokens
    if rate is None or inf.formula is None or not ndt:
        return inf.explanation + "." if inf.explanation else ""
    k = ndt - 1
    if inf.formula == "0.5.5":
        text = (f"With {ndt} draft tokens (K = {k} steps, topk 1) and the 0.5.3.post2-0.5.10.post1 formula "
                f"accept_len/(K+1), "
                f"accept rate {rate:.2f} and accept len {length:.2f}: {length:.2f}/{ndt} = {length / ndt:.2f}")
        if length <= ZERO_ACCEPT_LEN:
            text += (f" is the formula's floor 1/(K+1), not {100 * rate:.0f}% acceptance: only the bonus token is "
                     f"ever accepted. Under 0.5.11+ the same run logs ({length:.2f}-1)/({ndt}-1) = "
                     f"{(length - 1) / k:.2f}.")
        else:
            text += f"; under 0.5.11+ the same run would log ({length:.2f}-1)/({ndt}-1) = {(length - 1) / k:.2f}."
        return text
    text = (f"With {ndt} draft tokens and the 0.5.11+ formula (len-1)/(num_draft_tokens-1): "
            f"({length:.2f}-1)/{k} = {(length - 1) / k:.2f} (logged {rate:.2f})")
    return text + f"; the 0.5.5 formula would have logged {length:.2f}/{ndt} = {length / ndt:.2f}."


@dataclass(frozen=True)
class _Judged:
    """What every acceptance finding of one log says alike: the figure judged, how it is named, the fixes."""

    result: LogResult
    length: float | None  # mean accept len, else the lifetime or counters' figure
    what: str  # how ``length`` is named in a title
    lines: str  # " over N log lines", or ""
    era: str  # the worked arithmetic of the release's convention, and the other readings
    evidence: dict[str, Any]
    fix: str  # re-run the doctor (or the measured acceptance, for a server's counters)
    budget: str  # the doctor's acceptance budget: each lever outside the checkpoint priced on the served traffic


def _judged(result: LogResult) -> _Judged:
    s, inf = result.summary, result.inference
    length = s.mean_accept_len if s.mean_accept_len is not None else s.lifetime_accept_len
    engine = result.engine or "sglang"
    log = result.source if result.source != "<text>" else "SERVER_LOG"
    spec = f"{engine}=={result.version}" if result.version and result.engine else engine
    counters = dict(result.formats).get("vllm-prometheus") is not None
    fix = fix_command("acceptance", "DRAFT_CHECKPOINT", "--target", "TARGET", "--prompts", "PROMPTS", "--engine",
                      "installed", "--measure") if counters else \
        fix_command("doctor", "DRAFT_CHECKPOINT", "--engine", spec, "--log", log)
    # low, not zero: the causes sit outside the checkpoint as often as in it; the doctor's budget prices each lever
    promised = s.expected_accept_len
    budget = fix_command("doctor", "DRAFT_CHECKPOINT", "--target", "TARGET", "--chat", "SERVED_CHATS.jsonl",
                         "--request", "REQUEST.json", *(("--engine", "installed", "--measure") if counters else
                                                         ("--engine", spec, "--log", log)),
                         *(("--expected-accept-len", f"{promised:g}") if promised is not None else ()))
    evidence: dict[str, Any] = {
        "engine": result.engine, "formats": dict(result.formats), "acceptance_lines": s.acceptance_lines,
        "mean_accept_len": s.mean_accept_len, "median_accept_len": s.median_accept_len,
        "last_accept_len": s.last_accept_len, "lifetime_accept_len": s.lifetime_accept_len,
        "mean_accept_rate": s.mean_accept_rate, "accepted_drafts_per_step": None if length is None else length - 1,
        "num_draft_tokens": inf.num_draft_tokens, "num_draft_tokens_source": inf.source,
        "rate_formula": inf.formula,
    }
    if s.mean_per_position:
        evidence["mean_per_position"] = list(s.mean_per_position)
    if s.accepted_tokens is not None:
        evidence.update(accepted_tokens=s.accepted_tokens, drafted_tokens=s.drafted_tokens)
    if result.readings:
        evidence["readings"] = [r.to_dict() for r in result.readings]
    what = "mean accept len" if s.mean_accept_len is not None else \
        "accept len from the server's counters" if counters else "lifetime avg_spec_accept_length"
    lines = f" over {s.acceptance_lines} log lines" if s.mean_accept_len is not None else ""
    return _Judged(result, length, what, lines, _era_with_readings(result, length), evidence, fix, budget)


def _era_with_readings(result: LogResult, length: float | None) -> str:
    """The era sentence, then what the mean would be under each release the log's lines leave open."""
    era = _era_sentence(result)
    alternatives = [r for r in result.readings if not r.chosen and r.mean_accept_len is not None]
    if alternatives and length is not None:
        chosen = next((r.releases for r in result.readings if r.chosen), "the likeliest release")
        era = (era + f" Read as {chosen}; " + "; ".join(
            f"if the log is from {r.releases} ({r.meaning}) the mean accept len is {r.mean_accept_len:.2f}"
            for r in alternatives) + ": pass --engine NAME==VERSION to decide.").strip()
    return era


def _engine_mismatch(result: LogResult) -> Finding | None:
    if not result.disagreement:
        return None
    return Finding(
        "logs/engine-mismatch", Severity.WARNING,
        f"the log does not match the engine named: read as {result.engine} by its own format",
        result.disagreement + ". Findings from other probes assume the engine named; make sure the log is "
        "from the server that runs that engine and release.",
        evidence={"engine": result.engine, "formats": dict(result.formats), "version": result.version})


def _no_acceptance_lines(result: LogResult) -> Finding | None:
    s = result.summary
    if s.lifetime_accept_len is not None or s.acceptance_lines:
        return None
    log = result.source if result.source != "<text>" else "SERVER_LOG"
    return Finding(
        "logs/no-acceptance-lines", Severity.WARNING, f"no acceptance lines in {log}",
        (f"None of its {result.total_lines} lines is an SGLang decode line with accept len or a vLLM SpecDecoding "
         f"metrics line ({result.unparsed_lines} looked like metrics but did not parse): acceptance was not "
         "judged. Is this the server log of a run with speculative decoding on?"),
        evidence={"total_lines": result.total_lines, "unparsed_lines": result.unparsed_lines,
                  "unparsed_examples": list(result.unparsed_examples), "formats": dict(result.formats)})


def _zero(j: _Judged, length: float) -> Finding:
    return Finding(
        "logs/zero-acceptance", Severity.CRITICAL,
        f"Draft acceptance is zero: {j.what} {length:.2f}{j.lines}",
        (f"accept len counts the bonus token: accept len = 1 + accepted draft tokens per verify step, so "
         f"{length:.2f} means {length - 1:.2f} accepted draft tokens per step (<= {ZERO_ACCEPT_LEN} means at most "
         f"one accepted draft token per twenty verify steps). Every round yields only the bonus token: the "
         f"target does all the work and each draft pass is pure overhead. {j.era} Typical causes: decoder layer "
         "dropped at load, fc bypassed (aux hidden states not passed), corrupt or identity d2t, random lm_head.")
        .replace("  ", " ").strip(),
        j.evidence, j.fix)


def _low_reasons(j: _Judged, length: float) -> list[str]:
    """Why ``length`` is low: under the training's promise, slower than the measured baseline, or (no baseline)
    under the estimated break-even."""
    s, inf, what = j.result.summary, j.result.inference, j.what
    reasons = []
    if s.expected_accept_len is not None and length - 1 < EXPECTED_SHORTFALL * (s.expected_accept_len - 1):
        reasons.append(
            f"{what} {length:.2f} gives {length - 1:.2f} accepted draft tokens per step, less than "
            f"{EXPECTED_SHORTFALL:.0%} of the {s.expected_accept_len - 1:.2f} that the training metrics promise "
            f"(expected accept len {s.expected_accept_len:.2f})")
    if s.baseline_tps is not None and s.mean_gen_tps is not None:
        if s.mean_gen_tps < s.baseline_tps:
            reasons.append(f"below break-even as measured: {s.mean_gen_tps:.1f} tok/s with speculation vs "
                           f"{s.baseline_tps:.1f} tok/s baseline")
    elif s.break_even_accept_len is not None and length < s.break_even_accept_len:
        k = inf.draft_steps or DEFAULT_DRAFT_STEPS
        k_from = "from the log" if inf.draft_steps and inf.source == "log" else (
            "given" if inf.draft_steps else "assumed: pass --num-draft-tokens")
        reasons.append(
            f"{what} {length:.2f} is below the estimated break-even {s.break_even_accept_len:.2f} = 1 + "
            f"{DRAFT_STEP_COST} x K (K = {k} draft steps, {k_from}); heuristic: each draft step plus its share of "
            "verification costs ~10% of a target decode step (vLLM PR #50170: accept len 1.036 ran at "
            "0.70-0.79x plain decoding); pass --baseline-tps to measure instead")
    return reasons


def _low(j: _Judged, length: float) -> Finding | None:
    reasons = _low_reasons(j, length)
    if not reasons:
        return None
    s = j.result.summary
    return Finding(
        "logs/low-acceptance", Severity.WARNING,
        f"Draft acceptance is low: {j.what} {length:.2f}{j.lines}",
        "; ".join(reasons) + ". " + j.era + " Some signal is left, so look for partial mismatches: "
        "aux layer ids, norm_before_fc or other config flags, vocab mapping; and outside the checkpoint: "
        "the served chat template, the sampling temperature, the served vocabulary. The fix command prints "
        "the acceptance budget: what training promised, then what the template, the vocabulary, the "
        "sampling and the engine each cost on your served conversations and request, at the log's K, down "
        "to the logged figure.",
        {**j.evidence, "expected_accept_len": s.expected_accept_len, "baseline_tps": s.baseline_tps,
         "mean_gen_tps": s.mean_gen_tps, "break_even_accept_len": s.break_even_accept_len},
        j.budget)


def _slower(j: _Judged) -> Finding | None:
    s = j.result.summary
    if s.baseline_tps is None or s.mean_gen_tps is None or s.mean_gen_tps >= s.baseline_tps:
        return None
    ratio = s.mean_gen_tps / s.baseline_tps
    return Finding(
        "logs/speculation-slower", Severity.CRITICAL if ratio < 0.5 else Severity.WARNING,
        f"Speculation is a net loss: {s.mean_gen_tps:.1f} tok/s vs {s.baseline_tps:.1f} tok/s without it "
        f"({ratio:.2f}x)",
        (f"mean generation throughput {s.mean_gen_tps:.1f} tok/s over {s.throughput_lines} log lines is "
         f"{ratio:.2f}x the {s.baseline_tps:.1f} tok/s baseline, a {1 - ratio:.0%} loss"
         + (f" (mean running requests {s.mean_running_reqs:.1f}; compare at the same concurrency)"
            if s.mean_running_reqs is not None else "")
         + ". Until acceptance is fixed, serving without speculative decoding is faster."),
        {"mean_gen_tps": s.mean_gen_tps, "baseline_tps": s.baseline_tps, "ratio": ratio,
         "throughput_lines": s.throughput_lines, "mean_running_reqs": s.mean_running_reqs,
         "mean_accept_len": j.length},
        j.fix)


def classify(result: LogResult) -> list[Finding]:
    """Zero / low acceptance and speculation-slower-than-baseline, with the arithmetic spelled out."""
    j = _judged(result)
    acceptance = None if j.length is None else _zero(j, j.length) if j.length <= ZERO_ACCEPT_LEN else _low(j, j.length)
    found = (_engine_mismatch(result), _no_acceptance_lines(result), acceptance, _slower(j))
    return [f for f in found if f is not None]

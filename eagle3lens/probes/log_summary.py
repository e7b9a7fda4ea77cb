"""From a :class:`~.log_scan.LogScan` to a :class:`~.log_result.LogResult`: which engine's log it is, by which
release's convention it is read (vLLM's bonus token, SGLang's accept-rate formula and K), the summary over every
acceptance line, and the notes saying what was assumed, skipped or capped."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from packaging.version import InvalidVersion, Version

from ..io.textsafe import clean_text
from .log_findings import DEFAULT_DRAFT_STEPS, DRAFT_STEP_COST, classify
from .log_formats import ENGINES, FORMULA_TEXT, DraftInference, Era, check_version, era_of, infer_draft_tokens
from .log_result import LogReading, LogResult, LogSample, LogSummary
from .log_scan import EPOCH, FORMAT_CODES, MAX_PAIRS, Collector, LogScan

_NAN = math.nan


@dataclass(frozen=True)
class LogQuery:
    """What the caller asks of a log: the engine named (and its release), K, and the figures to judge against."""

    name: str | None = None  # sglang | vllm
    version: Version | None = None
    spec: str | None = None  # engine= as given
    num_draft_tokens: int | None = None
    baseline_tps: float | None = None
    expected_accept_len: float | None = None


@dataclass
class _Reading:
    """How the scan is read: the engine and release chosen, its era, and what was inferred under it."""

    engine: str | None
    col: Collector
    version: Version | None = None
    version_source: str | None = None  # "option" or "log"
    disagreement: str | None = None
    era: Era | None = None
    bonus: bool = True  # vLLM's mean acceptance length counts the bonus token
    readings: list[LogReading] = field(default_factory=list)
    inference: DraftInference = DraftInference(None, None, None, "unknown")
    steps: int | None = None


@dataclass(frozen=True)
class _Acceptance:
    """Every acceptance line once: bonus-inclusive lengths, rates, and what had to be derived or dropped."""

    lengths: list[float]
    rates: list[float]
    lines: int
    derived: int
    impossible: int


def build_result(scan: LogScan, query: LogQuery) -> LogResult:
    """The scan read under ``query``'s engine and release (or the log's own), summarised and judged."""
    notes = scan.notes
    _scan_notes(scan)
    r = _choose_engine(scan, query)
    _release(r, notes)
    if r.engine == "vllm":
        _vllm_bonus(r, notes)
        _vllm_inference(r, query)
    else:
        _sglang_inference(r, scan, query, notes)
    acc = _acceptance(r.col, r.bonus, r.steps)
    if acc.derived:
        notes.append(f"accept len derived for {acc.derived} rate-only vLLM lines (1 + K x rate; exactly 1.00 when "
                     "0 tokens were accepted)")
    if acc.impossible:
        notes.append(f"{acc.impossible} accept lengths under 1.00 skipped: accept len counts the bonus token, so it "
                     "is at least 1 in this format")
    summary = _summary(r, acc, query)
    _closing_notes(r, summary, notes)
    result = LogResult(
        source=scan.source, engine=r.engine, formats=tuple(sorted(r.col.formats.items(), key=lambda kv: -kv[1])),
        samples=tuple(_final_samples(r.col.samples, r.bonus, r.steps, scan.first_time)), summary=summary,
        inference=r.inference, total_lines=scan.total, ignored_lines=scan.ignored,
        unparsed_lines=scan.unparsed_count, unparsed_examples=tuple(scan.unparsed),
        unknown_fields=tuple(sorted(r.col.unknown)), notes=tuple(notes), parsed_lines=r.col.count,
        overlong_lines=scan.overlong, rejected_values=scan.rejected_count + acc.impossible,
        rejected_examples=tuple(scan.rejected), readings=tuple(r.readings), series_stride=r.col.stride,
        version=None if r.version is None else str(r.version), version_source=r.version_source,
        disagreement=r.disagreement)
    return replace(result, findings=tuple(classify(result)))


def _scan_notes(scan: LogScan) -> None:
    if scan.overlong:
        scan.notes.append(f"{scan.overlong} lines over {scan.bounds.line_bytes // 1024} KiB skipped (no engine "
                          f"prints such lines; first at line {', '.join(map(str, scan.overlong_at))})")
    if scan.rejected_count:
        scan.notes.append(f"{scan.rejected_count} values out of any believable range (negative, NaN, infinite or "
                          "huge) were skipped, never judged")


def _choose_engine(scan: LogScan, query: LogQuery) -> _Reading:
    """The engine whose lines the log is read by: the one named, unless the log has none of its acceptance lines
    and the other's (the disagreement is reported); by default the one with most acceptance lines."""
    name, collectors = query.name, scan.collectors
    counts = {e: collectors[e].acceptance_count for e in ENGINES}
    chosen: str | None
    if name is not None and counts[name] < max(counts[e] for e in ENGINES if e != name) and not counts[name][0]:
        chosen = max((e for e in ENGINES if e != name), key=lambda e: counts[e])
        mismatch = True
    else:
        chosen = name or max(ENGINES, key=lambda e: counts[e])
        mismatch = False
        if not name and not collectors[chosen].count:
            chosen = None
    for other in ENGINES:
        if other != chosen and collectors[other].count:
            scan.notes.append(f"{collectors[other].count} {other} lines ignored: this log was read as {chosen}")
            scan.ignored += collectors[other].count
    r = _Reading(chosen, collectors[chosen] if chosen else Collector("sglang"))
    if mismatch and chosen is not None:
        r.disagreement = (f"--engine {clean_text(query.spec or '')} names {name}, but this log has no {name} "
                          f"acceptance lines and {r.col.count} {chosen} lines: read as {chosen} by its own format")
    elif query.version is not None:
        r.version, r.version_source = query.version, "option"
    if r.version is None and chosen == "vllm" and scan.log_version is not None:
        try:
            r.version, r.version_source = Version(scan.log_version), "log"
        except InvalidVersion:
            pass
    return r


def _release(r: _Reading, notes: list[str]) -> None:
    """The release's era, unless the log's own lines contradict it (then it is read by its own format)."""
    if r.disagreement is None and r.engine is not None and r.version is not None:
        spec = f"{r.engine}=={r.version}" + ("" if r.version_source == "option" else " (the version the log names)")
        r.disagreement = check_version(r.engine, r.version, r.col.formats, spec)
        if r.disagreement is not None:
            r.version, r.version_source = None, None
    formats = r.col.formats
    r.era = era_of(r.engine, r.version) if r.engine and r.version else None
    if r.engine == "sglang" and r.era is None and formats.get("sglang-0.5.3") and not formats.get("sglang-0.5"):
        r.era = era_of("sglang", Version("0.5.3.post2"))  # the 'Decode batch.' form with a rate pins the release
        notes.append("'Decode batch.' lines with an accept rate are SGLang 0.5.3.post2-0.5.3.post3's: rate read as "
                     "accept_len/(steps+1)")


def _vllm_bonus(r: _Reading, notes: list[str]) -> None:
    """Whether vLLM's logged mean acceptance length counts the bonus token: the release says, else the log's own
    arithmetic, else both readings are reported."""
    col, era = r.col, r.era
    logged = [x for x, c in zip(col.lengths, col.codes, strict=True)
              if c // 2 == FORMAT_CODES["vllm-mean-length"] and not math.isnan(x)]
    if not logged:
        return
    below_one = any(x < 1 for x in logged)
    if era is not None and "vllm-mean-length" in era.formats:
        r.bonus = era.bonus_included and not below_one
        if below_one and era.bonus_included:
            r.disagreement = r.disagreement or (
                f"{r.engine}=={r.version} counts the bonus token in its mean acceptance length, so it never logs "
                f"under 1.00; this log's {min(logged):.2f} is vLLM 0.8.5-0.8.5.post1's form (bonus "
                "excluded): read with the bonus added (+1)")
    elif era is None and below_one:
        r.bonus = False
        notes.append(f"a mean acceptance length under 1.00 ({min(logged):.2f}) is printed only by vLLM "
                     "0.8.5-0.8.5.post1, whose mean excludes the bonus token: read with the bonus added (+1)")
    elif era is None and col.mean_is_sum and not col.mean_is_one_plus_sum:
        r.bonus = False  # vllm/v1/spec_decode/metrics.py 0.8.5:76,82: mean = accepted/drafts = sum of the rates
        notes.append(f"on {col.mean_is_sum} 'Mean acceptance length' line(s) the mean equals the sum of the "
                     "per-position rates, which only vLLM 0.8.5-0.8.5.post1 prints (accepted/drafts, bonus "
                     "excluded; 0.9.0+ prints 1 + that sum): read with the bonus added (+1)")
    elif era is None and col.mean_is_one_plus_sum and not col.mean_is_sum:
        notes.append(f"on {col.mean_is_one_plus_sum} 'Mean acceptance length' line(s) the mean equals 1 + the "
                     "sum of the per-position rates: vLLM 0.9.0+'s convention (bonus included)")
    elif era is None:
        mean = statistics.fmean(logged)
        r.readings = [LogReading("vllm 0.9.0-0.10.1.1", "mean acceptance length includes the bonus token",
                                 mean, True),
                      LogReading("vllm 0.8.5-0.8.5.post1", "mean acceptance length excludes the bonus token: "
                                 "accept len = logged + 1", mean + 1, False)]
        notes.append("'Mean acceptance length' without throughput fields is printed by vLLM 0.8.5-0.10.1.1: read "
                     f"as 0.9.0+ (bonus included, mean {mean:.2f}); if this server ran 0.8.5-0.8.5.post1 (bonus "
                     f"excluded) the mean is {mean + 1:.2f}: pass --engine vllm==VERSION to decide")


def _vllm_inference(r: _Reading, query: LogQuery) -> None:
    """vLLM's K: the option, else the number of per-position rates."""
    ndt, width = query.num_draft_tokens, len(r.col.pos_sums)
    r.steps = ndt or (width or None)
    source = "option" if ndt else ("per-position count" if width else "unknown")
    r.inference = DraftInference(None, r.steps, r.steps, source, explanation=(
        f"num_speculative_tokens K = {r.steps}" if r.steps else
        "K not in the log (no per-position rates): pass --num-draft-tokens"))


def _sglang_inference(r: _Reading, scan: LogScan, query: LogQuery, notes: list[str]) -> None:
    """SGLang's accept-rate formula and K from the (len, rate) pairs, narrowed by the release and the log's own
    server arguments; when both formulas fit, each is a reading."""
    col, server_args = r.col, scan.server_args
    sglang = r.engine == "sglang"
    ndt_from_log = sglang and query.num_draft_tokens is None and "ndt" in server_args
    pairs = [p for p in col.pairs if p[0] >= 1]
    if col.pairs_capped:
        notes.append(f"over {MAX_PAIRS} distinct accept len/rate pairs: the formula and K were inferred from the "
                     f"first {MAX_PAIRS}")
    if pairs and r.era is not None and r.era.formula is None:
        r.disagreement = r.disagreement or (
            f"the log has accept rates, which {r.era.releases} does not print (none before 0.5.3.post2): the rate's "
            "formula is inferred from the log itself")
        r.era = None
    era = r.era
    r.inference = inference = infer_draft_tokens(
        pairs, server_args["ndt"] if ndt_from_log else query.num_draft_tokens,
        era.first if era and era.first != "0" else None, "server_args" if ndt_from_log else "option",
        num_steps=server_args.get("steps") if sglang else None,
        tree=sglang and ("tree" in server_args or server_args.get("topk", 1) > 1))
    r.steps = inference.draft_steps
    families = {c[0] for c in inference.candidates}
    if inference.formula is None and len(families) == 2:
        for family, releases in (("0.5.5", "sglang 0.5.3.post2-0.5.10.post1"), ("0.5.11+", "sglang 0.5.11+")):
            sizes = sorted(n for f, n in inference.candidates if f == family)
            r.readings.append(LogReading(releases, f"accept rate = {FORMULA_TEXT[family].split(':')[0]}, "
                                         f"num_draft_tokens one of {sizes}", None, False))


def _acceptance(col: Collector, bonus: bool, steps: int | None) -> _Acceptance:
    """One pass over every acceptance line: the bonus convention, rate-only lengths, impossible values."""
    mean_len_code, rate_only_code = FORMAT_CODES["vllm-mean-length"], FORMAT_CODES["vllm-rate-only"]
    lengths: list[float] = []
    rates: list[float] = []
    derived = impossible = acceptance_lines = 0
    isnan = math.isnan
    for length, rate, packed in zip(col.lengths, col.rates, col.codes, strict=True):
        code, zero = divmod(packed, 2)
        if isnan(length):
            if code == rate_only_code and (zero or rate == 0 or (steps and not isnan(rate))):
                length = 1.0 if (zero or rate == 0) else 1 + steps * rate  # type: ignore[operator]
                derived += 1
        elif code == mean_len_code and not bonus:
            length += 1
        elif length < 1:
            impossible += 1
            length = _NAN
        if not isnan(length):
            lengths.append(length)
        if not isnan(rate):
            rates.append(rate)
        acceptance_lines += not (isnan(length) and isnan(rate))
    return _Acceptance(lengths, rates, acceptance_lines, derived, impossible)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _summary(r: _Reading, acc: _Acceptance, query: LogQuery) -> LogSummary:
    col, lengths = r.col, acc.lengths
    width = len(col.pos_sums)
    return LogSummary(
        acceptance_lines=acc.lines,
        throughput_lines=len(col.tps),
        mean_accept_len=_mean(lengths),
        median_accept_len=statistics.median(lengths) if lengths else None,
        last_accept_len=lengths[-1] if lengths else None,
        min_accept_len=min(lengths) if lengths else None,
        max_accept_len=max(lengths) if lengths else None,
        mean_accept_rate=_mean(acc.rates),
        mean_per_position=tuple(col.pos_sums[i] / col.pos_counts[i] for i in range(width)),
        mean_gen_tps=math.fsum(col.tps) / len(col.tps) if col.tps else None,
        mean_running_reqs=math.fsum(col.running) / len(col.running) if col.running else None,
        accepted_tokens=col.accepted,
        drafted_tokens=col.drafted,
        lifetime_accept_len=col.lifetime if col.lifetime is None or col.lifetime >= 1 else None,
        baseline_tps=query.baseline_tps,
        expected_accept_len=query.expected_accept_len,
        break_even_accept_len=1 + DRAFT_STEP_COST * (r.steps or DEFAULT_DRAFT_STEPS),
    )


def _closing_notes(r: _Reading, summary: LogSummary, notes: list[str]) -> None:
    col = r.col
    if col.stride > 1:
        notes.append(f"{col.count} lines parsed: the series keeps every {col.stride}th for display; the summary "
                     "covers all of them")
    if not col.count:
        notes.append("no decode or speculative-metrics lines parsed: is this an SGLang/vLLM server log "
                     "with speculative decoding on?")
    elif not summary.acceptance_lines and summary.lifetime_accept_len is None:
        notes.append("decode lines carry no accept len / acceptance fields: speculative decoding looks off")
    if r.disagreement:
        notes.insert(0, r.disagreement)


def _final_samples(samples: list[LogSample], bonus: bool, steps: int | None,
                   first_time: datetime | None) -> list[LogSample]:
    """The kept samples with accept len in the log's convention made bonus-inclusive, and times made relative."""
    origin = (first_time - EPOCH).total_seconds() if first_time is not None else None
    out = []
    for s in samples:
        changes: dict[str, Any] = {}
        if s.seconds is not None:
            changes["seconds"] = None if origin is None else s.seconds - origin
        if s.format == "vllm-mean-length" and not bonus and s.accept_len is not None:
            changes.update(accept_len=s.accept_len + 1, logged_accept_len=s.accept_len)
        elif s.format == "vllm-rate-only" and s.accept_len is None:
            if s.accepted_tokens == 0 or s.accept_rate == 0:
                changes["accept_len"] = 1.0
            elif steps and s.accept_rate is not None:
                changes["accept_len"] = 1 + steps * s.accept_rate
        elif s.accept_len is not None and s.accept_len < 1 and s.format != "sglang-lifetime":
            changes["accept_len"] = None
        out.append(replace(s, **changes) if changes else s)
    return out

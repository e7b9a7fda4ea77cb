"""Acceptance-log probe: read SGLang / vLLM server logs and say whether speculation pays.

Lines are matched by *label*, never by position, so extra fields from forks and
reordered fields are tolerated. Formats read (FACTS.md §6, checked against the engines'
sources):

- SGLang ``Decode batch`` lines: 0.4.x (``Decode batch.`` + ``accept len``), 0.5.x
  (``accept len`` + ``accept rate``), with ``[N]`` iteration, ``#full token`` (hybrid
  models), prealloc fields, ``cuda/cpu/npu graph`` labels; the lifetime
  ``avg_spec_accept_length=`` line.
- vLLM ``SpecDecoding metrics:`` lines in their three historical forms (rate only;
  + mean length and per-position; 0.33.0 with accepted/drafted throughput) and the
  ``Avg generation throughput`` stats line.

A metrics-looking line that yields nothing is counted as *unparsed* (with examples);
other lines are *ignored*. Neither is ever fatal.

Judging (accept len always counts the bonus token, so accepted drafts per step = len - 1):
``logs/zero-acceptance`` when the mean accept len is <= 1.05; ``logs/low-acceptance`` when
len - 1 is under half of what ``expected_accept_len`` promises, or speculation is measured
slower than ``baseline_tps``, or (no baseline) len is under the break-even heuristic
1 + 0.1·K; ``logs/speculation-slower`` when measured tok/s is under the baseline (critical
under 0.5×). SGLang's accept rate changed meaning in 0.5.11, so the (len, rate) pairs are
used to infer the formula era and K (FACTS.md §6.4).
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import LogFileError, UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable

ZERO_ACCEPT_LEN = 1.05  # ≤ 1 accepted draft token per 20 verify steps: "zero"
EXPECTED_SHORTFALL = 0.5  # low when < half the accepted drafts the training promised
DRAFT_STEP_COST = 0.1  # break-even heuristic: each draft step costs ~10% of a target step
DEFAULT_DRAFT_STEPS = 3  # K assumed for break-even when nothing pins it (SGLang 0.5.23 auto, non-Llama)
MAX_EXAMPLES = 5
FIELD_SCAN_LINES = 500  # fork fields are collected from the first lines of each engine
_MAX_K = 16

ENGINES = ("sglang", "vllm")
FORMAT_DESCRIPTIONS = {
    "sglang-0.4": "SGLang 0.4.x 'Decode batch.' with accept len only",
    "sglang-0.5": "SGLang 0.5.x 'Decode batch,' with accept len and accept rate",
    "sglang-no-spec": "SGLang decode line without speculative fields",
    "sglang-lifetime": "SGLang lifetime avg_spec_accept_length",
    "vllm-rate-only": "vLLM 'SpecDecoding metrics' with draft acceptance rate only (earliest V1)",
    "vllm-mean-length": "vLLM 'SpecDecoding metrics' with mean length and per-position rates",
    "vllm-throughput": "vLLM 'SpecDecoding metrics' with accepted/drafted throughput (0.33.0 form)",
    "vllm-engine-stats": "vLLM engine stats line (generation throughput, running reqs)",
}
FORMULA_TEXT = {
    "0.5.5": "accept_len / (K+1)",
    "0.5.11+": "(accept_len - 1) / (num_draft_tokens - 1)",
}


# ---------------------------------------------------------------- line grammar (data)

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
_SEPARATORS = ",:.]"  # a label starts the message or follows one of these (then spaces)
_BOUNDARY = r"(?:^|[,:.\]]\s*)"


@dataclass(frozen=True)
class _Field:
    """A ``label: number[suffix]`` field found by its label wherever it sits in the line."""

    label: str
    suffix: str = ""
    scale: float = 1.0

    def read(self, message: str) -> float | None:
        """The value after the first occurrence of the label that starts a field, or None."""
        at = message.find(self.label)
        while at >= 0:
            before = message[:at].rstrip()
            if not before or before[-1] in _SEPARATORS:
                match = _value_pattern(self.suffix).match(message, at + len(self.label))
                if match is not None:
                    value = float(match.group(1))
                    return None if math.isnan(value) or math.isinf(value) else value * self.scale
            at = message.find(self.label, at + 1)
        return None


@lru_cache(maxsize=None)
def _value_pattern(suffix: str) -> re.Pattern[str]:
    return re.compile(r"\s*:\s*(" + _NUM + ")" + re.escape(suffix))


# attribute -> field, labels exactly as the engines print them
SGLANG_FIELDS = {
    "accept_len": _Field("accept len"),
    "accept_rate": _Field("accept rate"),
    "running_reqs": _Field("#running-req"),
    "gen_tps": _Field("gen throughput (token/s)"),
}
VLLM_SPEC_FIELDS = {
    "accept_len": _Field("Mean acceptance length"),
    "accepted_tps": _Field("Accepted throughput"),
    "drafted_tps": _Field("Drafted throughput"),
    "accepted_tokens": _Field("Accepted"),
    "drafted_tokens": _Field("Drafted"),
    "accept_rate": _Field("Avg Draft acceptance rate", "%", 0.01),
    "legacy_rate": _Field("Draft acceptance rate", "%", 0.01),
}
VLLM_ENGINE_FIELDS = {
    "gen_tps": _Field("Avg generation throughput"),
    "running_reqs": _Field("Running"),
}
_PER_POSITION = re.compile(_BOUNDARY + r"Per-position acceptance rate\s*:\s*((?:\d*\.?\d+)(?:\s*,\s*\d*\.?\d+)*)")
_LIFETIME = re.compile(r"avg_spec_accept_length['\"]?\s*[=:]\s*(?:np\.float\d*\()?(" + _NUM + ")")
_SGLANG_DECODE = re.compile(r"Decode batch")
_VLLM_SPEC = "SpecDecoding metrics"
_VLLM_STATS = "Avg generation throughput"
# words that make a line look like acceptance metrics: if nothing parses, it is "unparsed"
_ANCHORS = ("Decode batch", "SpecDecoding metrics", "accept len", "avg_spec_accept_length",
            "Mean acceptance length", "Avg generation throughput")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SERVER_ARGS_NDT = re.compile(r"\bspeculative_num_draft_tokens=(\d+)")
_ISO_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_VLLM_TIME = re.compile(r"\b(?:INFO|DEBUG|WARNING|ERROR)\s+(\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_LABEL = re.compile(r"^\s*([A-Za-z#][A-Za-z0-9 #()/_.\-]*?)\s*:\s*\S")
# labels the engines print that this probe does not need (anything else is reported as a fork field)
_KNOWN_LABELS = {
    "sglang": {"#running-req", "#token", "token usage", "accept len", "accept rate", "cuda graph", "cpu graph",
               "npu graph", "musa graph", "gen throughput (token/s)", "#queue-req", "#full token",
               "full token usage", "#swa token", "swa token usage", "mamba num", "mamba usage", "#gpu token",
               "gpu token usage", "#cpu token", "cpu token usage", "cap len", "block accept len",
               "pre-allocated usage", "#prealloc-req", "#transfer-req", "#retracted-req", "#host-receive-req",
               "waiting-image-req", "est. decode tflops/s (per gpu)", "est. read bw (gb/s per gpu)",
               "est. write bw (gb/s per gpu)", "fwd occupancy"},
    "vllm": {"mean acceptance length", "accepted throughput", "drafted throughput", "accepted", "drafted",
             "per-position acceptance rate", "avg draft acceptance rate", "draft acceptance rate"},
}
_FIELD_ANCHOR = {"sglang": "Decode batch", "vllm": _VLLM_SPEC + ":"}


# ---------------------------------------------------------------- result types

@dataclass(frozen=True)
class LogSample:
    """One parsed log line. Rates are fractions (vLLM percentages divided by 100)."""

    line: int
    engine: str
    format: str
    time: str | None = None
    seconds: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    per_position: tuple[float, ...] = ()
    gen_tps: float | None = None
    accepted_tps: float | None = None
    drafted_tps: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    running_reqs: int | None = None

    @property
    def has_acceptance(self) -> bool:
        return self.accept_len is not None or self.accept_rate is not None

    def to_dict(self) -> dict[str, Any]:
        return {k: to_jsonable(getattr(self, k)) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DraftInference:
    """Which SGLang accept-rate formula and how many draft tokens the len/rate pairs imply."""

    formula: str | None  # "0.5.5" | "0.5.11+" | None
    num_draft_tokens: int | None  # SGLang: --speculative-num-draft-tokens; vLLM: num_speculative_tokens
    draft_steps: int | None  # K: tokens drafted per verify step
    source: str  # where num_draft_tokens came from
    candidates: tuple[tuple[str, int], ...] = ()
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"formula": self.formula, "formula_text": FORMULA_TEXT.get(self.formula or ""),
                "num_draft_tokens": self.num_draft_tokens, "draft_steps": self.draft_steps,
                "source": self.source, "candidates": [list(c) for c in self.candidates],
                "explanation": self.explanation}


@dataclass(frozen=True)
class LogSummary:
    """Aggregates over the acceptance lines (unweighted means over logged intervals)."""

    acceptance_lines: int = 0
    throughput_lines: int = 0
    mean_accept_len: float | None = None
    median_accept_len: float | None = None
    last_accept_len: float | None = None
    min_accept_len: float | None = None
    max_accept_len: float | None = None
    mean_accept_rate: float | None = None
    mean_per_position: tuple[float, ...] = ()
    mean_gen_tps: float | None = None
    mean_running_reqs: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    lifetime_accept_len: float | None = None
    baseline_tps: float | None = None
    expected_accept_len: float | None = None
    break_even_accept_len: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: to_jsonable(getattr(self, k)) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LogResult:
    """Everything read from one log: samples, summary, inference, unparsed lines and findings."""

    source: str
    engine: str | None
    formats: tuple[tuple[str, int], ...]
    samples: tuple[LogSample, ...]
    summary: LogSummary
    inference: DraftInference
    total_lines: int
    ignored_lines: int
    unparsed_lines: int
    unparsed_examples: tuple[tuple[int, str], ...]
    unknown_fields: tuple[str, ...]
    notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = field(default=())

    @property
    def acceptance_samples(self) -> tuple[LogSample, ...]:
        return tuple(s for s in self.samples if s.has_acceptance)

    @property
    def format_era(self) -> str:
        """Human label of the formats seen, e.g. ``sglang-0.5 (accept rate formula 0.5.5)``."""
        if not self.formats:
            return "nothing parsed"
        text = ", ".join(f"{name} ×{count}" for name, count in self.formats)
        if self.inference.formula:
            text += f"; accept rate formula {self.inference.formula}: {FORMULA_TEXT[self.inference.formula]}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "engine": self.engine,
            "formats": dict(self.formats),
            "format_descriptions": {name: FORMAT_DESCRIPTIONS[name] for name, _ in self.formats},
            "format_era": self.format_era,
            "summary": self.summary.to_dict(),
            "inference": self.inference.to_dict(),
            "lines": {"total": self.total_lines, "parsed": len(self.samples), "ignored": self.ignored_lines,
                      "unparsed": self.unparsed_lines},
            "unparsed_examples": [{"line": n, "text": t} for n, t in self.unparsed_examples],
            "unknown_fields": list(self.unknown_fields),
            "notes": list(self.notes),
            "series": [s.to_dict() for s in self.samples],
            "findings": [f.to_dict() for f in self.findings],
        }


# ---------------------------------------------------------------- line parsing

def _fields(message: str, table: dict[str, _Field]) -> dict[str, float]:
    found = {}
    for name, spec in table.items():
        value = spec.read(message)
        if value is not None:
            found[name] = value
    return found


def _timestamp(line: str) -> tuple[str | None, datetime | None]:
    head = line[:120]
    if m := _ISO_TIME.search(head):
        text = m.group(1)
    elif m := _VLLM_TIME.search(head):  # vLLM prints no year; 2000 is a leap year, so 02-29 parses
        text = m.group(1)
    else:
        return None, None
    iso = text.replace(",", ".") if len(text) > 14 else "2000-" + text
    try:
        return text, datetime.fromisoformat(iso)
    except ValueError:  # e.g. a hand-edited "09:12:64"
        return text, None


def _ints(values: dict[str, float], *names: str) -> dict[str, int]:
    return {n: int(round(values[n])) for n in names if n in values}


def _parse_sglang(line: str) -> tuple[str, dict[str, Any]] | None:
    if "avg_spec_accept_length" in line and (m := _LIFETIME.search(line)):
        value = float(m.group(1))
        return ("sglang-lifetime", {"accept_len": value}) if math.isfinite(value) else None
    decode = _SGLANG_DECODE.search(line)
    values = _fields(line[decode.start():] if decode else line, SGLANG_FIELDS)
    if "accept_len" not in values and not (decode and "gen_tps" in values):
        return None  # a decode line without speculation still carries its throughput
    if "accept_len" not in values:
        fmt = "sglang-no-spec"
    elif "accept_rate" in values:
        fmt = "sglang-0.5"
    else:
        fmt = "sglang-0.4"
    return fmt, {**values, **_ints(values, "running_reqs")}


def _parse_vllm(line: str) -> tuple[str, dict[str, Any]] | None:
    at = line.find(_VLLM_SPEC)
    if at >= 0:
        message = line[at + len(_VLLM_SPEC):]
        values = _fields(message, VLLM_SPEC_FIELDS)
        legacy = values.pop("legacy_rate", None)
        if "accept_rate" not in values and legacy is not None:
            values["accept_rate"] = legacy
        if pos := _PER_POSITION.search(message):
            values["per_position"] = tuple(float(v) for v in pos.group(1).split(","))
        if "accept_len" not in values and "accept_rate" not in values:
            return None
        if "accepted_tps" in values or "drafted_tps" in values:
            fmt = "vllm-throughput"
        elif "accept_len" in values:
            fmt = "vllm-mean-length"
        else:
            fmt = "vllm-rate-only"
        return fmt, {**values, **_ints(values, "accepted_tokens", "drafted_tokens")}
    at = line.find(_VLLM_STATS)
    if at >= 0:
        values = _fields(line[at:], VLLM_ENGINE_FIELDS)
        if "gen_tps" in values:
            return "vllm-engine-stats", {**values, **_ints(values, "running_reqs")}
    return None


_PARSERS = {"sglang": _parse_sglang, "vllm": _parse_vllm}


def _unknown_labels(engine: str, line: str) -> set[str]:
    """Labels of ``label: value`` parts this probe does not know (fork additions)."""
    start = line.find(_FIELD_ANCHOR[engine])
    if start < 0:
        return set()
    message = line[start + len(_FIELD_ANCHOR[engine]):]
    message = re.sub(r"^(?:\s*\[\d+\])?\s*[.,]?", ",", message)  # SGLang "[N]" iteration and separator
    labels = set()
    for part in message.split(","):
        if (m := _LABEL.match(part)) and m.group(1).lower() not in _KNOWN_LABELS[engine]:
            labels.add(m.group(1))
    return labels


# ---------------------------------------------------------------- inference of K and formula

def _fits_old(length: float, rate: float, n: int) -> bool:
    """0.5.5: rate = len / (K+1) with n = K+1, both printed to 2 decimals."""
    return n >= length - 0.005 and abs(length / n - rate) <= 0.005 + 0.005 / n + 1e-9


def _fits_new(length: float, rate: float, m: int) -> bool:
    """0.5.11+: rate = (len - 1) / (num_draft_tokens - 1) with m = num_draft_tokens - 1."""
    return length - 1 <= m + 0.005 and abs((length - 1) / m - rate) <= 0.005 + 0.005 / m + 1e-9


def _candidates(length: float, rate: float) -> set[tuple[str, int]]:
    """(formula, num_draft_tokens) pairs consistent with one logged len/rate pair (topk 1: ndt = K+1)."""
    found = {("0.5.5", n) for n in range(2, _MAX_K + 2) if _fits_old(length, rate, n)}
    found |= {("0.5.11+", m + 1) for m in range(1, _MAX_K + 1) if _fits_new(length, rate, m)}
    return found


def _version_formula(version: tuple[int, ...] | None) -> str | None:
    if version is None or version < (0, 5):
        return None
    return "0.5.11+" if version >= (0, 5, 11) else "0.5.5"


def infer_draft_tokens(pairs: Iterable[tuple[float, float]], num_draft_tokens: int | None = None,
                       version: tuple[int, ...] | None = None, given_by: str = "option") -> DraftInference:
    """Intersect, over every SGLang (accept len, accept rate) pair, the formulas and K that fit it.

    0.5.5 logs ``len/(K+1)`` (floor ``1/(K+1)`` for a dead draft); 0.5.11+ logs
    ``(len-1)/(num_draft_tokens-1)`` (0.00 for a dead draft). ``num_draft_tokens`` and an engine
    ``version`` narrow the choice; a contradiction is reported, never raised. ``given_by`` says where
    ``num_draft_tokens`` came from ("option", or "server_args" when the log's own start-up line gave it).
    """
    pairs = list(pairs)
    forced = _version_formula(version)
    if not pairs:
        steps = num_draft_tokens - 1 if num_draft_tokens else None
        return DraftInference(forced, num_draft_tokens, steps, given_by if num_draft_tokens else "unknown",
                              explanation="no accept rate in the log: formula and K cannot be read from it")
    common: set[tuple[str, int]] | None = None
    for length, rate in dict.fromkeys(pairs):  # distinct pairs, in order
        common = _candidates(length, rate) if common is None else common & _candidates(length, rate)
    assert common is not None
    fitting = set(common)
    if forced:
        fitting = {c for c in fitting if c[0] == forced}
    if num_draft_tokens:
        fitting = {c for c in fitting if c[1] == num_draft_tokens}
    candidates = tuple(sorted(fitting))
    formulas = {c[0] for c in fitting}
    counts = {c[1] for c in fitting}
    formula = forced or (formulas.pop() if len(formulas) == 1 else None)
    length, rate = pairs[0]
    if num_draft_tokens:
        ndt, source = num_draft_tokens, given_by
    elif len(counts) == 1:
        ndt, source = next(iter(counts)), "log"
    else:
        ndt, source = None, "unknown"
    if not fitting:
        why = (f"the {len(pairs)} len/rate pairs fit no single formula"
               + (f" with num_draft_tokens={num_draft_tokens}" if num_draft_tokens else "")
               + (f" under the {forced} formula" if forced else "")
               + " (K changed during the run, adaptive speculation, or a fork's own rate)")
        return DraftInference(formula, ndt, ndt - 1 if ndt else None, source, (), why)
    if formula == "0.5.5" and ndt:
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits the 0.5.5-era formula "
                f"accept_len/(K+1) with K+1 = {ndt} ({length:.2f}/{ndt} = {length / ndt:.2f}); "
                f"with topk 1 that is num_draft_tokens={ndt}, K={ndt - 1} draft steps")
    elif formula == "0.5.11+" and ndt:
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits the 0.5.11+ formula "
                f"(len-1)/(num_draft_tokens-1) with num_draft_tokens={ndt} "
                f"(({length:.2f}-1)/{ndt - 1} = {(length - 1) / (ndt - 1):.2f})")
    elif formula == "0.5.11+":
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits only the 0.5.11+ formula "
                "(len-1)/(num_draft_tokens-1); a dead draft logs 0.00 under it for any K, so K is not in the log")
    elif formula == "0.5.5":
        expl = f"the pairs fit only the 0.5.5-era formula accept_len/(K+1); K+1 is one of {sorted(counts)}"
    else:
        expl = ("the pairs fit both formulas: " + ", ".join(f"{f} with num_draft_tokens={n}" for f, n in candidates)
                + "; pass --engine sglang==VERSION or --num-draft-tokens to decide")
    return DraftInference(formula, ndt, ndt - 1 if ndt else None, source, candidates, expl)


# ---------------------------------------------------------------- reading

def _split_engine(engine: str | None) -> tuple[str | None, tuple[int, ...] | None]:
    if not engine:
        return None, None
    name, _, version = engine.strip().lower().partition("==")
    if name not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} for logs: use sglang or vllm (optionally ==VERSION)")
    if not version:
        return name, None
    return name, tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _lines(path_or_text: str | os.PathLike[str]) -> tuple[str, Iterator[str]]:
    """(source label, line iterator). Paths are files; a str with a newline or a metrics anchor is text."""
    if isinstance(path_or_text, os.PathLike) or (
            isinstance(path_or_text, str) and "\n" not in path_or_text
            and (os.path.exists(path_or_text) or not any(a in path_or_text for a in _ANCHORS))):
        path = Path(path_or_text)
        if not path.exists():
            raise LogFileError(path, "no such log file")
        if path.is_dir():
            raise LogFileError(path, "is a directory, expected a server log file")
        try:
            handle = path.open("r", encoding="utf-8", errors="replace")
        except OSError as exc:
            raise LogFileError(path, f"cannot read log file ({exc.strerror or exc})") from None

        def read() -> Iterator[str]:
            with handle:
                try:
                    yield from handle
                except OSError as exc:
                    raise LogFileError(path, f"cannot read log file ({exc.strerror or exc})") from None

        return str(path), read()
    return "<text>", iter(str(path_or_text).splitlines())


def parse_log(path_or_text: str | os.PathLike[str], engine: str | None = None,
              num_draft_tokens: int | None = None, baseline_tps: float | None = None,
              expected_accept_len: float | None = None) -> LogResult:
    """Parse an SGLang or vLLM server log into series, a summary and acceptance findings.

    ``engine`` (``sglang``, ``vllm``, optionally ``==VERSION``) reads the log as that engine (other engines'
    lines count as ignored) and, with a version, fixes SGLang's accept-rate formula; by default the engine
    with most acceptance lines wins.
    ``num_draft_tokens`` is SGLang's ``--speculative-num-draft-tokens`` or vLLM's
    ``num_speculative_tokens``; ``baseline_tps`` the tok/s of the same server without speculation;
    ``expected_accept_len`` what the draft's training metrics promise (bonus token included).
    """
    name, version = _split_engine(engine)
    for label, value in (("num_draft_tokens", num_draft_tokens), ("baseline_tps", baseline_tps),
                         ("expected_accept_len", expected_accept_len)):
        if value is not None and value <= 0:
            raise UsageError(f"{label} must be positive, got {value}")
    source, lines = _lines(path_or_text)
    parsed: dict[str, list[LogSample]] = {e: [] for e in ENGINES}
    unknown: dict[str, set[str]] = {e: set() for e in ENGINES}
    unparsed: list[tuple[int, str]] = []
    unparsed_count = ignored = total = 0
    first_time: datetime | None = None
    logged_ndt: int | None = None
    for number, raw in enumerate(lines, 1):
        total += 1
        line = (_ANSI.sub("", raw) if "\x1b" in raw else raw).rstrip("\r\n")
        if first_time is None:  # times count from the first timestamped line of the file
            first_time = _timestamp(line)[1]
        if logged_ndt is None and (m := _SERVER_ARGS_NDT.search(line)):
            logged_ndt = int(m.group(1))  # SGLang prints its ServerArgs at start-up
        if not any(a in line for a in _ANCHORS):
            ignored += 1
            continue
        hit = next(((e, r) for e in ENGINES if (r := _PARSERS[e](line)) is not None), None)
        if hit is None:
            unparsed_count += 1
            if len(unparsed) < MAX_EXAMPLES:
                unparsed.append((number, line.strip()[:300]))
            continue
        engine_name, (fmt, values) = hit
        text, when = _timestamp(line)
        seconds = (when - first_time).total_seconds() if when is not None and first_time is not None else None
        parsed[engine_name].append(LogSample(line=number, engine=engine_name, format=fmt, time=text,
                                             seconds=seconds, **values))
        if fmt != "sglang-lifetime" and len(parsed[engine_name]) <= FIELD_SCAN_LINES:
            unknown[engine_name] |= _unknown_labels(engine_name, line)

    notes: list[str] = []
    chosen = name or max(ENGINES, key=lambda e: (sum(s.has_acceptance for s in parsed[e]), len(parsed[e])))
    if not parsed[chosen] and not name:
        chosen_engine: str | None = None
    else:
        chosen_engine = chosen
    for other in ENGINES:
        if other != chosen and parsed[other]:
            notes.append(f"{len(parsed[other])} {other} lines ignored: this log was read as {chosen}")
            ignored += len(parsed[other])
    samples = parsed[chosen] if chosen_engine else []
    ndt_from_log = chosen_engine == "sglang" and num_draft_tokens is None and logged_ndt is not None
    return _build_result(source, chosen_engine, version, samples, total, ignored, unparsed_count, tuple(unparsed),
                         tuple(sorted(unknown.get(chosen, set()))), notes,
                         logged_ndt if ndt_from_log else num_draft_tokens, baseline_tps, expected_accept_len,
                         "server_args" if ndt_from_log else "option")


def _derive_vllm_lengths(samples: list[LogSample], steps: int | None, notes: list[str]) -> list[LogSample]:
    """Rate-only vLLM lines carry no mean length: 1.00 when nothing was accepted, else 1 + K·rate."""
    out, derived = [], 0
    for s in samples:
        if s.format == "vllm-rate-only" and s.accept_len is None:
            if s.accepted_tokens == 0 or s.accept_rate == 0:
                s = replace(s, accept_len=1.0)
                derived += 1
            elif steps and s.accept_rate is not None:
                s = replace(s, accept_len=1 + steps * s.accept_rate)
                derived += 1
        out.append(s)
    if derived:
        notes.append(f"accept len derived for {derived} rate-only vLLM lines (1 + K x rate; exactly 1.00 when "
                     "0 tokens were accepted)")
    return out


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _build_result(source: str, engine: str | None, version: tuple[int, ...] | None, samples: list[LogSample],
                  total: int, ignored: int, unparsed_count: int, unparsed: tuple[tuple[int, str], ...],
                  unknown: tuple[str, ...], notes: list[str], num_draft_tokens: int | None,
                  baseline_tps: float | None, expected_accept_len: float | None, ndt_given_by: str) -> LogResult:
    if engine == "vllm":
        positions = {len(s.per_position) for s in samples if s.per_position}
        steps = num_draft_tokens or (max(positions) if positions else None)
        source_k = "option" if num_draft_tokens else ("per-position count" if positions else "unknown")
        inference = DraftInference(None, steps, steps, source_k, explanation=(
            f"num_speculative_tokens K = {steps}" if steps else
            "K not in the log (no per-position rates): pass --num-draft-tokens"))
        samples = _derive_vllm_lengths(samples, steps, notes)
    else:
        pairs = [(s.accept_len, s.accept_rate) for s in samples
                 if s.accept_len is not None and s.accept_rate is not None]
        inference = infer_draft_tokens(pairs, num_draft_tokens, version, ndt_given_by)
    interval = [s for s in samples if s.format != "sglang-lifetime"]
    lengths = [s.accept_len for s in interval if s.accept_len is not None]
    rates = [s.accept_rate for s in interval if s.accept_rate is not None]
    tps = [s.gen_tps for s in interval if s.gen_tps is not None]
    running = [float(s.running_reqs) for s in interval if s.running_reqs is not None]
    lifetime = [s.accept_len for s in samples if s.format == "sglang-lifetime" and s.accept_len is not None]
    per_pos = [s.per_position for s in interval if s.per_position]
    width = max((len(p) for p in per_pos), default=0)
    mean_pos = tuple(statistics.fmean(p[i] for p in per_pos if len(p) > i) for i in range(width))
    accepted = [s.accepted_tokens for s in interval if s.accepted_tokens is not None]
    drafted = [s.drafted_tokens for s in interval if s.drafted_tokens is not None]
    steps = inference.draft_steps
    summary = LogSummary(
        acceptance_lines=sum(s.has_acceptance for s in interval),
        throughput_lines=len(tps),
        mean_accept_len=_mean(lengths),
        median_accept_len=statistics.median(lengths) if lengths else None,
        last_accept_len=lengths[-1] if lengths else None,
        min_accept_len=min(lengths) if lengths else None,
        max_accept_len=max(lengths) if lengths else None,
        mean_accept_rate=_mean(rates),
        mean_per_position=mean_pos,
        mean_gen_tps=_mean(tps),
        mean_running_reqs=_mean(running),
        accepted_tokens=sum(accepted) if accepted else None,
        drafted_tokens=sum(drafted) if drafted else None,
        lifetime_accept_len=lifetime[-1] if lifetime else None,
        baseline_tps=baseline_tps,
        expected_accept_len=expected_accept_len,
        break_even_accept_len=1 + DRAFT_STEP_COST * (steps or DEFAULT_DRAFT_STEPS),
    )
    formats = tuple(sorted(Counter(s.format for s in samples).items(), key=lambda kv: -kv[1]))
    if not samples:
        notes.append("no decode or speculative-metrics lines parsed: is this an SGLang/vLLM server log "
                     "with speculative decoding on?")
    elif not summary.acceptance_lines and summary.lifetime_accept_len is None:
        notes.append("decode lines carry no accept len / acceptance fields: speculative decoding looks off")
    result = LogResult(source=source, engine=engine, formats=formats, samples=tuple(samples), summary=summary,
                       inference=inference, total_lines=total, ignored_lines=ignored,
                       unparsed_lines=unparsed_count, unparsed_examples=unparsed, unknown_fields=unknown,
                       notes=tuple(notes))
    return replace(result, findings=tuple(classify(result)))


# ---------------------------------------------------------------- findings

def _fmt_rates(values: Iterable[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def _era_sentence(result: LogResult) -> str:
    """The worked arithmetic of FACTS §6.4 for the formula and K this log implies."""
    s, inf = result.summary, result.inference
    length, rate = s.mean_accept_len, s.mean_accept_rate
    if length is None:
        return ""
    if result.engine == "vllm":
        parts = [f"vLLM mean acceptance length {length:.2f} = 1 + accepted/drafts"]
        if rate is not None:
            parts.append(f"avg draft acceptance rate {100 * rate:.1f}%")
        if s.mean_per_position:
            parts.append(f"per-position rates {_fmt_rates(s.mean_per_position)}")
        return "; ".join(parts) + "."
    ndt = inf.num_draft_tokens
    if rate is None or inf.formula is None or not ndt:
        return inf.explanation + "." if inf.explanation else ""
    k = ndt - 1
    if inf.formula == "0.5.5":
        text = (f"With {ndt} draft tokens (K = {k} steps, topk 1) and the 0.5.5 formula accept_len/(K+1), "
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


def classify(result: LogResult) -> list[Finding]:
    """Zero / low acceptance and speculation-slower-than-baseline, with the arithmetic spelled out."""
    s, inf = result.summary, result.inference
    length = s.mean_accept_len if s.mean_accept_len is not None else s.lifetime_accept_len
    findings: list[Finding] = []
    engine = result.engine or "sglang"
    log = result.source if result.source != "<text>" else "SERVER_LOG"
    fix = fix_command("doctor", "DRAFT_CHECKPOINT", "--engine", engine, "--log", log)
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
    if s.lifetime_accept_len is None and not any(x.accept_len is not None or x.accept_rate is not None
                                                 for x in result.samples):
        findings.append(Finding(
            "logs/no-acceptance-lines", Severity.WARNING, f"no acceptance lines in {log}",
            (f"None of its {result.total_lines} lines is an SGLang decode line with accept len or a vLLM SpecDecoding "
             f"metrics line ({result.unparsed_lines} looked like metrics but did not parse): acceptance was not "
             "judged. Is this the server log of a run with speculative decoding on?"),
            evidence={"total_lines": result.total_lines, "unparsed_lines": result.unparsed_lines,
                      "unparsed_examples": list(result.unparsed_examples), "formats": dict(result.formats)}))
    era = _era_sentence(result)
    what = "mean accept len" if s.mean_accept_len is not None else "lifetime avg_spec_accept_length"
    lines = f" over {s.acceptance_lines} log lines" if s.mean_accept_len is not None else ""
    if length is not None and length <= ZERO_ACCEPT_LEN:
        findings.append(Finding(
            "logs/zero-acceptance", Severity.CRITICAL,
            f"Draft acceptance is zero: {what} {length:.2f}{lines}",
            (f"accept len counts the bonus token: accept len = 1 + accepted draft tokens per verify step, so "
             f"{length:.2f} means {length - 1:.2f} accepted draft tokens per step (<= {ZERO_ACCEPT_LEN} means at most "
             f"one accepted draft token per twenty verify steps). Every round yields only the bonus token: the "
             f"target does all the work and each draft pass is pure overhead. {era} Typical causes: decoder layer "
             "dropped at load, fc bypassed (aux hidden states not passed), corrupt or identity d2t, random lm_head.")
            .replace("  ", " ").strip(),
            evidence, fix))
    elif length is not None:
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
        if reasons:
            findings.append(Finding(
                "logs/low-acceptance", Severity.WARNING,
                f"Draft acceptance is low: {what} {length:.2f}{lines}",
                "; ".join(reasons) + ". " + era + " Some signal is left, so look for partial mismatches: "
                "aux layer ids, norm_before_fc or other config flags, vocab mapping.",
                {**evidence, "expected_accept_len": s.expected_accept_len, "baseline_tps": s.baseline_tps,
                 "mean_gen_tps": s.mean_gen_tps, "break_even_accept_len": s.break_even_accept_len},
                fix))
    if s.baseline_tps is not None and s.mean_gen_tps is not None and s.mean_gen_tps < s.baseline_tps:
        ratio = s.mean_gen_tps / s.baseline_tps
        findings.append(Finding(
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
             "mean_accept_len": length},
            fix))
    return findings

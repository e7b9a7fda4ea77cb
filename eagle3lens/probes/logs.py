"""Acceptance-log probe: read SGLang / vLLM server logs and say whether speculation pays.

Lines are matched by *label*, never by position, so extra fields from forks and
reordered fields are tolerated. What each release prints, read from the wheels
(ENGINE_VERSIONS.md §2c, §3c; the release table is ``log_formats.ERAS``):

- SGLang ``Decode batch`` lines: ``Decode batch.`` with ``accept len`` only through
  0.5.3.post1; ``Decode batch.`` + ``accept rate`` in 0.5.3.post2–0.5.3.post3; ``Decode batch [N],`` /
  ``Decode batch,`` from 0.5.4. The accept rate's formula changed twice: ``len/(steps+1)``
  (0.5.3.post2–0.5.5.post2), ``len/num_draft_tokens`` (0.5.5.post3–0.5.10.post1),
  ``(len-1)/(num_draft_tokens-1)`` (0.5.11+). Also the lifetime ``avg_spec_accept_length=`` line.
- vLLM ``SpecDecoding metrics:`` lines: rate only (0.8.3–0.8.4); + mean length and per-position
  (0.8.5–0.10.1.1, where **0.8.5–0.8.5.post1's mean length excludes the bonus token**); the 0.10.2+
  form with accepted/drafted throughput; and the ``Avg generation throughput`` stats line.

``engine="NAME==VERSION"`` reads the log by that release's convention; a log whose lines that
release never prints is read by its own format, and the disagreement is reported. Without a
version, a line whose meaning depends on the release is reported with every reading.

Input is untrusted: the file must be a regular file (at most ``MAX_LOG_BYTES``), lines are
streamed and capped at ``MAX_LINE_BYTES`` (longer ones are counted and skipped), parsing is
linear (no backtracking patterns, no re-slicing per label), absurd values are counted and
skipped, and every stored text is stripped of terminal control sequences.

Judging (accept len always counts the bonus token, so accepted drafts per step = len - 1):
``logs/zero-acceptance`` when the mean accept len is <= 1.05; ``logs/low-acceptance`` when
len - 1 is under half of what ``expected_accept_len`` promises, or speculation is measured
slower than ``baseline_tps``, or (no baseline) len is under the break-even heuristic
1 + 0.1·K; ``logs/speculation-slower`` when measured tok/s is under the baseline (critical
under 0.5×); ``logs/engine-mismatch`` when ``engine`` names one engine and the log is the other's.
"""

from __future__ import annotations

import codecs
import math
import os
import re
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from packaging.version import InvalidVersion, Version

from ..engines import EngineProfile
from ..errors import CheckpointError, LogFileError, UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable
from ..io.inputs import GiB, open_regular
from ..io.textsafe import ESC_BRANCHES, clean_text, strip_escapes
from .log_formats import (
    ENGINES,
    FORMAT_DESCRIPTIONS,
    FORMULA_TEXT,
    PARSERS,
    SERVER_ARGS,
    SGLANG_DECODE,
    VLLM_SPEC,
    VLLM_STATS,
    VLLM_VERSION,
    TREE_HINT,
    VLLM_VERSION_HINTS,
    DraftInference,
    anchored,
    check_version,
    era_of,
    infer_draft_tokens,
    timestamp,
    unknown_labels,
)

ZERO_ACCEPT_LEN = 1.05  # ≤ 1 accepted draft token per 20 verify steps: "zero"
EXPECTED_SHORTFALL = 0.5  # low when < half the accepted drafts the training promised
DRAFT_STEP_COST = 0.1  # break-even heuristic: each draft step costs ~10% of a target step
DEFAULT_DRAFT_STEPS = 3  # K assumed for break-even when nothing pins it (SGLang 0.5.23 auto, non-Llama)
MAX_EXAMPLES = 5
FIELD_SCAN_LINES = 500  # fork fields are collected from the first lines of each engine
MAX_LOG_BYTES = 2 * GiB  # a server log over this is refused (split it or pass its tail)
MAX_LINE_BYTES = 64 * 1024  # a longer line is no engine's metrics line: counted and skipped
MAX_SERIES = 4096  # samples kept for the series/figures; more are decimated evenly (the summary uses all)
MAX_PAIRS = 4096  # distinct SGLang (len, rate) pairs used to infer the formula and K
MAX_UNKNOWN_FIELDS = 32
_BLOCK = 1 << 20





# ---------------------------------------------------------------- result types

@dataclass(frozen=True)
class LogSample:
    """One parsed log line. Rates are fractions (vLLM percentages divided by 100); ``accept_len`` always counts
    the bonus token (``logged_accept_len`` keeps the printed value where the release excluded it)."""

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
    logged_accept_len: float | None = None

    @property
    def has_acceptance(self) -> bool:
        return self.accept_len is not None or self.accept_rate is not None

    def to_dict(self) -> dict[str, Any]:
        return {k: to_jsonable(getattr(self, k)) for k in self.__dataclass_fields__}



@dataclass(frozen=True)
class LogReading:
    """One way to read the log's acceptance lines: the releases that print them so, and what they then mean."""

    releases: str
    meaning: str
    mean_accept_len: float | None
    chosen: bool

    def to_dict(self) -> dict[str, Any]:
        return {k: to_jsonable(getattr(self, k)) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LogSummary:
    """Aggregates over every acceptance line (unweighted means over logged intervals)."""

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
    """Everything read from one log: samples, summary, inference, unparsed lines and findings.

    ``samples`` is the series for display: every parsed line up to ``MAX_SERIES``, then every
    ``series_stride``-th one; the summary always covers all ``parsed_lines``."""

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
    parsed_lines: int | None = None  # None: len(samples)
    overlong_lines: int = 0
    rejected_values: int = 0
    rejected_examples: tuple[tuple[int, str], ...] = ()
    readings: tuple[LogReading, ...] = ()
    series_stride: int = 1
    version: str | None = None  # the engine release whose convention the log was read by
    version_source: str | None = None  # "option" (engine=) or "log" (the log's own start-up line)
    disagreement: str | None = None  # how engine= and the log's own format disagree (the log's format wins)

    @property
    def acceptance_samples(self) -> tuple[LogSample, ...]:
        return tuple(s for s in self.samples if s.has_acceptance)

    @property
    def format_era(self) -> str:
        """Human label of the formats seen, e.g. ``sglang-0.5 ×4; accept rate formula 0.5.5: ...``."""
        if not self.formats:
            return "nothing parsed"
        text = ", ".join(f"{name} ×{count}" for name, count in self.formats)
        if self.version:
            text += f"; read as {self.engine}=={self.version} ({'given' if self.version_source == 'option' else 'from the log'})"
        if self.inference.formula:
            text += f"; accept rate formula {self.inference.formula}: {FORMULA_TEXT[self.inference.formula]}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "engine": self.engine,
            "version": self.version,
            "version_source": self.version_source,
            "disagreement": self.disagreement,
            "formats": dict(self.formats),
            "format_descriptions": {name: FORMAT_DESCRIPTIONS[name] for name, _ in self.formats},
            "format_era": self.format_era,
            "summary": self.summary.to_dict(),
            "inference": self.inference.to_dict(),
            "readings": [r.to_dict() for r in self.readings],
            "lines": {"total": self.total_lines,
                      "parsed": len(self.samples) if self.parsed_lines is None else self.parsed_lines,
                      "ignored": self.ignored_lines, "unparsed": self.unparsed_lines},
            "limits": {"overlong_lines": self.overlong_lines, "max_line_bytes": MAX_LINE_BYTES,
                       "rejected_values": self.rejected_values, "series_stride": self.series_stride},
            "unparsed_examples": [{"line": n, "text": t} for n, t in self.unparsed_examples],
            "rejected_examples": [{"line": n, "text": t} for n, t in self.rejected_examples],
            "unknown_fields": list(self.unknown_fields),
            "notes": list(self.notes),
            "series": [s.to_dict() for s in self.samples],
            "findings": [f.to_dict() for f in self.findings],
        }



# ---------------------------------------------------------------- reading

def _split_engine(engine: str | None) -> tuple[str | None, Version | None]:
    """``sglang`` / ``vllm==0.10.1`` (a runtime-path suffix such as ``:v1`` is ignored) -> (name, version)."""
    if not engine:
        return None, None
    text = engine.strip()
    if len(text) > 100:
        raise UsageError(f"engine spec for logs is {len(text)} characters long: use sglang or vllm, optionally "
                         "==VERSION")
    name, _, version = text.lower().partition("==")
    name = name.split(":", 1)[0].strip()
    if name not in ENGINES:
        raise UsageError(f"unknown engine {clean_text(text)!r} for logs: use sglang or vllm (optionally ==VERSION)")
    version = version.split(":", 1)[0].strip()
    if not version:
        return name, None
    try:
        return name, Version(version)
    except (InvalidVersion, ValueError):  # ValueError: an integer part over Python's digit limit
        raise UsageError(f"invalid {name} version {clean_text(version)[:40]!r} for logs: expected a release such as "
                         f"{'0.5.11' if name == 'sglang' else '0.10.1.1'}") from None


class _Block(NamedTuple):
    """Lines of one read block, the same lines without terminal escapes, and whether any carries start-up facts."""

    lines: list[str | None]  # None: a line over MAX_LINE_BYTES (skipped, never parsed)
    clean: list[str | None] | list[str]  # line i without escape sequences (``lines`` itself when none has one)
    startup: bool
    crlf: bool


# textsafe's ESC-introduced sequences as one literal-prefixed pattern (found at memchr speed) whose classes stop at a
# newline: over a block's lines joined by "\n" it removes from each line what strip_escapes removes from it alone,
# when the block holds no 8-bit C1 introducer (those blocks are stripped line by line)
_BLOCK_ESCAPES = re.compile("\x1b(?:" + "|".join(b.removeprefix("\x1b").replace("[^\x07\x1b\x9c]", "[^\x07\x1b\x9c\n]")
                                                  .replace("[^\x1b\x9c]", "[^\x1b\x9c\n]") for b in ESC_BRANCHES) + ")")
_C1 = ("\x9b", "\x9d", "\x90", "\x98", "\x9e", "\x9f")


def _block(lines: list[str | None], *texts: str) -> _Block:
    escapes = any("\x1b" in t or "\x9b" in t or "\x9d" in t or "\x90" in t for t in texts)
    startup = any("speculative_num_" in t or "speculative_eagle_topk" in t or TREE_HINT in t
                  or any(h in t for h in VLLM_VERSION_HINTS) for t in texts)
    clean: list[str | None] | list[str] = lines
    if escapes and any(c in t for t in texts for c in _C1):
        clean = [None if line is None else strip_escapes(line) for line in lines]
    elif escapes:
        clean = _BLOCK_ESCAPES.sub("", "\n".join("" if line is None else line for line in lines)).split("\n")
    return _Block(lines, clean, startup, any("\r" in t for t in texts))


def _file_blocks(handle: BinaryIO, path: Path) -> Iterator[_Block]:
    """The file's lines (without newline) in blocks of about 1 MiB, read through an incremental UTF-8 decoder.

    A line over ``MAX_LINE_BYTES`` characters that spans blocks is skipped to its end without being held; memory
    stays bounded by the block and the cap, and at most ``MAX_LOG_BYTES`` are read even if the file grows."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    budget, tail, skipping = MAX_LOG_BYTES, "", False
    with handle:
        try:
            while budget > 0:
                data = handle.read(min(_BLOCK, budget))
                budget -= len(data)
                text = decoder.decode(data, final=not data)
                parts = text.split("\n")
                rest = parts.pop()
                if parts:
                    head = tail
                    lines: list[str | None] = [None if skipping else tail + parts[0], *parts[1:]]
                    skipping, tail = False, rest
                    yield _block(lines, head, text)
                elif not skipping:
                    tail += rest
                if not skipping and len(tail) > MAX_LINE_BYTES:
                    skipping, tail = True, ""
                if not data:
                    break
        except OSError as exc:
            raise LogFileError(clean_text(str(path)), f"cannot read log file ({exc.strerror or exc})") from None
    if skipping or tail:
        yield _block([None if skipping else tail], tail)


def _text_blocks(text: str) -> Iterator[_Block]:
    parts = text.split("\n")
    if parts[-1] == "":  # the newline ending the last line opens no new one
        parts.pop()
    lines: list[str | None] = [*parts]
    yield _block(lines, text)


def _lines(path_or_text: str | os.PathLike[str]) -> tuple[str, Iterator[_Block]]:
    """(source label, line iterator). Paths are files; a str with a newline or a metrics anchor is text."""
    if isinstance(path_or_text, os.PathLike) or (
            isinstance(path_or_text, str) and "\n" not in path_or_text and len(path_or_text) < 4096
            and (os.path.exists(path_or_text) or not anchored(path_or_text))):
        path = Path(path_or_text)
        try:
            handle = open_regular(path, MAX_LOG_BYTES, "log file")
        except CheckpointError as exc:
            raise LogFileError(clean_text(exc.path), exc.problem) from None
        return clean_text(str(path)), _file_blocks(handle, path)
    return "<text>", _text_blocks(str(path_or_text))


_FORMAT_CODES = {name: i for i, name in enumerate(FORMAT_DESCRIPTIONS)}
_NAN = math.nan
_EPOCH = datetime(1970, 1, 1)


class _Collector:
    """One engine's parsed lines: compact columns over all of them, a decimated series for display."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.count = 0
        self.stride = 1
        self.samples: list[LogSample] = []
        self.formats: Counter[str] = Counter()
        self.unknown: set[str] = set()
        # one entry per interval line with acceptance: logged accept len (NaN: none), rate (NaN: none), and
        # 2 x format code + 1 for a rate-only vLLM line with 0 accepted tokens (its accept len is exactly 1)
        self.lengths = array("d")
        self.rates = array("d")
        self.codes = array("b")
        self.tps = array("d")
        self.running = array("d")
        self.pairs: dict[tuple[float, float], None] = {}
        self.pairs_capped = False
        self.accepted: int | None = None
        self.drafted: int | None = None
        self.pos_sums: list[float] = []
        self.pos_counts: list[int] = []
        self.lifetime: float | None = None
        self.lifetime_lines = 0
        # 'Mean acceptance length' lines whose own arithmetic names the convention: mean = sum of the
        # per-position rates (0.8.5-0.8.5.post1, bonus excluded) or 1 + that sum (0.9.0+, bonus included)
        self.mean_is_sum = 0
        self.mean_is_one_plus_sum = 0

    def _add_vllm(self, fmt: str, values: dict[str, Any]) -> None:
        if (accepted := values.get("accepted_tokens")) is not None:
            self.accepted = (self.accepted or 0) + accepted
        if (drafted := values.get("drafted_tokens")) is not None:
            self.drafted = (self.drafted or 0) + drafted
        for i, p in enumerate(values.get("per_position", ())):
            if i == len(self.pos_sums):
                self.pos_sums.append(0.0)
                self.pos_counts.append(0)
            self.pos_sums[i] += p
            self.pos_counts[i] += 1
        if fmt == "vllm-mean-length" and (mean := values.get("accept_len")) is not None and (
                positions := values.get("per_position")):
            total = math.fsum(positions)
            slack = 0.005 + 0.0005 * len(positions) + 1e-9  # mean printed to 2 decimals, each rate to 3
            if abs(mean - total) <= slack:
                self.mean_is_sum += 1
            elif abs(mean - 1 - total) <= slack:
                self.mean_is_one_plus_sum += 1

    def add(self, number: int, fmt: str, values: dict[str, Any], line: str) -> None:
        self.count = count = self.count + 1
        self.formats[fmt] += 1
        if fmt == "sglang-lifetime":
            self.lifetime = values["accept_len"]
            self.lifetime_lines += 1
        else:
            get = values.get
            length, rate = get("accept_len"), get("accept_rate")
            sglang = self.engine == "sglang"
            if length is not None or rate is not None:
                self.lengths.append(_NAN if length is None else length)
                self.rates.append(_NAN if rate is None else rate)
                self.codes.append(_FORMAT_CODES[fmt] * 2 + (not sglang and get("accepted_tokens") == 0))
                if sglang and length is not None and rate is not None:
                    if len(self.pairs) < MAX_PAIRS:
                        self.pairs[(length, rate)] = None
                    elif (length, rate) not in self.pairs:
                        self.pairs_capped = True
            if (tps := get("gen_tps")) is not None:
                self.tps.append(tps)
            if (running := get("running_reqs")) is not None:
                self.running.append(running)
            if not sglang:  # only vLLM lines carry token counts and per-position rates
                self._add_vllm(fmt, values)
            if count <= FIELD_SCAN_LINES and len(self.unknown) < MAX_UNKNOWN_FIELDS:
                self.unknown |= unknown_labels(self.engine, line)
        if (count - 1) % self.stride == 0:
            text, when = timestamp(line)
            self.samples.append(LogSample(line=number, engine=self.engine, format=fmt, time=text,
                                          seconds=None if when is None else (when - _EPOCH).total_seconds(), **values))
            if len(self.samples) > MAX_SERIES:
                self.samples = self.samples[::2]
                self.stride *= 2


def _server_arg(line: str, name: str, found: dict[str, int], notes: list[str]) -> None:
    if name in found or not (m := SERVER_ARGS[name].search(line)):
        return
    digits = m.group(1)
    if len(digits) <= 4 and 0 < int(digits) <= 1024:
        found[name] = int(digits)
    elif f"bad-{name}" not in found:
        found[f"bad-{name}"] = 0
        label = {"ndt": "speculative_num_draft_tokens", "steps": "speculative_num_steps"}.get(name, "speculative_eagle_topk")
        shown = digits if len(digits) <= 12 else f"<{len(digits)} digits>"
        notes.append(f"{label}={shown} in the log's server arguments is not a believable size: ignored")


def parse_log(log: str | os.PathLike[str], *, engine: str | EngineProfile | None = None,
              num_draft_tokens: int | None = None, baseline_tps: float | None = None,
              expected_accept_len: float | None = None) -> LogResult:
    """Parse an SGLang or vLLM server log (a path, or the log's text) into series, a summary and acceptance findings.

    ``engine`` (``sglang``, ``vllm``, optionally ``==VERSION``, or an SGLang/vLLM profile) reads the log as that engine (other engines'
    lines count as ignored) and, with a version, by that release's convention (vLLM 0.8.5's mean length without
    the bonus token, SGLang's accept-rate formula); a log that is the other engine's, or whose lines that release
    never prints, is read by its own format and the disagreement is reported. By default the engine with most
    acceptance lines wins, and a line whose meaning depends on the release is reported with every reading.
    ``num_draft_tokens`` is SGLang's ``--speculative-num-draft-tokens`` or vLLM's
    ``num_speculative_tokens``; ``baseline_tps`` the tok/s of the same server without speculation;
    ``expected_accept_len`` what the draft's training metrics promise (bonus token included).
    """
    engine_spec = engine.spec if isinstance(engine, EngineProfile) else engine
    name, version = _split_engine(engine_spec)
    for label, value in (("num_draft_tokens", num_draft_tokens), ("baseline_tps", baseline_tps),
                         ("expected_accept_len", expected_accept_len)):
        if value is not None and not (0 < value < math.inf):
            raise UsageError(f"{label} must be positive, got {value}")
    source, lines = _lines(log)
    collectors = {e: _Collector(e) for e in ENGINES}
    notes: list[str] = []
    unparsed: list[tuple[int, str]] = []
    rejected: list[tuple[int, str]] = []
    unparsed_count = ignored = total = overlong = rejected_count = 0
    first_time: datetime | None = None
    server_args: dict[str, int] = {}
    log_version: str | None = None
    overlong_at: list[int] = []
    number = 0
    cap, decode_anchor, spec_anchor, stats_anchor = MAX_LINE_BYTES, SGLANG_DECODE, VLLM_SPEC, VLLM_STATS  # locals
    want_time = True  # times count from the first timestamped line of the file (looked for in its first lines)
    for block in lines:
        startup, crlf = block.startup, block.crlf
        for raw, text in zip(block.lines, block.clean, strict=True):
            number += 1
            if raw is None or text is None or len(raw) > cap:  # the cap is on the line as read, escapes included
                overlong += 1
                if len(overlong_at) < MAX_EXAMPLES:
                    overlong_at.append(number)
                continue
            line = text.removesuffix("\r") if crlf else text
            if want_time:
                first_time = timestamp(line)[1]
                want_time = first_time is None and number < 10_000
            if startup:
                if "speculative_num_" in line or "speculative_eagle_topk" in line:  # SGLang's ServerArgs at start-up
                    _server_arg(line, "ndt", server_args, notes)
                    _server_arg(line, "steps", server_args, notes)
                    _server_arg(line, "topk", server_args, notes)
                if TREE_HINT in line:
                    server_args.setdefault("tree", 1)
                if log_version is None and (VLLM_VERSION_HINTS[0] in line or VLLM_VERSION_HINTS[1] in line) and (
                        vm := VLLM_VERSION.search(line)):
                    log_version = vm.group(1)
            if not ("accept" in line or decode_anchor in line or spec_anchor in line or stats_anchor in line):
                ignored += 1  # the same test as log_formats.anchored, inline: most lines of a server log end here
                continue
            hit: tuple[str, str, dict[str, Any]] | None = None
            for engine_name in ENGINES:
                fmt, values, absurd = PARSERS[engine_name](line)
                if absurd:
                    rejected_count += len(absurd)
                    if len(rejected) < MAX_EXAMPLES:
                        rejected.append((number, ", ".join(f"{n}: {clean_text(t)}" for n, t in absurd)))
                if fmt is not None:
                    hit = engine_name, fmt, values
                    break
            if hit is None:
                unparsed_count += 1
                if len(unparsed) < MAX_EXAMPLES:
                    unparsed.append((number, clean_text(line.strip()[:300])))
                continue
            collectors[hit[0]].add(number, hit[1], hit[2], line)
    total = number

    if overlong:
        notes.append(f"{overlong} lines over {MAX_LINE_BYTES // 1024} KiB skipped (no engine prints such lines; "
                     f"first at line {', '.join(map(str, overlong_at))})")
    if rejected_count:
        notes.append(f"{rejected_count} values out of any believable range (negative, NaN, infinite or huge) were "
                     "skipped, never judged")
    requested = name
    counts = {e: (len(collectors[e].lengths) + collectors[e].lifetime_lines, collectors[e].count) for e in ENGINES}
    # the named engine has no acceptance line but the other has (or has lines at all): the log is the other's
    if name is not None and counts[name] < max(counts[e] for e in ENGINES if e != name) and not counts[name][0]:
        chosen: str | None = max((e for e in ENGINES if e != name), key=lambda e: counts[e])
        mismatch = True
    else:
        chosen = name or max(ENGINES, key=lambda e: counts[e])
        mismatch = False
        if not name and not collectors[chosen].count:
            chosen = None
    for other in ENGINES:
        if other != chosen and collectors[other].count:
            notes.append(f"{collectors[other].count} {other} lines ignored: this log was read as {chosen}")
            ignored += collectors[other].count
    use_version, version_source = (version, "option") if version is not None and not mismatch else (None, None)
    if use_version is None and chosen == "vllm" and log_version is not None:
        try:
            use_version, version_source = Version(log_version), "log"
        except InvalidVersion:
            pass
    collector = collectors[chosen] if chosen else _Collector("sglang")
    ndt_from_log = chosen == "sglang" and num_draft_tokens is None and "ndt" in server_args
    return _build_result(
        source, chosen, collector, first_time, total, ignored, unparsed_count, tuple(unparsed), notes,
        server_args["ndt"] if ndt_from_log else num_draft_tokens,
        server_args.get("steps") if chosen == "sglang" else None, baseline_tps, expected_accept_len,
        "server_args" if ndt_from_log else "option", use_version, version_source, engine_spec if mismatch else None,
        overlong, rejected_count, tuple(rejected), requested,
        tree=chosen == "sglang" and ("tree" in server_args or server_args.get("topk", 1) > 1))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _build_result(source: str, engine: str | None, col: _Collector, first_time: datetime | None, total: int,
                  ignored: int, unparsed_count: int, unparsed: tuple[tuple[int, str], ...], notes: list[str],
                  num_draft_tokens: int | None, num_steps: int | None, baseline_tps: float | None,
                  expected_accept_len: float | None, ndt_given_by: str, version: Version | None,
                  version_source: str | None, mismatched_spec: str | None, overlong: int, rejected_count: int,
                  rejected: tuple[tuple[int, str], ...], requested: str | None, tree: bool = False) -> LogResult:
    formats = col.formats
    disagreement = None
    if mismatched_spec is not None and engine is not None:
        disagreement = (f"--engine {clean_text(mismatched_spec)} names {requested}, but this log has no {requested} "
                        f"acceptance lines and {col.count} {engine} lines: read as {engine} by its own format")
    elif engine is not None and version is not None:
        spec = f"{engine}=={version}" + ("" if version_source == "option" else " (the version the log names)")
        disagreement = check_version(engine, version, formats, spec)
        if disagreement is not None:
            version, version_source = None, None
    era = era_of(engine, version) if engine and version else None
    if engine == "sglang" and era is None and formats.get("sglang-0.5.3") and not formats.get("sglang-0.5"):
        era = era_of("sglang", Version("0.5.3.post2"))  # the 'Decode batch.' form with a rate pins the release
        notes.append("'Decode batch.' lines with an accept rate are SGLang 0.5.3.post2-0.5.3.post3's: rate read as "
                     "accept_len/(steps+1)")
    readings: list[LogReading] = []

    # vLLM: K, and whether the mean length counts the bonus token
    bonus = True
    logged_means = [x for x, c in zip(col.lengths, col.codes, strict=True)
                    if c // 2 == _FORMAT_CODES["vllm-mean-length"] and not math.isnan(x)] if engine == "vllm" else []
    if logged_means:
        below_one = any(x < 1 for x in logged_means)
        if era is not None and "vllm-mean-length" in era.formats:
            bonus = era.bonus_included and not below_one
            if below_one and era.bonus_included:
                disagreement = disagreement or (
                    f"{engine}=={version} counts the bonus token in its mean acceptance length, so it never logs "
                    f"under 1.00; this log's {min(logged_means):.2f} is vLLM 0.8.5-0.8.5.post1's form (bonus "
                    "excluded): read with the bonus added (+1)")
        elif era is None and below_one:
            bonus = False
            notes.append(f"a mean acceptance length under 1.00 ({min(logged_means):.2f}) is printed only by vLLM "
                         "0.8.5-0.8.5.post1, whose mean excludes the bonus token: read with the bonus added (+1)")
        elif era is None and col.mean_is_sum and not col.mean_is_one_plus_sum:
            bonus = False  # vllm/v1/spec_decode/metrics.py 0.8.5:76,82: mean = accepted/drafts = sum of the rates
            notes.append(f"on {col.mean_is_sum} 'Mean acceptance length' line(s) the mean equals the sum of the "
                         "per-position rates, which only vLLM 0.8.5-0.8.5.post1 prints (accepted/drafts, bonus "
                         "excluded; 0.9.0+ prints 1 + that sum): read with the bonus added (+1)")
        elif era is None and col.mean_is_one_plus_sum and not col.mean_is_sum:
            notes.append(f"on {col.mean_is_one_plus_sum} 'Mean acceptance length' line(s) the mean equals 1 + the "
                         "sum of the per-position rates: vLLM 0.9.0+'s convention (bonus included)")
        elif era is None:
            mean = statistics.fmean(logged_means)
            readings = [LogReading("vllm 0.9.0-0.10.1.1", "mean acceptance length includes the bonus token",
                                   mean, True),
                        LogReading("vllm 0.8.5-0.8.5.post1", "mean acceptance length excludes the bonus token: "
                                   "accept len = logged + 1", mean + 1, False)]
            notes.append("'Mean acceptance length' without throughput fields is printed by vLLM 0.8.5-0.10.1.1: read "
                         f"as 0.9.0+ (bonus included, mean {mean:.2f}); if this server ran 0.8.5-0.8.5.post1 (bonus "
                         f"excluded) the mean is {mean + 1:.2f}: pass --engine vllm==VERSION to decide")
    if engine == "vllm":
        width = len(col.pos_sums)
        steps = num_draft_tokens or (width or None)
        source_k = "option" if num_draft_tokens else ("per-position count" if width else "unknown")
        inference = DraftInference(None, steps, steps, source_k, explanation=(
            f"num_speculative_tokens K = {steps}" if steps else
            "K not in the log (no per-position rates): pass --num-draft-tokens"))
    else:
        pairs = [p for p in col.pairs if p[0] >= 1]
        if col.pairs_capped:
            notes.append(f"over {MAX_PAIRS} distinct accept len/rate pairs: the formula and K were inferred from the "
                         f"first {MAX_PAIRS}")
        if pairs and era is not None and era.formula is None:
            disagreement = disagreement or (
                f"the log has accept rates, which {era.releases} does not print (none before 0.5.3.post2): the rate's "
                "formula is inferred from the log itself")
            era = None
        inference = infer_draft_tokens(pairs, num_draft_tokens, era.first if era and era.first != "0" else None,
                                       ndt_given_by, num_steps=num_steps, tree=tree)
        steps = inference.draft_steps
        families = {c[0] for c in inference.candidates}
        if inference.formula is None and len(families) == 2:
            for family, releases in (("0.5.5", "sglang 0.5.3.post2-0.5.10.post1"), ("0.5.11+", "sglang 0.5.11+")):
                sizes = sorted(n for f, n in inference.candidates if f == family)
                readings.append(LogReading(releases, f"accept rate = {FORMULA_TEXT[family].split(':')[0]}, "
                                           f"num_draft_tokens one of {sizes}", None, False))

    # one pass over every acceptance line: the bonus convention, rate-only lengths, impossible values
    mean_len_code, rate_only_code = _FORMAT_CODES["vllm-mean-length"], _FORMAT_CODES["vllm-rate-only"]
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
    if derived:
        notes.append(f"accept len derived for {derived} rate-only vLLM lines (1 + K x rate; exactly 1.00 when "
                     "0 tokens were accepted)")
    if impossible:
        notes.append(f"{impossible} accept lengths under 1.00 skipped: accept len counts the bonus token, so it is "
                     "at least 1 in this format")
        rejected_count += impossible

    samples = _final_samples(col.samples, bonus, steps, first_time)
    width = len(col.pos_sums)
    mean_pos = tuple(col.pos_sums[i] / col.pos_counts[i] for i in range(width))
    lifetime = col.lifetime if col.lifetime is None or col.lifetime >= 1 else None
    summary = LogSummary(
        acceptance_lines=acceptance_lines,
        throughput_lines=len(col.tps),
        mean_accept_len=_mean(lengths),
        median_accept_len=statistics.median(lengths) if lengths else None,
        last_accept_len=lengths[-1] if lengths else None,
        min_accept_len=min(lengths) if lengths else None,
        max_accept_len=max(lengths) if lengths else None,
        mean_accept_rate=_mean(rates),
        mean_per_position=mean_pos,
        mean_gen_tps=math.fsum(col.tps) / len(col.tps) if col.tps else None,
        mean_running_reqs=math.fsum(col.running) / len(col.running) if col.running else None,
        accepted_tokens=col.accepted,
        drafted_tokens=col.drafted,
        lifetime_accept_len=lifetime,
        baseline_tps=baseline_tps,
        expected_accept_len=expected_accept_len,
        break_even_accept_len=1 + DRAFT_STEP_COST * (steps or DEFAULT_DRAFT_STEPS),
    )
    if col.stride > 1:
        notes.append(f"{col.count} lines parsed: the series keeps every {col.stride}th for display; the summary "
                     "covers all of them")
    format_counts = tuple(sorted(formats.items(), key=lambda kv: -kv[1]))
    if not col.count:
        notes.append("no decode or speculative-metrics lines parsed: is this an SGLang/vLLM server log "
                     "with speculative decoding on?")
    elif not summary.acceptance_lines and summary.lifetime_accept_len is None:
        notes.append("decode lines carry no accept len / acceptance fields: speculative decoding looks off")
    if disagreement:
        notes.insert(0, disagreement)
    result = LogResult(source=source, engine=engine, formats=format_counts, samples=tuple(samples), summary=summary,
                       inference=inference, total_lines=total, ignored_lines=ignored,
                       unparsed_lines=unparsed_count, unparsed_examples=unparsed,
                       unknown_fields=tuple(sorted(col.unknown)), notes=tuple(notes), parsed_lines=col.count,
                       overlong_lines=overlong, rejected_values=rejected_count, rejected_examples=rejected,
                       readings=tuple(readings), series_stride=col.stride,
                       version=None if version is None else str(version), version_source=version_source,
                       disagreement=disagreement)
    return replace(result, findings=tuple(classify(result)))


def _final_samples(samples: list[LogSample], bonus: bool, steps: int | None,
                   first_time: datetime | None) -> list[LogSample]:
    """The kept samples with accept len in the log's convention made bonus-inclusive, and times made relative."""
    origin = (first_time - _EPOCH).total_seconds() if first_time is not None else None
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


def classify(result: LogResult) -> list[Finding]:
    """Zero / low acceptance and speculation-slower-than-baseline, with the arithmetic spelled out."""
    s, inf = result.summary, result.inference
    length = s.mean_accept_len if s.mean_accept_len is not None else s.lifetime_accept_len
    findings: list[Finding] = []
    engine = result.engine or "sglang"
    log = result.source if result.source != "<text>" else "SERVER_LOG"
    spec = f"{engine}=={result.version}" if result.version and result.engine else engine
    counters = dict(result.formats).get("vllm-prometheus") is not None
    fix = fix_command("acceptance", "DRAFT_CHECKPOINT", "--target", "TARGET", "--prompts", "PROMPTS", "--engine",
                      "installed", "--measure") if counters else \
        fix_command("doctor", "DRAFT_CHECKPOINT", "--engine", spec, "--log", log)
    # low, not zero: the causes sit outside the checkpoint as often as in it; acceptance prices each lever
    budget = fix_command("acceptance", "DRAFT_CHECKPOINT", "--target", "TARGET", "--chat", "SERVED_CHATS.jsonl",
                         "--request", "REQUEST.json", *(("--engine", "installed", "--measure") if counters else
                                                         ("--engine", spec, "--log", log)))
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
    if result.disagreement:
        findings.append(Finding(
            "logs/engine-mismatch", Severity.WARNING,
            f"the log does not match the engine named: read as {result.engine} by its own format",
            result.disagreement + ". Findings from other probes assume the engine named; make sure the log is "
            "from the server that runs that engine and release.",
            evidence={"engine": result.engine, "formats": dict(result.formats), "version": result.version}))
    if s.lifetime_accept_len is None and not s.acceptance_lines:
        findings.append(Finding(
            "logs/no-acceptance-lines", Severity.WARNING, f"no acceptance lines in {log}",
            (f"None of its {result.total_lines} lines is an SGLang decode line with accept len or a vLLM SpecDecoding "
             f"metrics line ({result.unparsed_lines} looked like metrics but did not parse): acceptance was not "
             "judged. Is this the server log of a run with speculative decoding on?"),
            evidence={"total_lines": result.total_lines, "unparsed_lines": result.unparsed_lines,
                      "unparsed_examples": list(result.unparsed_examples), "formats": dict(result.formats)}))
    era = _era_sentence(result)
    alternatives = [r for r in result.readings if not r.chosen and r.mean_accept_len is not None]
    if alternatives and length is not None:
        chosen = next((r.releases for r in result.readings if r.chosen), "the likeliest release")
        era = (era + f" Read as {chosen}; " + "; ".join(
            f"if the log is from {r.releases} ({r.meaning}) the mean accept len is {r.mean_accept_len:.2f}"
            for r in alternatives) + ": pass --engine NAME==VERSION to decide.").strip()
    what = "mean accept len" if s.mean_accept_len is not None else \
        "accept len from the server's counters" if counters else "lifetime avg_spec_accept_length"
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
                "aux layer ids, norm_before_fc or other config flags, vocab mapping; and outside the checkpoint: "
                "the served chat template, the sampling temperature, the served vocabulary. The fix command "
                "estimates each on your served conversations and request, at the log's K, beside the logged "
                "figure.",
                {**evidence, "expected_accept_len": s.expected_accept_len, "baseline_tps": s.baseline_tps,
                 "mean_gen_tps": s.mean_gen_tps, "break_even_accept_len": s.break_even_accept_len},
                budget))
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

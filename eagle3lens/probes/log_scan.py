"""One pass over a server log's lines, accumulated into a :class:`LogScan`: per-engine columns, start-up facts,
what did not parse and what was out of range.

The pass is linear in the log: most lines are rejected by a substring test; an anchored line is read by each
engine's label parser (``log_formats.PARSERS``) once. Everything kept is bounded: examples (``MAX_EXAMPLES``),
the display series (``LogBounds.series``, decimated evenly), distinct (len, rate) pairs (``MAX_PAIRS``) and fork
fields (``MAX_UNKNOWN_FIELDS`` from the first ``FIELD_SCAN_LINES`` lines).
"""

from __future__ import annotations

import math
import os
from array import array
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..io.textsafe import clean_text
from .log_formats import (
    ENGINES,
    FORMAT_DESCRIPTIONS,
    PARSERS,
    SERVER_ARGS,
    SGLANG_DECODE,
    TREE_HINT,
    VLLM_SPEC,
    VLLM_STATS,
    VLLM_VERSION,
    VLLM_VERSION_HINTS,
    timestamp,
    unknown_labels,
)
from .log_lines import LogBounds, open_lines
from .log_result import LogSample

MAX_EXAMPLES = 5
FIELD_SCAN_LINES = 500  # fork fields are collected from the first lines of each engine
MAX_PAIRS = 4096  # distinct SGLang (len, rate) pairs used to infer the formula and K
MAX_UNKNOWN_FIELDS = 32
FORMAT_CODES = {name: i for i, name in enumerate(FORMAT_DESCRIPTIONS)}
EPOCH = datetime(1970, 1, 1)
_NAN = math.nan


class Collector:
    """One engine's parsed lines: compact columns over all of them, a decimated series for display."""

    def __init__(self, engine: str, max_series: int = LogBounds.series) -> None:
        self.engine = engine
        self.max_series = max_series
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

    @property
    def acceptance_count(self) -> tuple[int, int]:
        """(lines with acceptance, lines parsed): how strongly the log is this engine's."""
        return len(self.lengths) + self.lifetime_lines, self.count

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

    def _add_interval(self, fmt: str, values: dict[str, Any], line: str) -> None:
        get = values.get
        length, rate = get("accept_len"), get("accept_rate")
        sglang = self.engine == "sglang"
        if length is not None or rate is not None:
            self.lengths.append(_NAN if length is None else length)
            self.rates.append(_NAN if rate is None else rate)
            self.codes.append(FORMAT_CODES[fmt] * 2 + (not sglang and get("accepted_tokens") == 0))
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
        if self.count <= FIELD_SCAN_LINES and len(self.unknown) < MAX_UNKNOWN_FIELDS:
            self.unknown |= unknown_labels(self.engine, line)

    def add(self, number: int, fmt: str, values: dict[str, Any], line: str) -> None:
        self.count = count = self.count + 1
        self.formats[fmt] += 1
        if fmt == "sglang-lifetime":
            self.lifetime = values["accept_len"]
            self.lifetime_lines += 1
        else:
            self._add_interval(fmt, values, line)
        if (count - 1) % self.stride == 0:
            text, when = timestamp(line)
            self.samples.append(LogSample(line=number, engine=self.engine, format=fmt, time=text,
                                          seconds=None if when is None else (when - EPOCH).total_seconds(), **values))
            if len(self.samples) > self.max_series:
                self.samples = self.samples[::2]
                self.stride *= 2


@dataclass
class LogScan:
    """What one pass over a log found, before any engine's convention is applied."""

    source: str
    bounds: LogBounds
    collectors: dict[str, Collector]
    notes: list[str] = field(default_factory=list)
    total: int = 0
    ignored: int = 0
    unparsed_count: int = 0
    unparsed: list[tuple[int, str]] = field(default_factory=list)
    rejected_count: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    overlong: int = 0
    overlong_at: list[int] = field(default_factory=list)
    first_time: datetime | None = None
    server_args: dict[str, int] = field(default_factory=dict)  # SGLang's ndt / steps / topk / tree at start-up
    log_version: str | None = None  # the vLLM release the log's start-up line names

    def startup_line(self, line: str) -> None:
        """Start-up facts: SGLang's ServerArgs (K, topk, a tree), the vLLM release."""
        if "speculative_num_" in line or "speculative_eagle_topk" in line:  # SGLang's ServerArgs at start-up
            for name in ("ndt", "steps", "topk"):
                self._server_arg(line, name)
        if TREE_HINT in line:
            self.server_args.setdefault("tree", 1)
        if self.log_version is None and (VLLM_VERSION_HINTS[0] in line or VLLM_VERSION_HINTS[1] in line) and (
                vm := VLLM_VERSION.search(line)):
            self.log_version = vm.group(1)

    def _server_arg(self, line: str, name: str) -> None:
        found = self.server_args
        if name in found or not (m := SERVER_ARGS[name].search(line)):
            return
        digits = m.group(1)
        if len(digits) <= 4 and 0 < int(digits) <= 1024:
            found[name] = int(digits)
        elif f"bad-{name}" not in found:
            found[f"bad-{name}"] = 0
            label = {"ndt": "speculative_num_draft_tokens", "steps": "speculative_num_steps"}.get(
                name, "speculative_eagle_topk")
            shown = digits if len(digits) <= 12 else f"<{len(digits)} digits>"
            self.notes.append(f"{label}={shown} in the log's server arguments is not a believable size: ignored")

    def metrics_line(self, number: int, line: str) -> None:
        """An anchored line: the first engine whose parser reads it keeps it; absurd values are counted."""
        for engine_name in ENGINES:
            fmt, values, absurd = PARSERS[engine_name](line)
            if absurd:
                self.rejected_count += len(absurd)
                if len(self.rejected) < MAX_EXAMPLES:
                    self.rejected.append((number, ", ".join(f"{n}: {clean_text(t)}" for n, t in absurd)))
            if fmt is not None:
                self.collectors[engine_name].add(number, fmt, values, line)
                return
        self.unparsed_count += 1
        if len(self.unparsed) < MAX_EXAMPLES:
            self.unparsed.append((number, clean_text(line.strip()[:300])))

    def overlong_line(self, number: int) -> None:
        self.overlong += 1
        if len(self.overlong_at) < MAX_EXAMPLES:
            self.overlong_at.append(number)


def scan_log(log: str | os.PathLike[str], bounds: LogBounds) -> LogScan:
    """Read every line of ``log`` (a path, or the log's text) once into a :class:`LogScan`."""
    source, blocks = open_lines(log, bounds)
    scan = LogScan(source, bounds, {e: Collector(e, bounds.series) for e in ENGINES})
    number = 0
    cap, decode_anchor, spec_anchor, stats_anchor = bounds.line_bytes, SGLANG_DECODE, VLLM_SPEC, VLLM_STATS  # locals
    want_time = True  # times count from the first timestamped line of the file (looked for in its first lines)
    for block in blocks:
        startup, crlf = block.startup, block.crlf
        for raw, text in zip(block.lines, block.clean, strict=True):
            number += 1
            if raw is None or text is None or len(raw) > cap:  # the cap is on the line as read, escapes included
                scan.overlong_line(number)
                continue
            line = text.removesuffix("\r") if crlf else text
            if want_time:
                scan.first_time = timestamp(line)[1]
                want_time = scan.first_time is None and number < 10_000
            if startup:
                scan.startup_line(line)
            if not ("accept" in line or decode_anchor in line or spec_anchor in line or stats_anchor in line):
                scan.ignored += 1  # the same test as log_formats.anchored, inline: most lines of a server log end here
                continue
            scan.metrics_line(number, line)
    scan.total = number
    return scan

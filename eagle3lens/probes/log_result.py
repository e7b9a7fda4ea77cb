"""The log probe's results: one parsed line (:class:`LogSample`), the summary over all of them, and the whole
:class:`LogResult` with its findings. Plain data: views are registered in ``plots/`` by the result's public name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..findings import Finding, to_jsonable
from .log_formats import FORMAT_DESCRIPTIONS, FORMULA_TEXT, DraftInference
from .log_lines import MAX_LINE_BYTES


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

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

The probe's parts: ``log_lines`` (bounded reading), ``log_scan`` (one pass into a ``LogScan``),
``log_summary`` (the release's conventions, the summary), ``log_findings`` (the judging), ``log_result``
(the result types); this module is the entry point and keeps every name it always exported.

Judging (accept len always counts the bonus token, so accepted drafts per step = len - 1):
``logs/zero-acceptance`` when the mean accept len is <= 1.05; ``logs/low-acceptance`` when
len - 1 is under half of what ``expected_accept_len`` promises, or speculation is measured
slower than ``baseline_tps``, or (no baseline) len is under the break-even heuristic
1 + 0.1·K; ``logs/speculation-slower`` when measured tok/s is under the baseline (critical
under 0.5×); ``logs/engine-mismatch`` when ``engine`` names one engine and the log is the other's.
"""

from __future__ import annotations

import math
import os

from packaging.version import InvalidVersion, Version

from ..engines import EngineProfile
from ..errors import LogFileError, UsageError
from ..io.textsafe import clean_text
from .log_findings import (
    DEFAULT_DRAFT_STEPS,
    DRAFT_STEP_COST,
    EXPECTED_SHORTFALL,
    ZERO_ACCEPT_LEN,
    classify,
)
from .log_formats import ENGINES, FORMAT_DESCRIPTIONS, FORMULA_TEXT, DraftInference, infer_draft_tokens
from .log_lines import BLOCK_BYTES as _BLOCK
from .log_lines import BLOCK_ESCAPES as _BLOCK_ESCAPES
from .log_lines import MAX_LINE_BYTES, MAX_LOG_BYTES, MAX_SERIES, LogBounds
from .log_result import LogReading, LogResult, LogSample, LogSummary
from .log_scan import FIELD_SCAN_LINES, MAX_EXAMPLES, MAX_PAIRS, MAX_UNKNOWN_FIELDS, LogScan, scan_log
from .log_summary import LogQuery, build_result

# moved to log_lines, log_scan, log_summary, log_findings and log_result; kept here for one release
__all__ = [
    "DEFAULT_DRAFT_STEPS", "DRAFT_STEP_COST", "ENGINES", "EXPECTED_SHORTFALL", "FIELD_SCAN_LINES",
    "FORMAT_DESCRIPTIONS", "FORMULA_TEXT", "MAX_EXAMPLES", "MAX_LINE_BYTES", "MAX_LOG_BYTES", "MAX_PAIRS",
    "MAX_SERIES", "MAX_UNKNOWN_FIELDS", "ZERO_ACCEPT_LEN", "DraftInference", "LogBounds", "LogFileError",
    "LogQuery", "LogReading", "LogResult", "LogSample", "LogScan", "LogSummary", "_BLOCK", "_BLOCK_ESCAPES",
    "classify", "clean_text", "infer_draft_tokens", "parse_log", "scan_log",
]


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
    # the bounds are this module's names, read now (tests lower them here)
    scan = scan_log(log, LogBounds(MAX_LOG_BYTES, MAX_LINE_BYTES, MAX_SERIES, _BLOCK))
    return build_result(scan, LogQuery(name, version, engine_spec, num_draft_tokens, baseline_tps,
                                       expected_accept_len))

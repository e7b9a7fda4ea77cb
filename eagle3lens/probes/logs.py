"""Acceptance-log probe: read SGLang / vLLM server logs and say whether speculation pays.

Lines are matched by *label*, never by position, so extra fields from forks and
reordered fields are tolerated. What each release prints, read from the wheels
(ENGINE_VERSIONS.md §2c, §3c; the release table is ``ERAS`` below):

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

from ..errors import CheckpointError, Eagle3LensError, UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable
from ..inputs import GiB, open_regular

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
_MAX_K = 16
_BLOCK = 1 << 20
_MAX_POSITIONS = 64
_MAX_NUMBER_CHARS = 48  # a longer number is no engine's output
_MAX_ACCEPT_LEN = 1000.0  # K + 1 is far below this for any engine
_MAX_RATE_VALUE = 1e9  # tok/s, request and token counts above this are absurd

ENGINES = ("sglang", "vllm")
FORMAT_DESCRIPTIONS = {
    "sglang-0.4": "SGLang 'Decode batch.' with accept len only (0.4.1.post7 through 0.5.3.post1: no accept rate "
                  "before 0.5.3.post2)",
    "sglang-0.5.3": "SGLang 0.5.3.post2-0.5.3.post3 'Decode batch.' with accept len and accept rate = len/(steps+1)",
    "sglang-0.5": "SGLang 0.5.4+ 'Decode batch [N],' / 'Decode batch,' with accept len and accept rate "
                  "(the rate's formula depends on the release)",
    "sglang-no-spec": "SGLang decode line without speculative fields",
    "sglang-lifetime": "SGLang lifetime avg_spec_accept_length",
    "vllm-rate-only": "vLLM 0.8.3-0.8.4 'SpecDecoding metrics' with draft acceptance rate only",
    "vllm-mean-length": "vLLM 0.8.5-0.10.1.1 'SpecDecoding metrics' with mean length and per-position rates "
                        "(0.8.5-0.8.5.post1: mean length excludes the bonus token; 0.9.0+: includes it)",
    "vllm-throughput": "vLLM 0.10.2+ 'SpecDecoding metrics' with accepted/drafted throughput (format unchanged "
                       "through 0.33.0)",
    "vllm-engine-stats": "vLLM engine stats line (generation throughput, running reqs)",
}
FORMULA_TEXT = {
    "0.5.5": "accept_len / (K+1): len/(steps+1) in 0.5.3.post2-0.5.5.post2, len/num_draft_tokens in "
             "0.5.5.post3-0.5.10.post1",
    "0.5.11+": "(accept_len - 1) / (num_draft_tokens - 1), or / num_steps when num_draft_tokens is unset (0.5.11+)",
}


class LogFileError(Eagle3LensError):
    """A log file that is missing, unreadable, not a regular file or too large."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {problem}")


# ---------------------------------------------------------------- releases (data)

@dataclass(frozen=True)
class Era:
    """What one range of releases prints: line formats, vLLM's bonus convention, SGLang's rate formula."""

    engine: str
    first: str  # first release of the range (inclusive)
    after: str | None  # first release no longer in the range (None: open-ended)
    formats: frozenset[str]
    bonus_included: bool = True  # vLLM mean acceptance length counts the bonus token
    formula: str | None = None  # SGLang accept-rate family ("0.5.5" | "0.5.11+"), None: no accept rate
    denominator: str = ""  # what the 0.5.5 family divides by: "steps+1" or "num_draft_tokens"
    source: str = ""

    @property
    def releases(self) -> str:
        last = {"0.5.3.post2": "0.5.3.post1", "0.5.4": "0.5.3.post3", "0.5.5.post3": "0.5.5.post2",
                "0.5.11": "0.5.10.post1", "0.8.5": "0.8.4", "0.9.0": "0.8.5.post1", "0.10.2": "0.10.1.1"}
        first = "" if self.first == "0" else self.first
        if self.after is None:
            return f"{self.engine} {first}+"
        return f"{self.engine} {first}-{last[self.after]}" if first else f"{self.engine} <= {last[self.after]}"

    def covers(self, version: Version) -> bool:
        return Version(self.first) <= version and (self.after is None or version < Version(self.after))


_SG = "sglang/srt/managers/scheduler_metrics_mixin.py"
ERAS = (
    Era("sglang", "0", "0.5.3.post2", frozenset({"sglang-0.4", "sglang-no-spec", "sglang-lifetime"}),
        source=f"{_SG} 0.5.3.post1:215-226"),
    Era("sglang", "0.5.3.post2", "0.5.4", frozenset({"sglang-0.5.3", "sglang-no-spec", "sglang-lifetime"}),
        formula="0.5.5", denominator="steps+1", source=f"{_SG} 0.5.3.post2:251-272"),
    Era("sglang", "0.5.4", "0.5.5.post3", frozenset({"sglang-0.5", "sglang-no-spec", "sglang-lifetime"}),
        formula="0.5.5", denominator="steps+1", source=f"{_SG} 0.5.4:249-270"),
    Era("sglang", "0.5.5.post3", "0.5.11", frozenset({"sglang-0.5", "sglang-no-spec", "sglang-lifetime"}),
        formula="0.5.5", denominator="num_draft_tokens", source=f"{_SG} 0.5.5.post3:267-291"),
    Era("sglang", "0.5.11", None, frozenset({"sglang-0.5", "sglang-no-spec", "sglang-lifetime"}),
        formula="0.5.11+", source="sglang/srt/observability/scheduler_metrics_mixin.py 0.5.11:522-547"),
    Era("vllm", "0", "0.8.5", frozenset({"vllm-rate-only", "vllm-engine-stats"}),
        source="vllm/v1/spec_decode/metrics.py 0.8.3-0.8.4"),
    Era("vllm", "0.8.5", "0.9.0", frozenset({"vllm-mean-length", "vllm-engine-stats"}), bonus_included=False,
        source="vllm/v1/spec_decode/metrics.py 0.8.5:76,82-88"),
    Era("vllm", "0.9.0", "0.10.2", frozenset({"vllm-mean-length", "vllm-engine-stats"}),
        source="vllm/v1/spec_decode/metrics.py 0.9.0:80"),
    Era("vllm", "0.10.2", None, frozenset({"vllm-throughput", "vllm-engine-stats"}),
        source="vllm/v1/spec_decode/metrics.py 0.10.2-0.33.0"),
)


def era_of(engine: str, version: Version) -> Era:
    """The release range of ``engine`` that ``version`` falls in."""
    return next(e for e in ERAS if e.engine == engine and e.covers(version))


def eras_printing(engine: str, fmt: str) -> tuple[Era, ...]:
    """Every release range of ``engine`` whose lines have format ``fmt``."""
    return tuple(e for e in ERAS if e.engine == engine and fmt in e.formats)


# ---------------------------------------------------------------- untrusted text

# ESC sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC (ESC P/X/^/_ ... ST), any other
# ESC + intermediates + final; and their 8-bit C1 forms. Every branch is a run of one disjoint class: linear.
_ESCAPES = re.compile(
    "\x1b\\[[0-?]*[ -/]*[@-~]?"
    "|\x1b\\][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?"
    "|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\\\|\x9c)?"
    "|\x1b[ -/]*[0-~]?"
    "|\x9b[0-?]*[ -/]*[@-~]?"
    "|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?")
_CONTROLS = {c: "\ufffd" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0), 0x061c, 0x200e, 0x200f,
                                    *range(0x202a, 0x202f), *range(0x2066, 0x206a), 0x2028, 0x2029]}
_CONTROLS[ord("\t")] = " "


def clean_text(text: str) -> str:
    """``text`` safe to print: terminal escape sequences removed, other C0/C1, DEL and bidi controls replaced."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        text = _ESCAPES.sub("", text)
    return text.translate(_CONTROLS)


# ---------------------------------------------------------------- line grammar (data)

_SEPARATORS = frozenset(",:.]")  # a label starts the message or follows one of these (then spaces)
_SPACES = frozenset(" \t")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf)")
_SGLANG_LABELS = (("accept_len", "accept len", "", 1.0), ("accept_rate", "accept rate", "", 1.0),
                  ("running_reqs", "#running-req", "", 1.0), ("gen_tps", "gen throughput (token/s)", "", 1.0))
# (attribute, label, required suffix, scale)
_VLLM_SPEC_LABELS = (("accept_len", "Mean acceptance length", "", 1.0), ("accepted_tps", "Accepted throughput", "", 1.0),
                     ("drafted_tps", "Drafted throughput", "", 1.0), ("accepted_tokens", "Accepted", "", 1.0),
                     ("drafted_tokens", "Drafted", "", 1.0), ("accept_rate", "Avg Draft acceptance rate", "%", 0.01),
                     ("legacy_rate", "Draft acceptance rate", "%", 0.01))
_VLLM_ENGINE_LABELS = (("gen_tps", "Avg generation throughput", "", 1.0), ("running_reqs", "Running", "", 1.0))
_PER_POSITION = "Per-position acceptance rate"
_LIFETIME = re.compile(r"avg_spec_accept_length['\"]?[ \t]*[=:][ \t]*(?:np\.float\d{0,3}\()?"
                       r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)", re.IGNORECASE)
_SGLANG_DECODE = "Decode batch"
_VLLM_SPEC = "SpecDecoding metrics"
_VLLM_STATS = "Avg generation throughput"
_SERVER_ARGS = {"ndt": re.compile(r"\bspeculative_num_draft_tokens=(\d+)"),
                "steps": re.compile(r"\bspeculative_num_steps=(\d+)")}
# vLLM names its release at start-up: "Initializing a V1 LLM engine (v0.8.5) with config" (v1/engine/core.py:58),
# "vLLM API server version 0.8.5" (entrypoints/openai/api_server.py:1043)
_VLLM_VERSION_HINTS = ("LLM engine (v", "vLLM API server version ")
_VLLM_VERSION = re.compile(r"(?:LLM engine \(v|vLLM API server version )"
                           r"(\d{1,4}(?:\.\d{1,6}){1,3}(?:\.?(?:post|rc|dev)\d{0,6}){0,3})(?:\+[\w.]{0,64})?(?![\w.])")
_ISO_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)")
_VLLM_TIME = re.compile(r"\b(?:INFO|DEBUG|WARNING|ERROR)[ \t]{1,8}(\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_LABEL_CHARS = re.compile(r"[A-Za-z#][A-Za-z0-9 #()/_.\-]{0,59}")
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
_FIELD_ANCHOR = {"sglang": _SGLANG_DECODE, "vllm": _VLLM_SPEC + ":"}
# bounds of a believable value, per attribute (anything else is counted as rejected, never judged)
_BOUNDS = {"accept_len": (0.0, _MAX_ACCEPT_LEN), "accept_rate": (0.0, 1.0), "legacy_rate": (0.0, 1.0)}


def _anchored(line: str) -> bool:
    """A line that may carry acceptance metrics (cheap substring tests only)."""
    return ("accept" in line or _SGLANG_DECODE in line or _VLLM_SPEC in line or _VLLM_STATS in line)


def _label_at(message: str, label: str, start: int = 0) -> int:
    """Index just past the first occurrence of ``label`` at or after ``start`` that starts a field, or -1.

    A label starts a field at the message start or after one of ``,:.]`` and spaces. Each occurrence looks back
    only over its own run of spaces, so the whole search is linear in the message length."""
    at = message.find(label, start)
    while at >= 0:
        i = at
        while i > 0 and message[i - 1] in _SPACES:
            i -= 1
        if i == 0 or message[i - 1] in _SEPARATORS:
            return at + len(label)
        at = message.find(label, at + 1)
    return -1


_INTEGERS = frozenset({"running_reqs", "accepted_tokens", "drafted_tokens"})
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf)"


class _FieldTable:
    """``label: number[suffix]`` fields found by label wherever they sit, in one linear regex pass.

    A label counts where it starts a field: at the message start or after one of ``,:.]`` and spaces. The pattern
    is a chain of disjoint classes and literals (no nested repetition), so it never backtracks; the first
    occurrence of each label whose number (and suffix) reads wins."""

    def __init__(self, fields: Iterable[tuple[str, str, str, float]]) -> None:
        self.fields = {label: (name, suffix, scale, *_BOUNDS.get(name, (0.0, _MAX_RATE_VALUE)), name in _INTEGERS)
                       for name, label, suffix, scale in fields}
        labels = "|".join(re.escape(label) for label in sorted(self.fields, key=len, reverse=True))
        # starts with a character set, so the regex engine scans for it at C speed; read() prefixes a ","
        self.pattern = re.compile(r"[,:.\]][ \t]*(" + labels + r")[ \t]*:[ \t]*(" + _NUM + r")(%?)")

    def read(self, message: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """(values, rejected): believable values by attribute, and (attribute, text) of the absurd ones.

        ``message`` starts with a separator (callers prefix one where the message start is a field start)."""
        values: dict[str, Any] = {}
        rejected: list[tuple[str, str]] = []
        fields = self.fields
        for label, text, percent in self.pattern.findall(message):
            name, suffix, scale, low, high, integer = fields[label]
            if percent != suffix or name in values:
                continue
            value = float(text) * scale if len(text) <= _MAX_NUMBER_CHARS else math.inf
            if low <= value <= high:  # False for NaN and the infinities too
                values[name] = round(value) if integer else value
            elif len(rejected) < len(fields):
                rejected.append((name, text[:_MAX_NUMBER_CHARS]))
        return values, rejected


def _per_position(message: str) -> tuple[tuple[float, ...], bool]:
    """(rates, absurd) after ``Per-position acceptance rate:``: comma-separated numbers up to the first non-number."""
    end = _label_at(message, _PER_POSITION)
    if end < 0:
        return (), False
    rest = message[end:].lstrip(" \t")
    if not rest.startswith(":"):
        return (), False
    values: list[float] = []
    for part in rest[1:].split(",", _MAX_POSITIONS)[:_MAX_POSITIONS]:
        text = part.strip()
        if _NUMBER.fullmatch(text) is None:
            break
        value = float(text) if len(text) <= _MAX_NUMBER_CHARS else math.inf
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            return (), True
        values.append(value)
    return tuple(values), False


_SGLANG_FIELDS = _FieldTable(_SGLANG_LABELS)
_VLLM_SPEC_FIELDS = _FieldTable(_VLLM_SPEC_LABELS)
_VLLM_ENGINE_FIELDS = _FieldTable(_VLLM_ENGINE_LABELS)
_Parsed = tuple[str | None, dict[str, Any], list[tuple[str, str]]]


def _parse_sglang(line: str) -> _Parsed:
    if "avg_spec_accept_length" in line and (m := _LIFETIME.search(line)):
        text = m.group(1)
        value = float(text) if len(text) <= _MAX_NUMBER_CHARS else math.inf
        if 0.0 <= value <= _MAX_ACCEPT_LEN:
            return "sglang-lifetime", {"accept_len": value}, []
        return None, {}, [("accept_len", text[:_MAX_NUMBER_CHARS])]
    at = line.find(_SGLANG_DECODE)
    if at >= 0:
        message = line[at + len(_SGLANG_DECODE):]
        dot_form = message.startswith(".")
    else:  # a decode line cut by a log shipper: read from its first field-starting "accept len"
        end = _label_at(line, "accept len")
        if end < 0:
            return None, {}, []
        message, dot_form = "," + line[end - len("accept len"):], False
    values, rejected = _SGLANG_FIELDS.read(message)
    if "accept_len" not in values:
        # a decode line without speculation still carries its throughput
        spec_off = at >= 0 and "gen_tps" in values and not any(n == "accept_len" for n, _ in rejected)
        return ("sglang-no-spec" if spec_off else None), values, rejected
    if "accept_rate" in values:
        return ("sglang-0.5.3" if dot_form else "sglang-0.5"), values, rejected
    return "sglang-0.4", values, rejected


def _parse_vllm(line: str) -> _Parsed:
    at = line.find(_VLLM_SPEC)
    if at >= 0:
        message = line[at + len(_VLLM_SPEC):]
        values, rejected = _VLLM_SPEC_FIELDS.read(message)
        legacy = values.pop("legacy_rate", None)
        if "accept_rate" not in values and legacy is not None:
            values["accept_rate"] = legacy
        positions, absurd = _per_position(message)
        if positions:
            values["per_position"] = positions
        elif absurd:
            rejected.append(("per_position", "out of [0, 1]"))
        if "accept_len" not in values and "accept_rate" not in values:
            return None, values, rejected
        if "accepted_tps" in values or "drafted_tps" in values:
            return "vllm-throughput", values, rejected
        return ("vllm-mean-length" if "accept_len" in values else "vllm-rate-only"), values, rejected
    at = line.find(_VLLM_STATS)
    if at >= 0:
        values, rejected = _VLLM_ENGINE_FIELDS.read("," + line[at:])
        if "gen_tps" in values:
            return "vllm-engine-stats", values, rejected
        return None, values, rejected
    return None, {}, []


_PARSERS = {"sglang": _parse_sglang, "vllm": _parse_vllm}


def _unknown_labels(engine: str, line: str) -> set[str]:
    """Labels of ``label: value`` parts this probe does not know (fork additions)."""
    start = line.find(_FIELD_ANCHOR[engine])
    if start < 0:
        return set()
    message = line[start + len(_FIELD_ANCHOR[engine]):].lstrip(" \t")
    if message.startswith("["):  # SGLang's "[N]" iteration
        close = message.find("]", 0, 32)
        message = message[close + 1:] if close > 0 else message
    labels = set()
    for part in message.split(",", 256)[:256]:
        label, colon, value = part.partition(":")
        label = label.lstrip(" \t.").rstrip(" \t")
        if colon and value.strip() and _LABEL_CHARS.fullmatch(label) and label.lower() not in _KNOWN_LABELS[engine]:
            labels.add(clean_text(label))
    return labels


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
class DraftInference:
    """Which SGLang accept-rate formula and how many draft tokens the len/rate pairs imply."""

    formula: str | None  # "0.5.5" | "0.5.11+" | None
    num_draft_tokens: int | None  # SGLang: --speculative-num-draft-tokens; vLLM: num_speculative_tokens
    draft_steps: int | None  # K: tokens drafted per verify step
    source: str  # where num_draft_tokens came from
    candidates: tuple[tuple[str, int], ...] = ()
    explanation: str = ""
    denominator: int | None = None  # the formula's size: K+1 (0.5.5 family) or num_draft_tokens (0.5.11+)

    def to_dict(self) -> dict[str, Any]:
        return {"formula": self.formula, "formula_text": FORMULA_TEXT.get(self.formula or ""),
                "num_draft_tokens": self.num_draft_tokens, "draft_steps": self.draft_steps,
                "denominator": self.denominator,
                "source": self.source, "candidates": [list(c) for c in self.candidates],
                "explanation": self.explanation}


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

    def figures(self) -> list[Any]:
        from ..plots.logs import log_figures

        return log_figures(self)

    def _repr_html_(self) -> str:
        from ..plots.logs import summary_html

        return summary_html(self)

    def __rich__(self) -> Any:
        from ..plots.logs import summary_rich

        return summary_rich(self)


# ---------------------------------------------------------------- timestamps

def _timestamp(line: str) -> tuple[str | None, datetime | None]:
    head = line[:120]
    if (m := _ISO_TIME.search(head)) or (m := _VLLM_TIME.search(head)):
        text = m.group(1)
    else:
        return None, None
    iso = text.replace(",", ".") if len(text) > 14 else "2000-" + text
    try:
        return text, datetime.fromisoformat(iso)
    except ValueError:  # e.g. a hand-edited "09:12:64"
        return text, None


# ---------------------------------------------------------------- inference of K and formula

def _fits_old(length: float, rate: float, n: int) -> bool:
    """0.5.3.post2-0.5.10.post1: rate = len / n (n = steps+1, or num_draft_tokens from 0.5.5.post3), 2 decimals."""
    return n >= length - 0.005 and abs(length / n - rate) <= 0.005 + 0.005 / n + 1e-9


def _fits_new(length: float, rate: float, m: int) -> bool:
    """0.5.11+: rate = (len - 1) / (num_draft_tokens - 1) with m = num_draft_tokens - 1."""
    return length - 1 <= m + 0.005 and abs((length - 1) / m - rate) <= 0.005 + 0.005 / m + 1e-9


def _candidates(length: float, rate: float) -> set[tuple[str, int]]:
    """(formula, num_draft_tokens) pairs consistent with one logged len/rate pair (topk 1: ndt = K+1)."""
    found = {("0.5.5", n) for n in range(2, _MAX_K + 2) if _fits_old(length, rate, n)}
    found |= {("0.5.11+", m + 1) for m in range(1, _MAX_K + 1) if _fits_new(length, rate, m)}
    return found


def _as_version(version: Version | str | tuple[int, ...] | None) -> Version | None:
    if version is None or isinstance(version, Version):
        return version
    return Version(".".join(map(str, version)) if isinstance(version, tuple) else version)


def _allowed_sizes(era: Era | None, num_draft_tokens: int | None, num_steps: int | None) -> dict[str, set[int]]:
    """The denominators each formula family may have given what is known (empty: unconstrained)."""
    old: set[int] = set()
    new: set[int] = set()
    if num_draft_tokens:
        new.add(num_draft_tokens)
        if era is None or era.denominator != "steps+1":
            old.add(num_draft_tokens)
    if num_steps:
        if not num_draft_tokens:
            new.add(num_steps + 1)  # 0.5.11+ divides by num_steps when num_draft_tokens is unset
        if era is None or era.denominator == "steps+1" or not num_draft_tokens:
            old.add(num_steps + 1)
    return {"0.5.5": old, "0.5.11+": new}


def infer_draft_tokens(pairs: Iterable[tuple[float, float]], num_draft_tokens: int | None = None,
                       version: Version | str | tuple[int, ...] | None = None, given_by: str = "option", *,
                       num_steps: int | None = None, formula: str | None = None) -> DraftInference:
    """Intersect, over every SGLang (accept len, accept rate) pair, the formulas and K that fit it.

    0.5.3.post2-0.5.10.post1 log ``len/(K+1)`` (floor ``1/(K+1)`` for a dead draft); 0.5.11+ logs
    ``(len-1)/(num_draft_tokens-1)`` (0.00 for a dead draft). ``num_draft_tokens`` / ``num_steps`` and an engine
    ``version`` (or a ``formula`` the log's own format pins) narrow the choice; a contradiction is reported, never
    raised. ``given_by`` says where ``num_draft_tokens`` came from ("option", or "server_args" when the log's own
    start-up line gave it).
    """
    pairs = list(pairs)
    v = _as_version(version)
    era = era_of("sglang", v) if v is not None else None
    forced = formula or (era.formula if era else None)
    steps_known = num_steps
    if not pairs:
        steps = steps_known or (num_draft_tokens - 1 if num_draft_tokens else None)
        return DraftInference(forced, num_draft_tokens, steps, given_by if num_draft_tokens else "unknown",
                              explanation="no accept rate in the log: formula and K cannot be read from it")
    common: set[tuple[str, int]] | None = None
    for length, rate in dict.fromkeys(pairs):  # distinct pairs, in order
        common = _candidates(length, rate) if common is None else common & _candidates(length, rate)
        if not common:
            break
    assert common is not None
    fitting = set(common)
    if forced:
        fitting = {c for c in fitting if c[0] == forced}
    allowed = _allowed_sizes(era, num_draft_tokens, num_steps)
    fitting = {c for c in fitting if not allowed[c[0]] or c[1] in allowed[c[0]]}
    candidates = tuple(sorted(fitting))
    formulas = {c[0] for c in fitting}
    counts = {c[1] for c in fitting}
    chosen = forced or (formulas.pop() if len(formulas) == 1 else None)
    length, rate = pairs[0]
    if num_draft_tokens:
        ndt, source = num_draft_tokens, given_by
    elif len(counts) == 1:
        ndt, source = next(iter(counts)), "log"
    else:
        ndt, source = None, "unknown"

    def steps_of(n: int | None) -> int | None:
        return steps_known or (n - 1 if n else None)

    if not fitting:
        why = (f"the {len(pairs)} len/rate pairs fit no single formula"
               + (f" with num_draft_tokens={num_draft_tokens}" if num_draft_tokens else "")
               + (f" under the {forced} formula" if forced else "")
               + " (K changed during the run, adaptive speculation, or a fork's own rate)")
        return DraftInference(chosen, ndt, steps_of(ndt), source, (), why)
    n_fit = next(iter(counts)) if len(counts) == 1 else None
    if chosen == "0.5.5" and n_fit:
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits the 0.5.3.post2-0.5.10.post1 formula "
                f"accept_len/(K+1) with K+1 = {n_fit} ({length:.2f}/{n_fit} = {length / n_fit:.2f}); "
                f"with topk 1 that is num_draft_tokens={n_fit}, K={n_fit - 1} draft steps")
    elif chosen == "0.5.11+" and n_fit:
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits the 0.5.11+ formula "
                f"(len-1)/(num_draft_tokens-1) with num_draft_tokens={n_fit} "
                f"(({length:.2f}-1)/{n_fit - 1} = {(length - 1) / (n_fit - 1):.2f})")
    elif chosen == "0.5.11+":
        expl = (f"accept rate {rate:.2f} with accept len {length:.2f} fits only the 0.5.11+ formula "
                "(len-1)/(num_draft_tokens-1); a dead draft logs 0.00 under it for any K, so K is not in the log")
    elif chosen == "0.5.5":
        expl = (f"the pairs fit only the 0.5.3.post2-0.5.10.post1 formula accept_len/(K+1); K+1 is one of "
                f"{sorted(counts)}")
    else:
        expl = ("the pairs fit both formulas: " + ", ".join(f"{f} with num_draft_tokens={n}" for f, n in candidates)
                + "; pass --engine sglang==VERSION or --num-draft-tokens to decide")
    return DraftInference(chosen, ndt, steps_of(ndt), source, candidates, expl, denominator=n_fit)


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
    """Lines of one read block, and whether any of them may need escape stripping or carries start-up facts."""

    lines: list[str | None]  # None: a line over MAX_LINE_BYTES (skipped, never parsed)
    escapes: bool
    startup: bool


def _block(lines: list[str | None], *texts: str) -> _Block:
    escapes = any("\x1b" in t or "\x9b" in t for t in texts)
    startup = any("speculative_num_" in t or "LLM engine (v" in t or "API server version" in t for t in texts)
    return _Block(lines, escapes, startup)


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
            raise LogFileError(path, f"cannot read log file ({exc.strerror or exc})") from None
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
            and (os.path.exists(path_or_text) or not _anchored(path_or_text))):
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

    def _add_vllm(self, values: dict[str, Any]) -> None:
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

    def add(self, number: int, fmt: str, values: dict[str, Any], line: str) -> None:
        self.count = count = self.count + 1
        self.formats[fmt] += 1
        if fmt == "sglang-lifetime":
            self.lifetime = values["accept_len"]
            self.lifetime_lines += 1
        else:
            get = values.get
            length, rate = get("accept_len"), get("accept_rate")
            if length is not None or rate is not None:
                self.lengths.append(_NAN if length is None else length)
                self.rates.append(_NAN if rate is None else rate)
                self.codes.append(_FORMAT_CODES[fmt] * 2 + (get("accepted_tokens") == 0))
                if length is not None and rate is not None and self.engine == "sglang":
                    if len(self.pairs) < MAX_PAIRS:
                        self.pairs[(length, rate)] = None
                    elif (length, rate) not in self.pairs:
                        self.pairs_capped = True
            if (tps := get("gen_tps")) is not None:
                self.tps.append(tps)
            if (running := get("running_reqs")) is not None:
                self.running.append(running)
            if self.engine == "vllm":  # only vLLM lines carry token counts and per-position rates
                self._add_vllm(values)
            if count <= FIELD_SCAN_LINES and len(self.unknown) < MAX_UNKNOWN_FIELDS:
                self.unknown |= _unknown_labels(self.engine, line)
        if (count - 1) % self.stride == 0:
            text, when = _timestamp(line)
            self.samples.append(LogSample(line=number, engine=self.engine, format=fmt, time=text,
                                          seconds=None if when is None else (when - _EPOCH).total_seconds(), **values))
            if len(self.samples) > MAX_SERIES:
                self.samples = self.samples[::2]
                self.stride *= 2


def _server_arg(line: str, name: str, found: dict[str, int], notes: list[str]) -> None:
    if name in found or not (m := _SERVER_ARGS[name].search(line)):
        return
    digits = m.group(1)
    if len(digits) <= 4 and 0 < int(digits) <= 1024:
        found[name] = int(digits)
    elif f"bad-{name}" not in found:
        found[f"bad-{name}"] = 0
        label = "speculative_num_draft_tokens" if name == "ndt" else "speculative_num_steps"
        shown = digits if len(digits) <= 12 else f"<{len(digits)} digits>"
        notes.append(f"{label}={shown} in the log's server arguments is not a believable size: ignored")


def parse_log(path_or_text: str | os.PathLike[str], engine: str | None = None,
              num_draft_tokens: int | None = None, baseline_tps: float | None = None,
              expected_accept_len: float | None = None) -> LogResult:
    """Parse an SGLang or vLLM server log into series, a summary and acceptance findings.

    ``engine`` (``sglang``, ``vllm``, optionally ``==VERSION``) reads the log as that engine (other engines'
    lines count as ignored) and, with a version, by that release's convention (vLLM 0.8.5's mean length without
    the bonus token, SGLang's accept-rate formula); a log that is the other engine's, or whose lines that release
    never prints, is read by its own format and the disagreement is reported. By default the engine with most
    acceptance lines wins, and a line whose meaning depends on the release is reported with every reading.
    ``num_draft_tokens`` is SGLang's ``--speculative-num-draft-tokens`` or vLLM's
    ``num_speculative_tokens``; ``baseline_tps`` the tok/s of the same server without speculation;
    ``expected_accept_len`` what the draft's training metrics promise (bonus token included).
    """
    name, version = _split_engine(engine)
    for label, value in (("num_draft_tokens", num_draft_tokens), ("baseline_tps", baseline_tps),
                         ("expected_accept_len", expected_accept_len)):
        if value is not None and not (0 < value < math.inf):
            raise UsageError(f"{label} must be positive, got {value}")
    source, lines = _lines(path_or_text)
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
    for block in lines:
        escapes, startup = block.escapes, block.startup
        for raw in block.lines:
            number += 1
            if raw is None or len(raw) > MAX_LINE_BYTES:
                overlong += 1
                if len(overlong_at) < MAX_EXAMPLES:
                    overlong_at.append(number)
                continue
            line = raw.removesuffix("\r")
            if escapes and ("\x1b" in line or "\x9b" in line):
                line = _ESCAPES.sub("", line)
            if first_time is None and number <= 10_000:  # times count from the first timestamped line of the file
                first_time = _timestamp(line)[1]
            if startup:
                if "speculative_num_" in line:  # SGLang prints its ServerArgs at start-up
                    _server_arg(line, "ndt", server_args, notes)
                    _server_arg(line, "steps", server_args, notes)
                if log_version is None and any(h in line for h in _VLLM_VERSION_HINTS) and (
                        vm := _VLLM_VERSION.search(line)):
                    log_version = vm.group(1)
            if not ("accept" in line or _SGLANG_DECODE in line or _VLLM_SPEC in line or _VLLM_STATS in line):
                ignored += 1  # the same test as _anchored, inline: most lines of a server log end here
                continue
            hit: tuple[str, str, dict[str, Any]] | None = None
            for engine_name in ENGINES:
                fmt, values, absurd = _PARSERS[engine_name](line)
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
    if name is not None and not collectors[name].count and any(collectors[e].count for e in ENGINES if e != name):
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
        "server_args" if ndt_from_log else "option", use_version, version_source, engine if mismatch else None,
        overlong, rejected_count, tuple(rejected), requested)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


_NOT_ACCEPTANCE = frozenset({"sglang-no-spec", "sglang-lifetime", "vllm-engine-stats"})


def _releases(eras: tuple[Era, ...]) -> str:
    """Release ranges as text, adjacent ranges merged (``sglang 0.5.4+``)."""
    groups: list[list[Era]] = []
    for era in eras:
        if groups and groups[-1][-1].after == era.first:
            groups[-1].append(era)
        else:
            groups.append([era])
    return ", ".join(replace(g[0], after=g[-1].after).releases for g in groups)


def _check_version(engine: str, version: Version, formats: Iterable[str], spec: str) -> str | None:
    """Why the log's line formats cannot come from ``engine==version`` (None when they can)."""
    era = era_of(engine, version)
    foreign = sorted(f for f in formats if f not in _NOT_ACCEPTANCE and f not in era.formats)
    if not foreign:
        return None
    printers = "; ".join(f"{f} lines are printed by {_releases(eras_printing(engine, f))}" for f in foreign)
    return (f"{spec} ({era.releases}) does not print this log's lines: {printers}. The log is read by its own "
            "format, not by that release's convention: check which release served it")


def _build_result(source: str, engine: str | None, col: _Collector, first_time: datetime | None, total: int,
                  ignored: int, unparsed_count: int, unparsed: tuple[tuple[int, str], ...], notes: list[str],
                  num_draft_tokens: int | None, num_steps: int | None, baseline_tps: float | None,
                  expected_accept_len: float | None, ndt_given_by: str, version: Version | None,
                  version_source: str | None, mismatched_spec: str | None, overlong: int, rejected_count: int,
                  rejected: tuple[tuple[int, str], ...], requested: str | None) -> LogResult:
    formats = col.formats
    disagreement = None
    if mismatched_spec is not None and engine is not None:
        disagreement = (f"--engine {clean_text(mismatched_spec)} names {requested}, but this log has no {requested} "
                        f"lines and {col.count} {engine} lines: read as {engine} by its own format")
    elif engine is not None and version is not None:
        spec = f"{engine}=={version}" + ("" if version_source == "option" else " (the version the log names)")
        disagreement = _check_version(engine, version, formats, spec)
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
    logged_means = [x for x, c in zip(col.lengths, col.codes)
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
                                       ndt_given_by, num_steps=num_steps)
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
    for length, rate, packed in zip(col.lengths, col.rates, col.codes):
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
    fix = fix_command("doctor", "DRAFT_CHECKPOINT", "--engine", spec, "--log", log)
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

"""What each SGLang and vLLM release prints in its acceptance log lines, and how to read one line.

Data: ``ERAS`` (release ranges, read from the wheels: ENGINE_VERSIONS.md §2c, §3c), the labels of every
field, and the accept-rate formulas. Code: label-based readers that are linear in the line (one regex pass
of disjoint classes, no re-slicing per label occurrence), and the inference of SGLang's formula and K from
(accept len, accept rate) pairs. ``logs`` streams a file through these and judges the result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from packaging.version import Version

from ..io.textsafe import clean_text

_MAX_K = 16
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
    "vllm-prometheus": "vLLM's Prometheus counters (/metrics: vllm:spec_decode_*), over the server's life",
}
FORMULA_TEXT = {
    "0.5.5": "accept_len / (K+1): len/(steps+1) in 0.5.3.post2-0.5.5.post2, len/num_draft_tokens in "
             "0.5.5.post3-0.5.10.post1",
    "0.5.11+": "(accept_len - 1) / (num_draft_tokens - 1), or / num_steps when num_draft_tokens is unset (0.5.11+)",
}


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
        source="vllm/v1/spec_decode/metrics.py 0.9.0:80,88-92 (0.10.1.1:81)"),
    Era("vllm", "0.10.2", None, frozenset({"vllm-throughput", "vllm-engine-stats"}),
        source="vllm/v1/spec_decode/metrics.py 0.10.2:90,97-104 (same format through 0.33.0)"),
)


def era_of(engine: str, version: Version) -> Era:
    """The release range of ``engine`` that ``version`` falls in. A pre-release or dev build counts as the release
    it leads to (``0.5.11rc1`` logs like 0.5.11); ``.postN`` is kept (0.5.3.post2 changed the line)."""
    release = Version(version.base_version + (f".post{version.post}" if version.post is not None else ""))
    eras = [e for e in ERAS if e.engine == engine]
    return next((e for e in eras if e.covers(release)), eras[0])


def eras_printing(engine: str, fmt: str) -> tuple[Era, ...]:
    """Every release range of ``engine`` whose lines have format ``fmt``."""
    return tuple(e for e in ERAS if e.engine == engine and fmt in e.formats)


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
SGLANG_DECODE = "Decode batch"
VLLM_SPEC = "SpecDecoding metrics"
VLLM_STATS = "Avg generation throughput"
SERVER_ARGS = {"ndt": re.compile(r"\bspeculative_num_draft_tokens=(\d+)"),
                "steps": re.compile(r"\bspeculative_num_steps=(\d+)"),
                "topk": re.compile(r"\bspeculative_eagle_topk=(\d+)")}
# SGLang 0.5.11 warns at start-up that a tree launch (topk > 1) falls back to spec v1 (server_args.py:3467,3477):
# "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 currently only supports topk = 1."
TREE_HINT = "spec v2 currently only supports topk = 1"
# vLLM names its release at start-up: "Initializing a V1 LLM engine (v0.8.5) with config" (v1/engine/core.py:58),
# "vLLM API server version 0.8.5" (entrypoints/openai/api_server.py:1043)
VLLM_VERSION_HINTS = ("LLM engine (v", "vLLM API server version ")
VLLM_VERSION = re.compile(r"(?:LLM engine \(v|vLLM API server version )"
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
_FIELD_ANCHOR = {"sglang": SGLANG_DECODE, "vllm": VLLM_SPEC + ":"}
# bounds of a believable value, per attribute (anything else is counted as rejected, never judged)
_BOUNDS = {"accept_len": (0.0, _MAX_ACCEPT_LEN), "accept_rate": (0.0, 1.0), "legacy_rate": (0.0, 1.0)}


def anchored(line: str) -> bool:
    """A line that may carry acceptance metrics (cheap substring tests only)."""
    return ("accept" in line or SGLANG_DECODE in line or VLLM_SPEC in line or VLLM_STATS in line)


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


# SGLang 0.5.x's decode line as it prints it: one match reads the four fields the general reader would, in a
# fraction of its time; used only where each label occurs once (so the general reader has no other occurrence to
# choose) and every value is in bounds, else the general reader decides
_SGLANG_FAST = re.compile(r"Decode batch, #running-req: (\d{1,9}), (?:[^,\n]{0,80}, ){0,16}?accept len: (\d{1,3}\.\d{1,4}), "
                          r"accept rate: (\d{1,3}\.\d{1,4}), (?:[^,\n]{0,80}, ){0,16}?"
                          r"gen throughput \(token/s\): (\d{1,9}\.\d{1,4})(?![\d.eE%])")


def _parse_sglang_fast(line: str, at: int) -> dict[str, Any] | None:
    m = _SGLANG_FAST.match(line, at)
    count = line.count
    if m is None or not (count("accept len") == count("accept rate") == count("#running-req")
                         == count("gen throughput") == 1):
        return None
    running, length, rate, tps = m.groups()
    accept_len, accept_rate, gen_tps = float(length), float(rate), float(tps)
    if accept_len > _MAX_ACCEPT_LEN or accept_rate > 1.0 or gen_tps > _MAX_RATE_VALUE:
        return None
    return {"running_reqs": int(running), "accept_len": accept_len, "accept_rate": accept_rate, "gen_tps": gen_tps}


def _parse_sglang(line: str) -> _Parsed:
    if "avg_spec_accept_length" in line and (m := _LIFETIME.search(line)):
        text = m.group(1)
        value = float(text) if len(text) <= _MAX_NUMBER_CHARS else math.inf
        if 0.0 <= value <= _MAX_ACCEPT_LEN:
            return "sglang-lifetime", {"accept_len": value}, []
        return None, {}, [("accept_len", text[:_MAX_NUMBER_CHARS])]
    at = line.find(SGLANG_DECODE)
    if at >= 0 and (fast := _parse_sglang_fast(line, at)) is not None:
        return "sglang-0.5", fast, []
    if at >= 0:
        message = line[at + len(SGLANG_DECODE):]
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
    at = line.find(VLLM_SPEC)
    if at >= 0:
        message = line[at + len(VLLM_SPEC):]
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
    at = line.find(VLLM_STATS)
    if at >= 0:
        values, rejected = _VLLM_ENGINE_FIELDS.read("," + line[at:])
        if "gen_tps" in values:
            return "vllm-engine-stats", values, rejected
        return None, values, rejected
    return None, {}, []


PARSERS = {"sglang": _parse_sglang, "vllm": _parse_vllm}


def unknown_labels(engine: str, line: str) -> set[str]:
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



# ---------------------------------------------------------------- timestamps

def timestamp(line: str) -> tuple[str | None, datetime | None]:
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
                       num_steps: int | None = None, formula: str | None = None,
                       tree: bool = False) -> DraftInference:
    """Intersect, over every SGLang (accept len, accept rate) pair, the formulas and K that fit it.

    0.5.3.post2-0.5.10.post1 log ``len/(K+1)`` (floor ``1/(K+1)`` for a dead draft); 0.5.11+ logs
    ``(len-1)/(num_draft_tokens-1)`` (0.00 for a dead draft). ``num_draft_tokens`` / ``num_steps`` and an engine
    ``version`` (or a ``formula`` the log's own format pins) narrow the choice; a contradiction is reported, never
    raised. ``given_by`` says where ``num_draft_tokens`` came from ("option", or "server_args" when the log's own
    start-up line gave it). ``tree``: the launch drafts a tree (topk > 1), so num_draft_tokens counts tree nodes
    and K is not num_draft_tokens - 1: without ``num_steps`` K is unknown rather than guessed.
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
        if steps_known or not n:
            return steps_known
        if tree and not (chosen == "0.5.5" and era is not None and era.denominator == "steps+1"):
            return None  # a tree's num_draft_tokens is not K + 1 (only 0.5.3.post2-0.5.5.post2 divide by steps+1)
        return n - 1

    if not fitting:
        why = (f"the {len(pairs)} len/rate pairs fit no single formula"
               + (f" with num_draft_tokens={num_draft_tokens}" if num_draft_tokens else "")
               + (f" under the {forced} formula" if forced else "")
               + " (K changed during the run, adaptive speculation, or a fork's own rate)")
        return DraftInference(chosen, ndt, steps_of(ndt), source, (), why)
    n_fit = next(iter(counts)) if len(counts) == 1 else None
    expl = _explanation(chosen, n_fit, counts, candidates, length, rate)
    if tree and steps_of(ndt) is None:
        expl += ("; the launch drafts a tree (topk > 1), so num_draft_tokens counts tree nodes, not K + 1: K is "
                 "not in the log (its server_args line gives speculative_num_steps)")
    return DraftInference(chosen, ndt, steps_of(ndt), source, candidates, expl, denominator=n_fit)


def _explanation(chosen: str | None, n_fit: int | None, counts: set[int], candidates: tuple[tuple[str, int], ...],
                 length: float, rate: float) -> str:
    """How the first (len, rate) pair fits the formula (and size) chosen, or every candidate when none is."""
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
    return expl


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


def check_version(engine: str, version: Version, formats: Iterable[str], spec: str) -> str | None:
    """Why the log's line formats cannot come from ``engine==version`` (None when they can)."""
    era = era_of(engine, version)
    foreign = sorted(f for f in formats if f not in _NOT_ACCEPTANCE and f not in era.formats)
    if not foreign:
        return None
    printers = "; ".join(f"{f} lines are printed by {_releases(eras_printing(engine, f))}" for f in foreign)
    return (f"{spec} ({era.releases}) does not print this log's lines: {printers}. The log is read by its own "
            "format, not by that release's convention: check which release served it")


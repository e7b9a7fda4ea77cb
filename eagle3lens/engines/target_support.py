"""Which target model classes capture EAGLE-3 aux hidden states, per engine release (data read from the wheels).

The tables in ``data/<engine>_capture.json`` are written by :mod:`.capture_scan` from every release's wheel:
per architecture, the releases that serve it natively and those whose class captures aux states
(SGLang: defines or inherits ``set_eagle3_layers_to_capture``; vLLM: derives ``SupportsEagle3``).

    capture_support("sglang", "0.5.9", "KimiK25ForConditionalGeneration").captures   # False
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from packaging.version import InvalidVersion, Version

FALLBACK = {"sglang": "TransformersForCausalLM", "vllm": "TransformersForCausalLM"}

# what start-up raises when aux capture is requested from a class without it, by the kind the scan recorded
_MISSING = {
    "AttributeError": "AttributeError: '{cls}' object has no attribute 'set_eagle3_layers_to_capture'",
    "ValueError": ("ValueError: Model {cls} does not implement set_eagle3_layers_to_capture, which EAGLE3 aux "
                   "hidden-state capture requires."),
    # vLLM before SupportsEagle3 (<= 0.10.x): the runner calls the method unconditionally (inferred from the classes)
    "AttributeError-vllm": "AttributeError: '{cls}' object has no attribute 'set_aux_hidden_state_layers'",
    "RuntimeError": ("RuntimeError: Model does not support EAGLE3 interface but aux_hidden_state_outputs was "
                     "requested"),
}
_UNSERVED = "ValueError: Model architectures ['{arch}'] are not supported for now."


@dataclass(frozen=True)
class CaptureSupport:
    """What one engine release does with a target architecture when EAGLE-3 aux capture is asked for."""

    engine: str
    release: str  # the release whose table row answered (the asked one, or the nearest older known one)
    exact: bool  # False: the asked release is not in the table (newer, or between known releases)
    architecture: str
    served_by: str | None  # the class that runs the target (the architecture, the Transformers fallback) or None
    captures: bool
    error: str | None  # the start-up error when capture is requested and ``served_by`` lacks it
    first_capture: str | None  # the first known release whose class for this architecture captures
    source: str  # the files the table was read from

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "release": self.release, "exact": self.exact,
                "architecture": self.architecture, "served_by": self.served_by, "captures": self.captures,
                "error": self.error, "first_capture": self.first_capture, "source": self.source}


@lru_cache(maxsize=None)
def capture_table(engine: str) -> dict[str, Any]:
    """The scanned table for ``engine`` (``sglang`` or ``vllm``)."""
    text = resources.files(__package__).joinpath("data", f"{engine}_capture.json").read_text(encoding="utf-8")
    return json.loads(text)


def known_releases(engine: str) -> tuple[str, ...]:
    return tuple(capture_table(engine)["releases"])


def _index(engine: str, version: str | None) -> tuple[int, bool]:
    releases = [Version(v) for v in known_releases(engine)]
    if version is None:
        return len(releases) - 1, False
    try:
        asked = Version(version)
    except InvalidVersion:
        return len(releases) - 1, False
    older = [i for i, v in enumerate(releases) if v <= asked]
    if not older:
        return 0, False
    return older[-1], releases[older[-1]] == asked


def _member(ranges: list[list[int]], i: int) -> bool:
    return any(a <= i <= b for a, b in ranges)


def capture_support(engine: str, version: str | None, architecture: str) -> CaptureSupport:
    """How ``engine==version`` runs a target of ``architecture`` when the launch asks for EAGLE-3 aux capture."""
    table = capture_table(engine)
    releases = table["releases"]
    i, exact = _index(engine, version)
    archs = table["architectures"]
    row = archs.get(architecture)
    fallback = FALLBACK.get(engine)
    kind = next(k for a, b, k in ((releases.index(a), releases.index(b), k) for a, b, k in table["missing_error"])
                if a <= i <= b)
    served_by: str | None
    if row is not None and _member(row["served"], i):
        served_by, captures = architecture, _member(row["capture"], i)
    elif fallback in archs and _member(archs[fallback]["served"], i):
        served_by, captures = fallback, _member(archs[fallback]["capture"], i)
    else:
        served_by, captures = None, False
    first = next((releases[a] for a, _ in (row or {}).get("capture", [])), None)
    if served_by is None:
        error = _UNSERVED.format(arch=architecture)
    elif not captures:
        error = _MISSING[kind].format(cls=served_by)
    else:
        error = None
    return CaptureSupport(engine, releases[i], exact, architecture, served_by, captures, error, first,
                          table["source"])

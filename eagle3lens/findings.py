"""Findings, severities and the Report that gathers them (JSON / terminal / HTML entry points)."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Iterable, Mapping

from ._version import __version__
from .catalogue import lookup


class Severity(str, enum.Enum):
    """How bad a finding is; ordered ``info < warning < critical``."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]

    @classmethod
    def parse(cls, value: "str | Severity") -> "Severity":
        try:
            return cls(value) if not isinstance(value, Severity) else value
        except ValueError:
            from .errors import UsageError

            raise UsageError(f"unknown severity {value!r}: use info, warning or critical") from None


@dataclass(frozen=True)
class Finding:
    """One observation with its proof. ``code`` is a stable ``area/slug`` listed in :mod:`eagle3lens.catalogue`."""

    code: str
    severity: Severity
    title: str
    detail: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str | None = None

    def __post_init__(self) -> None:
        lookup(self.code)  # ValueError for a code the catalogue does not list
        object.__setattr__(self, "severity", Severity.parse(self.severity))

    @property
    def area(self) -> str:
        return self.code.split("/", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "title": self.title,
            "detail": self.detail,
            "evidence": to_jsonable(dict(self.evidence)),
            "fix": self.fix,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        return cls(
            code=data["code"],
            severity=Severity(data["severity"]),
            title=data["title"],
            detail=data.get("detail", ""),
            evidence=data.get("evidence", {}),
            fix=data.get("fix"),
        )


def fix_command(*argv: "str | os.PathLike[str]") -> str:
    """A shell-safe ``eagle3lens ...`` line for a finding's ``fix`` (user paths quoted; ``OUT`` stays as is)."""
    return shlex.join(["eagle3lens", *map(str, argv)])


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first; stable within a severity."""
    return sorted(findings, key=lambda f: -f.severity.rank)


def worst(findings: Iterable[Finding]) -> Severity | None:
    """The highest severity among ``findings``, or None when there are none."""
    ranked = sort_findings(findings)
    return ranked[0].severity if ranked else None


_PLAIN_TYPES = frozenset({str, int, bool, type(None)})


def to_jsonable(value: Any) -> Any:
    """Convert numpy/torch scalars, tuples, paths and dataclasses into plain JSON values.

    Exact plain types, dicts and lists are checked first: a report of a million tensors is millions of calls."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): to_jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return repr(value)  # JSON has no NaN/Inf; keep them readable
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return to_jsonable(value.to_dict())
        return to_jsonable(dataclasses.asdict(value))
    if hasattr(value, "tolist"):  # numpy / torch
        return to_jsonable(value.tolist())
    if hasattr(value, "item"):
        return to_jsonable(value.item())
    return str(value)


@dataclass
class Report:
    """A checkpoint summary, the findings and each probe's result: what the CLI and notebooks show."""

    checkpoint: dict[str, Any]
    engine: str | None = None
    findings: list[Finding] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. "no target given: wiring not checked"
    judged_as: str | None = None  # without an engine: the loader the findings assume (doctor: the layout's trainer)

    def add(self, name: str, result: Any) -> None:
        """Attach a probe result and collect its findings (de-duplicated by code + title)."""
        self.results[name] = result
        seen = {(f.code, f.title) for f in self.findings}
        for finding in getattr(result, "findings", ()):
            if (finding.code, finding.title) not in seen:
                self.findings.append(finding)
                seen.add((finding.code, finding.title))

    @property
    def worst(self) -> Severity | None:
        return worst(self.findings)

    def fails(self, fail_on: Severity | str) -> bool:
        """True when a finding is at or above ``fail_on`` (the CLI's exit code 1)."""
        threshold = Severity.parse(fail_on)
        return any(f.severity.rank >= threshold.rank for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        results = {}
        for name, result in self.results.items():
            results[name] = to_jsonable(result.to_dict() if hasattr(result, "to_dict") else result)
        data: dict[str, Any] = {
            "tool": "eagle3lens",
            "version": __version__,
            "checkpoint": to_jsonable(self.checkpoint),
            "engine": self.engine,
            "findings": [f.to_dict() for f in self.findings],
            "results": results,
            "notes": list(self.notes),  # always present, possibly empty: a consumer need not test for it
        }
        if self.judged_as:
            data["judged_as"] = self.judged_as
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

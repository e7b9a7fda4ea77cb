"""What a walkthrough run returns, locally (:class:`NotebookRun`) or over SSH on several hosts (:class:`RemoteRun`):
plain data below the views that draw it (``plots/notebook``, ``plots/remote``); the runs live in ``notebook/``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ._version import __version__
from .findings import Finding, Severity, to_jsonable


@dataclass(frozen=True)
class NotebookRun:
    """The outputs of one headless walkthrough run."""

    notebook: Path
    executed: Path
    html: Path
    findings_json: Path
    parameters: Mapping[str, Any]
    findings: tuple[Finding, ...]
    seconds: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"notebook": self.notebook, "executed": self.executed, "html": self.html,
                            "findings_json": self.findings_json, "parameters": dict(self.parameters),
                            "seconds": round(self.seconds, 3)})


@dataclass(frozen=True)
class Preflight:
    """What the remote interpreter offers; ``problems`` stop the run, ``notes`` do not."""

    python: str = ""
    executable: str = ""
    eagle3lens: str | None = None
    papermill: str | None = None
    gpus: tuple[str, ...] = ()
    gpu_source: str | None = None
    workdir: str = ""
    free_bytes: int | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self.__dict__)


@dataclass(frozen=True)
class HostRun:
    """The outcome on one host. ``status``: ok, failed, timeout, interrupted, disconnected or refused."""

    host: str
    status: str
    out_dir: Path | None = None
    exit_code: int | None = None
    error: str | None = None
    last_cell: str | None = None
    notes: tuple[str, ...] = ()  # what the user should know even when the run went well (no GPU, no SFTP, ...)
    files: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    preflight: Preflight | None = None
    remote_dir: str | None = None
    remote_dir_removed: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "status": self.status, "exit_code": self.exit_code, "error": self.error,
            "last_cell": self.last_cell, "notes": list(self.notes), "out_dir": str(self.out_dir) if self.out_dir else None,
            "files": list(self.files), "findings": [f.to_dict() for f in self.findings],
            "preflight": self.preflight.to_dict() if self.preflight else None,
            "remote_dir": self.remote_dir, "remote_dir_removed": self.remote_dir_removed,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class RemoteRun:
    """One notebook run on several hosts, side by side."""

    notebook: str
    hosts: tuple[HostRun, ...]
    findings: tuple[Finding, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "findings", tuple(f for h in self.hosts for f in h.findings))

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def exit_code(self, fail_on: Severity | str = Severity.CRITICAL) -> int:
        """2 when a host did not run to the end, 1 when a fetched finding is at/above ``fail_on``, else 0."""
        if not self.ok:
            return 130 if any(h.status == "interrupted" for h in self.hosts) else 2
        bar = Severity.parse(fail_on).rank
        return 1 if any(f.severity.rank >= bar for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        return {"tool": "eagle3lens", "version": __version__, "notebook": self.notebook,
                "hosts": [h.to_dict() for h in self.hosts]}


__all__ = ["HostRun", "NotebookRun", "Preflight", "RemoteRun"]

"""Error types: every bad input becomes one of these, with a one-line message for people."""

from __future__ import annotations

from pathlib import Path


class Eagle3LensError(Exception):
    """Base class: the CLI prints ``str(error)`` on one line and exits 2."""


class CheckpointError(Eagle3LensError):
    """A checkpoint file or directory is missing, malformed or unsafe."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        shown = self.path if len(self.path) <= 400 else f"{self.path[:200]}…[{len(self.path) - 300} characters]…{self.path[-100:]}"
        super().__init__(f"{shown}: {problem}")


class UsageError(Eagle3LensError):
    """Arguments that do not make sense together (unknown engine, bad option value...)."""


class ConversionRefused(Eagle3LensError):
    """A conversion or repair that cannot be done faithfully (``--force`` overrides where allowed)."""

"""Progress reporting: probes call a ``Progress`` callback; the caller (CLI, notebook) decides how to show it.

A probe never decides whether a bar appears: it calls ``progress(done, total, label)`` when given one,
where ``label`` names the phase (each phase restarts ``done`` at 0). :class:`TqdmBars` is the callback
the CLI and notebooks pass; it draws one tqdm bar per phase.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Progress = Callable[[int, "int | None", str], None]

# a phase reading less than this is over before a bar would help (the CLI's and notebooks' default)
BAR_MIN_BYTES = 100_000_000


class Counter:
    """Adds up increments (from any thread) and reports the running total to ``progress``; inert without one."""

    def __init__(self, progress: Progress | None, total: int | None, label: str) -> None:
        self.progress, self.total, self.label = progress, total, label
        self.done = 0
        self._lock = threading.Lock()
        if progress is not None:
            progress(0, total, label)

    def add(self, n: int) -> None:
        if self.progress is None:
            return
        with self._lock:
            self.done += n
            self.progress(self.done, self.total, self.label)


class TqdmBars:
    """A ``Progress`` callback drawing one tqdm bar per phase; phases whose total is below ``min_total`` get none.

    ``unit="B"`` scales byte counts (KiB, MiB, ...). A bar closes when its phase reaches its total or the next
    phase starts.
    """

    def __init__(self, unit: str = "B", min_total: int = 0) -> None:
        self.unit, self.min_total = unit, min_total
        self._label: str | None = None
        self._bar: Any = None
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int | None, label: str) -> None:
        with self._lock:
            if label != self._label:
                self._close()
                self._label = label
                if total is None or total >= self.min_total:
                    from tqdm.auto import tqdm

                    scaled = self.unit == "B"
                    self._bar = tqdm(total=total, unit=self.unit, unit_scale=scaled,
                                     unit_divisor=1024 if scaled else 1000, desc=label)
            if self._bar is not None:
                self._bar.update(done - self._bar.n)
                if total is not None and done >= total:
                    self._close()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar = None


def bars(show: bool | None = True, min_total: int = BAR_MIN_BYTES) -> TqdmBars | None:
    """The CLI's and notebooks' choice in one place: byte bars for phases of ``min_total`` or more, None when
    ``show`` is False (e.g. ``--json`` or stderr not a terminal)."""
    return TqdmBars(min_total=min_total) if show else None

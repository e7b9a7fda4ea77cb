"""Read-ahead for a stream of byte ranges: the kernel is asked (``posix_fadvise`` WILLNEED, from a daemon thread)
to bring the ranges into the page cache in the order they will be read, at most ``ahead`` bytes in front of the
reader, so the disk works while the reader imports torch or reduces a chunk. A hint only: the bytes are still
read by the reader (nothing lands in this process's memory, so its RSS is unchanged); where the platform has no
``posix_fadvise`` it does nothing.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Iterable

STEP = 8 << 20  # bytes per hint
AHEAD_CAP = 1 << 30  # never more than this in front of the reader


def default_ahead() -> int:
    """How far ahead to read: a quarter of the memory available now, at most ``AHEAD_CAP``."""
    return min(AHEAD_CAP, available_memory() // 4)


def available_memory() -> int:
    """Bytes the kernel could give without swapping (``MemAvailable``); free pages elsewhere; 0 when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


class ReadAhead:
    """Hints ``ranges`` (path, begin, end), in order, to the kernel; ``consumed(n)`` tells it the reader took
    ``n`` more bytes. A context manager: leaving it stops the thread and waits for it (no hint after that)."""

    def __init__(self, ranges: Iterable[tuple[Path, int, int]], ahead: int | None = None) -> None:
        self.ranges = [(Path(p), b, e) for p, b, e in ranges if e > b]
        self.ahead = default_ahead() if ahead is None else ahead
        self.hinted = 0  # bytes hinted so far
        self._consumed = 0
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "ReadAhead":
        if hasattr(os, "posix_fadvise") and self.ranges and self.ahead > 0:
            self._thread = threading.Thread(target=self._run, name="eagle3lens-readahead", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def consumed(self, n: int) -> None:
        with self._cond:
            self._consumed += n
            self._cond.notify_all()

    def _wait_for_room(self) -> bool:
        """Block until the next hint stays within ``ahead`` of the reader; False once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self.hinted - self._consumed < self.ahead)
            return not self._closed

    def _run(self) -> None:
        for path, begin, end in self.ranges:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # the reader reports it
            try:
                for start in range(begin, end, STEP):
                    if not self._wait_for_room():
                        return
                    n = min(STEP, end - start)
                    os.posix_fadvise(fd, start, n, os.POSIX_FADV_WILLNEED)
                    with self._cond:
                        self.hinted += n
            except OSError:
                return  # a hint that fails costs the reader nothing
            finally:
                os.close(fd)

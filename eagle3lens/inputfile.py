"""Reading a text file a user points at: a regular file of bounded size, streamed line by line."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

from .errors import UsageError

MAX_INPUT_BYTES = 2 << 30  # 2 GiB


def open_text_lines(path: str | Path, what: str, *, max_line: int, max_bytes: int = MAX_INPUT_BYTES) -> Iterator[str]:
    """The lines of ``path`` (without line ends, each cut at ``max_line`` characters), after checking it is a
    regular file of at most ``max_bytes``; a FIFO, device or missing file is one ``UsageError`` line."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path}: {what} is not a regular file")
    if info.st_size > max_bytes:
        raise UsageError(f"{path}: {what} is larger than {max_bytes >> 20} MiB")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # swapped for a FIFO after the check
            raise UsageError(f"{path}: {what} is not a regular file")
        limit = max_line * 4  # bytes: a UTF-8 character is at most 4
        while raw := handle.readline(limit):
            if not raw.endswith(b"\n"):  # longer than the cap: keep its head, skip the rest in bounded reads
                while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
                    pass
            yield raw.decode("utf-8", "replace")[:max_line].rstrip("\r\n")

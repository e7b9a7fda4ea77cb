"""Opening a file a user points at: a regular file of bounded size, or one line naming the file and the problem.

A device node (``/dev/zero``), a FIFO or a socket where a file is expected would be read forever or block
forever, so the type is checked with ``os.stat`` before opening, the file is opened with ``O_NONBLOCK`` (a
FIFO swapped in after the check cannot block the open) and checked again on the open descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from ..errors import CheckpointError

GiB = 1 << 30
MiB = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size_text(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n % size else f"{n // size} {unit}"
    return f"{n} bytes"


def _check(path: Path, st: os.stat_result, max_bytes: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(path, f"is {_kind(st.st_mode)}, expected a {what} (a regular file)")
    if st.st_size > max_bytes:
        raise CheckpointError(path, f"{what} is {_size_text(st.st_size)}, over the {_size_text(max_bytes)} limit "
                                    "for this input")


def open_regular(path: str | os.PathLike[str], max_bytes: int, what: str) -> BinaryIO:
    """``path`` opened for binary reading once it is known to be a regular file of at most ``max_bytes``.

    Raises ``CheckpointError(path, problem)``: missing, unreadable, a directory, device, FIFO or socket, or too
    large. Callers that stream should still stop after ``max_bytes`` (a file may grow after the check).
    """
    p = Path(path)
    try:
        _check(p, os.stat(p), max_bytes, what)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CheckpointError(p, f"no such {what}") from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise CheckpointError(str(p)[:200] + "...", f"file name too long for a {what}") from None
        raise CheckpointError(p, f"cannot read {what} ({exc.strerror or exc})") from None
    try:
        _check(p, os.fstat(fd), max_bytes, what)  # the path may have been swapped since the stat above
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: plain blocking reads from here on
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` (see ``open_regular``)."""
    with open_regular(path, max_bytes, what) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise CheckpointError(Path(path), f"cannot read {what} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise CheckpointError(Path(path), f"{what} grew over the {_size_text(max_bytes)} limit while being read")
    return data


# -- containment: every file a checkpoint, target, tokenizer or dump directory names stays inside it ------------
def containment_roots(root: Path) -> tuple[Path, ...]:
    """The folders symlinks may lead into: the checkpoint directory, and for a real Hugging Face cache snapshot
    (``models--ORG--NAME/snapshots/REV``, whose files link to ``../../blobs``) that model's ``blobs`` folder.
    A ``snapshots/REV`` folder anywhere else widens nothing."""
    real = root.resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real, real.parent.parent / "blobs"
    return (real,)


def inside(root: Path, path: Path, what: str | None = None) -> Path:
    """Refuse ``path`` when it (or a symlink on the way) leads outside ``root``, or is not a regular file
    (a FIFO or device would hang or never end)."""
    real = path.resolve()
    if not any(real == r or r in real.parents for r in containment_roots(root)):
        raise CheckpointError(path, f"{what or 'file'} leads outside the checkpoint directory (to {real})")
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        raise CheckpointError(path, f"cannot read {what or 'file'} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(path, f"{what or 'file'} is not a regular file")
    return path

"""A private directory on an SSH host for one run: made there by the host's Python (``tempfile.mkdtemp``, mode
0700) and removed when the run ends, whatever happened, while the connection lives. Every word of both commands is ``shlex.quote``d."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import UsageError
from .ssh import SshConnection

_MKDTEMP = "import sys, tempfile; print(tempfile.mkdtemp(prefix=sys.argv[1]))"
_RMTREE = ("import os, shutil, sys; p, prefix = sys.argv[1:3]; "
           "shutil.rmtree(p) if os.path.isabs(p) and os.path.basename(p).startswith(prefix) else None")


@contextmanager
def private_dir(conn: SshConnection, python: str, prefix: str) -> Iterator[str]:
    """The absolute path of a fresh directory ``PREFIX...`` in the host's temp dir, removed on exit."""
    status, made = conn.run([shlex.quote(w) for w in (python, "-c", _MKDTEMP, prefix)], timeout=60)
    workdir = made.strip().splitlines()[-1] if status == 0 and made.strip() else ""
    if not workdir.startswith("/"):
        raise UsageError(f"{conn.target.label}: could not make a private directory there with {python} "
                         f"(exit {status})")
    try:
        yield workdir
    finally:
        if conn.alive:  # a lost connection leaves it (the run there stops on the closed connection)
            conn.run([shlex.quote(w) for w in (python, "-c", _RMTREE, workdir, prefix)], timeout=60)

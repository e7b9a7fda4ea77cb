"""Files on a remote host: SFTP when the host serves it, else bytes over an exec channel.

Some sshd configurations have no ``Subsystem sftp`` line (paramiko then fails with ``Channel closed.``).
The fallback runs one fixed Python program (:data:`EXEC_FILES`) with the remote interpreter the run
already uses; every argument is shell-quoted, file contents travel only over stdin/stdout.
"""

from __future__ import annotations

import json
import shlex
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import paramiko

from ..errors import RemoteError

# Runs on the host as ``PY -c EXEC_FILES OP PATH [MODE]``: put (stdin -> file), get (file -> stdout),
# mkdir, list (JSON [[name, lstat mode, size, mtime], ...]). An OSError exits 3 with its strerror on stderr.
EXEC_FILES = r"""
import json, os, shutil, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "put":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            shutil.copyfileobj(sys.stdin.buffer, fh, 1 << 16)
    elif op == "get":
        with open(path, "rb") as fh:
            shutil.copyfileobj(fh, sys.stdout.buffer, 1 << 16)
    elif op == "mkdir":
        os.mkdir(path, int(sys.argv[3], 8))
    elif op == "list":
        out = []
        for entry in os.scandir(path):
            st = entry.stat(follow_symlinks=False)
            out.append([entry.name, st.st_mode, st.st_size, int(st.st_mtime)])
        sys.stdout.write(json.dumps(out))
    else:
        sys.exit(4)
except OSError as exc:
    sys.stderr.write((exc.strerror or type(exc).__name__)[:200])
    sys.exit(3)
"""
TRANSFER_TIMEOUT = 600.0


@dataclass(frozen=True)
class Entry:
    """One directory entry, with the attributes of paramiko's ``SFTPAttributes`` that the runner reads."""

    filename: str
    st_mode: int
    st_size: int
    st_mtime: int


class RemoteFiles(Protocol):
    """The four file operations a remote run needs."""

    via: str

    def write(self, path: str, data: bytes) -> None: ...
    def mkdir(self, path: str, mode: int) -> None: ...
    def listdir_attr(self, path: str) -> list[Entry]: ...
    def get(self, path: str, local: Path) -> None: ...


class SftpFiles:
    via = "sftp"

    def __init__(self, sftp: paramiko.SFTPClient) -> None:
        self.sftp = sftp

    def write(self, path: str, data: bytes) -> None:
        with self.sftp.open(path, "wb") as fh:
            fh.chmod(0o600)
            fh.write(data)

    def mkdir(self, path: str, mode: int) -> None:
        self.sftp.mkdir(path, mode)

    def listdir_attr(self, path: str) -> list[Entry]:
        return [Entry(a.filename, a.st_mode or 0, a.st_size or 0, int(a.st_mtime or 0))
                for a in self.sftp.listdir_attr(path)]

    def get(self, path: str, local: Path) -> None:
        self.sftp.get(path, str(local))


class ExecFiles:
    """The same operations through ``PY -c EXEC_FILES`` on an exec channel (no SFTP on the host)."""

    via = "exec"

    def __init__(self, transport: paramiko.Transport, python_command: str, label: str, open_timeout: float) -> None:
        self.transport = transport
        self.prefix = python_command  # already shell-quoted: the remote interpreter, -c, EXEC_FILES
        self.label = label
        self.open_timeout = open_timeout  # seconds to wait for the host to open each exec channel

    def _exec(self, *args: str, stdin: bytes = b"", sink: Path | None = None) -> bytes:
        channel = self.transport.open_session(timeout=self.open_timeout)
        channel.settimeout(TRANSFER_TIMEOUT)
        channel.exec_command(" ".join([self.prefix, *(shlex.quote(a) for a in args)]))
        out = bytearray()
        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            # stdout to its end, then stderr: the program writes at most one short line there, far below the
            # channel window, so it never blocks on an undrained stderr
            with open(sink, "wb") if sink is not None else nullcontext() as fh:
                while chunk := channel.recv(1 << 16):
                    if fh is not None:
                        fh.write(chunk)
                    else:
                        out += chunk
            err = channel.recv_stderr(4096)
            status = channel.recv_exit_status()
        except TimeoutError:
            raise RemoteError(f"{self.label}: file transfer did not finish within {TRANSFER_TIMEOUT:.0f} s") from None
        finally:
            channel.close()
        if status != 0:
            problem = err.decode("utf-8", "replace").strip().splitlines()[:1] or [f"exit status {status}"]
            raise RemoteError(f"{self.label}: {args[0]} {args[1]!r} on the host failed: {problem[0]}")
        return bytes(out)

    def write(self, path: str, data: bytes) -> None:
        self._exec("put", path, stdin=data)

    def mkdir(self, path: str, mode: int) -> None:
        self._exec("mkdir", path, f"{mode:o}")

    def listdir_attr(self, path: str) -> list[Entry]:
        try:
            rows = json.loads(self._exec("list", path))
            return [Entry(str(n), int(m), int(s), int(t)) for n, m, s, t in rows]
        except (ValueError, TypeError) as exc:
            raise RemoteError(f"{self.label}: unreadable listing of {path!r} from the host") from exc

    def get(self, path: str, local: Path) -> None:
        self._exec("get", path, sink=local)


def open_files(client: paramiko.SSHClient, transport: paramiko.Transport, python_command: str,
               label: str, open_timeout: float) -> RemoteFiles:
    """SFTP when the host serves the subsystem, else the exec-channel fallback (``open_timeout``: seconds to
    wait for each of its channels to open)."""
    try:
        return SftpFiles(client.open_sftp())
    except (paramiko.SSHException, EOFError):  # "Channel closed.": no Subsystem sftp in sshd_config
        if not transport.is_active():
            raise RemoteError(f"{label}: connection lost while opening SFTP") from None
        return ExecFiles(transport, python_command, label, open_timeout)


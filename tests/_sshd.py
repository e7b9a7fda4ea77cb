"""A real OpenSSH server on 127.0.0.1 for the remote-run tests (Debian ``openssh-server``).

Everything lives in one temp directory: ed25519 host and client keys, ``authorized_keys``, an
``sshd_config`` on a free port, the daemon's pid file and log. The daemon runs in the foreground
(``sshd -D -e``) by absolute path and is stopped by its PID; a second instance is the ProxyJump bastion.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


def sshd_missing_reason() -> str | None:
    """Why the ssh tests cannot run here, or None when they can."""
    if not SSHD.exists():
        return "/usr/sbin/sshd not found: install Debian openssh-server (apt-get install openssh-server)"
    if os.geteuid() != 0:
        return "the loopback sshd tests log in as root and need to run as root"
    return None


def write_ed25519_key(path: Path) -> str:
    """Generate an ed25519 key pair ``path`` / ``path.pub`` (paramiko cannot generate ed25519); return the public line."""
    subprocess.run(["/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


def ssh_host(alias: str, port: int, key: Path, *extra: str) -> str:
    """One ssh_config ``Host`` block: root on 127.0.0.1:``port`` with only ``key``, then ``extra`` option lines."""
    lines = [f"Host {alias}", "    HostName 127.0.0.1", f"    Port {port}", "    User root", f"    IdentityFile {key}",
             "    IdentitiesOnly yes", *(f"    {e}" for e in extra)]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    """One running sshd; ``host_key_line`` is its known_hosts entry."""

    root: Path
    port: int
    host_key: Path
    process: subprocess.Popen | None = None
    extra_config: list[str] = field(default_factory=list)
    sftp: bool = True  # False: no `Subsystem sftp` line, as on hosts that disable SFTP

    @property
    def config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    @property
    def host_pattern(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def host_key_line(self, pattern: str | None = None) -> str:
        algo, b64 = (self.root / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{pattern or self.host_pattern} {algo} {b64}\n"

    def write_config(self) -> None:
        lines = [  # sshd keeps the first value it reads: extra lines go first to override the defaults
            *self.extra_config,
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            f"PidFile {self.root / 'sshd.pid'}",
            "UsePAM no",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            *(["Subsystem sftp internal-sftp"] if self.sftp else []),
            "AllowTcpForwarding yes",
            "LogLevel ERROR",
            "MaxStartups 50",
            "MaxSessions 50",
        ]
        self.config.write_text("\n".join(lines) + "\n")
        subprocess.run([str(SSHD), "-t", "-f", str(self.config)], check=True, capture_output=True)

    def start(self) -> "Sshd":
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege-separation dir (root)
        self.write_config()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.config)],
                                            stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd on port {self.port} did not come up: {self.log.read_text()[-2000:]}")

    def sshd_pids(self) -> list[int]:
        """The daemon and every sshd process it forked for a connection (those call setsid: no shared group)."""
        if self.process is None:
            return []
        parents: dict[int, int] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("sshd"):
                parents[int(pid)] = int(fields[1])
        tree, grew = {self.process.pid}, True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        return sorted(tree)

    def kill_everything(self) -> None:
        """SIGKILL the daemon and its session processes at once: live connections drop."""
        for pid in self.sshd_pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if self.process is not None:
            self.process.wait(5)

    def stop(self) -> None:
        """Stop the daemon and every session it forked."""
        if self.process is None:
            return
        for pid in reversed(self.sshd_pids()):
            try:
                os.kill(pid, 15)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None


def make_sshd(root: Path, client_public_lines: list[str], extra_config: list[str] | None = None,
              sftp: bool = True) -> Sshd:
    """Create (not start) an sshd under ``root`` accepting the given client public keys."""
    root.mkdir(parents=True, exist_ok=True)
    host_key = root / "ssh_host_ed25519_key"
    write_ed25519_key(host_key)
    (root / "authorized_keys").write_text("".join(line.strip() + "\n" for line in client_public_lines))
    return Sshd(root=root, port=free_port(), host_key=host_key, extra_config=extra_config or [], sftp=sftp)

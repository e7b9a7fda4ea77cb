"""SSH connections for remote runs: ``~/.ssh/config``, ProxyJump, agent/key auth, strict host keys.

``resolve_host`` turns what the user typed (``gpu1``, ``me@gpu1:2222``) into an :class:`SshTarget`
by applying the ssh config the way ``ssh`` does (HostName, User, Port, IdentityFile, IdentitiesOnly,
UserKnownHostsFile, ProxyJump). ``connect`` opens it with paramiko: host keys are checked against
known_hosts and unknown ones refused unless ``accept_new_host_key`` records them; a changed key is
always refused. Error messages never carry key paths or agent details.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

import paramiko

from ..errors import HostKeyError, RemoteError
from .files import RemoteFiles, open_files

DEFAULT_SSH_CONFIG = Path("~/.ssh/config")
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
CONNECT_TIMEOUT = 15.0
_MAX_JUMPS = 8


# what a transfer or channel that fails midway raises (for callers that must not import paramiko themselves)
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (OSError, paramiko.SSHException)


@dataclass(frozen=True)
class SshTarget:
    """Where and how to log in, after the ssh config has been applied."""

    label: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    known_hosts: Path | None = None
    via: "SshTarget | None" = None

    @property
    def address(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def host_key_name(self) -> str:
        """The known_hosts name: ``host`` on port 22, ``[host]:port`` otherwise (as OpenSSH writes it)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _split_destination(text: str) -> tuple[str | None, str, int | None]:
    """``[ssh://][user@]host[:port]`` -> (user, host, port)."""
    rest = text.removeprefix("ssh://")
    user, _, host = rest.rpartition("@")
    port: int | None = None
    if host.startswith("["):  # [v6addr]:port
        inner, _, tail = host[1:].partition("]")
        host, port_text = inner, tail.removeprefix(":")
    else:
        host, _, port_text = host.partition(":")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise RemoteError(f"{text}: bad port {port_text!r} (expected [user@]host[:port])")
        port = int(port_text)
    if not host:
        raise RemoteError(f"{text!r}: no host name (expected [user@]host[:port])")
    return user or None, host, port


def load_ssh_config(path: str | Path | None) -> paramiko.SSHConfig:
    """The ssh config at ``path`` (default ``~/.ssh/config``); an empty one when the default is absent."""
    chosen = Path(path or DEFAULT_SSH_CONFIG).expanduser()
    if not chosen.exists():
        if path is not None:
            raise RemoteError(f"{chosen}: ssh config file not found")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(chosen))
    except (OSError, paramiko.ConfigParseError) as exc:
        raise RemoteError(f"{chosen}: cannot read ssh config: {exc}") from None


def resolve_host(host: str, config: paramiko.SSHConfig, known_hosts: str | Path | None = None,
                 _depth: int = 0) -> SshTarget:
    """Apply ``config`` to ``host`` (``[user@]alias[:port]``) like ``ssh`` does, ProxyJump hops included."""
    if _depth > _MAX_JUMPS:
        raise RemoteError(f"{host}: ProxyJump chain longer than {_MAX_JUMPS} hops (a loop in the ssh config?)")
    user, alias, port = _split_destination(host)
    entry = config.lookup(alias)
    files = tuple(str(Path(f).expanduser()) for f in entry.get("identityfile", []))
    if known_hosts is None and entry.get("userknownhostsfile"):
        known_hosts = entry["userknownhostsfile"].split()[0]
    target = SshTarget(
        label=host,
        hostname=entry.get("hostname", alias),
        port=port or int(entry.get("port", 22)),
        user=user or entry.get("user") or getpass.getuser(),
        identity_files=files,
        identities_only=entry.get("identitiesonly", "no").lower() == "yes",
        known_hosts=Path(known_hosts or DEFAULT_KNOWN_HOSTS).expanduser(),
    )
    jump = entry.get("proxyjump", "none")
    if jump.lower() == "none":
        return target
    via = None
    for hop in jump.split(","):  # "a,b": reach a, then b through a, then the target through b
        hop_target = resolve_host(hop.strip(), config, known_hosts, _depth + 1)
        via = hop_target if via is None else _with_via(hop_target, via)
    return _with_via(target, via)


def _with_via(target: SshTarget, via: SshTarget | None) -> SshTarget:
    return replace(target, via=via)


_KNOWN_HOSTS_LOCK = threading.Lock()


class _RefuseUnknownHostKey(paramiko.RejectPolicy):
    """paramiko's RejectPolicy with a message that says what to check and how to opt in."""

    def __init__(self, target: SshTarget) -> None:
        self.target = target

    # paramiko's MissingHostKeyPolicy signature; refusing needs no client
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> NoReturn:  # noqa: ARG002
        raise HostKeyError(
            f"{self.target.label}: host key of {hostname} is not in known_hosts ({key.get_name()} "
            f"{key.fingerprint}); check the fingerprint with the host's owner, then rerun with "
            "--accept-new-host-key to record it")


class _RecordNewHostKey(paramiko.MissingHostKeyPolicy):
    """Explicit opt-in (``--accept-new-host-key``): trust a key seen for the first time and append it to known_hosts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        with _KNOWN_HOSTS_LOCK:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshConnection:
    """An open SSH session to one target, plus the bastion sessions it rides on."""

    def __init__(self, target: SshTarget, client: paramiko.SSHClient, hops: list[paramiko.SSHClient]) -> None:
        self.target = target
        self.client = client
        self._hops = hops
        self._files: RemoteFiles | None = None

    @property
    def transport(self) -> paramiko.Transport:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise RemoteError(f"{self.target.label}: connection to {self.target.hostname} was lost")
        return transport

    @property
    def alive(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def files(self, python_command: str) -> RemoteFiles:
        """File transfer to the host: SFTP, or the exec-channel fallback through ``python_command``
        (the shell-quoted ``PY -c EXEC_FILES``) when the host serves no SFTP subsystem."""
        if self._files is None:
            self._files = open_files(self.client, self.transport, python_command, self.target.label, CONNECT_TIMEOUT)
        return self._files

    def run(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run a short command (``argv`` already shell-quoted words joined by the caller); return (status, output)."""
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.set_combine_stderr(True)  # one stream: nothing left undrained (paramiko #109)
        channel.settimeout(timeout)
        channel.exec_command(" ".join(argv))
        chunks = []
        try:
            while chunk := channel.recv(65536):
                chunks.append(chunk)
        except socket.timeout:
            channel.close()
            raise RemoteError(f"{self.target.label}: remote command did not finish within {timeout:.0f} s") from None
        status = channel.recv_exit_status()
        channel.close()
        return status, b"".join(chunks).decode("utf-8", "replace")

    def close(self) -> None:
        sftp = getattr(self._files, "sftp", None)
        for closable in (sftp, self.client, *reversed(self._hops)):
            try:
                if closable is not None:
                    closable.close()
            except Exception:  # noqa: BLE001 - closing a dead connection must not mask the real error
                pass

    def __enter__(self) -> "SshConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(target: SshTarget, *, accept_new_host_key: bool = False,
            timeout: float = CONNECT_TIMEOUT) -> SshConnection:
    """Open ``target`` (through its ProxyJump hops), verifying host keys; raise :class:`RemoteError` on failure."""
    hops: list[paramiko.SSHClient] = []
    sock = None
    try:
        if target.via is not None:
            bastion = connect(target.via, accept_new_host_key=accept_new_host_key, timeout=timeout)
            hops.extend([*bastion._hops, bastion.client])
            try:
                sock = bastion.transport.open_channel(
                    "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout)
            except (paramiko.SSHException, OSError) as exc:
                raise RemoteError(f"{target.label}: bastion {target.via.label} cannot reach "
                                  f"{target.hostname}:{target.port}: {exc}") from None
        client = _open_client(target, sock, accept_new_host_key, timeout)
    except BaseException:
        for hop in reversed(hops):
            hop.close()
        raise
    transport = client.get_transport()
    if transport is None:  # typed Optional: None only before connect() or after close()
        client.close()
        for hop in reversed(hops):
            hop.close()
        raise RemoteError(f"{target.label}: the SSH session closed as it opened")
    transport.set_keepalive(5)
    return SshConnection(target, client, hops)


def _open_client(target: SshTarget, sock: paramiko.Channel | None, accept_new_host_key: bool,
                 timeout: float) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    known_hosts = target.known_hosts or DEFAULT_KNOWN_HOSTS.expanduser()
    if known_hosts.exists():
        try:
            client.load_host_keys(str(known_hosts))
        except (OSError, paramiko.SSHException) as exc:
            raise RemoteError(f"{known_hosts}: cannot read known_hosts: {exc}") from None
    client.set_missing_host_key_policy(
        _RecordNewHostKey(known_hosts) if accept_new_host_key else _RefuseUnknownHostKey(target))
    key_files = [f for f in target.identity_files if Path(f).is_file()]
    try:
        client.connect(
            target.hostname, port=target.port, username=target.user, sock=sock, timeout=timeout,
            # paramiko takes a list of key files too (SSHClient.connect's docstring); the stub says str only
            banner_timeout=timeout, auth_timeout=timeout, key_filename=key_files or None,  # type: ignore[arg-type]
            allow_agent=not target.identities_only, look_for_keys=not target.identities_only and not key_files,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyError(
            f"{target.label}: host key of {target.host_key_name} has CHANGED (known_hosts has "
            f"{exc.expected_key.get_name()} {exc.expected_key.fingerprint}, the server offers "
            f"{exc.key.get_name()} {exc.key.fingerprint}); refusing to connect. If the change is expected, "
            f"remove the old entry with: ssh-keygen -R '{target.host_key_name}'") from None
    except paramiko.AuthenticationException:
        client.close()
        tried = "the ssh agent and " if not target.identities_only else ""
        raise RemoteError(f"{target.label}: authentication as {target.user} on {target.hostname}:{target.port} "
                          f"was refused (tried {tried}{len(key_files) or 'the default'} key file(s))") from None
    except HostKeyError:
        client.close()
        raise
    except (paramiko.SSHException, OSError, EOFError) as exc:
        client.close()
        reason = str(exc) or type(exc).__name__
        raise RemoteError(f"{target.label}: cannot connect to {target.hostname}:{target.port}: {reason}") from None
    return client

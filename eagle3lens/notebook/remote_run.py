"""Run a walkthrough notebook on GPU hosts over SSH and bring the results home.

For each host (in parallel): connect (``remote_ssh``), pre-flight the remote interpreter
(Python, eagle3lens, papermill, GPU, free disk) while creating a private run directory there,
upload the notebook, a parameters JSON file and the supervisor script by SFTP (``remote_files``: over the
exec channel when the host serves no SFTP), then run
``PY remote_supervisor.py RUN_DIR TIMEOUT -- PY -m eagle3lens notebook NB --params-file P --out RUN_DIR/out``.
Every word of that line is ``shlex.quote``d and parameters only travel in the file. Progress lines
stream to the caller; the executed notebook is fetched as it grows, and everything in the remote
``out`` directory is fetched at the end into ``OUT/<host>/``. On timeout, interrupt or a dropped
connection the remote process group is killed and the last cell that ran is named. The run
directory is removed afterwards. Nothing about keys, agents or local config paths is written out.
"""

from __future__ import annotations

import json
import re
import select
import shlex
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .._version import __version__
from ..errors import RemoteError, UsageError
from ..findings import Finding
from ..run_results import HostRun, Preflight, RemoteRun
from .runner import cell_failed, cell_label, code_cells, first_line, is_injected, papermill_state, resolve
from ..remote.files import EXEC_FILES, RemoteFiles
from ..remote.ssh import SshConnection, SshTarget, connect, load_ssh_config, resolve_host
from ..remote.supervisor import EXIT_KILLED, EXIT_TIMEOUT
from ..io.safewrite import replacing, write_text_atomic
from ..io.textsafe import clip, printable

StageProgress = Callable[[str, str], None]  # (stage, message): a remote run reports stages, not counts

MIN_FREE_BYTES = 200 * 1024 * 1024
REFRESH_S = 2.0  # how often a growing executed notebook is fetched during the run
LOCAL_GRACE_S = 15.0  # the remote supervisor enforces --timeout; the local side steps in after this grace
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TQDM = re.compile(r"Executing:.*?\|\s*(\d+)/(\d+)\s*\[")

# Programs shipped to the remote host (standard library only), read from the installed package:
# the pre-flight check runs as ``PY -c PREFLIGHT WORKDIR MIN_FREE``, the supervisor is uploaded into the run dir.
SUPERVISOR_NAME = "remote_supervisor.py"


def _shipped(name: str) -> bytes:
    """The bytes of a program shipped inside this package (``preflight.py``, ``supervisor.py``)."""
    return resources.files("eagle3lens.remote").joinpath(name).read_bytes()


PREFLIGHT = _shipped("preflight.py").decode("utf-8")


def _q(word: str) -> str:
    """Quote one word for the remote shell; a leading ``~/`` still means the remote home."""
    if word.startswith("~/"):
        return '"$HOME"/' + shlex.quote(word[2:])
    return shlex.quote(word)


def _host_dir_name(host: str) -> str:
    """The local output folder of one ``--host`` value (``ssh://me@gpu1:2222`` -> ``me@gpu1_2222``)."""
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", host.removeprefix("ssh://")).strip(".") or "host"


class _HostWorker:
    """Everything that happens for one host, in one thread."""

    def __init__(self, host: str, *, notebook: Path, params_json: str, out_dir: Path, timeout: float | None,
                 remote_python: str, remote_workdir: str | None, known_hosts: str | Path | None,
                 ssh_config: str | Path | None, accept_new_host_key: bool, progress: StageProgress | None,
                 cancel: threading.Event) -> None:
        self.host = host
        self.notebook = notebook
        self.params_json = params_json
        self.out = out_dir
        self.timeout = timeout
        self.python = remote_python
        self.workdir = remote_workdir or ""
        self.known_hosts = known_hosts
        self.ssh_config = ssh_config
        self.accept_new = accept_new_host_key
        self.progress = progress
        self.cancel = cancel
        self.conn: SshConnection | None = None
        self.target: SshTarget | None = None
        self.run_dir: str | None = None  # the private directory on the host, once created
        self.cleaned = False
        self.fetched: dict[str, tuple[int, int]] = {}
        self.cell: tuple[int, int] | None = None  # (n, N) from the remote progress bar
        self.remote_error: str | None = None  # the remote command's own one-line error, if it printed one
        self.said_no_sftp = False
        self.notes: list[str] = []

    # -- plumbing ------------------------------------------------------------------------------
    def say(self, line: str) -> None:
        """A progress line (shown while the run goes; the caller decides where, if anywhere)."""
        if self.progress is not None:
            self.progress(self.host, line)

    def note(self, line: str) -> None:
        """A note kept in the result (its view and JSON), and shown as progress meanwhile."""
        self.notes.append(line)
        self.say(f"note: {line}")

    def remote(self, *words: str) -> str:
        return " ".join(_q(w) for w in words)

    @property
    def ssh(self) -> SshConnection:
        """The open connection (a RemoteError when there is none)."""
        if self.conn is None:
            raise RemoteError(f"{self.host}: not connected")
        return self.conn

    @property
    def peer(self) -> SshTarget:
        """The resolved host (set before anything connects)."""
        if self.target is None:
            raise RemoteError(f"{self.host}: host not resolved")
        return self.target

    @property
    def rd(self) -> str:
        """The private run directory on the host (made by the pre-flight check)."""
        if self.run_dir is None:
            raise RemoteError(f"{self.host}: no run directory on the host")
        return self.run_dir

    # -- steps ---------------------------------------------------------------------------------
    def run(self) -> HostRun:
        started = time.monotonic()
        preflight = None
        try:
            self.target = resolve_host(self.host, load_ssh_config(self.ssh_config), self.known_hosts)
            self.conn = connect(self.target, accept_new_host_key=self.accept_new)
            preflight = self.preflight()
            if preflight.problems:
                self.cleanup()
                return self.result("refused", started, preflight=preflight, error="; ".join(preflight.problems))
            for note in preflight.notes:
                self.note(note)
            self.upload()
            status, code, error = self.execute()
        except RemoteError as exc:
            self.cleanup()
            return self.result("refused" if self.run_dir is None else "disconnected", started,
                               preflight=preflight, error=str(exc))
        self.fetch_all()
        cell_text, cell_error = self.read_back()
        if cell_error and status in ("ok", "failed"):
            status, error = "failed", cell_error
        elif status != "ok" and cell_text:
            error = f"{error}; last cell that ran: {cell_text}"
        self.cleanup()
        return self.result(status, started, preflight=preflight, error=error, exit_code=code, last_cell=cell_text)

    def preflight(self) -> Preflight:
        code, output = self.ssh.run(
            [self.remote(self.python, "-c", PREFLIGHT, self.workdir, str(MIN_FREE_BYTES))], timeout=120)
        where = f"{self.host}: remote python {self.python!r}"
        if code == 127:
            return Preflight(problems=(f"{where} not found: pass --remote-python PATH (a python or venv/bin/python)",))
        last = output.strip().splitlines()[-1:] or ["no output"]
        try:
            info = json.loads(last[0])
        except (ValueError, RecursionError):
            return Preflight(problems=(f"{where} failed the pre-flight check (exit {code}): "
                                       f"{printable(clip(last[0], 200))}",))
        unreadable = _unreadable_preflight(info)
        if unreadable:
            return Preflight(problems=(f"{where}: its pre-flight record {unreadable}",))
        problems, notes = [], []
        pip = f"{info['executable']} -m pip install 'eagle3lens[notebook,remote]=={__version__}'"
        if not info["eagle3lens"]:
            problems.append(f"{self.host}: eagle3lens is not installed for {info['executable']}: {pip}")
        elif info["eagle3lens"] != __version__:
            notes.append(f"remote eagle3lens {info['eagle3lens']} differs from local {__version__}; "
                         f"results may differ ({pip})")
        if not info["papermill"]:
            problems.append(f"{self.host}: papermill is not installed for {info['executable']}: {pip}")
        free = info.get("free_bytes")
        if free is None:
            problems.append(f"{self.host}: work dir {info['workdir']} is not usable: {info.get('workdir_error')}")
        elif free < MIN_FREE_BYTES:
            problems.append(f"{self.host}: only {free / 2**20:.0f} MiB free in {info['workdir']} "
                            f"(need {MIN_FREE_BYTES / 2**20:.0f} MiB): pass --remote-workdir DIR")
        if not info["gpu"]:
            notes.append(f"no GPU found on {self.host} (nvidia-smi / torch.cuda); the notebook runs on CPU")
        self.run_dir = info.get("run_dir")
        return Preflight(python=info["python"], executable=info["executable"], eagle3lens=info["eagle3lens"],
                         papermill=info["papermill"], gpus=tuple(info["gpu"] or ()), gpu_source=info["gpu_source"],
                         workdir=info["workdir"], free_bytes=free, problems=tuple(problems), notes=tuple(notes))

    def files(self) -> RemoteFiles:
        """SFTP, or bytes over an exec channel of the remote python when the host has no SFTP subsystem."""
        files = self.ssh.files(self.remote(self.python, "-c", EXEC_FILES))
        if files.via != "sftp" and not self.said_no_sftp:
            self.said_no_sftp = True
            self.note("the host serves no SFTP (no `Subsystem sftp` in its sshd_config); "
                     "files go over the exec channel")
        return files

    def upload(self) -> None:
        files = self.files()
        for name, data in ((self.notebook_name, self.notebook.read_bytes()),
                           ("params.json", self.params_json.encode()),
                           (SUPERVISOR_NAME, _shipped("supervisor.py"))):
            files.write(f"{self.run_dir}/{name}", data)
        files.mkdir(f"{self.run_dir}/out", 0o700)

    @property
    def notebook_name(self) -> str:
        return _safe_name(self.notebook.name) if self.notebook.suffix == ".ipynb" else "notebook.ipynb"

    def execute(self) -> tuple[str, int | None, str | None]:
        """Run the notebook; return (status, exit code, error)."""
        if self.cancel.is_set():
            return "interrupted", None, "interrupted before the notebook started"
        rd = self.rd
        command = self.remote(
            self.python, "-u", f"{rd}/{SUPERVISOR_NAME}", rd, f"{self.timeout or 0:g}", "--",
            self.python, "-m", "eagle3lens", "notebook", f"{rd}/{self.notebook_name}",
            "--params-file", f"{rd}/params.json", "--out", f"{rd}/out", "--json")
        channel = self.ssh.transport.open_session()
        channel.exec_command(command)
        self.say(f"running {self.notebook.name} on {self.peer.hostname} in {rd}")
        deadline = time.monotonic() + self.timeout + LOCAL_GRACE_S if self.timeout else None
        next_refresh = time.monotonic() + REFRESH_S
        pending = ""
        while True:
            # stdout carries the remote JSON report (the results are fetched as files instead);
            # stderr carries progress and errors. Both are drained, or the remote side blocks (paramiko #109).
            readable, _, _ = select.select([channel], [], [], 0.2)
            if readable:
                while channel.recv_ready():
                    channel.recv(65536)
                while channel.recv_stderr_ready():
                    pending = self.lines(pending + channel.recv_stderr(65536).decode("utf-8", "replace"))
            if channel.eof_received and not channel.recv_ready() and not channel.recv_stderr_ready():
                break  # the command ended or the connection went away
            if channel.exit_status_ready() or channel.closed:
                break
            if not self.ssh.alive:
                break
            if self.cancel.is_set():
                self.kill(channel)
                return "interrupted", None, "interrupted"
            if deadline is not None and time.monotonic() > deadline:
                self.kill(channel)
                return "timeout", EXIT_TIMEOUT, f"timed out after {self.timeout:g} s"
            if time.monotonic() >= next_refresh:
                self.fetch_partial()
                next_refresh = time.monotonic() + REFRESH_S
        self.lines(pending + "\n")
        if not channel.exit_status_ready() and not self.ssh.alive:
            return self.after_drop()
        code = channel.recv_exit_status()
        channel.close()
        if code == EXIT_TIMEOUT:
            return "timeout", code, f"timed out after {self.timeout:g} s; remote process group killed"
        if code == EXIT_KILLED:
            return "interrupted", code, "stopped on the remote host"
        if code == -1 or not self.ssh.alive:
            return self.after_drop()
        if code in (0, 1):
            return "ok", code, None
        return "failed", code, self.remote_error or f"remote eagle3lens notebook exited with status {code}"

    def lines(self, text: str) -> str:
        """Pass complete lines (``\\r`` or ``\\n`` ended) to the progress callback; return the unfinished tail."""
        *complete, tail = re.split(r"[\r\n]", text)
        for raw in complete:
            line = _ANSI.sub("", raw).strip()
            if not line:
                continue
            match = _TQDM.search(line)
            if match:
                cell = (int(match.group(1)), int(match.group(2)))
                if cell != self.cell and cell[0]:
                    self.cell = cell
                    self.say(f"cell {cell[0]} of {cell[1]}")
            elif line.startswith("eagle3lens: error: "):
                self.remote_error = line.removeprefix("eagle3lens: error: ")  # summarised in the result, not echoed
            else:
                self.say(line)
        return tail

    def kill(self, channel: Any = None) -> None:
        """Stop the remote run from a second session, then drop our end (the supervisor also sees EOF)."""
        try:
            self.ssh.run([self.remote(self.python, f"{self.rd}/{SUPERVISOR_NAME}", "kill", self.rd)],
                          timeout=30)
        except (RemoteError, OSError):
            pass
        if channel is not None:
            channel.close()

    def after_drop(self) -> tuple[str, int | None, str | None]:
        """The connection went away mid-run: try once to reconnect, stop the run and fetch; else keep what we have."""
        where = f" during cell {self.cell[0]} of {self.cell[1]}" if self.cell else ""
        message = f"connection to {self.peer.hostname}:{self.peer.port} lost{where}"
        self.ssh.close()
        try:
            self.conn = connect(self.peer, accept_new_host_key=False, timeout=5)
        except RemoteError:
            self.conn = None
            kept = f"kept {len(self.fetched)} file(s) fetched before the drop" if self.fetched else "nothing fetched"
            return "disconnected", None, (f"{message}; {kept}; the remote supervisor stops the run when the "
                                          f"connection closes; {self.run_dir} may remain on the host")
        self.kill()
        return "disconnected", None, f"{message}; reconnected, stopped the run and fetched its results"

    # -- results -------------------------------------------------------------------------------
    def _remote_files(self, top: str) -> list[tuple[str, Any]]:
        found, stack = [], [(top, "")]
        files = self.files()
        while stack:
            path, rel = stack.pop()
            for entry in files.listdir_attr(path):
                child_rel = f"{rel}{_safe_name(entry.filename)}"
                if stat.S_ISDIR(entry.st_mode or 0) and rel.count("/") < 4:
                    stack.append((f"{path}/{entry.filename}", child_rel + "/"))
                elif stat.S_ISREG(entry.st_mode or 0):
                    found.append((child_rel, entry))
        return found

    def _fetch(self, rel: str, entry: Any, force: bool = False) -> None:
        signature = (entry.st_size or 0, entry.st_mtime or 0)  # SFTP mtimes are whole seconds: a hint only
        if self.fetched.get(rel) == signature and not force:
            return
        local = local_path(self.out, rel)
        local.parent.mkdir(parents=True, exist_ok=True)
        with replacing(local) as part:
            self.files().get(f"{self.run_dir}/out/{rel}", part)
        self.fetched[rel] = signature

    def fetch_partial(self) -> None:
        """Fetch executed notebooks that grew since the last look, so a dropped connection keeps them."""
        try:
            for rel, entry in self._remote_files(f"{self.run_dir}/out"):
                if rel.endswith(".ipynb"):
                    self._fetch(rel, entry)
        except (OSError, EOFError, RemoteError):
            pass  # the connection is going away (the main loop notices), or an unsafe name (fetch_all says so)

    def fetch_all(self) -> None:
        if self.conn is None or not self.conn.alive or self.run_dir is None:
            return
        try:
            for rel, entry in self._remote_files(f"{self.run_dir}/out"):
                self._fetch(rel, entry, force=True)
        except (OSError, EOFError, RemoteError, UsageError) as exc:  # UsageError: a local file there is a FIFO...
            self.note(f"fetch stopped: {exc}")

    def read_back(self) -> tuple[str | None, str | None]:
        """(last cell that ran, error of a failed cell) from the fetched executed notebook, else the progress bar."""
        for rel in sorted(self.fetched):
            if rel.endswith(".ipynb"):
                described = describe_progress(self.out / rel)
                if described is not None:
                    return described
        if self.cell:
            return f"cell {self.cell[0]} of {self.cell[1]} done (progress bar; no executed notebook was saved)", None
        return None, None

    def cleanup(self) -> None:
        if self.conn is not None and self.conn.alive and self.run_dir is not None and not self.cleaned:
            try:
                self.conn.run([self.remote("rm", "-rf", "--", self.run_dir)], timeout=60)
                self.cleaned = True
            except (RemoteError, OSError):
                pass
        if self.conn is not None:
            self.conn.close()

    def result(self, status: str, started: float, **kw: Any) -> HostRun:
        files = tuple(sorted(self.fetched))
        findings = _read_findings(self.out, files)
        return HostRun(host=self.host, status=status, out_dir=self.out, files=files, findings=findings,
                       notes=tuple(self.notes),
                       remote_dir=self.run_dir, remote_dir_removed=self.cleaned,
                       seconds=time.monotonic() - started, **kw)


# the pre-flight record's fields (remote/preflight.py) and the types each may take
_PREFLIGHT_FIELDS: dict[str, tuple[type, ...]] = {
    "python": (str,), "executable": (str,), "workdir": (str,), "eagle3lens": (str, type(None)),
    "papermill": (str, type(None)), "gpu": (list, type(None)), "gpu_source": (str, type(None)),
    "free_bytes": (int, type(None)), "run_dir": (str, type(None)), "workdir_error": (str, type(None))}
_PREFLIGHT_OPTIONAL = ("run_dir", "workdir_error")


def _unreadable_preflight(info: Any) -> str | None:
    """What is wrong with a pre-flight record read back from a host (None when it is as preflight.py writes it)."""
    if not isinstance(info, dict):
        return f"is a JSON {type(info).__name__}, not an object"
    for key, types in _PREFLIGHT_FIELDS.items():
        if key not in info:
            if key in _PREFLIGHT_OPTIONAL:
                continue
            return f"lacks {key!r}"
        value = info[key]
        if not isinstance(value, types) or isinstance(value, bool) or (
                isinstance(value, list) and not all(isinstance(g, str) for g in value)):
            want = " or ".join("null" if t is type(None) else "a list of names" if t is list else t.__name__
                               for t in types)
            return f"has {key!r} = {printable(clip(json.dumps(value), 80))}, not {want}"
    return None


def _safe_name(name: str) -> str:
    """A file name from the host's SFTP listing, refused when it could climb out of the local folder."""
    if not name or "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise RemoteError(f"the host listed a file named {name!r}, which could lead outside the output folder")
    return name


def local_path(out: Path, rel: str) -> Path:
    """Where the remote file ``rel`` (``/``-separated names from the host) is written under ``out``;
    RemoteError when any name is unsafe or the path (symlinks resolved) would land outside ``out``."""
    local = out.joinpath(*(_safe_name(part) for part in rel.split("/")))
    root = out.resolve()
    if root not in local.resolve().parents:
        raise RemoteError(f"remote file {rel!r} would be written outside {out}")
    return local


def describe_progress(notebook: Path) -> tuple[str, str | None] | None:
    """Name the last cell papermill ran in an executed notebook and the error of a failed cell, if any."""
    try:
        cells = code_cells(json.loads(notebook.read_text()))
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    ran = [c for c in cells if not is_injected(c)
           and papermill_state(c).get("status") in ("completed", "failed", "running")]
    if not ran:
        return f"no cell ran (0 of {sum(not is_injected(c) for c in cells)} code cells)", None
    cell = ran[-1]
    label = cell_label(cells, cell) + (" (running)" if papermill_state(cell)["status"] == "running" else "")
    if first_line(cell):
        label += f" `{first_line(cell)[:60]}`"
    failed = next((c for c in cells if cell_failed(c)), None)
    if failed is None:
        return label, None
    errs = [o for o in failed.get("outputs", []) if o.get("output_type") == "error"]
    what = f"{errs[0].get('ename')}: {errs[0].get('evalue')}" if errs else "an exception"
    return label, f"{cell_label(cells, failed)} `{first_line(failed)[:60]}` failed: {what}"


def _read_findings(out: Path, files: Sequence[str]) -> tuple[Finding, ...]:
    for rel in sorted(files, key=lambda r: ("findings" not in r, r)):
        if not rel.endswith(".json") or rel == "remote.json":
            continue
        try:
            data = json.loads((out / rel).read_text())
            return tuple(Finding.from_dict(f) for f in data["findings"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return ()


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text


def run_remote(notebook: str | Path, parameters: Mapping[str, Any] | None, hosts: str | Sequence[str],
               out_dir: str | Path, *, timeout: float | None = None, remote_python: str = "python3",
               remote_workdir: str | None = None, known_hosts: str | Path | None = None,
               ssh_config: str | Path | None = None, accept_new_host_key: bool = False,
               progress: StageProgress | None = None, cancel: threading.Event | None = None) -> RemoteRun:
    """Run ``notebook`` with ``parameters`` on every host in parallel; results go to ``out_dir/<host>/``.

    Never raises for a host that cannot be reached or fails: each outcome is a :class:`HostRun`.
    ``progress(host, line)`` receives progress lines. Ctrl-C (or setting ``cancel``) stops every
    remote run, fetches what exists and returns with status ``interrupted``.
    """
    path = resolve(notebook)
    host_list = [hosts] if isinstance(hosts, str) else list(hosts)
    if not host_list:
        raise UsageError("no --host given")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")
    try:
        params_json = json.dumps(dict(parameters or {}), default=str)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"parameters are not JSON-able: {exc}") from None
    out = Path(out_dir)
    names = [_host_dir_name(h) for h in host_list]
    if len(set(names)) != len(names):
        raise UsageError(f"--host given twice: {', '.join(host_list)}")
    cancel = cancel or threading.Event()
    workers = [_HostWorker(h, notebook=path, params_json=params_json, out_dir=out / n, timeout=timeout,
                           remote_python=remote_python, remote_workdir=remote_workdir, known_hosts=known_hosts,
                           ssh_config=ssh_config, accept_new_host_key=accept_new_host_key, progress=progress,
                           cancel=cancel) for h, n in zip(host_list, names, strict=True)]
    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="eagle3lens-remote") as pool:
        futures = [pool.submit(_guarded, w) for w in workers]
        while True:
            try:
                done, pending = wait(futures, timeout=0.2)
                if not pending:
                    break
            except KeyboardInterrupt:
                cancel.set()
    results = tuple(f.result() for f in futures)
    secrets = [str(Path(p).expanduser()) for p in (known_hosts, ssh_config) if p]
    secrets += [f for w in workers if w.target for t in _chain(w.target) for f in t.identity_files]
    for run in results:
        _write_manifest(run, path.name, secrets)
    return RemoteRun(notebook=path.name, hosts=results)


def _guarded(worker: _HostWorker) -> HostRun:
    started = time.monotonic()
    try:
        return worker.run()
    except Exception as exc:  # noqa: BLE001 - one host's surprise must not lose the other hosts' results
        worker.cleanup()
        return worker.result("failed", started, error=f"{worker.host}: {type(exc).__name__}: {exc}")


def _chain(target: SshTarget) -> list[SshTarget]:
    chain = []
    hop: SshTarget | None = target
    while hop is not None:
        chain.append(hop)
        hop = hop.via
    return chain


def _write_manifest(run: HostRun, notebook: str, secrets: Sequence[str]) -> None:
    """``OUT/<host>/remote.json``: how the run went, with local paths to keys and configs redacted."""
    if run.out_dir is None:
        return
    run.out_dir.mkdir(parents=True, exist_ok=True)
    data = {"tool": "eagle3lens", "version": __version__, "notebook": notebook, **run.to_dict()}
    data.pop("findings")
    write_text_atomic(run.out_dir / "remote.json", _redact(json.dumps(data, indent=2), secrets) + "\n")


__all__ = ["HostRun", "Preflight", "RemoteRun", "RemoteError", "describe_progress", "run_remote"]

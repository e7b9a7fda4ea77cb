"""Runs on the remote host (standard library only; uploaded next to the notebook by ``eagle3lens.notebook.remote_run``).

``python remote_supervisor.py RUN_DIR TIMEOUT -- CMD...`` starts CMD in its own session (process
group), records ``RUN_DIR/run.json`` {"pgid", "supervisor"}, and kills the group plus every process
that inherited the run marker (the Jupyter kernel lives in a session of its own) when the wall-clock
TIMEOUT passes (exit 124), when it receives SIGTERM/SIGINT (exit 143), or when its stdin reaches
EOF because the SSH connection dropped (exit 129). ``python remote_supervisor.py kill RUN_DIR``
does the same from a second SSH session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

MARKER = "EAGLE3LENS_REMOTE_RUN"
EXIT_TIMEOUT, EXIT_KILLED, EXIT_DISCONNECTED = 124, 143, 129
GRACE_S = 3.0


def marked_pids(run_dir: str) -> list[int]:
    """Processes whose environment carries ``MARKER=run_dir`` (Linux /proc; empty elsewhere)."""
    needle = f"\0{MARKER}={run_dir}\0".encode()
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = b"\0" + fh.read()
        except OSError:
            continue
        if needle in env or env.endswith(needle[:-1]):
            found.append(int(name))
    return found


def _signal_all(pgid: int | None, run_dir: str, sig: int) -> bool:
    """Send ``sig`` to the group and the marked processes; True when something was still alive."""
    alive = False
    if pgid:
        try:
            os.killpg(pgid, sig)
            alive = True
        except (ProcessLookupError, PermissionError):
            pass
    for pid in marked_pids(run_dir):
        try:
            os.kill(pid, sig)
            alive = True
        except (ProcessLookupError, PermissionError):
            pass
    return alive


def kill_all(pgid: int | None, run_dir: str, child: subprocess.Popen | None = None) -> None:
    """SIGTERM, wait up to GRACE_S, then SIGKILL whatever is left."""
    _signal_all(pgid, run_dir, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap, or the zombie keeps the group "alive"
        if not _signal_all(pgid, run_dir, 0):
            return
        time.sleep(0.05)
    _signal_all(pgid, run_dir, signal.SIGKILL)
    if child is not None:
        child.wait()


def supervise(run_dir: str, timeout: float, cmd: list[str]) -> int:
    stop = threading.Event()
    reason: list[int] = []

    def request(code: int) -> None:
        if not reason:
            reason.append(code)
        stop.set()

    def watch_stdin() -> None:
        try:  # raw reads: a daemon thread parked in a buffered reader aborts interpreter shutdown
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        request(EXIT_DISCONNECTED)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: request(EXIT_KILLED))
    env = dict(os.environ, **{MARKER: run_dir, "PYTHONUNBUFFERED": "1"})
    child = subprocess.Popen(cmd, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(run_dir, "run.json"), "w") as fh:
        json.dump({"pgid": child.pid, "supervisor": os.getpid()}, fh)
    threading.Thread(target=watch_stdin, daemon=True).start()
    deadline = time.monotonic() + timeout if timeout > 0 else None
    while child.poll() is None:
        if deadline is not None and time.monotonic() >= deadline:
            request(EXIT_TIMEOUT)
        if stop.wait(0.1):
            break
    if child.returncode is not None and not reason:
        kill_all(None, run_dir)  # stray kernels of a finished run
        return child.returncode
    code = reason[0]
    what = {EXIT_TIMEOUT: f"timed out after {timeout:g} s", EXIT_KILLED: "stopped on request",
            EXIT_DISCONNECTED: "ssh connection closed"}[code]
    kill_all(child.pid, run_dir, child)
    print(f"eagle3lens-remote: {what}; killed process group {child.pid}", file=sys.stderr, flush=True)
    return code


def kill_run(run_dir: str) -> int:
    try:
        with open(os.path.join(run_dir, "run.json")) as fh:
            ids = json.load(fh)
    except (OSError, ValueError):
        ids = {}
    if ids.get("supervisor"):
        try:
            os.kill(int(ids["supervisor"]), signal.SIGTERM)
        except ProcessLookupError:
            pass
    kill_all(ids.get("pgid"), run_dir)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "kill":
        return kill_run(argv[1])
    if len(argv) < 4 or argv[2] != "--":
        print("usage: remote_supervisor.py RUN_DIR TIMEOUT -- CMD... | kill RUN_DIR", file=sys.stderr)
        return 2
    return supervise(argv[0], float(argv[1]), argv[3:])


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter shutdown: the stdin watcher may still be blocked in read()

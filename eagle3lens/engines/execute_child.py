"""Run the engine's own code in a child process: the worker (``python -m eagle3lens.engines.execute``) under a time
limit, its output captured, and what the engine did when its record never came back.

Importing an engine runs whatever its package does: it may raise ``SystemExit``, call ``os._exit``, raise
``KeyboardInterrupt``, print terminal control sequences, or never return. None of that reaches this process. The
worker runs in a session of its own (a Ctrl-C at the terminal is the user's, never the engine's) with no stdin; its
stdout and stderr are read here, the record lines whole and everything else the engine printed bounded and escaped
(:mod:`..io.textsafe`); at the time limit its process group is killed. A checkpoint without a record is an
:class:`~.execute.Execution` whose ``not_executed`` says what the engine's process did, and one whose engine printed
terminal control sequences is withheld the same way: :mod:`eagle3lens.probes.executed` makes either ``engine/not-executed``, the
simulation standing.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Sequence

from ..errors import UsageError
from ..io.textsafe import clip, escape_sequences, printable
from .execute import ADAPTERS, LINE, PHASE, Execution, engine_at
from .release_env import ReleaseEnv, release_env

TIMEOUT_ENV = "EAGLE3LENS_EXECUTE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
OUTPUT_LIMIT = 64 * 1024  # bytes of each stream the engine printed that are kept (the rest counted)
RECORD_LIMIT = 1 << 30  # bytes of record lines kept (a record of 100 000 tensors is tens of MB)
CHUNK = 1 << 16
POLL_S = 0.05
PROTOCOL = b"eagle3lens-"  # the worker's own lines start so (LINE, PHASE)
WHERE = {"import": "before the engine was imported", "construct": "while importing the engine and building the draft",
         "load": "inside load_weights", "done": "after load_weights returned"}
_SGR = re.compile(r"\x1b\[[0-9;:]*m")  # colour: what a logger prints, harmless once escaped


def execute_timeout(seconds: float | None = None) -> float:
    """The time limit of one execution: ``seconds`` (``--execute-timeout``), else ``$EAGLE3LENS_EXECUTE_TIMEOUT``,
    else :data:`DEFAULT_TIMEOUT_S`."""
    if seconds is not None:
        return seconds
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{TIMEOUT_ENV}={printable(clip(raw, 40))}: must be a positive number of seconds")
    return value


class _Reader(threading.Thread):
    """One pipe of the worker, drained as it writes: the worker's own lines kept whole (``protocol``), everything
    else up to :data:`OUTPUT_LIMIT` bytes, the rest counted."""

    def __init__(self, stream: IO[bytes], protocol: bool) -> None:
        super().__init__(daemon=True)
        self.stream, self.protocol = stream, protocol
        self.lines: list[bytes] = []
        self.text = bytearray()
        self.dropped = 0

    def run(self) -> None:
        line: bytearray | None = None  # a protocol line in progress
        kept, start = 0, True
        for chunk in iter(lambda: self.stream.readline(CHUNK), b""):
            if start and self.protocol and chunk.startswith(PROTOCOL):
                line = bytearray()
            if line is not None:
                if kept + len(chunk) <= RECORD_LIMIT:
                    line += chunk
                    kept += len(chunk)
            else:
                room = max(0, OUTPUT_LIMIT - len(self.text))
                self.text += chunk[:room]
                self.dropped += len(chunk) - min(room, len(chunk))
            start = chunk.endswith(b"\n")
            if start and line is not None:
                self.lines.append(bytes(line))
                line = None
        if line is not None:
            self.lines.append(bytes(line))


@dataclass(frozen=True)
class Finished:
    """How the worker ended and what it wrote."""

    returncode: int | None
    timed_out: bool
    lines: tuple[str, ...]  # the worker's own lines (records, phases)
    output: str  # what else it printed: stdout, then stderr, raw (escape before showing)
    dropped: int  # bytes of it not kept


def run_worker(cmd: Sequence[str], env: dict[str, str], timeout: float) -> Finished:
    """``cmd`` in its own session with no stdin, killed with its process group after ``timeout`` seconds (or when
    this process is interrupted)."""
    proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Reader(proc.stdout, protocol=True), _Reader(proc.stderr, protocol=False)
    out.start()
    err.start()
    deadline = time.monotonic() + timeout
    try:
        # wait for the worker to end without reaping it: while it is unreaped its process group id stays its own, so
        # killing the group afterwards reaches only what the engine left running, never a stranger
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None \
                and time.monotonic() < deadline:
            time.sleep(POLL_S)
        timed_out = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None
    finally:  # also when this process is interrupted: the worker and whatever the engine started go with it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    for reader in (out, err):
        reader.join(timeout=10)  # a process the engine started in a session of its own may hold the pipe
    text = (bytes(out.text) + bytes(err.text)).decode("utf-8", "replace")
    lines = tuple(ln.decode("utf-8", "replace").rstrip("\n") for ln in out.lines)
    return Finished(proc.returncode, timed_out, lines, text, out.dropped + err.dropped)


def what_it_did(done: Finished, timeout: float, phase: str) -> str:
    """What the engine's process did, when it gave no record: exited, was killed, interrupted or timed out."""
    where = WHERE.get(phase, phase)
    if done.timed_out:
        return f"timed out after {timeout:g} s {where} and was stopped"
    code = done.returncode or 0
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGINT:
            return f"was interrupted {where} (SIGINT: its code raised KeyboardInterrupt)"
        return f"was killed by {name} {where}"
    if code == 0:
        return f"ended its own process with status 0 {where}, before reporting (its code exited: os._exit or sys.exit)"
    last = [ln for ln in done.output.splitlines() if ln.strip()][-1:]
    said = f": {printable(clip(last[0], 200))}" if last else ""
    return f"exited with status {code} {where}{said}"


def printed_controls(output: str) -> str:
    """Why an engine's output withholds its record (terminal control sequences other than colour), or ""."""
    found = [s for s in escape_sequences(output) if not _SGR.fullmatch(s)]
    if not found:
        return ""
    shown = ", ".join(printable(clip(s, 40)) for s in found[:3])
    return (f"printed {len(found)} terminal control sequence{'s' * (len(found) != 1)} ({shown}): an engine does not "
            "write to the terminal behind the tool's back, so its record is not taken as the engine's verdict")


def is_other_python(python: str) -> bool:
    """Whether ``python`` is another interpreter than this one (another environment)."""
    return os.path.abspath(python) != os.path.abspath(sys.executable)


def engine_root(python: str) -> Path:
    """Where the engine installed for ``python`` imports from: that interpreter's ``sys.path`` searched by package
    metadata, as ``engines --detect`` searches this one's (nothing of the engine is imported here)."""
    from .detect import detect

    shown = printable(clip(python, 200))
    try:
        done = subprocess.run([python, "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
                              capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        paths = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        raise UsageError(f"--engine-python {shown}: cannot read its module search path") from None
    if not isinstance(paths, list):
        raise UsageError(f"--engine-python {shown}: cannot read its module search path")
    found = [e for e in detect([p for p in paths if isinstance(p, str) and p]).engines if e.name in ADAPTERS]
    if not found:
        raise UsageError(f"--execute: no sglang or vllm is installed for --engine-python {shown}")
    if len(found) > 1:
        names = ", ".join(f"{e.name}=={e.version}" for e in found)
        raise UsageError(f"--execute: several engines are installed for --engine-python {shown} ({names}); "
                         "run it where one is")
    return Path(found[0].location)


def execute_isolated(draft: str | Path, root: str | Path, *, fallback_class: str | None = None,
                     timeout: float | None = None, python: str | None = None) -> Execution:
    """:func:`~.execute.record_execution` in a child process (one engine copy per process, and nothing it does
    reaches this one)."""
    return execute_many_isolated([(draft, fallback_class)], root, timeout=timeout, python=python)[0]


def execute_many_isolated(drafts: Sequence[tuple[str | Path, str | None]], root: str | Path, *,
                          timeout: float | None = None, python: str | None = None) -> list[Execution]:
    """Several checkpoints (each with its fallback class) through one child process that imports the engine once;
    one :class:`Execution` each, in order (``not_executed`` for those the process gave no record of)."""
    limit = execute_timeout(timeout)
    cmd = [python or sys.executable, "-m", "eagle3lens.engines.execute", "--root", str(root)]
    for draft, fallback in drafts:
        cmd += [str(draft), "--class", fallback or ""]
    name, version = engine_at(root)
    other = python is not None and is_other_python(python)
    # the release's own transformers, first on the worker's path (another interpreter is the engine's own environment)
    release = None if other else release_env(Path(root), name)
    with tempfile.TemporaryDirectory(prefix="eagle3lens-source-") as source:
        if other:
            # the engine's own environment: eagle3lens' package alone beside it (its source, not this environment's
            # site-packages, which would shadow the engine's own transformers)
            (Path(source) / "eagle3lens").symlink_to(Path(__file__).resolve().parents[1], target_is_directory=True)
            env = {**os.environ, "PYTHONPATH": source}
        else:
            first = [release.path] if release is not None and release.path else []
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                first + [str(Path(__file__).resolve().parents[2])]
                + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        done = run_worker(cmd, env, limit)
    output = printable(done.output, newlines=True) + (f"\n[{done.dropped} more bytes]" if done.dropped else "")
    records: dict[int, Execution] = {}
    phases: dict[int, str] = {}
    unreadable = ""
    for line in done.lines:
        if line.startswith(PHASE):
            number, _, phase = line[len(PHASE):].partition(" ")
            phases[int(number) if number.isdigit() else -1] = phase
        elif line.startswith(LINE) and len(records) < len(drafts):
            try:
                records[len(records)] = Execution.from_dict(json.loads(line[len(LINE):]))
            except (ValueError, KeyError, TypeError) as exc:
                unreadable = f"gave a record that cannot be read ({type(exc).__name__})"
                break
    withheld = printed_controls(done.output)
    out: list[Execution] = []
    for index in range(len(drafts)):
        ex = records.get(index)
        if ex is None:
            reason = unreadable or what_it_did(done, limit, phases.get(index, "import"))
            ex = Execution(name, version, str(Path(root).resolve()), phase=phases.get(index, "import"),
                           not_executed=reason)
        elif withheld:
            ex = replace(ex, not_executed=withheld)
        if release is not None:
            ex = with_release_env(ex, release)
        out.append(replace(ex, output=output))
    return out


def with_release_env(ex: Execution, release: ReleaseEnv) -> Execution:
    """``ex`` with the release's transformers pin and the notes of its environment in the record."""
    used = {**release.to_dict(), **ex.transformers}  # what the worker imported wins over what was prepared
    where = f"from {used['path']}" if release.path else "installed here"
    said = (f"transformers {used.get('version') or '?'} {where}"
            + (f" (the release requires {release.pin})" if release.pin else " (the release pins none)"))
    return replace(ex, transformers=used, notes=ex.notes + (said,) + release.notes)


__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "engine_root", "execute_isolated", "execute_many_isolated",
           "execute_timeout", "is_other_python"]

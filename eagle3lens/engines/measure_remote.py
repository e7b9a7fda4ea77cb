"""``--measure --host H``: the engine installed on a GPU host serves the draft, over the existing SSH path.

The run makes a private directory on the host (``remote.workdir``), sends ``measure_child.py``, the request and the
remote supervisor there (SFTP, or the exec-channel fallback), and runs ``PY -I remote_supervisor.py DIR LIMIT --
env -u PYTHONPATH OMP_NUM_THREADS=N VLLM_CPU_KVCACHE_SPACE=S ... PY -I DIR/measure_child.py
DIR/request.json DIR/record.json`` (the local run's environment): the supervisor holds the time limit on the host
and kills the engine's process group (and its workers) past it or when the connection drops. The record comes back into the local work directory, the engine's
output beside it, and ``measure`` reads them as it reads a local run's. Every word is ``shlex.quote``d.
"""

from __future__ import annotations

import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

from ..errors import MeasureFailed, RemoteError
from ..remote import supervisor
from .measure_run import CHILD, LOG, MAX_RECORD_BYTES, RECORD, REQUEST, too_long

_SUPERVISOR = "remote_supervisor.py"
_CONNECTED_GRACE_S = 60.0  # the host's supervisor holds the limit; the local side waits this much longer


def host_output(host: str, words: list[str], ssh_config: str | Path | None, timeout_s: float = 60.0) -> tuple[int, str]:
    """Run one short command on ``host`` (``words``, each quoted here); its exit status and output."""
    from ..remote.ssh import connect, load_ssh_config, resolve_host

    with connect(resolve_host(host, load_ssh_config(ssh_config))) as conn:
        return conn.run([shlex.quote(w) for w in words], timeout=timeout_s)


def run_on_host(host: str, python: str, work: Path, env: Mapping[str, str], timeout_s: float,
                ssh_config: str | Path | None) -> int:
    """Serve ``work``'s request with the engine of ``python`` on ``host``; the record (when the child wrote one) and
    the engine's output land in ``work``. Returns the child's exit status; raises ``MeasureFailed`` past the time
    limit or when the connection fails during the run."""
    from ..remote.files import EXEC_FILES
    from ..remote.ssh import TRANSPORT_ERRORS, connect, load_ssh_config, resolve_host
    from ..remote.workdir import private_dir

    with connect(resolve_host(host, load_ssh_config(ssh_config))) as conn, \
            private_dir(conn, python, "eagle3lens-measure-") as remote:
        try:
            files = conn.files(" ".join(shlex.quote(w) for w in (python, "-c", EXEC_FILES)))
            for name, data in ((CHILD.name, CHILD.read_bytes()), (REQUEST, (work / REQUEST).read_bytes()),
                               (_SUPERVISOR, Path(supervisor.__file__).read_bytes())):
                files.write(f"{remote}/{name}", data)
            child = ["env", "-u", "PYTHONPATH", *(f"{k}={v}" for k, v in env.items()),
                     python, "-I", f"{remote}/{CHILD.name}", f"{remote}/{REQUEST}", f"{remote}/{RECORD}"]
            words = [python, "-I", f"{remote}/{_SUPERVISOR}", remote, f"{timeout_s:g}", "--", *child]
            status, output = conn.run([shlex.quote(w) for w in words], timeout=timeout_s + _CONNECTED_GRACE_S)
            (work / LOG).write_text(output, encoding="utf-8")
            if status == supervisor.EXIT_TIMEOUT:
                raise MeasureFailed(too_long(timeout_s))
            entry = next((e for e in files.listdir_attr(remote) if e.filename == RECORD), None)
            if entry is not None and stat.S_ISREG(entry.st_mode):
                if entry.st_size > MAX_RECORD_BYTES:
                    raise MeasureFailed(f"the engine's record on {host} is {entry.st_size} bytes, over the "
                                        f"{MAX_RECORD_BYTES}-byte limit")
                files.get(f"{remote}/{RECORD}", work / RECORD)
        except RemoteError as exc:  # the host was reached and then lost: nothing said about the draft
            raise MeasureFailed(str(exc)) from None
        except TRANSPORT_ERRORS as exc:  # a transfer or channel that failed midway
            raise MeasureFailed(f"{host}: the run's files or channel failed ({exc})") from None
    return status

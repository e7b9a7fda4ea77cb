"""``keys CKPT --engine installed --execute --host H``: the engine installed on the GPU host runs its own loader.

Only the checkpoint's headers travel: its config and each safetensors file's header (the 8-byte length and the
JSON), as one JSON spec written into a private directory on the host. There the worker
(``python -m eagle3lens.engines.execute --headers SPEC --root installed``) rebuilds the files as sparse ones
(header real, data a hole: no tensor byte exists, none is read), runs the host's engine on them and prints its
record; the directory is removed afterwards. Every word of the remote command is ``shlex.quote``d.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..io.textsafe import clip
from .execute import LINE, Execution
from .execute_headers import MAX_SPEC_BYTES, header_spec

REMOTE_TIMEOUT_S = 900


def execute_on_host(ckpt: Checkpoint, host: str, *, fallback_class: str | None, python: str = "python3",
                    ssh_config: str | Path | None = None, known_hosts: str | Path | None = None,
                    engine_root: str | None = None) -> Execution:
    """Run the host's installed engine (or the one in ``engine_root`` there) on ``ckpt``'s headers."""
    from ..remote.files import EXEC_FILES
    from ..remote.ssh import connect, load_ssh_config, resolve_host
    from ..remote.workdir import private_dir

    spec = json.dumps(header_spec(ckpt)).encode()
    if len(spec) > MAX_SPEC_BYTES:
        raise UsageError(f"{ckpt.root}: its headers are {len(spec)} bytes, over the {MAX_SPEC_BYTES}-byte limit")
    target = resolve_host(host, load_ssh_config(ssh_config), known_hosts)
    with connect(target) as conn, private_dir(conn, python, "eagle3lens-execute-") as workdir:
        conn.files(" ".join(shlex.quote(w) for w in (python, "-c", EXEC_FILES))).write(f"{workdir}/spec.json", spec)
        words = [python, "-m", "eagle3lens.engines.execute", "--root", engine_root or "installed",
                 "--headers", f"{workdir}/spec.json", f"{workdir}/ckpt", "--class", fallback_class or ""]
        status, output = conn.run([shlex.quote(w) for w in words], timeout=REMOTE_TIMEOUT_S)
    lines = [ln for ln in output.splitlines() if ln.startswith(LINE)]
    if status != 0 or not lines:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        raise UsageError(f"{host}: --execute failed there (exit {status}): {tail[0][:300]!r}")
    try:
        return Execution.from_dict(json.loads(lines[-1][len(LINE):]))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise UsageError(f"{host}: its --execute record is unreadable ({type(exc).__name__}: {clip(exc, 160)})") \
            from None


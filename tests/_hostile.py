"""Hostile-input helpers shared by tests/hostile/: special files where a regular file is expected, a tensor rewritten
in a dtype torch cannot write, and the CLI's one-line error."""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path

import pytest
from _builders import raw_safetensors


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's stderr: exactly one line, an eagle3lens error, no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagle3lens: error: "), err
    return lines[0]


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def make_socket(path: Path) -> tuple[Path, socket.socket]:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return path, sock


def rewrite_tensor(file: Path, name: str, dtype: str, shape: list[int], data: bytes) -> None:
    """Replace one tensor of a safetensors file by raw ``dtype``/``shape``/``data`` (dtypes torch cannot write)."""
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", None)
    body = raw[8 + n:]
    items = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
    items[name] = (dtype, shape, data)
    out, blob = ({"__metadata__": metadata} if metadata else {}), b""
    for key, (dt, sh, chunk) in items.items():
        out[key] = {"dtype": dt, "shape": sh, "data_offsets": [len(blob), len(blob) + len(chunk)]}
        blob += chunk
    file.write_bytes(raw_safetensors(out, blob))


def killed_at(step: int, run) -> int:
    """Run ``run()`` in a forked child that dies (os._exit) at its ``step``-th rename/replace/link; its exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        calls = [0]

        def dying(real):
            def call(*args, **kwargs):
                calls[0] += 1
                if calls[0] == step:
                    os._exit(9)
                return real(*args, **kwargs)
            return call

        os.rename, os.replace, os.link = dying(os.rename), dying(os.replace), dying(os.link)
        try:
            run()
            os._exit(0)
        finally:
            os._exit(3)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

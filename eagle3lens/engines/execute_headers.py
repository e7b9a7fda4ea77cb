"""A checkpoint as its headers only (config, index, each safetensors file's 8-byte length and JSON header), and the
same checkpoint rebuilt from them as sparse files (the headers real, the data a hole): what ``keys --execute --host``
sends to the GPU host, where the engine's loader runs on meta tensors and reads no tensor byte.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..errors import UsageError

MAX_SPEC_BYTES = 64 << 20


def header_spec(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint as headers only: config, index, and each safetensors file's header prefix and size."""
    if not all(f.suffix == ".safetensors" for f in ckpt.files):
        raise UsageError("--execute --host ships safetensors headers; convert a pickle checkpoint first")
    files = {}
    for f in ckpt.files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            fh.seek(0)
            prefix = fh.read(8 + n)
        files[str(f.relative_to(ckpt.root))] = {"prefix": base64.b64encode(prefix).decode(), "size": f.stat().st_size}
    return {"config": ckpt.config, "index": ckpt.index, "files": files}


def materialise(spec: dict[str, Any], out: Path) -> Path:
    """On the host: write ``spec``'s files into ``out`` (headers real, the data a sparse hole)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, entry in spec["files"].items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or len(rel.parts) != 1:
            raise UsageError(f"header spec: file name {name!r} is not a plain file name")
        prefix = base64.b64decode(entry["prefix"])
        with open(out / rel, "wb") as fh:
            fh.write(prefix)
            fh.truncate(max(int(entry["size"]), len(prefix)))
    if spec.get("config") is not None:
        (out / "config.json").write_text(json.dumps(spec["config"]), encoding="utf-8")
    if spec.get("index") is not None:
        (out / "model.safetensors.index.json").write_text(json.dumps(spec["index"]), encoding="utf-8")
    return out


def read_spec(path: str | Path) -> dict[str, Any]:
    """The spec file the host was sent (bounded, a JSON object)."""
    path = Path(path)
    if not path.is_file() or os.path.getsize(path) > MAX_SPEC_BYTES:
        raise UsageError(f"{path}: not a header spec of at most {MAX_SPEC_BYTES} bytes")
    spec = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(spec, dict) or not isinstance(spec.get("files"), dict):
        raise UsageError(f"{path}: not a header spec")
    return spec

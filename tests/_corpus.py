"""Builders for malformed checkpoints: raw safetensors bytes written by hand, so every rule is exercised."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any


def raw_safetensors(header: dict[str, Any], data: bytes, *, header_bytes: bytes | None = None,
                    length: int | None = None) -> bytes:
    """Header JSON (or raw header bytes) + data, with the u64 length prefix (overridable)."""
    body = header_bytes if header_bytes is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body) if length is None else length) + body + data


def good_header() -> tuple[dict[str, Any], bytes]:
    """Two F32 tensors a[2] and b[3] stored back to back."""
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]},
    }
    return header, bytes(20)


def write(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def sharded(root: Path, weight_map: dict[str, str], shards: dict[str, dict[str, Any]]) -> Path:
    """A sharded checkpoint: ``shards`` maps file name -> {tensor name: numel} of F32 tensors."""
    root.mkdir(parents=True, exist_ok=True)
    for name, tensors in shards.items():
        header, offset = {}, 0
        for tensor, numel in tensors.items():
            header[tensor] = {"dtype": "F32", "shape": [numel], "data_offsets": [offset, offset + 4 * numel]}
            offset += 4 * numel
        write(root / name, raw_safetensors(header, bytes(offset)))
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root

"""Strict safetensors header reader: validates everything before any byte of tensor data is trusted.

Rules follow the format's reference reader (see FACTS.md §9): header length bounds, UTF-8 JSON,
known dtypes, exact sizes, contiguous offsets from 0 with no gaps or overlaps, no trailing bytes.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import CheckpointError

MAX_HEADER_BYTES = 100_000_000

# bits per element for every dtype the format defines
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}

# the one safetensors <-> torch dtype table; None: torch has no element type with this layout (F4 and F6 pack
# several values per byte, torch's float4_e2m1fn_x2 counts pairs, so shapes would not match)
_TORCH_NAMES: dict[str, str | None] = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64", "F64": "float64",
    "I64": "int64", "U64": "uint64", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu",
    "F4": None, "F6_E2M3": None, "F6_E3M2": None,
}
_ST_NAMES = {torch_name: st for st, torch_name in _TORCH_NAMES.items() if torch_name}


def torch_dtype(st_name: str):  # -> torch.dtype | None
    """The torch dtype for a safetensors dtype name, or None when torch (this version) has none for it."""
    import torch

    name = _TORCH_NAMES.get(st_name)
    return getattr(torch, name, None) if name else None


def st_dtype(dtype) -> str:
    """The safetensors dtype name for a torch dtype; ValueError when the format has none."""
    try:
        return _ST_NAMES[str(dtype).removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"no safetensors dtype for {dtype}") from None


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as its header describes it; ``begin``/``end`` are absolute file offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    entries: tuple[TensorEntry, ...]
    metadata: dict[str, str]
    data_start: int
    file_size: int


def read_header(path: str | Path) -> SafetensorsHeader:
    """Parse and validate the header of ``path``; raise CheckpointError naming the problem."""
    path = Path(path)
    try:
        file_size = os.path.getsize(path)
        with open(path, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise CheckpointError(path, f"truncated safetensors file ({file_size} bytes, header length needs 8)")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(path, f"safetensors header length {n} exceeds the {MAX_HEADER_BYTES}-byte cap")
            if 8 + n > file_size:
                raise CheckpointError(path, f"safetensors header length {n} runs past the end of the {file_size}-byte file (truncated?)")
            raw = fh.read(n)
    except OSError as exc:
        raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(path, "safetensors header is not valid UTF-8") from None
    if not text.lstrip().startswith("{"):
        raise CheckpointError(path, "safetensors header is not a JSON object")
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise CheckpointError(path, "safetensors header JSON is nested too deeply") from None
    except _DuplicateName as exc:
        raise CheckpointError(path, f"tensor {exc.args[0]!r} is named twice in the safetensors header") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(path, f"safetensors header is not valid JSON ({exc.msg} at byte {exc.pos})") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, "safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(path, "safetensors __metadata__ must map strings to strings")
    data_start = 8 + n
    entries = [_entry(path, name, info, data_start) for name, info in header.items()]
    entries.sort(key=lambda e: (e.begin, e.end))
    expected = data_start
    for entry in entries:
        if entry.begin != expected:
            kind = "overlaps the previous tensor" if entry.begin < expected else "leaves a gap after the previous tensor"
            raise CheckpointError(path, f"tensor {entry.name!r} {kind} (offset {entry.begin - data_start}, expected {expected - data_start})")
        expected = entry.end
    if expected != file_size:
        if expected > file_size:
            raise CheckpointError(path, f"truncated: tensor data needs {expected} bytes, file has {file_size}")
        raise CheckpointError(path, f"{file_size - expected} trailing bytes after the last tensor")
    return SafetensorsHeader(path, tuple(entries), dict(metadata), data_start, file_size)


class _DuplicateName(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateName(key)
        out[key] = value
    return out


def _entry(path: Path, name: str, info: object, data_start: int) -> TensorEntry:
    if not isinstance(info, dict):
        raise CheckpointError(path, f"tensor {name!r}: header entry is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise CheckpointError(path, f"tensor {name!r}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise CheckpointError(path, f"tensor {name!r}: shape must be a list of non-negative integers, got {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(path, f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, got {offsets!r}")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise CheckpointError(
            path,
            f"tensor {name!r}: {dtype}{list(shape)} needs {bits / 8:g} bytes but its byte range holds {offsets[1] - offsets[0]}",
        )
    return TensorEntry(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])

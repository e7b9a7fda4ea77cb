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
from typing import NamedTuple

from ..errors import CheckpointError

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


class TensorEntry(NamedTuple):
    """One tensor as its header describes it; ``begin``/``end`` are absolute file offsets (a tuple: a header can
    list a million tensors, and a tuple is built three times faster than a frozen dataclass)."""

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
        header = json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_header_int)
    except RecursionError:
        raise CheckpointError(path, "safetensors header JSON is nested too deeply") from None
    except _DuplicateName as exc:
        raise CheckpointError(path, f"tensor {exc.args[0]!r} is named twice in the safetensors header") from None
    except _BadNumber as exc:
        raise CheckpointError(path, f"safetensors header holds {exc.args[0]}") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(path, f"safetensors header is not valid JSON ({exc.msg} at byte {exc.pos})") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, "safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:  # absent or null, as the reference reader accepts
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(path, "safetensors __metadata__ must be an object mapping strings to strings")
    data_start = 8 + n
    entries = [_entry(path, name, info, data_start) for name, info in header.items()]
    entries.sort(key=_span)  # stable: equal spans (zero-size tensors) keep header order
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


class _BadNumber(ValueError):
    pass


MAX_INT_DIGITS = 20  # u64, the format's widest integer


def _header_int(text: str) -> int:
    """json's ``parse_int``: header integers are shapes and offsets (u64); longer digit strings are refused
    before ``int()`` (past 4,300 digits Python itself refuses with a traceback)."""
    if len(text) > MAX_INT_DIGITS:
        raise _BadNumber(f"an integer of {len(text)} digits (shapes and offsets are 64-bit)")
    return int(text)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateName(key)
            seen.add(key)
    return out


def _span(entry: TensorEntry) -> tuple[int, int]:
    return entry.begin, entry.end


U64 = 1 << 64


def _entry(path: Path, name: str, info: object, data_start: int) -> TensorEntry:
    """One header entry, validated: a known dtype, a shape of non-negative 64-bit integers, offsets
    ``0 <= begin <= end`` that hold exactly the shape's bytes. One loop per shape (this runs per tensor)."""
    if type(info) is not dict:
        raise CheckpointError(path, f"tensor {name!r}: header entry is not an object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None or not isinstance(dtype, str):
        raise CheckpointError(path, f"tensor {name!r}: unknown dtype {_clip(dtype)}")
    if type(shape) is not list:
        raise _bad_shape(path, name, shape)
    total = bits
    for d in shape:  # stops growing past 2^64 bytes (a 10,000-dimension shape must not build a huge integer)
        if type(d) is not int or not 0 <= d < U64:
            raise _bad_shape(path, name, shape)
        total = total * d if total <= U64 * 8 else (0 if d == 0 else total)
    if type(offsets) is not list or len(offsets) != 2 or type(offsets[0]) is not int or type(offsets[1]) is not int \
            or not 0 <= offsets[0] <= offsets[1] < U64:
        raise CheckpointError(path, f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, "
                                    f"got {_clip(offsets)}")
    begin, end = offsets
    if total % 8 or total // 8 != end - begin:
        needs = "more than 2^64" if total > U64 * 8 else f"{total / 8:g}" if total % 8 else str(total // 8)
        raise CheckpointError(path, f"tensor {name!r}: {dtype}{_clip(shape)} needs {needs} bytes but its byte range "
                                    f"holds {end - begin}")
    return TensorEntry(name, dtype, tuple(shape), data_start + begin, data_start + end)


def _bad_shape(path: Path, name: str, shape: object) -> CheckpointError:
    return CheckpointError(path, f"tensor {name!r}: shape must be a list of non-negative 64-bit integers, "
                                 f"got {_clip(shape)}")


def _clip(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"

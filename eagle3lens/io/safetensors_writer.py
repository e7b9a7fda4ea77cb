"""Writing safetensors files byte by byte: the header built from validated entries, padded so that the data sits
at the source's offset within a page, and each tensor's bytes copied from its source file (in-kernel where the
offsets allow) or, for a replacement tensor, from memory. The reader's counterpart is ``safetensors_header``.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Mapping

from ..checkpoint import Checkpoint, TensorInfo
from ..errors import CheckpointError, UsageError
from ..progress import Counter
from .safetensors_header import st_dtype

CHUNK = 1 << 20  # userspace copies: a buffer that stays in L2
PAGE = 4096


def override_info(name: str, tensor: Any) -> tuple[str, tuple[int, ...]]:
    """The safetensors dtype and shape of a replacement tensor (one line for a dtype safetensors cannot hold)."""
    try:
        dtype = st_dtype(tensor.dtype)
    except ValueError:
        raise UsageError(f"replacement tensor {name!r}: unsupported dtype {tensor.dtype}") from None
    return dtype, tuple(tensor.shape)


def tensor_nbytes(ckpt: Checkpoint, overrides: Mapping[str, Any], key: str) -> int:
    if key in overrides:
        t = overrides[key]
        return t.numel() * t.element_size()
    return ckpt.tensors[key].nbytes


def write_file(ckpt: Checkpoint, keys: list[str], names: dict[str, str], overrides: Mapping[str, Any], path: Path,
               metadata: dict[str, str], written: Counter) -> None:
    """Write ``keys`` of ``ckpt`` (renamed by ``names``; ``overrides`` replace tensors or add new ones) as one
    safetensors file at ``path``, adding the bytes written to ``written``."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for key in keys:
        if key in overrides:
            dtype, shape = override_info(key, overrides[key])
        else:
            info: TensorInfo = ckpt.tensors[key]
            dtype, shape = info.dtype, info.shape
        size = tensor_nbytes(ckpt, overrides, key)
        header[names[key]] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * header_padding(len(raw), ckpt.tensors[keys[0]].begin if keys and keys[0] not in overrides else None)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for key in keys:
            if key in overrides:
                data = tensor_bytes(overrides[key])
                fh.write(data)
                written.add(len(data))
                continue
            copy_tensor(ckpt, key, fh)
            written.add(ckpt.tensors[key].nbytes)


def header_padding(json_len: int, first_begin: int | None) -> int:
    """Spaces after the header JSON: 8-byte alignment, and the data placed at the same offset within a page as
    in the source file, so that in-kernel copies of the tensors that follow run page-aligned (about twice as fast)."""
    pad = -json_len % 8
    if first_begin is not None and first_begin % 8 == 0:
        pad += (first_begin - (8 + json_len + pad)) % PAGE
    return pad


def copy_tensor(ckpt: Checkpoint, key: str, fh: Any) -> None:
    """Copy one tensor's byte range: in-kernel (copy_file_range) when source and destination offsets sit alike
    within a page, else (or on another filesystem or an old kernel) through a reused 1 MiB buffer."""
    info = ckpt.tensors[key]
    if info.begin is None:  # a pickled tensor
        for chunk in ckpt.iter_chunks(key, CHUNK):
            fh.write(chunk)
        return
    fh.flush()
    start = fh.tell()
    with open(info.file, "rb", buffering=0) as src:
        if hasattr(os, "copy_file_range") and (start - info.begin) % PAGE == 0:
            try:
                done = 0
                while done < info.nbytes:
                    n = os.copy_file_range(src.fileno(), fh.fileno(), min(info.nbytes - done, 1 << 30), info.begin + done)
                    if n <= 0:
                        raise OSError("copy_file_range made no progress")
                    done += n
                fh.seek(start + info.nbytes)
                return
            except OSError:  # fall back to plain reads
                fh.seek(start)
                fh.truncate()
        src.seek(info.begin)
        view = memoryview(bytearray(min(CHUNK, info.nbytes)))
        left = info.nbytes
        while left:
            n = src.readinto(view[:min(left, len(view))])
            if not n:
                raise CheckpointError(info.file, f"tensor {key!r}: file ended before its last byte")
            fh.write(view[:n])
            left -= n


def tensor_bytes(tensor: Any) -> memoryview:
    """A torch tensor's bytes, little-endian as safetensors stores them (CPU, contiguous)."""
    import torch

    t = tensor.detach().to("cpu").contiguous()
    return memoryview(t.view(-1).view(torch.uint8).numpy()).cast("B") if t.numel() else memoryview(b"")

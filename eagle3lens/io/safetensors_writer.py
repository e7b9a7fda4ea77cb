"""Writing safetensors files byte by byte: the header built from validated entries, padded so that the data sits
at the source's offset within a page, and each tensor's bytes copied from its source file (in-kernel where the
offsets allow) or, for a replacement tensor, from memory. The reader's counterpart is ``safetensors_header``.

Verified while written: each slice a copy puts in the output (a 32 MiB in-kernel copy, say) is read back on a
thread and compared byte for byte with its source while the next slice is copied (both still in the page cache,
just touched), and the file's one fsync runs while the last slices are compared; so the comparison costs little
time of its own where writing is the slower part, and no tensor is held in memory.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

from ..errors import CheckpointError, UsageError, WriteVerifyError
from ..progress import Counter
from ..tensor_info import TensorInfo
from .safetensors_header import st_dtype



class TensorTable(Protocol):
    """What the writer reads from a source checkpoint: its tensor table (headers) and each tensor's bytes."""

    tensors: dict[str, TensorInfo]

    def iter_chunks(self, name: str, chunk_bytes: int = ..., start: int = ...,
                    stop: int | None = ...) -> Iterator[memoryview]: ...


CHUNK = 1 << 20  # userspace copies and comparisons: buffers that stay in L2
SLICE = 32 << 20  # in-kernel copies, one call each
PAGE = 4096


def override_info(name: str, tensor: Any) -> tuple[str, tuple[int, ...]]:
    """The safetensors dtype and shape of a replacement tensor (one line for a dtype safetensors cannot hold)."""
    try:
        dtype = st_dtype(tensor.dtype)
    except ValueError:
        raise UsageError(f"replacement tensor {name!r}: unsupported dtype {tensor.dtype}") from None
    return dtype, tuple(tensor.shape)


def tensor_nbytes(ckpt: TensorTable, overrides: Mapping[str, Any], key: str) -> int:
    if key in overrides:
        t = overrides[key]
        return t.numel() * t.element_size()
    return ckpt.tensors[key].nbytes


def write_file(ckpt: TensorTable, keys: list[str], names: dict[str, str], overrides: Mapping[str, Any], path: Path,
               metadata: dict[str, str], written: Counter) -> None:
    """Write ``keys`` of ``ckpt`` (renamed by ``names``; ``overrides`` replace tensors or add new ones) as one
    safetensors file at ``path``, adding the bytes written to ``written``. Every tensor's bytes are read back and
    compared with their source as they are written (``WriteVerifyError`` names the first that differs)."""
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
    with open(path, "w+b") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        verifier = _Verifier(fh.fileno(), path)
        try:
            for key in keys:
                if key in overrides:
                    data = tensor_bytes(overrides[key])
                    fh.flush()
                    start = fh.tell()
                    fh.write(data)
                    fh.flush()
                    _verify_written(fh.fileno(), start, memoryview(data), key, path)
                    written.add(len(data))
                    continue
                copy_tensor(ckpt, key, fh, verifier.add)
                verifier.check()
                written.add(ckpt.tensors[key].nbytes)
            fh.flush()
            os.fsync(fh.fileno())  # while the last slices are compared
        except BaseException:
            verifier.close()
            raise
        verifier.close()
        verifier.check()


class _Verifier:
    """Compares copied byte ranges of the output (``fd``) with their source on a thread, in the order they were
    copied; ``check`` raises the first difference (or read error) found so far, ``close`` waits for the rest."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        self.failure: BaseException | None = None
        self._queue: queue.SimpleQueue[tuple[str, Path, int, int, int] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="eagle3lens-verify", daemon=True)
        self._thread.start()

    def add(self, key: str, src: Path, src_at: int, dst_at: int, n: int) -> None:
        """Queue ``n`` bytes copied from ``src`` at ``src_at`` to the output at ``dst_at``."""
        self._queue.put((key, src, src_at, dst_at, n))

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        bufs = (bytearray(CHUNK), bytearray(CHUNK))
        while (item := self._queue.get()) is not None:
            if self.failure is not None:
                continue  # drained, not compared: the write is refused already
            key, src, src_at, dst_at, n = item
            try:
                with open(src, "rb", buffering=0) as fh:
                    same = _compare_ranges(fh.fileno(), src_at, self.fd, dst_at, n, bufs)
            except BaseException as exc:  # raised on the writing thread
                self.failure = exc
                continue
            if not same:
                self.failure = WriteVerifyError(self.path, f"tensor {key!r}: the bytes written differ from the source "
                                                           f"{src} (or it changed while being copied)")


def _verify_written(fd: int, start: int, expected: memoryview, key: str, path: Path) -> None:
    """Read ``len(expected)`` bytes at ``start`` back from ``fd`` and compare them with ``expected``."""
    buf = bytearray(min(CHUNK, len(expected)))
    view = memoryview(buf)
    for pos in range(0, len(expected), CHUNK):
        n = min(CHUNK, len(expected) - pos)
        if os.preadv(fd, [view[:n]], start + pos) != n or (buf if n == len(buf) else buf[:n]) != expected[pos:pos + n]:
            raise WriteVerifyError(path, f"tensor {key!r}: the bytes read back differ from those written")


def _compare_ranges(src: int, src_at: int, dst: int, dst_at: int, n: int, bufs: tuple[bytearray, bytearray]) -> bool:
    """Byte-for-byte equality of ``n`` bytes of two descriptors (``bytearray ==`` is a memcmp)."""
    a, b = bufs
    va, vb = memoryview(a), memoryview(b)
    for pos in range(0, n, len(a)):
        k = min(len(a), n - pos)
        if os.preadv(src, [va[:k]], src_at + pos) != k or os.preadv(dst, [vb[:k]], dst_at + pos) != k:
            return False
        if (a if k == len(a) else a[:k]) != (b if k == len(b) else b[:k]):
            return False
    return True


def header_padding(json_len: int, first_begin: int | None) -> int:
    """Spaces after the header JSON: 8-byte alignment, and the data placed at the same offset within a page as
    in the source file, so that in-kernel copies of the tensors that follow run page-aligned (about twice as fast)."""
    pad = -json_len % 8
    if first_begin is not None and first_begin % 8 == 0:
        pad += (first_begin - (8 + json_len + pad)) % PAGE
    return pad


def copy_tensor(ckpt: TensorTable, key: str, fh: Any,
                copied: Callable[[str, Path, int, int, int], None] | None = None) -> None:
    """Copy one tensor's byte range: in-kernel (copy_file_range) when source and destination offsets sit alike
    within a page, else (or on another filesystem or an old kernel) through a reused 1 MiB buffer; each slice done
    goes to ``copied(key, source file, source offset, output offset, size)`` to be compared. A pickled tensor's
    bytes are read back and compared as they are written."""
    info = ckpt.tensors[key]
    if info.begin is None:  # a pickled tensor: write its bytes, then read them back against the source
        for chunk in ckpt.iter_chunks(key, CHUNK):
            fh.write(chunk)
            fh.flush()
            _verify_written(fh.fileno(), fh.tell() - len(chunk), memoryview(chunk), key, Path(fh.name))
        return
    fh.flush()
    start = fh.tell()
    buf = bytearray(min(CHUNK, info.nbytes))
    with open(info.file, "rb", buffering=0) as src:
        in_kernel = hasattr(os, "copy_file_range") and (start - info.begin) % PAGE == 0
        done = 0
        while done < info.nbytes:
            n = min(SLICE, info.nbytes - done)
            if in_kernel:
                try:
                    _copy_in_kernel(src.fileno(), info.begin + done, fh.fileno(), start + done, n)
                except OSError:  # fall back to plain reads from here on
                    in_kernel = False
            if not in_kernel:
                _copy_through_buffer(src.fileno(), info.begin + done, fh.fileno(), start + done, n, buf, info, key)
            if copied is not None:
                copied(key, info.file, info.begin + done, start + done, n)
            done += n
    fh.seek(start + info.nbytes)


def _copy_in_kernel(src: int, src_at: int, dst: int, dst_at: int, n: int) -> None:
    done = 0
    while done < n:
        k = os.copy_file_range(src, dst, n - done, src_at + done, dst_at + done)
        if k <= 0:
            raise OSError("copy_file_range made no progress")
        done += k


def _copy_through_buffer(src: int, src_at: int, dst: int, dst_at: int, n: int, buf: bytearray, info: TensorInfo,
                         key: str) -> None:
    view = memoryview(buf)
    done = 0
    while done < n:
        k = os.preadv(src, [view[:min(len(buf), n - done)]], src_at + done)
        if not k:
            raise CheckpointError(info.file, f"tensor {key!r}: file ended before its last byte")
        written = 0
        while written < k:
            written += os.pwrite(dst, view[written:k], dst_at + done + written)
        done += k


def tensor_bytes(tensor: Any) -> memoryview:
    """A torch tensor's bytes, little-endian as safetensors stores them (CPU, contiguous)."""
    import torch

    t = tensor.detach().to("cpu").contiguous()
    return memoryview(t.view(-1).view(torch.uint8).numpy()).cast("B") if t.numel() else memoryview(b"")

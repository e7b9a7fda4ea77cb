"""Checkpoint diff: only in A, only in B, renamed (same bytes under another name), dtype/shape and value changes.

``names_only=True`` reads headers only. Otherwise tensor bytes are streamed in chunks: paired tensors
(same name, or a ``pairs`` mapping given by the caller) are compared byte for byte; an unpaired one is read
only if the other side has an unpaired tensor of its dtype and shape: compared byte for byte with a lone such
candidate, matched by a content hash among several. Value differences (max abs / max rel) are computed only for tensors whose
bytes differ, chunk by chunk: no tensor is ever loaded whole.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..checkpoint import Checkpoint, CheckpointLike, _from_bytes, as_checkpoint
from ..errors import CheckpointError
from ..findings import Finding, to_jsonable
from ..progress import Counter, Progress
from ..io.safetensors_header import DTYPE_BITS

CHUNK = 16 << 20  # hashing unpaired tensors
COMPARE_CHUNK = 1 << 20  # paired tensors: two 1 MiB buffers fit in L2, so memcmp runs from cache


@dataclass(frozen=True)
class LayoutChange:
    name: str
    a: str  # "BF16[16, 32]"
    b: str


@dataclass(frozen=True)
class ValueChange:
    name: str
    b_name: str
    max_abs: float
    max_rel: float
    n_diff: int


@dataclass(frozen=True)
class DiffResult:
    a: str
    b: str
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...]
    layout_changes: tuple[LayoutChange, ...]
    changed: tuple[ValueChange, ...]
    identical: tuple[str, ...]
    unchecked: tuple[str, ...] = ()  # names_only: same name, dtype and shape, bytes not read
    findings: tuple[Finding, ...] = ()

    @property
    def renames_only(self) -> bool:
        """Every tensor of A is in B with identical bytes (possibly under another name), and nothing else."""
        return not (self.only_in_a or self.only_in_b or self.layout_changes or self.changed or self.unchecked)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "a": self.a, "b": self.b, "renames_only": self.renames_only, "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b, "renamed": [{"a": a, "b": b} for a, b in self.renamed],
            "layout_changes": [c.__dict__ for c in self.layout_changes], "changed": [c.__dict__ for c in self.changed],
            "identical": self.identical, "unchecked": self.unchecked})


def diff(a: CheckpointLike, b: CheckpointLike, *, values: bool = True, names_only: bool = False,
         pairs: Mapping[str, str] | None = None, progress: Progress | None = None) -> DiffResult:
    """Compare two checkpoints (or their paths); ``pairs`` (A name -> B name) says which tensors correspond when
    names differ. ``progress(done, total, label)``: bytes of paired tensors compared so far."""
    a, b = as_checkpoint(a), as_checkpoint(b)
    pairs = dict(pairs) if pairs is not None else {n: n for n in a.tensors if n in b.tensors}
    pairs = {x: y for x, y in pairs.items() if x in a.tensors and y in b.tensors}
    layout: list[LayoutChange] = []
    changed: list[ValueChange] = []
    identical: list[str] = []
    renamed: list[tuple[str, str]] = []
    unchecked: list[str] = []
    largest = max((a.tensors[x].nbytes for x in pairs), default=0)
    size = 0 if names_only else min(COMPARE_CHUNK, largest)
    buffers = (bytearray(size), bytearray(size))
    compared = Counter(None if names_only else progress, sum(a.tensors[x].nbytes for x in pairs),
                       f"diff {a.path} {b.path}")
    for x, y in pairs.items():
        ta, tb = a.tensors[x], b.tensors[y]
        if (ta.dtype, ta.shape) != (tb.dtype, tb.shape):
            layout.append(LayoutChange(x, f"{ta.dtype}{list(ta.shape)}", f"{tb.dtype}{list(tb.shape)}"))
        elif names_only or _same_bytes(a, x, b, y, buffers):
            if x != y:
                renamed.append((x, y))
            else:
                (unchecked if names_only else identical).append(x)
        else:
            changed.append(_value_change(a, x, b, y) if values else ValueChange(x, y, float("nan"), float("nan"), -1))
        compared.add(ta.nbytes)
    rest_a = [n for n in a.tensors if n not in pairs]
    paired_b = set(pairs.values())
    rest_b = [n for n in b.tensors if n not in paired_b]
    if not names_only and rest_a and rest_b:
        found = dict(_renames(a, rest_a, b, rest_b, buffers))
        renamed += found.items()
        matched_b = set(found.values())
        rest_a, rest_b = [n for n in rest_a if n not in found], [n for n in rest_b if n not in matched_b]
    return DiffResult(str(a.path), str(b.path), tuple(rest_a), tuple(rest_b), tuple(sorted(renamed)),
                      tuple(layout), tuple(changed), tuple(sorted(identical)), tuple(sorted(unchecked)))


def _renames(a: Checkpoint, rest_a: list[str], b: Checkpoint, rest_b: list[str],
             buffers: tuple[bytearray, bytearray]) -> list[tuple[str, str]]:
    """Unpaired A tensors with the same bytes as an unpaired B tensor of the same dtype and shape (the first such in
    B's order). Only tensors with a candidate of their dtype and shape on the other side are read: a lone candidate
    is compared byte for byte, several are matched by content hash."""
    def group(ckpt: Checkpoint, names: list[str]) -> dict[tuple, list[str]]:
        out: dict[tuple, list[str]] = {}
        for n in names:
            out.setdefault((ckpt.tensors[n].dtype, tuple(ckpt.tensors[n].shape)), []).append(n)
        return out

    groups_b = group(b, rest_b)
    found = []
    for layout, names_a in group(a, rest_a).items():
        names_b = groups_b.get(layout, [])
        if len(names_a) == len(names_b) == 1:
            if _same_bytes(a, names_a[0], b, names_b[0], _sized(buffers, a.tensors[names_a[0]].nbytes)):
                found.append((names_a[0], names_b[0]))
        elif names_b:
            by_hash: dict[str, list[str]] = {}
            for n in names_b:
                by_hash.setdefault(digest(b, n), []).append(n)
            for n in names_a:
                match = by_hash.get(digest(a, n))
                if match:
                    found.append((n, match.pop(0)))
    return found


def _sized(buffers: tuple[bytearray, bytearray], nbytes: int) -> tuple[bytearray, bytearray]:
    """The compare buffers, made ``COMPARE_CHUNK`` long if the paired tensors left them shorter."""
    if len(buffers[0]) >= min(COMPARE_CHUNK, nbytes):
        return buffers
    return bytearray(COMPARE_CHUNK), bytearray(COMPARE_CHUNK)


def digest(ckpt: Checkpoint, name: str) -> str:
    """Content hash of a tensor's bytes (streamed)."""
    h = hashlib.blake2b(digest_size=16)
    for chunk in ckpt.iter_chunks(name, CHUNK):
        h.update(chunk)
    return h.hexdigest()


def _same_bytes(a: Checkpoint, x: str, b: Checkpoint, y: str, buffers: tuple[bytearray, bytearray]) -> bool:
    """Byte-for-byte comparison in chunks (bytearray == is a memcmp; memoryview == is element-wise and slow).

    Chunks of ``COMPARE_CHUNK`` keep both buffers in the CPU cache while they are compared; each file is
    opened once per tensor.
    """
    ia, ib = a.tensors[x], b.tensors[y]
    size = ia.nbytes
    if size != ib.nbytes:
        return False
    buf_a, buf_b = buffers
    if ia.begin is None or ib.begin is None:  # a pickled tensor: compare its bytes in memory
        for start in range(0, size, COMPARE_CHUNK):
            n = len(a.read_bytes(x, start, start + COMPARE_CHUNK, out=buf_a))
            b.read_bytes(y, start, start + COMPARE_CHUNK, out=buf_b)
            if (buf_a if n == COMPARE_CHUNK else buf_a[:n]) != (buf_b if n == COMPARE_CHUNK else buf_b[:n]):
                return False
        return True
    view_a, view_b = memoryview(buf_a), memoryview(buf_b)
    with open(ia.file, "rb", buffering=0) as fa, open(ib.file, "rb", buffering=0) as fb:
        fa.seek(ia.begin)
        fb.seek(ib.begin)
        for start in range(0, size, COMPARE_CHUNK):
            n = min(COMPARE_CHUNK, size - start)
            for fh, info, view, name in ((fa, ia, view_a, x), (fb, ib, view_b, y)):
                if fh.readinto(view[:n]) != n:
                    raise CheckpointError(info.file, f"tensor {name!r}: file ended before its last byte")
            if (buf_a if n == COMPARE_CHUNK else buf_a[:n]) != (buf_b if n == COMPARE_CHUNK else buf_b[:n]):
                return False
    return True


def _value_change(a: Checkpoint, x: str, b: Checkpoint, y: str) -> ValueChange:
    """Max abs / max rel difference and the count of differing elements, streamed chunk by chunk (bounded memory;
    each chunk is widened to float64 on its own)."""
    import torch

    from .stats import as_float64  # numpy comes with it: only value diffs need it (convert's header diff does not)

    info = a.tensors[x]
    max_abs, scale, n_diff, seen = 0.0, 0.0, 0, False
    for raw_a, raw_b in zip(a.iter_chunks(x, COMPARE_CHUNK), b.iter_chunks(y, COMPARE_CHUNK), strict=True):
        elems = len(raw_a) * 8 // DTYPE_BITS[info.dtype]
        ta, tb = (_from_bytes(raw, replace(info, shape=(elems,))) for raw in (raw_a, raw_b))
        if ta is None:  # a dtype torch cannot view: the bytes differ, the values are not computed
            return ValueChange(x, y, float("nan"), float("nan"), -1)
        fa, fb = as_float64(ta), as_float64(tb)  # bool, ints, floats and complex alike
        delta = (fa - fb).abs()
        finite = torch.isfinite(delta)
        if bool(finite.any()):
            max_abs, seen = max(max_abs, float(delta[finite].max())), True
        finite_a = torch.isfinite(fa)
        if bool(finite_a.any()):
            scale = max(scale, float(fa.abs()[finite_a].max()))
        differs = ~((fa == fb) | (torch.isnan(fa) & torch.isnan(fb)))
        n_diff += int((differs.view(-1, 2).any(-1) if ta.is_complex() else differs).sum())  # per element
    max_abs = max_abs if seen else float("nan")
    return ValueChange(x, y, max_abs, max_abs / scale if scale else float("inf") if max_abs else 0.0, n_diff)

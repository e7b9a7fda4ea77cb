"""Reading a draft's d2t / t2d: the keys, the sizes N and V, the tables with their shape and dtype checks, the
mapping invariants, the candidate readings, and the cross-check of the draft's lm_head rows against the target's.

Training keeps the N most frequent target ids, sorted ascending (``ids``), and stores offsets
``d2t[i] = ids[i] - i`` plus a mask ``t2d[j] = j in ids``; ``i -> i + d2t[i]`` must be strictly increasing,
>= 0 and < V.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..checkpoint import Checkpoint, TensorInfo
from ..findings import Finding, Severity
from ..io.safetensors_header import torch_dtype

SHOW = 5  # offending indices quoted in evidence
HEAD_BLOCK_ROWS = 4096  # target lm_head rows read at a time
CANDIDATES = {
    "stored": "d2t as stored",
    "double-subtracted": "d2t + arange(N) (arange was subtracted twice)",
    "absolute": "d2t - arange(N) (absolute target ids were stored)",
    "from-t2d": "nonzero(t2d) - arange(N) (rebuilt from t2d)",
    "from-head": "ids of the target lm_head rows the draft lm_head copies, minus arange(N)",
}


# -- invariants ---------------------------------------------------------------------------------
def readable_table(info: TensorInfo) -> bool:
    """A d2t / t2d that can be read as a table at all: non-empty, in a dtype torch holds element by element
    (not F4 / F6, which pack several values per byte)."""
    return info.numel > 0 and torch_dtype(info.dtype) is not None


def target_ids(d2t: torch.Tensor) -> torch.Tensor:
    """The target id each draft id maps to: ``arange(N) + d2t``."""
    return torch.from_numpy(np.arange(d2t.numel(), dtype=np.int64) + d2t.to(torch.int64).numpy())


def ids_valid(ids: torch.Tensor, vocab_size: int | None) -> bool:
    """True when target ids are strictly increasing, >= 0 and < V."""
    a = ids.numpy()
    return a.size > 0 and a[0] >= 0 and (vocab_size is None or a[-1] < vocab_size) and bool((a[1:] > a[:-1]).all())


def is_valid(d2t: torch.Tensor, vocab_size: int | None) -> bool:
    """True when ``i -> i + d2t[i]`` is strictly increasing, >= 0 and < V (d2t >= 0, non-decreasing, <= V - N)."""
    return ids_valid(target_ids(d2t), vocab_size)


def invariant_breaks(d2t: torch.Tensor, vocab_size: int | None) -> dict[str, Any]:
    """Which invariants ``i -> i + d2t[i]`` breaks: ids must be >= 0, strictly increasing and < V.

    Returns counts, the first offending indices and a boolean mask ``bad`` over draft ids (for
    figures; None when the table is valid).
    """
    if is_valid(d2t, vocab_size):
        return no_breaks()
    ids = target_ids(d2t)
    negative = ids < 0
    not_increasing = torch.zeros_like(negative)
    not_increasing[1:] = ids[1:] <= ids[:-1]
    too_big = ids >= vocab_size if vocab_size is not None else torch.zeros_like(negative)
    bad = negative | not_increasing | too_big
    out: dict[str, Any] = {"valid": not bool(bad.any()), "bad": bad}
    for name, mask in (("negative_ids", negative), ("not_increasing", not_increasing), ("ids_out_of_range", too_big)):
        idx = mask.nonzero().flatten()
        out[name] = int(idx.numel())
        if idx.numel():
            out[f"first_{name}"] = idx[:SHOW].tolist()
    return out


def no_breaks() -> dict[str, Any]:
    return {"valid": True, "bad": None, "negative_ids": 0, "not_increasing": 0, "ids_out_of_range": 0}


def leading_zeros(d2t: torch.Tensor) -> int:
    """Length of the run of zeros at the head of d2t (target ids 0..k-1 kept)."""
    nonzero = np.flatnonzero(d2t.numpy()[:4096])  # the head is short; look further only when it is all zeros
    if nonzero.size:
        return int(nonzero[0])
    nonzero = np.flatnonzero(d2t.numpy())
    return int(nonzero[0]) if nonzero.size else int(d2t.numel())


@dataclass(frozen=True)
class CandidateCheck:
    """One way of reading the stored table, and the evidence for it."""

    name: str
    d2t: torch.Tensor = field(repr=False, compare=False)
    valid: bool
    matches_t2d: bool | None  # None: no usable t2d
    head_rows_equal: float | None = None  # share of lm_head rows bitwise equal to target.lm_head[ids]
    head_cosine: float | None = None  # mean row cosine with target.lm_head[ids]

    @property
    def matches_head(self) -> bool:
        return self.head_rows_equal == 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "meaning": CANDIDATES[self.name], "valid": self.valid,
                "matches_t2d": self.matches_t2d, "head_rows_equal": self.head_rows_equal,
                "head_cosine": self.head_cosine}


def inv_summary(inv: Mapping[str, Any]) -> dict[str, Any]:
    """The invariant counts without the per-id mask (for evidence)."""
    return {k: v for k, v in inv.items() if k != "bad"}


# -- reading ------------------------------------------------------------------------------------
def find_key(ckpt: Checkpoint, leaf: str) -> str | None:
    names = [n for n in ckpt.tensors if n.split(".")[-1] == leaf]
    return min(names, key=len) if names else None


def head_key(ckpt: Checkpoint) -> str | None:
    """The output head of a checkpoint (a tied head falls back to the input embedding)."""
    for name in ("lm_head.weight", "model.lm_head.weight"):
        if name in ckpt:
            return name
    return next((n for n in ("model.embed_tokens.weight", "embed_tokens.weight") if n in ckpt), None)


def mapping_sizes(ckpt: Checkpoint, target: Checkpoint | None, d2t_key: str | None, t2d_key: str | None) -> tuple[int | None, int | None]:
    spec = ckpt.spec
    n = spec.draft_vocab_size or spec.lm_head_rows
    if d2t_key is not None and len(ckpt.info(d2t_key).shape) == 1:
        n = ckpt.info(d2t_key).shape[0]
    v = spec.vocab_size
    if v is None and t2d_key is not None and len(ckpt.info(t2d_key).shape) == 1:
        v = ckpt.info(t2d_key).shape[0]
    if v is None and target is not None:
        v = target.spec.vocab_size or (target.info(k).shape[0] if (k := head_key(target)) else None)
    if v is None and n is not None and d2t_key is None and t2d_key is None:
        v = n
    return n, v


class MappingReader:
    """Reads the mapping once, with shape / dtype checks (``vocab/bad-shape`` findings); the diagnosis builds on it."""

    def __init__(self, ckpt: Checkpoint, target: Checkpoint | None) -> None:
        self.ckpt, self.target = ckpt, target
        self.d2t_key, self.t2d_key = find_key(ckpt, "d2t"), find_key(ckpt, "t2d")
        self.n, self.v = mapping_sizes(ckpt, target, self.d2t_key, self.t2d_key)
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self.d2t = self._read_d2t()
        self.t2d = self._read_t2d()
        self.t2d_sum = int(np.count_nonzero(self.t2d.numpy())) if self.t2d is not None else None

    # reading with shape / dtype checks -------------------------------------------------------
    def _bad_shape(self, title: str, severity: Severity = Severity.CRITICAL, /, **evidence: Any) -> None:
        self.findings.append(Finding("vocab/bad-shape", severity, title, evidence=evidence,
                                     detail="A mapping of the wrong type or size is misread or rejected by the engines."))

    def _read_d2t(self) -> torch.Tensor | None:
        if self.d2t_key is None:
            return None
        info = self.ckpt.info(self.d2t_key)
        if not readable_table(info):
            self._bad_shape(f"{self.d2t_key} is {info.dtype} {list(info.shape)}, expected int64 [N]",
                            tensor=self.d2t_key, dtype=info.dtype, shape=list(info.shape))
            return None
        d2t = self.ckpt.read(self.d2t_key)
        if d2t.ndim != 1 or d2t.dtype.is_floating_point or d2t.dtype == torch.bool or d2t.is_complex():
            self._bad_shape(f"{self.d2t_key} is {info.dtype} {list(info.shape)}, expected int64 [N]",
                            tensor=self.d2t_key, dtype=info.dtype, shape=list(info.shape))
            return None
        if info.dtype != "I64":
            self._bad_shape(f"{self.d2t_key} is {info.dtype}, expected I64 (int64)", Severity.WARNING,
                            tensor=self.d2t_key, dtype=info.dtype)
        spec = self.ckpt.spec
        for what, size in (("lm_head rows", spec.lm_head_rows), ("config draft_vocab_size", spec.draft_vocab_size)):
            if size is not None and size != d2t.numel():
                self._bad_shape(f"{self.d2t_key} has {d2t.numel()} entries but {what} = {size} (stale mapping?)",
                                tensor=self.d2t_key, d2t_len=d2t.numel(), **{what.replace(" ", "_"): size})
        return d2t.to(torch.int64)

    def _read_t2d(self) -> torch.Tensor | None:
        if self.t2d_key is None:
            return None
        info = self.ckpt.info(self.t2d_key)
        if not readable_table(info):
            self._bad_shape(f"{self.t2d_key} is {info.dtype} {list(info.shape)}, expected BOOL [V = {self.v}]",
                            Severity.WARNING, tensor=self.t2d_key, dtype=info.dtype, shape=list(info.shape), vocab_size=self.v)
            return None
        t2d = self.ckpt.read(self.t2d_key)
        if t2d.ndim != 1 or (self.v is not None and t2d.numel() != self.v):
            self._bad_shape(f"{self.t2d_key} has shape {list(info.shape)}, expected [V = {self.v}]", Severity.WARNING,
                            tensor=self.t2d_key, shape=list(info.shape), vocab_size=self.v)
            return None
        if t2d.dtype != torch.bool:
            if t2d.dtype.is_floating_point or bool(((t2d != 0) & (t2d != 1)).any()):
                self._bad_shape(f"{self.t2d_key} is {info.dtype} with values other than 0/1, expected BOOL",
                                Severity.WARNING, tensor=self.t2d_key, dtype=info.dtype)
                return None
            self._bad_shape(f"{self.t2d_key} is {info.dtype}, expected BOOL", Severity.INFO, tensor=self.t2d_key,
                            dtype=info.dtype)
            t2d = t2d != 0
        return t2d

# -- lm_head cross-check ------------------------------------------------------------------------
def compare_head_rows(draft: Checkpoint, draft_key: str, target: Checkpoint, target_key: str,
                      tables: Sequence[torch.Tensor]) -> list[tuple[float, float]]:
    """For each d2t table: (share of draft lm_head rows bitwise equal to target rows ids, mean row cosine).

    Target rows are read in blocks (never the whole head at once); rows are compared after casting
    the target rows to the draft's dtype, as speculators copies them.
    """
    if not tables:
        return []
    t_info, d_info = target.info(target_key), draft.info(draft_key)
    if len(t_info.shape) != 2 or len(d_info.shape) != 2 or t_info.shape[1] != d_info.shape[1]:
        return [(0.0, 0.0)] * len(tables)
    draft_head = draft.read(draft_key)
    id_lists = [target_ids(t) for t in tables]
    equal = [0] * len(tables)
    cosine = [0.0] * len(tables)
    for start, block in _head_blocks(target, target_key):
        stop = start + block.shape[0]
        for k, ids in enumerate(id_lists):
            lo, hi = int(torch.searchsorted(ids, start)), int(torch.searchsorted(ids, stop))
            if lo == hi:
                continue
            want = block[ids[lo:hi] - start].to(draft_head.dtype)
            got = draft_head[lo:hi]
            equal[k] += int((want == got).all(dim=1).sum())
            cosine[k] += float(torch.nn.functional.cosine_similarity(want.float(), got.float(), dim=1).sum())
    n = draft_head.shape[0]
    return [(round(e / n, 6), round(c / n, 6)) for e, c in zip(equal, cosine, strict=True)]


def recover_ids_from_head(draft: Checkpoint, draft_key: str, target: Checkpoint, target_key: str) -> torch.Tensor | None:
    """The target ids whose lm_head rows the draft lm_head copies (speculators), or None when not a unique copy.

    Draft rows are hashed by their bytes; target rows are read in blocks, cast to the draft dtype and
    looked up. Every draft row must be found exactly once, at strictly increasing target ids.
    """
    t_info, d_info = target.info(target_key), draft.info(draft_key)
    if len(t_info.shape) != 2 or len(d_info.shape) != 2 or t_info.shape[1] != d_info.shape[1]:
        return None
    head = draft.read(draft_key).contiguous()
    rows = {bytes(r): i for i, r in enumerate(head.view(torch.uint8).reshape(head.shape[0], -1).numpy())}
    if len(rows) != head.shape[0]:
        return None  # repeated draft rows: no unique answer
    ids = torch.full((head.shape[0],), -1, dtype=torch.int64)
    for start, block in _head_blocks(target, target_key):
        raw = block.to(head.dtype).contiguous().view(torch.uint8).reshape(block.shape[0], -1).numpy()
        for j, row in enumerate(raw):
            i = rows.get(bytes(row))
            if i is not None:
                if ids[i] >= 0:
                    return None  # two target rows equal one draft row
                ids[i] = start + j
    if bool((ids < 0).any()) or not bool((ids[1:] > ids[:-1]).all()):
        return None
    return ids


def _head_blocks(target: Checkpoint, key: str) -> Iterator[tuple[int, torch.Tensor]]:
    """(first row, rows) blocks of a 2-D tensor, read HEAD_BLOCK_ROWS at a time."""
    from safetensors import safe_open

    info = target.info(key)
    if info.begin is None:
        full = target.read(key)
        for start in range(0, info.shape[0], HEAD_BLOCK_ROWS):
            yield start, full[start:start + HEAD_BLOCK_ROWS]
        return
    with safe_open(str(info.file), framework="pt") as fh:
        sl = fh.get_slice(key)
        for start in range(0, info.shape[0], HEAD_BLOCK_ROWS):
            yield start, sl[start:start + HEAD_BLOCK_ROWS]

"""Coverage: how much of the target's token mass the draft vocabulary keeps, from token counts or a text sample."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ..errors import UsageError
from ..io.jsonio import read_json


@dataclass(frozen=True)
class Coverage:
    """How much of the target token mass the draft vocabulary covers."""

    source: str  # file name, "counts" or "text"
    covered: float  # share of total count on draft ids
    ideal: float  # share the N most frequent ids would cover
    total: int
    missed: tuple[dict[str, Any], ...]  # most frequent target ids outside the draft vocab
    counts: torch.Tensor = field(repr=False, compare=False)
    draft_ids: torch.Tensor = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "covered": self.covered, "ideal": self.ideal, "total": self.total,
                "missed": list(self.missed)}



@dataclass(frozen=True)
class TokenCounts:
    """Counts per target id counted here (e.g. the target's tokens over served traffic), with where from."""

    counts: torch.Tensor
    source: str


def load_token_counts(source: Any, vocab_size: int | None) -> tuple[torch.Tensor, str]:
    """Counts per target id from a path (.json list, {id: count} or {"counts": list}; .npy), in-memory values or
    :class:`TokenCounts`."""
    name = "counts"
    if isinstance(source, TokenCounts):
        name, source = source.source, source.counts
    if isinstance(source, (str, Path)):
        path = Path(source)
        name = path.name
        if not path.is_file():
            raise UsageError(f"{path}: token counts file not found")
        if path.suffix == ".npy":
            try:
                source = np.load(path, allow_pickle=False)
            except (ValueError, OSError) as exc:
                raise UsageError(f"{path}: not a numeric .npy array ({exc})") from None
        else:
            source = read_json(path, "token counts file (a JSON list or {id: count} object)")
    if isinstance(source, Mapping) and "counts" in source:  # {"counts": [...], ...metadata}
        source = source["counts"]
    if isinstance(source, Mapping):
        try:
            pairs = {int(k): float(v) for k, v in source.items()}
        except (TypeError, ValueError):
            raise UsageError(f"{name}: token counts object must map integer ids to numbers") from None
        size = vocab_size or (max(pairs) + 1 if pairs else 0)
        counts = torch.zeros(size, dtype=torch.float64)
        for k, v in pairs.items():
            if not 0 <= k < size:
                raise UsageError(f"{name}: token id {k} is outside the target vocab [0, {size})")
            counts[k] = v
    else:
        try:
            counts = torch.as_tensor(source, dtype=torch.float64).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise UsageError(f"{name}: token counts must be a list of numbers (one per target id)") from None
        if vocab_size is not None and counts.numel() != vocab_size:
            raise UsageError(f"{name}: {counts.numel()} counts, but the target vocab has V = {vocab_size} ids")
    if bool((counts < 0).any()) or not bool(torch.isfinite(counts).all()):
        raise UsageError(f"{name}: token counts must be finite and non-negative")
    return counts, name


def _tokenizer(tokenizer: Any) -> Any:
    if tokenizer is None or not isinstance(tokenizer, (str, Path)):
        return tokenizer
    from ..hf_load import load_tokenizer

    return load_tokenizer(tokenizer)


def measure_coverage(kept_ids: torch.Tensor, vocab_size: int | None, tokenizer: Any = None, token_counts: Any = None,
                     text: str | None = None, top: int = 20) -> Coverage:
    """Share of target-token mass on the draft vocab and the most frequent ids it misses."""
    tok = _tokenizer(tokenizer)
    if token_counts is not None:
        counts, source = load_token_counts(token_counts, vocab_size)
    else:
        if tok is None:
            raise UsageError("counting tokens in a text sample needs a tokenizer")
        ids = torch.as_tensor(tok(text, add_special_tokens=False)["input_ids"], dtype=torch.int64)
        size = vocab_size or int(ids.max()) + 1
        if ids.numel() and int(ids.max()) >= size:
            raise UsageError(f"tokenizer produced id {int(ids.max())} outside the target vocab [0, {size})")
        counts, source = torch.bincount(ids, minlength=size).to(torch.float64), "text"
    total = float(counts.sum())
    in_draft = torch.zeros(counts.numel(), dtype=torch.bool)
    kept = kept_ids[kept_ids < counts.numel()]
    in_draft[kept] = True
    covered = float(counts[in_draft].sum()) / total if total else 0.0
    ideal = float(counts.sort(descending=True).values[: kept_ids.numel()].sum()) / total if total else 0.0
    missed_counts = counts.masked_fill(in_draft, -1.0)
    order = missed_counts.argsort(descending=True)[:top]
    missed = []
    for i in order.tolist():
        if missed_counts[i] <= 0:
            break
        row: dict[str, Any] = {"id": i, "count": float(counts[i]), "share": float(counts[i]) / total}
        if tok is not None:
            row["token"] = tok.decode([i])
        missed.append(row)
    return Coverage(source=source, covered=covered, ideal=ideal, total=int(total), missed=tuple(missed),
                    counts=counts, draft_ids=kept)

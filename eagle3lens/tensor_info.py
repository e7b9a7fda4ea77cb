"""TensorInfo: where a tensor lives and what it is, from headers alone (shared by the checkpoint reader and the
DraftSpec builder, so neither imports the other's module)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .io.safetensors_header import DTYPE_BITS


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives and what it is, from headers alone."""

    name: str
    dtype: str  # safetensors dtype name, e.g. "BF16", "I64", "BOOL"
    shape: tuple[int, ...]
    file: Path
    begin: int | None = None  # absolute byte offsets in ``file`` (None for pickled tensors)
    end: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BITS[self.dtype] // 8

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "file": self.file.name,
                "begin": self.begin, "end": self.end}

    @classmethod
    def _fast(cls, name: str, dtype: str, shape: tuple[int, ...], file: Path, begin: int | None,
              end: int | None) -> TensorInfo:
        """The same object as ``TensorInfo(...)``, built without the frozen dataclass's per-field
        ``object.__setattr__`` (half the cost; a header can list a million tensors)."""
        obj = object.__new__(cls)
        obj.__dict__.update(name=name, dtype=dtype, shape=shape, file=file, begin=begin, end=end)
        return obj

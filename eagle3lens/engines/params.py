"""ParamSpec: one parameter an engine's draft class creates (a leaf shared by the profile, its steps and tables)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ParamSpec:
    """One engine parameter: its name, shape, and what it holds if nothing writes it."""

    name: str
    shape: tuple[int, ...]
    init: str  # "empty" (torch.empty), "ones", "zeros", "nan", "kaiming-uniform", "normal(0, std)", "false"
    role: str = "other"  # decoder | fc | norm | lm_head | embed | vocab | aux-norm | verifier
    shards: dict[str, tuple[int, ...]] = field(default_factory=dict)  # shard -> shape, for stacked params
    dtype: str | None = None  # fixed dtype (I64 mapping) or None (model dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "init": self.init, "role": self.role,
                "shards": {k: list(v) for k, v in self.shards.items()}}

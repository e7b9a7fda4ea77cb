"""Result types for acceptance on served traffic: sampling, the served vocabulary (plain data, no torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..findings import to_jsonable

FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max: the logits are scaled in float32


@dataclass(frozen=True)
class Sampling:
    """How the server samples: temperature (> 0), top-k (0 = off) and top-p (0 < p <= 1; 1 = off), applied to the
    target's logits in that order (both engines: top-k, then top-p over what top-k kept)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    # the target's own logit transform, applied to its head's output before sampling (HF and both engines):
    # a scale (Cohere's logit_scale, 1 / Granite's logits_scaling) and a soft cap (Gemma-2's final_logit_softcapping)
    logit_scale: float = 1.0
    softcap: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise UsageError(f"--temperature must be a finite number above 0, got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise UsageError(f"--top-p must be in (0, 1], got {self.top_p}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise UsageError(f"--top-k must be a whole number >= 0 (0: off), got {self.top_k!r}")

    def for_target(self, config: Any) -> Sampling:
        """This sampling with the logit transform ``config`` (the target's, a dict) names."""
        from dataclasses import replace

        if not isinstance(config, dict):
            return self
        config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
        scale = 1.0
        for key, invert in (("logit_scale", False), ("logits_scaling", True)):
            value = config.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
                scale = scale / value if invert else scale * value
                if not scale <= FLOAT32_MAX:
                    raise UsageError(f"the target config's {key} {value:g} scales its logits by {scale:g}, past "
                                     f"float32's largest value {FLOAT32_MAX:g}: every sampled figure would be nan")
        cap = config.get("final_logit_softcapping")
        cap = float(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0 else None
        return replace(self, logit_scale=scale, softcap=cap)

    def label(self) -> str:
        return (f"T = {self.temperature:g}" + (f", top-k {self.top_k}" if self.top_k else "")
                + (f", top-p {self.top_p:g}" if self.top_p < 1 else "")
                + (f", logits x {self.logit_scale:g}" if self.logit_scale != 1.0 else "")
                + (f", soft cap {self.softcap:g}" if self.softcap is not None else ""))


@dataclass(frozen=True)
class PerStart:
    """The chain's acceptance averaged over every start position, as if a round started at each (what training
    libraries report as step accuracy); the engine counts per drafting round instead (:mod:`.rounds`)."""

    accept_len: float | None
    full_acc: tuple[float, ...]
    cond_acc: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"accept_len": self.accept_len, "full_acc": list(self.full_acc),
                            "cond_acc": list(self.cond_acc)})


@dataclass(frozen=True)
class SampledView:
    """One serving view's acceptance under speculative sampling: per-position rate and accept length expected
    over the drafting rounds the engine runs (ratios of expectations, :mod:`.rounds`), and per start."""

    name: str
    sampling: Sampling
    full_acc: tuple[float, ...]  # per round: E[rounds whose positions 0..k were all accepted] / E[rounds]
    cond_acc: tuple[float, ...]  # per round: the same for position k over those whose 0..k-1 were accepted
    accept_len: float | None  # per round: 1 + E[accepted] / E[rounds]
    greedy_accept_len: float | None  # the greedy view's, per round
    exact_chain: bool  # later positions read the target run on the draft's own chain (else the data's prefix)
    per_start: PerStart | None = None
    rounds: float = 0.0  # expected drafting rounds over the samples

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"temperature": self.sampling.temperature, "top_p": self.sampling.top_p,
                            "top_k": self.sampling.top_k, "logit_scale": self.sampling.logit_scale,
                            "softcap": self.sampling.softcap, "full_acc": list(self.full_acc), "cond_acc": list(self.cond_acc),
                            "accept_len": self.accept_len, "greedy_accept_len": self.greedy_accept_len,
                            "exact_chain": self.exact_chain, "count": "per-round", "rounds": self.rounds,
                            "per_start": self.per_start.to_dict() if self.per_start is not None else None})


@dataclass(frozen=True)
class ServedVocab:
    """Target tokens outside the draft vocabulary on the scored traffic, per draft position, and their cost.

    ``oov_share[k]``: share of verify starts whose target token at position k is outside the draft vocab (the
    draft can never propose it). ``ceiling[k]``: share whose tokens 0..k are all inside (the best any draft with
    this vocab reaches); ``ceiling_accept_len = 1 + sum(ceiling)`` against ``1 + K`` for a full vocab, the
    difference is ``cost``. ``cut[k]``: starts where the served greedy chain had accepted 0..k-1 and position k's
    token was outside. With sampling, ``sampled_oov_share[k]`` is the target's probability mass outside.
    """

    steps: int
    starts: int
    tokens: int  # target tokens looked at (every scored position)
    oov_tokens: int
    oov_share: tuple[float, ...]
    ceiling: tuple[float, ...]
    cut: tuple[int, ...]
    sampled_oov_share: tuple[float, ...] | None = None
    draft_vocab: int | None = None
    view: str = "as_served"

    @property
    def ceiling_accept_len(self) -> float:
        return 1.0 + sum(self.ceiling)

    @property
    def cost(self) -> float:
        return (1.0 + self.steps) - self.ceiling_accept_len

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"steps": self.steps, "starts": self.starts, "tokens": self.tokens,
                            "oov_tokens": self.oov_tokens, "oov_share": list(self.oov_share),
                            "ceiling": list(self.ceiling), "ceiling_accept_len": self.ceiling_accept_len,
                            "cost": self.cost, "cut": list(self.cut), "draft_vocab": self.draft_vocab,
                            "sampled_oov_share": None if self.sampled_oov_share is None
                            else list(self.sampled_oov_share), "view": self.view})


@dataclass(frozen=True)
class Traffic:
    """What the served traffic adds to an acceptance result: sampled views and the served vocabulary."""

    sampled: dict[str, SampledView] = field(default_factory=dict)
    vocab: ServedVocab | None = None
    source: str | None = None  # "chat", "prompts" or "dump"

    def to_dict(self) -> dict[str, Any]:
        return {"sampled": {n: v.to_dict() for n, v in self.sampled.items()},
                "served_vocab": self.vocab.to_dict() if self.vocab is not None else None, "source": self.source}

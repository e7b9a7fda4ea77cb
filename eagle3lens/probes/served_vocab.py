"""The served vocabulary: how often the target's tokens on served traffic fall outside the draft vocabulary.

A draft with a reduced vocabulary (N < V, d2t) can only ever propose its N target ids: a position whose target
token is outside them is rejected whatever the draft computes, and so is every later position of that verify
step. Counted per draft position k over the verify starts of the scored traffic (live capture from prompts or
chat conversations, or a dump): the share outside, the ceiling any draft with this vocabulary reaches, and the
starts where the served greedy chain was still accepted when the vocabulary cut it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .traffic_result import ServedVocab


@dataclass
class ServedVocabCounts:
    """Summed counts over sequences; ``result()`` gives the frozen :class:`ServedVocab`."""

    steps: int
    starts: int = 0
    tokens: int = 0
    oov_tokens: int = 0
    oov: list[int] = field(default_factory=list)
    inside: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)
    sampled: list[float] | None = None
    draft_vocab: int | None = None

    def __post_init__(self) -> None:
        self.oov, self.inside, self.cut = [0] * self.steps, [0] * self.steps, [0] * self.steps

    def add(self, target_tokens: torch.Tensor, mask: torch.Tensor, in_vocab: torch.Tensor,
            proposed: Sequence[torch.Tensor], sampled_mass: torch.Tensor | None = None) -> None:
        """One sequence. ``target_tokens`` [T']: the target's token at each position (greedy, or sampled);
        ``mask`` [T']: positions that count (a verify start counts when its first position does);
        ``in_vocab`` [V] bool: the draft's target ids; ``proposed[k]`` [T']: the served chain's target id at step
        k from each start; ``sampled_mass`` [T']: the target's sampled mass outside the vocab per position."""
        K, T = self.steps, target_tokens.shape[0]
        outside = ~in_vocab.to(target_tokens.device)[target_tokens]
        self.tokens += int(mask.sum())
        self.oov_tokens += int((outside & mask).sum())
        n = T - K + 1
        if n <= 0:
            return
        starts = mask[:n]
        self.starts += int(starts.sum())
        all_inside = starts.clone()
        run = starts.clone()  # the served greedy chain accepted every earlier position
        for k in range(K):
            out_k = outside[k:k + n]
            self.oov[k] += int((out_k & starts).sum())
            self.cut[k] += int((out_k & run).sum())
            all_inside &= ~out_k
            self.inside[k] += int(all_inside.sum())
            run &= proposed[k][:n].to(target_tokens.device) == target_tokens[k:k + n]
        if sampled_mass is not None:
            if self.sampled is None:
                self.sampled = [0.0] * K
            for k in range(K):
                self.sampled[k] += float((sampled_mass[k:k + n].float() * starts.float()).sum())

    def result(self, view: str = "as_served") -> ServedVocab:
        share = tuple(o / self.starts if self.starts else 0.0 for o in self.oov)
        ceiling = tuple(c / self.starts if self.starts else 0.0 for c in self.inside)
        sampled = (tuple(m / self.starts if self.starts else 0.0 for m in self.sampled)
                   if self.sampled is not None else None)
        return ServedVocab(self.steps, self.starts, self.tokens, self.oov_tokens, share, ceiling, tuple(self.cut),
                           sampled, self.draft_vocab, view)


def in_draft_vocab(d2t: torch.Tensor | None, draft_vocab: int, vocab: int) -> torch.Tensor:
    """[V] bool: the target ids a draft can propose (``i + d2t[i]``; all ids when N = V or there is no d2t)."""
    mask = torch.zeros(vocab, dtype=torch.bool)
    if d2t is None or draft_vocab >= vocab:
        mask[:draft_vocab] = True
        return mask
    ids = torch.arange(draft_vocab) + d2t.cpu().long()
    mask[ids[(ids >= 0) & (ids < vocab)]] = True
    return mask


def served_token_counts(samples: Iterable[Any], target: Any) -> torch.Tensor:
    """[V] counts of the target's greedy token at every scored position of ``samples`` (loss-masked), as the
    acceptance probe's served vocabulary counts them: the vocab probe's coverage over the same traffic."""
    from .acceptance import Teacher

    teacher = Teacher.open(target, torch.device("cpu"))
    counts = torch.zeros(int(teacher.lm_head.shape[0]), dtype=torch.float64)
    with torch.no_grad():
        for s in samples:
            last = s.last.float() if s.last_normed else teacher.final_norm(s.last)
            tokens = teacher.greedy_tokens(last[1:])
            counts += torch.bincount(tokens[s.loss_mask[1:].bool()], minlength=counts.numel()).double()
    return counts

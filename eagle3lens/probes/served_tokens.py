"""The target's tokens over served traffic, counted where the acceptance probe counts its served vocabulary: what
the vocab probe's coverage reads for ``vocab --chat`` / ``--prompts``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..target_runtime import Teacher


def served_token_counts(samples: Iterable[Any], target: Any) -> torch.Tensor:
    """[V] counts of the target's greedy token at every scored (loss-masked) position of ``samples``, as
    ``estimate_acceptance`` finds them (``Teacher.greedy_tokens`` on the final-norm states)."""
    teacher = Teacher.open(target, torch.device("cpu"))
    counts = torch.zeros(int(teacher.lm_head.shape[0]), dtype=torch.float64)
    with torch.no_grad():
        for s in samples:
            last = s.last.float() if s.last_normed else teacher.final_norm(s.last)
            tokens = teacher.greedy_tokens(last[1:])
            counts += torch.bincount(tokens[s.loss_mask[1:].bool()], minlength=counts.numel()).double()
    return counts

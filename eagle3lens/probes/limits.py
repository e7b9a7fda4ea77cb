"""Bounds on the work an input can ask for, and the checks that keep token ids and lengths inside the target.

``MAX_STEPS`` caps the draft steps K of an offline acceptance run. Neither engine names an upper bound:
SGLang 0.5.23 parses ``--speculative-num-steps`` as a plain int and checks only that some algorithms get a
positive one (``srt/arg_groups/speculative_hook.py``: "MTP requires positive speculative_num_steps"), and vLLM
0.33.0 declares ``num_speculative_tokens: int = Field(default=None, gt=0)`` (``vllm/config/speculative.py:413``).
What bounds K in both is the context and the KV cache (SGLang adds the draft tokens to every request's context,
``srt/mem_cache/kv_cache_configurator.py``) and latency: K draft forwards run one after another per verify step. SGLang's own automatic
choice is 3 or 5 steps (``_auto_choose_speculative_params``), trainers' TTT lengths are single digits, and accept
length is at most K + 1 while per-step acceptance decays geometrically, so past a few dozen steps nothing more is
measured: 64 leaves an order of magnitude of headroom and keeps a run to seconds per sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from ..errors import CheckpointError, UsageError

MAX_STEPS = 64
MIN_TOKENS = 2  # a position and the token after it: the least a sample needs to predict anything


def check_steps(steps: int, source: str = "--steps") -> int:
    """``steps`` when it is a draft step count the engines could run (1..MAX_STEPS), else one clear error."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"{source}: {steps!r} draft steps; give 1 to {MAX_STEPS} (engines draft a handful per "
                         "verify step: SGLang picks 3 or 5 itself)")
    return steps


def max_positions(config: Mapping[str, Any] | Any) -> int | None:
    """The target's ``max_position_embeddings`` (a config dict or an HF config; the text config of a multimodal
    one), or None when it names none."""
    if isinstance(config, Mapping):
        text = config.get("text_config")
        value = (text if isinstance(text, Mapping) and "max_position_embeddings" in text else config).get(
            "max_position_embeddings")
    else:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        value = getattr(text, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_length(tokens: int, limit: int | None, source: str | Path, what: str = "the sample") -> None:
    """Refuse ``tokens`` positions beyond the target's ``limit`` (its max_position_embeddings)."""
    if limit is not None and tokens > limit:
        raise CheckpointError(source, f"{what} has {tokens} tokens, more than the target's max_position_embeddings "
                                      f"{limit}: the target cannot run it")


def check_token_ids(ids: torch.Tensor, vocab: int, source: str | Path, what: str = "") -> None:
    """Refuse an id outside ``[0, vocab)``, naming the first offending id and its position."""
    flat = ids.reshape(-1)
    bad = ((flat < 0) | (flat >= vocab)).nonzero().flatten()
    if bad.numel():
        at = int(bad[0])
        raise CheckpointError(source, f"{what}token id {int(flat[at])} at position {at} is outside the "
                                      f"target's vocabulary of {vocab} (ids 0 to {vocab - 1})")

"""The target's greedy continuation of one prompt, as a server decodes it: the prompt once, then one token a step
against the target's KV cache (the whole sequence again each step where the model keeps no cache)."""

from __future__ import annotations

import inspect
from collections.abc import Collection

import torch
from torch import nn

CACHE_KWARGS = ("cache", "past_key_values")  # transformers 5.x names it ``cache``; earlier releases the other


def cache_kwarg(target: nn.Module) -> str | None:
    """The keyword the target's forward takes its KV cache by, or ``None`` (a model that keeps none)."""
    try:
        params = inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in CACHE_KWARGS if name in params), None)


def greedy_continuation(target: nn.Module, ids: torch.Tensor, new_tokens: int,
                        stop: Collection[int] = frozenset()) -> torch.Tensor:
    """``ids`` [1, T] continued by up to ``new_tokens`` argmax tokens (no sampling), ending after a ``stop`` id as a
    server's generation does (nothing after it is ever verified); deterministic and engine-independent.

    An HF model decodes against its own KV cache (a ``DynamicCache``): one token's forward a step instead of the
    whole sequence's, the same tokens up to float rounding, as every server computes them."""
    kwarg = cache_kwarg(target)
    cache = _new_cache(target) if kwarg is not None else None
    step = ids
    for _ in range(new_tokens):
        extra = {kwarg: cache, "use_cache": True} if kwarg is not None else {"use_cache": False}
        logits = target(input_ids=step, **extra).logits[:, -1]
        token = logits.argmax(-1, keepdim=True)
        ids = torch.cat([ids, token], dim=1)
        if int(token) in stop:
            break
        step = token if cache is not None else ids
    return ids


def _new_cache(target: nn.Module) -> object:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=getattr(target, "config", None))
    except TypeError:  # a release whose DynamicCache takes no config
        return DynamicCache()

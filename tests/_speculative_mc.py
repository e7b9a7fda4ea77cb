"""A Monte-Carlo run of speculative sampling as SGLang and vLLM verify EAGLE-3 drafts (test helper).

Independent of ``eagle3lens.probes.sampling``: the target's distribution is warped here the way vLLM's
``apply_top_k_top_p`` does it (ascending sort, top-k below the k-th largest masked, then the tail whose cumulative mass stays <= 1 - p masked), each verify
step draws coins: the draft proposes its greedy chain, the target (run on the prefix plus the tokens accepted
so far) accepts token x with probability min(1, p(x) / q(x)) (q one-hot on the draft's token), a rejection
resamples from the residual max(0, p - q) renormalised and ends the step, K acceptances add the bonus token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from eagle3lens.draft import map_to_target
from eagle3lens.probes.acceptance import chain
from eagle3lens.probes.data import Sample


def warp_vllm(logits: torch.Tensor, temperature: float, top_p: float, top_k: int = 0) -> torch.Tensor:
    """vLLM's compute_probs: logits / T, top-k (mask below the k-th largest of the ascending sort), top-p by
    ascending sort and cumulative sum of what top-k left, softmax."""
    x = logits.float() / temperature
    sorted_x, idx = x.sort(dim=-1, descending=False)
    if 0 < top_k < x.shape[-1]:
        kth = sorted_x[..., x.shape[-1] - top_k].unsqueeze(-1)
        sorted_x = sorted_x.masked_fill(sorted_x < kth, float("-inf"))
    if top_p < 1.0:
        cum = sorted_x.softmax(-1).cumsum(-1)
        mask = cum <= 1 - top_p
        mask[..., -1] = False
        sorted_x = sorted_x.masked_fill(mask, float("-inf"))
    x = sorted_x.scatter(-1, idx, sorted_x)
    return x.softmax(-1)


def greedy_chains(draft: Any, samples: Sequence[Sample], layers: Sequence[int], steps: int) -> list[list[list[int]]]:
    """Per sample, per verify start i (whose first position is loss-masked), the draft's K target ids."""
    out = []
    for s in samples:
        chunks = dict(zip(sorted(s.layers or layers), s.aux.split(draft.cfg.target_hidden, dim=-1), strict=True))
        feature = torch.cat([chunks[k][:-1] for k in layers], dim=-1)
        preds = chain(draft, s.token_ids[1:], feature, "always", steps)
        proposed = [map_to_target(p, draft.d2t) for p in preds]
        T = s.token_ids.shape[0] - 1
        mask = s.loss_mask[1:]
        out.append([[int(proposed[k][i]) for k in range(steps)] if bool(mask[i]) else []
                    for i in range(T - steps + 1)])
    return out


def run(target: torch.nn.Module, samples: Sequence[Sample], chains: list[list[list[int]]], temperature: float,
        top_p: float, trials: int, seed: int = 0, cache: dict[Any, torch.Tensor] | None = None,
        top_k: int = 0) -> float:
    """Mean accept length (bonus token included) over ``trials`` verify steps spread evenly over the starts.
    ``cache`` keeps the target's logits per (sample, start, accepted count) across runs on the same chains."""
    gen = torch.Generator().manual_seed(seed)
    starts = [(si, i) for si, per in enumerate(chains) for i, c in enumerate(per) if c]
    logits_at = {} if cache is None else cache

    def target_probs(si: int, i: int, accepted: list[int]) -> torch.Tensor:
        key = (si, i, len(accepted))
        if key not in logits_at:
            ids = torch.cat([samples[si].token_ids[:i + 2], torch.tensor(accepted, dtype=torch.long)])[None]
            with torch.no_grad():
                logits_at[key] = target(input_ids=ids, use_cache=False).logits[0, -1]
        return warp_vllm(logits_at[key], temperature, top_p, top_k)

    per_start = -(-trials // len(starts))  # stratified: every start gets the same number of trials
    total = 0
    for si, i in starts:
        draft_tokens = chains[si][i]
        active = torch.ones(per_start, dtype=torch.bool)  # trials whose verify step is still accepting
        accepted = torch.zeros(per_start, dtype=torch.long)
        for k, d in enumerate(draft_tokens):
            p = target_probs(si, i, draft_tokens[:k])
            q = torch.zeros_like(p)
            q[d] = 1.0
            coins = torch.rand(per_start, generator=gen)
            accept = active & (coins < torch.clamp(p[d] / q[d], max=1.0))
            rejected = active & ~accept
            if rejected.any():  # each rejected trial emits a token from the residual and stops
                residual = (p - q).clamp(min=0)
                torch.multinomial(residual / residual.sum(), int(rejected.sum()), replacement=True, generator=gen)
            accepted += accept.long()
            active = accept
        if active.any():  # all K accepted: the bonus token from the target after the whole chain
            torch.multinomial(target_probs(si, i, draft_tokens), int(active.sum()), replacement=True, generator=gen)
        total += int((accepted + 1).sum())
    return total / (per_start * len(starts))


def walk(target: torch.nn.Module, samples: Sequence[Sample], chains: list[list[list[int]]], temperature: float,
         top_p: float, trials: int, seed: int = 0, cache: dict[Any, torch.Tensor] | None = None,
         top_k: int = 0) -> float:
    """Accept length as the engine counts it, (accepted + rounds) / rounds, over ``trials`` walks of every sample:
    each walk starts at the sample's first start with a chain, drafts there, draws the target's coins for the
    chain's tokens, and starts its next round after the accepted tokens and the target's own (p + a + 1); a start
    without a chain (loss-masked out) is stepped over. ``cache`` as in :func:`run`."""
    gen = torch.Generator().manual_seed(seed)
    logits_at = {} if cache is None else cache
    rounds = accepted_total = 0
    for si, per in enumerate(chains):
        n = len(per)
        pos = torch.zeros(trials, dtype=torch.long)  # each trial's next round start
        for p in range(n):
            here = pos == p
            m = int(here.sum())
            if not m:
                continue
            if not per[p]:
                pos[here] = p + 1
                continue
            accepted = torch.zeros(m, dtype=torch.long)
            active = torch.ones(m, dtype=torch.bool)
            for k, d in enumerate(per[p]):
                key = (si, p, k)
                if key not in logits_at:
                    ids = torch.cat([samples[si].token_ids[:p + 2], torch.tensor(per[p][:k], dtype=torch.long)])
                    with torch.no_grad():
                        logits_at[key] = target(input_ids=ids[None], use_cache=False).logits[0, -1]
                prob = warp_vllm(logits_at[key], temperature, top_p, top_k)[d]
                active = active & (torch.rand(m, generator=gen) < prob)
                accepted += active.long()
            rounds += m
            accepted_total += int(accepted.sum())
            pos[here] = p + accepted + 1
    return (accepted_total + rounds) / rounds

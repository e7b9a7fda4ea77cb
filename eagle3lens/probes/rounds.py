"""The drafting rounds an engine runs over one sequence, and what its counters count over them.

A round starts at position p, drafts K tokens and has a of them accepted (the leading run the target verifies);
the next round starts a + 1 positions later (the accepted tokens and the target's own token follow p). SGLang
and vLLM count per round: accept length = (accepted + rounds) / rounds, and the per-position rate k = the share of
rounds whose first k draft tokens were all accepted. Averaging the chain's acceptance over every position instead
("per start", what training libraries report as step accuracy) weighs each position once, where the engine
weighs only the positions its rounds start at: where acceptance is clustered, the rounds skip the accepted
stretches, so the served figure is lower.

The walk begins at a sequence's first draftable position (``draftable``: the loss mask) and skips positions that
are not draftable (a new round begins at the next one). ``round_weights`` takes, per start, the probability that
each leading run is accepted: 0/1 for greedy verification (the walk itself, exactly) and the chain's acceptance
probabilities under speculative sampling, where it gives the probability that a round starts at each position
(a forward pass over the positions: each start's mass passes to p + a + 1 with the probability of a). The
sampled figures are then ratios of expectations, E[accepted] / E[rounds]: the engine's counters are sums over
many rounds, and their ratio tends to that ratio (renewal-reward), not to the mean of per-sequence ratios.
"""

from __future__ import annotations

import torch


def round_weights(full: torch.Tensor, draftable: torch.Tensor) -> torch.Tensor:
    """P(a round starts at p) for each start p [n], the walk begun at the first draftable start.

    ``full`` [K, n]: P(draft positions 0..k all accepted) at each start (0/1 for greedy: then the result is the
    walk's 0/1 indicator); ``draftable`` [n] bool. A round whose next start falls at or past n ends the walk.
    """
    K, n = full.shape
    fulls = full.detach().double().cpu()
    ok = draftable.detach().bool().cpu().tolist()
    nxt = [n] * (n + 1)  # the first draftable start at or after q
    for q in range(n - 1, -1, -1):
        nxt[q] = q if ok[q] else nxt[q + 1]
    # P(exactly a accepted) at each start: full[a - 1] - full[a] (full[-1] = 1, full[K] = 0)
    ones = torch.ones(1, n, dtype=torch.float64)
    upper = torch.cat([ones, fulls])
    exact = (upper - torch.cat([fulls, torch.zeros(1, n, dtype=torch.float64)])).T.tolist()  # [n][K + 1]
    weight = [0.0] * (n + 1)
    weight[nxt[0]] = 1.0
    for p in range(n):
        w = weight[p]
        if w == 0.0:
            continue
        row = exact[p]
        for a in range(min(K + 1, n - p - 1)):  # the next round starts at p + a + 1 < n
            if row[a]:
                weight[nxt[p + a + 1]] += w * row[a]
    return torch.tensor(weight[:n], dtype=torch.float64)


def round_counts(full: torch.Tensor, draftable: torch.Tensor) -> tuple[float, list[float]]:
    """(rounds, per position k: rounds whose positions 0..k were all accepted), expected under ``full``'s
    acceptance probabilities (exact counts for greedy 0/1)."""
    if full.shape[1] == 0:
        return 0.0, [0.0] * full.shape[0]
    weight = round_weights(full, draftable)
    hits = (full.detach().double().cpu() * weight).sum(-1)
    return float(weight.sum()), [float(h) for h in hits]


def per_round(rounds: float, hits: list[float]) -> tuple[float | None, tuple[float, ...], tuple[float, ...]]:
    """(accept length, per-position rates, conditional rates) from summed round counts."""
    if not rounds:
        return None, tuple(0.0 for _ in hits), tuple(0.0 for _ in hits)
    full = tuple(h / rounds for h in hits)
    before = [rounds, *hits[:-1]]
    cond = tuple(h / b if b else 0.0 for h, b in zip(hits, before, strict=True))
    return 1.0 + sum(full), full, cond

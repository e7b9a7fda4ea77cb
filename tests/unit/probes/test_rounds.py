"""The engine's drafting rounds: the greedy walk on chains built by hand, the sampled expectation against a
Monte-Carlo walk."""

from __future__ import annotations

import pytest
import torch

from eagle3lens.probes.rounds import per_round, round_counts, round_weights


def _full(accepted: list[int], K: int) -> torch.Tensor:
    """Greedy chain acceptance [K, n]: start i has its first ``accepted[i]`` positions accepted."""
    return torch.tensor([[1.0 if a > k else 0.0 for a in accepted] for k in range(K)])


def _per_start(accepted: list[int]) -> float:
    return 1 + sum(accepted) / len(accepted)


def test_clustered_acceptance_counts_fewer_per_round_than_per_start() -> None:
    # K = 3; the first three starts accept 2, the rest nothing. The engine drafts at 0 (2 accepted), then at
    # 0 + 2 + 1 = 3, 4, 5, 6, 7: six rounds, 2 accepted: (2 + 6) / 6. Per start: 1 + 6 / 8.
    accepted = [2, 2, 2, 0, 0, 0, 0, 0]
    full = _full(accepted, 3)
    draftable = torch.ones(8, dtype=torch.bool)
    assert round_weights(full, draftable).tolist() == [1, 0, 0, 1, 1, 1, 1, 1]
    rounds, hits = round_counts(full, draftable)
    assert (rounds, hits) == (6, [1, 1, 0])
    accept, rates, cond = per_round(rounds, hits)
    assert accept == pytest.approx(8 / 6) and rates == pytest.approx((1 / 6, 1 / 6, 0)) and cond == (1 / 6, 1.0, 0.0)
    assert _per_start(accepted) == pytest.approx(1.75) and accept < _per_start(accepted)


def test_uniform_acceptance_counts_alike_and_a_full_chain_skips_k_plus_1() -> None:
    # every start accepts 1 of 3: rounds at 0, 2, 4, 6, 8, each accepting 1: 2.0 per round, as per start
    rounds, hits = round_counts(_full([1] * 10, 3), torch.ones(10, dtype=torch.bool))
    assert (rounds, hits) == (5, [5, 0, 0]) and per_round(rounds, hits)[0] == _per_start([1] * 10) == 2.0
    # alternate 3 and 0: the walk lands on the accepting starts only (0, 4, 8): 4.0 per round, 2.5 per start
    accepted = [3, 0, 3, 0, 3, 0, 3, 0, 3, 0]
    rounds, hits = round_counts(_full(accepted, 3), torch.ones(10, dtype=torch.bool))
    assert (rounds, hits) == (3, [3, 3, 3]) and per_round(rounds, hits)[0] == 4.0 > _per_start(accepted) == 2.5


def test_the_walk_begins_at_the_first_draftable_start_and_steps_over_the_others() -> None:
    draftable = torch.tensor([False, True, True, False, True, True])
    assert round_weights(_full([0] * 6, 2), draftable).tolist() == [0, 1, 1, 0, 1, 1]
    # a round ending on a masked-out start resumes at the next draftable one: 1 (+2) -> 4
    assert round_weights(_full([0, 2, 0, 0, 0, 0], 2), draftable).tolist() == [0, 1, 0, 0, 1, 1]
    assert round_counts(torch.zeros(3, 0), torch.zeros(0, dtype=torch.bool)) == (0.0, [0.0, 0.0, 0.0])
    assert per_round(0.0, [0.0, 0.0]) == (None, (0.0, 0.0), (0.0, 0.0))


def _monte_carlo(alphas: torch.Tensor, draftable: list[bool], trials: int, seed: int) -> tuple[float, list[float]]:
    """Walks drawn coin by coin: at start p, position k accepted with probability alphas[k, p] while the run
    lasts; the next round starts at p + a + 1. Returns (rounds, per-position hits), summed over the trials."""
    gen = torch.Generator().manual_seed(seed)
    K, n = alphas.shape
    pos = torch.zeros(trials, dtype=torch.long)
    rounds, hits = 0, [0] * K
    for p in range(n):
        here = pos == p
        m = int(here.sum())
        if not m:
            continue
        if not draftable[p]:
            pos[here] = p + 1
            continue
        run = torch.ones(m, dtype=torch.bool)
        accepted = torch.zeros(m, dtype=torch.long)
        for k in range(K):
            run = run & (torch.rand(m, generator=gen) < alphas[k, p])
            hits[k] += int(run.sum())
            accepted += run.long()
        rounds += m
        pos[here] = p + accepted + 1
    return rounds, hits


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sampled_expectation_matches_a_monte_carlo_walk(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    K, n = 4, 40
    # P(position k accepted | 0..k-1 accepted) per start, clustered: stretches of 6 easy starts, then 6 hard ones
    easy = (torch.arange(n) // 6) % 2 == 0
    noise = torch.rand(K, n, generator=gen)
    alphas = torch.where(easy, 0.8 + 0.2 * noise, 0.3 * noise)
    draftable = (torch.rand(n, generator=gen) > 0.1).tolist()
    full = alphas.cumprod(0)
    rounds, hits = round_counts(full, torch.tensor(draftable))
    accept, rates, _ = per_round(rounds, hits)
    trials = 20_000
    mc_rounds, mc_hits = _monte_carlo(alphas, draftable, trials, seed + 10)
    assert rounds == pytest.approx(mc_rounds / trials, rel=0.01)
    assert accept is not None and accept == pytest.approx(1 + sum(mc_hits) / mc_rounds, abs=0.01)
    assert rates == pytest.approx([h / mc_rounds for h in mc_hits], abs=0.01)
    per_start = 1 + float((full * torch.tensor(draftable)).sum()) / sum(draftable)
    assert abs(accept - per_start) > 0.02  # the two counts differ here: the test tells them apart


def test_greedy_is_the_sampled_rule_at_certainty() -> None:
    """0/1 acceptance probabilities give the deterministic walk: one rule for both."""
    gen = torch.Generator().manual_seed(3)
    accepted = torch.randint(0, 4, (30,), generator=gen).tolist()
    full = _full(accepted, 3)
    rounds, hits = round_counts(full, torch.ones(30, dtype=torch.bool))
    mc_rounds, mc_hits = _monte_carlo(full, [True] * 30, 1, 0)  # coins below 1 always, below 0 never
    assert (rounds, hits) == (mc_rounds, mc_hits)
    assert sum(hits) + rounds < sum(accepted) + 30  # fewer rounds than starts: the walk skips what it accepted

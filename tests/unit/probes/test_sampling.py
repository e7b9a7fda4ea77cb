"""Sampling as served: the exact expected accept length against a Monte-Carlo run of speculative sampling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.errors import UsageError
from eagle3lens.probes.acceptance import estimate_acceptance, needed_layers
from eagle3lens.probes.aux_layers import trained_with
from eagle3lens.probes.data import capture_samples
from eagle3lens.probes.sampling import (RowStats, accept_probability, chain_token_probs, head_logits, token_probs,
                                        warp)
from eagle3lens.probes.traffic_result import Sampling
from eagle3lens.probes.wiring import load_draft_as, load_target

import _speculative_mc as mc

SHARPEN = 30.0  # the untrained demo target's head scaled to a trained target's confidence (else p(x) ~ 1/V)
PROMPTS = [[(7 * i + 3 * j) % 64 for j in range(16)] for i in range(6)]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def served(demo_dir: Path):
    """The demo target with a sharpened head, and prompts continued greedily by it (aux layers captured)."""
    target = load_target(demo_dir / "target", "cpu")
    with torch.no_grad():
        target.lm_head.weight.mul_(SHARPEN)
    draft = demo_dir / "speculators"
    layers = needed_layers(draft, 10)
    samples = list(capture_samples(target, [torch.tensor(p) for p in PROMPTS], layers, new_tokens=32))
    return target, samples, {}


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p,top_k", [(0.7, 1.0, 0), (1.0, 1.0, 0), (0.7, 0.9, 0), (1.0, 0.9, 0),
                                                     (1.0, 0.95, 3)])
def test_expected_accept_len_matches_monte_carlo(demo_dir: Path, served, temperature: float, top_p: float,
                                                 top_k: int) -> None:
    target, samples, logits_cache = served
    draft_dir = demo_dir / "speculators"
    result = estimate_acceptance(draft_dir, samples, target=target, fixed=False,
                                 sampling=Sampling(temperature, top_p, top_k))
    assert result.traffic is not None
    view = result.traffic.sampled["as_trained"]
    assert view.exact_chain and view.greedy_accept_len == result.accept_len("as_trained")
    ckpt = Checkpoint.open(draft_dir)
    draft = load_draft_as(ckpt, None)
    chains = mc.greedy_chains(draft, samples, sorted(set(trained_with(ckpt.spec, 10)[0])), result.steps)
    # per start: every start verified alike (training's step accuracy)
    simulated = mc.run(target, samples, chains, temperature, top_p, trials=10_000, seed=1, cache=logits_cache,
                       top_k=top_k)
    assert view.per_start is not None and view.per_start.accept_len is not None
    assert 1.1 < view.per_start.accept_len < 3.5  # far from both 1 and 1 + K
    assert abs(view.per_start.accept_len - simulated) <= 0.02, (view.per_start.accept_len, simulated)
    # per round: the engine's walk, each round starting where the last one stopped, counted as the engine counts
    walked = mc.walk(target, samples, chains, temperature, top_p, trials=2_000, seed=2, cache=logits_cache,
                     top_k=top_k)
    assert view.accept_len is not None and 1.1 < view.accept_len < 3.5
    assert abs(view.accept_len - walked) <= 0.02, (view.accept_len, walked)
    assert view.full_acc == tuple(sorted(view.full_acc, reverse=True))
    assert view.accept_len == pytest.approx(1 + sum(view.full_acc))


def test_top_p_keeps_the_smallest_top_set() -> None:
    """Top-p keeps the smallest top set reaching p (the token that crosses p stays), as vLLM's sort does."""
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    for temperature, top_p in ((0.7, 0.5), (1.0, 0.9), (1.3, 0.3), (1.0, 1.0)):
        ours = warp(logits, Sampling(temperature, top_p))
        assert torch.allclose(ours, mc.warp_vllm(logits, temperature, top_p), atol=1e-6)
    for top_k, top_p in ((1, 1.0), (2, 1.0), (3, 0.8), (4, 0.6), (5, 0.9), (9, 0.9)):  # top-k, then top-p on the rest
        ours = warp(logits, Sampling(1.0, top_p, top_k))
        assert torch.allclose(ours, mc.warp_vllm(logits, 1.0, top_p, top_k), atol=1e-6), (top_k, top_p)
    assert int((warp(logits, Sampling(1.0, 1.0, 2)) > 0).sum()) == 2
    assert int((warp(logits, Sampling(1.0, 0.5)) > 0).sum()) == 1  # p(top) = 0.563 reaches 0.5 alone
    probs = warp(logits, Sampling(1.0, 0.7))
    assert int((probs > 0).sum()) == 2  # 0.563 + 0.207: the token that crosses 0.7 stays, the rest go
    one_hot = accept_probability(probs, torch.tensor([1]))
    assert torch.allclose(one_hot, probs[:, 1])
    textbook = accept_probability(probs, torch.full((1, 5), 0.2))
    assert torch.allclose(textbook, torch.minimum(probs, torch.tensor(0.2)).sum(-1))


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (-1.0, 1.0), (float("nan"), 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_sampling_is_refused(temperature: float, top_p: float) -> None:
    with pytest.raises(UsageError):
        Sampling(temperature, top_p)


@pytest.mark.parametrize("sampling", [Sampling(0.7), Sampling(1.0, 0.9), Sampling(0.5, 0.3), Sampling(1.0, 1.0, 5),
                                      Sampling(0.8, 0.9, 40), Sampling(1.2, 0.99, 300)])
def test_row_statistics_give_the_warped_probabilities(sampling: Sampling) -> None:
    """The fast path (cut and normaliser gathered from the teacher's logits) equals warping whole rows."""
    gen = torch.Generator().manual_seed(3)
    rows, head = torch.randn(70, 16, generator=gen), torch.randn(500, 16, generator=gen) * 2.0
    stats = RowStats(sampling)
    for block in rows.split(32):  # the teacher's logits come in blocks
        stats.add(block @ head.T)
    wanted = [(0, torch.randint(0, 500, (70,), generator=gen)), (2, torch.randint(0, 500, (68,), generator=gen))]
    fast = stats.probs(rows, head, wanted)
    whole = token_probs(rows, head, sampling, wanted)
    for a, b in zip(fast, whole, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    top = [(0, (rows @ head.T).argmax(-1))]  # the most likely token is always kept
    assert bool((stats.probs(rows, head, top)[0] > 0).all())


def test_a_temperature_near_zero_scores_the_greedy_figure(demo_dir: Path) -> None:
    """At T -> 0 the target's distribution is its argmax: the sampled chain accepts exactly what the greedy one
    does (a rounding difference between two ways of computing a logit must not be multiplied by 1 / T)."""
    result = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                                 fixed=False, sampling=Sampling(1e-5))
    assert result.traffic is not None
    view = result.traffic.sampled["as_trained"]
    assert view.accept_len is not None and view.greedy_accept_len is not None and view.greedy_accept_len > 1.05
    greedy = result.views["as_trained"].per_start
    assert view.per_start is not None and greedy is not None and view.per_start.accept_len is not None
    # a near-tie of the untrained target (logits 1e-4 apart) still splits its mass at T = 1e-5; the old bug (p > 1
    # from a rounding times 1 / T) put the sampled figure 0.1 above the greedy one
    assert abs(view.per_start.accept_len - greedy.accept_len) < 1e-4
    assert abs(view.accept_len - view.greedy_accept_len) < 1e-4
    assert view.full_acc[0] == pytest.approx(result.views["as_trained"].full_acc[0], abs=1e-4)


@pytest.mark.slow
def test_the_exact_chain_reads_the_same_rows_padded_or_alone(served) -> None:
    """Left-padded batches (the head run on the last K rows only) give each start what its own unpadded
    forward gives."""
    target, samples, _ = served
    sample = samples[0]
    starts = torch.tensor([0, 3, 9, 17, 20])
    gen = torch.Generator().manual_seed(5)
    proposed = [torch.randint(0, 64, (5,), generator=gen) for _ in range(3)]
    sampling = Sampling(0.8, 0.95)
    batched = chain_token_probs(target, sample.token_ids, starts, proposed, sampling)
    alone = chain_token_probs(target, sample.token_ids, starts, proposed, sampling, token_budget=1)
    for a, b in zip(batched, alone, strict=True):
        assert torch.allclose(a, b, atol=1e-5), (a, b)
    greedy: list[torch.Tensor] = []  # the target's own greedy chain per start, each from an unpadded forward
    for _ in range(3):
        greedy.append(torch.stack([target(input_ids=torch.cat(
            [sample.token_ids[:i + 2], *(g[r:r + 1] for g in greedy)])[None]).logits[0, -1].argmax()
            for r, i in enumerate(starts.tolist())]))
    top = chain_token_probs(target, sample.token_ids, starts, greedy, Sampling(1e-4))
    assert all(bool((t > 0.99).all()) for t in top)  # the argmax of each unpadded forward, at T -> 0


@pytest.mark.parametrize("model_type,extra", [("gemma2", {"final_logit_softcapping": 3.0}),
                                              ("cohere", {"logit_scale": 0.25}),
                                              ("granite", {"logits_scaling": 4.0})])
def test_the_teachers_logits_are_the_models_own(model_type: str, extra: dict) -> None:
    """Position 0 is scored from the final-norm rows and the head (RowStats), later positions from the model's
    logits: with the target's soft cap or logit scale applied to the first, the two are the same distribution."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=96, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # logits well past the soft cap
    seen: dict[str, torch.Tensor] = {}
    model.model.norm.register_forward_hook(lambda _m, _a, out: seen.__setitem__("rows", out[0].detach()))
    ids = torch.randint(0, 96, (1, 12))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    rows, head = seen["rows"].float(), model.lm_head.weight.detach().float()
    sampling = Sampling(0.9, 0.95).for_target(config.to_dict())
    assert (sampling.softcap, sampling.logit_scale) != (None, 1.0)
    stats = RowStats(sampling)
    stats.add(rows @ head.T)  # the teacher's raw head output
    tokens = torch.randint(0, 96, (12,))
    fast = stats.probs(rows, head, [(0, tokens)])[0]
    own = warp(logits, sampling).gather(-1, tokens[:, None]).squeeze(-1)
    assert torch.allclose(fast, own, atol=1e-5)
    assert torch.allclose(token_probs(rows, head, sampling, [(0, tokens)])[0], own, atol=1e-5)
    assert not torch.allclose(token_probs(rows, head, Sampling(0.9, 0.95), [(0, tokens)])[0], own, atol=1e-3)


@pytest.mark.parametrize("top_p", [1.0, 0.95])
def test_top_k_keeps_every_token_tied_with_the_kth(top_p: float) -> None:
    """vLLM masks the logits below the k-th largest: tokens tied with it all stay, in both paths."""
    head = torch.tensor([[3.0], [2.0], [1.0], [1.0], [0.0]])  # tokens 2 and 3 tie at the 3rd place
    rows = torch.tensor([[1.0], [-1.0]])
    sampling = Sampling(1.0, top_p, 3)
    stats = RowStats(sampling)
    stats.add(rows @ head.T)
    tokens = torch.arange(5)
    fast = torch.stack([stats.probs(rows, head, [(0, tokens[i:i + 1].expand(2))])[0] for i in range(5)], -1)
    whole = warp(rows @ head.T, sampling)
    assert torch.allclose(fast, whole, atol=1e-6) and torch.allclose(whole, mc.warp_vllm(rows @ head.T, 1.0, top_p, 3))
    assert int((whole[0] > 0).sum()) == 4 and float(whole[0].sum()) == pytest.approx(1.0)


@pytest.mark.slow
def test_greedy_per_round_is_the_engines_walk_over_the_targets_own_tokens(demo_dir: Path, served) -> None:
    """The greedy served figure, recomputed here without the probe: the draft's chains (the MC helper's), the
    target's greedy tokens from its own logits, and the walk written out round by round; per start beside it."""
    target, samples, _ = served
    draft_dir = demo_dir / "speculators"
    result = estimate_acceptance(draft_dir, samples, target=target, fixed=False)
    view = result.views["as_trained"]
    ckpt = Checkpoint.open(draft_dir)
    chains = mc.greedy_chains(load_draft_as(ckpt, None), samples, sorted(set(trained_with(ckpt.spec, 10)[0])),
                              result.steps)
    rounds = accepted = starts = start_accepted = 0
    for s, per in zip(samples, chains, strict=True):
        with torch.no_grad():
            greedy = target(input_ids=s.token_ids[None], use_cache=False).logits[0].argmax(-1)  # after token j

        def run(i: int, chain: list[int], greedy: torch.Tensor = greedy) -> int:  # start i: tokens after i + 1
            return next((k for k, d in enumerate(chain) if d != int(greedy[i + 1 + k])), len(chain))

        starts += sum(1 for c in per if c)
        start_accepted += sum(run(i, c) for i, c in enumerate(per) if c)
        p = next((i for i, c in enumerate(per) if c), len(per))
        while p < len(per):
            if not per[p]:
                p += 1
                continue
            a = run(p, per[p])
            rounds, accepted, p = rounds + 1, accepted + a, p + a + 1
    assert view.rounds == rounds < starts and view.positions == starts
    assert view.accept_len == pytest.approx((accepted + rounds) / rounds, abs=1e-9)
    assert view.per_start is not None and view.per_start.accept_len == pytest.approx(1 + start_accepted / starts)
    assert view.accept_len != pytest.approx(view.per_start.accept_len, abs=0.01)  # the two counts differ here


@pytest.mark.parametrize("config,key", [({"logit_scale": 1e308}, "logit_scale 1e+308"),
                                        ({"logits_scaling": 1e-308}, "logits_scaling 1e-308"),
                                        ({"text_config": {"logit_scale": 1e39}}, "logit_scale 1e+39")])
def test_a_logit_transform_past_float32_is_refused_naming_the_key(config: dict, key: str) -> None:
    with pytest.raises(UsageError, match=rf"^the target config.s {re.escape(key)} scales its logits by 1e\+\d+, past float32"):
        Sampling(0.7).for_target(config)
    assert Sampling(0.7).for_target({"logit_scale": 1e30}).logit_scale == 1e30  # large, still finite in float32


@pytest.mark.parametrize("sampling", [Sampling(1e-5, logit_scale=1e36), Sampling(1e-40), Sampling(1e-37, logit_scale=100.0),
                                      Sampling(0.7, 0.9, 5, logit_scale=1e38)])
def test_logits_that_overflow_after_the_transform_are_one_line(sampling: Sampling) -> None:
    """Every sampled probability would be nan: each path that scales the logits refuses instead."""
    gen = torch.Generator().manual_seed(5)
    rows, head = torch.randn(8, 16, generator=gen), torch.randn(50, 16, generator=gen) * 4.0
    wanted = [(0, torch.zeros(8, dtype=torch.long))]
    for run in (lambda: RowStats(sampling).add(rows @ head.T), lambda: token_probs(rows, head, sampling, wanted),
                lambda: warp(head_logits(rows @ head.T, sampling), sampling)):
        with pytest.raises(UsageError, match=r"the target's logits are not finite after its logit transform") as info:
            run()
        assert "\n" not in str(info.value) and sampling.label() in str(info.value)


def test_cli_target_logit_scale_past_float32_is_one_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    import json
    import shutil

    from eagle3lens.cli import main

    target = tmp_path / "target"
    shutil.copytree(demo_dir / "target", target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "logits_scaling": 1e-308}))
    code = main(["acceptance", str(demo_dir / "speculators"), "--target", str(target), "--data",
                 str(demo_dir / "hidden-states"), "--limit", "2", "--no-fixed", "--engine", "sglang==0.5.11",
                 "--temperature", "0.7"])
    assert code == 2 and capsys.readouterr().err == (
        "eagle3lens: error: the target config's logits_scaling 1e-308 scales its logits by 1e+308, past float32's "
        "largest value 3.40282e+38: every sampled figure would be nan\n")


def test_views_proposing_the_same_chain_run_the_target_over_it_once(demo_dir: Path, served) -> None:
    """The exact chain's target forwards are the sampled views' main cost: a serving view that proposes the very
    chain another view proposed on the same sample reuses its probabilities, and scores what it scores."""
    target, samples, _ = served
    calls: list[int] = []
    hook = target.register_forward_pre_hook(
        lambda _m, _a, kw: calls.append(1) if kw.get("attention_mask") is not None else None, with_kwargs=True)
    try:
        sampling = Sampling(0.8, 0.95)
        alone = estimate_acceptance(demo_dir / "speculators", samples, target=target, fixed=False, sampling=sampling)
        once = len(calls)
        calls.clear()
        both = estimate_acceptance(demo_dir / "speculators", samples, target=target, fixed=False, sampling=sampling,
                                   engine="vllm==0.32.0")
    finally:
        hook.remove()
    assert alone.traffic is not None and both.traffic is not None and once > 0
    assert set(both.traffic.sampled) >= {"as_trained", "as_served"}
    trained, as_served = both.traffic.sampled["as_trained"], both.traffic.sampled["as_served"]
    assert both.views["as_served"].full_acc == both.views["as_trained"].full_acc  # the same greedy chain here
    assert len(calls) == once  # the chain ran once for both views
    assert as_served.accept_len == trained.accept_len == alone.traffic.sampled["as_trained"].accept_len
    assert as_served.full_acc == trained.full_acc

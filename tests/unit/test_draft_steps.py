"""The reference draft's test-time-training step (``Eagle3Draft.ttt_step``): the one decoder forward the acceptance
chain runs. Step 0 is the plain causal forward; later steps attend to earlier steps' keys at their own position."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from eagle3lens import draft as draft_module
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.draft import Eagle3Draft, StepKeys, map_to_target, rope
from eagle3lens.probes.data import iter_samples

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(demo_dir: Path) -> tuple[Eagle3Draft, torch.Tensor, torch.Tensor]:
    module = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "speculators"))
    s = next(iter_samples(demo_dir / "hidden-states"))
    return module, s.token_ids[None, 1:40], s.aux[None, :39].float()


def _two_steps(module: Eagle3Draft, ids: torch.Tensor, aux: torch.Tensor) -> tuple[list[torch.Tensor], StepKeys]:
    T = ids.shape[1]
    positions = torch.arange(1, T + 1)[None]
    keys = StepKeys()
    with torch.no_grad():
        g, _ = module.project(aux)
        first = module.ttt_step(ids, g, positions, keys)
        nxt = map_to_target(first.logits.argmax(-1), module.d2t)
        second = module.ttt_step(nxt, first.hidden_out, positions + 1, keys)
    return [first.logits, second.logits], keys


def test_step_zero_is_the_causal_forward(setup) -> None:
    module, ids, aux = setup
    (first, _), keys = _two_steps(module, ids, aux)
    with torch.no_grad():
        plain = module(ids, aux, torch.arange(1, ids.shape[1] + 1)[None])
    torch.testing.assert_close(first, plain.logits, rtol=1e-4, atol=1e-5)
    assert len(keys.keys) == len(keys.values) == 2  # each step leaves its keys for the next


def test_step_one_reads_step_zeros_keys_causally_and_its_own_at_its_position(setup) -> None:
    """Step 1 recomputed densely: its query at i attends to step 0's keys at 0..i and its own key at i only."""
    module, ids, aux = setup
    (_, second), keys = _two_steps(module, ids, aux)
    cfg, layer = module.cfg, module.layers[0]
    T = ids.shape[1]
    with torch.no_grad():
        g, _ = module.project(aux)
        first = module.ttt_step(ids, g, torch.arange(1, T + 1)[None], StepKeys())
        nxt = map_to_target(first.logits.argmax(-1), module.d2t)
        xe, xh = layer.input_layernorm(module.embed_tokens(nxt)), layer.hidden_norm(first.hidden_out)
        x = torch.cat([xe, xh], dim=-1)
        q = rope(layer.self_attn.q_proj(x).view(1, T, cfg.heads, cfg.head_dim).transpose(1, 2),
                 torch.arange(2, T + 2)[None], cfg.rope_theta)
        k1, v1 = keys.keys[1], keys.values[1]
        scores = torch.cat([q @ keys.keys[0].transpose(-1, -2), (q * k1).sum(-1, keepdim=True)], -1) / math.sqrt(
            cfg.head_dim)
        scores[..., :T] = scores[..., :T].masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        p = scores.softmax(-1)
        y = p[..., :T] @ keys.values[0] + p[..., T:] * v1
        residual = xh if cfg.norm_before_residual else first.hidden_out
        h = layer.self_attn.o_proj(y.transpose(1, 2).reshape(1, T, -1)) + residual
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        dense = module.lm_head(module.norm(h))
    torch.testing.assert_close(second, dense, rtol=1e-4, atol=1e-4)


def test_query_blocks_do_not_change_the_result(setup, monkeypatch) -> None:
    module, ids, aux = setup
    whole, _ = _two_steps(module, ids, aux)
    monkeypatch.setattr(draft_module, "QUERY_CHUNK", 7)  # 39 rows in six blocks, the last one short
    blocked, _ = _two_steps(module, ids, aux)
    for a, b in zip(whole, blocked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # float sums over other block shapes

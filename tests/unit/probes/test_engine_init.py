"""What an engine leaves in draft parameters it never writes (probes.engine_init), on the demo's trained draft."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines import resolve
from eagle3lens.probes.engine_init import apply_engine_init, kind_of
from eagle3lens.probes.wiring import load_draft_as

DECODER_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _trained(demo_dir: Path):
    return load_draft_as(Checkpoint.open(demo_dir / "speculators"))


def test_kinds_of_parameter_names() -> None:
    assert kind_of("layers.0.input_layernorm.weight") == "norm"
    assert kind_of("layers.0.hidden_norm.weight") == "norm"
    assert kind_of("norm.weight") == "norm" and kind_of("fc_norm.1.weight") == "norm"
    assert kind_of("fc.weight") == "fc" and kind_of("fc.bias") == "fc"
    assert kind_of("embed_tokens.weight") == "embed"
    assert kind_of("layers.0.self_attn.q_proj.weight") == "linear" and kind_of("lm_head.weight") == "linear"


def test_sglang_leaves_empty_memory_in_linears_ones_in_norms_kaiming_in_fc(demo_dir: Path) -> None:
    module = _trained(demo_dir)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    written = {"embed_tokens.weight", "lm_head.weight", "norm.weight"}  # everything else never written
    applied = apply_engine_init(module, written, resolve("sglang==0.5.11"))
    state = module.state_dict()
    for name in written | {"d2t", "t2d"}:
        assert torch.equal(state[name], before[name]), name  # written parameters and the buffers untouched
    for linear in DECODER_LINEARS:
        name = f"layers.0.{linear}.weight"
        assert applied[name] == "torch.empty (noise)"
        assert 0.9 < state[name].std().item() < 1.1, name  # order-one values: no trained scale survives
    for norm in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        assert torch.equal(state[f"layers.0.{norm}.weight"], torch.ones(64))
    bound = 1 / math.sqrt(192)  # SGLang's fc is a plain nn.Linear: kaiming-uniform U(±1/sqrt(fan_in))
    assert applied["fc.weight"] == "kaiming-uniform" and state["fc.weight"].abs().max().item() <= bound
    assert state["fc.weight"].std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    again = _trained(demo_dir)
    apply_engine_init(again, written, resolve("sglang==0.5.11"))
    assert all(torch.equal(again.state_dict()[k], v) for k, v in state.items())  # deterministic


def test_vllm_fc_is_empty_memory_and_zeros_is_the_other_reading(demo_dir: Path) -> None:
    module = _trained(demo_dir)
    applied = apply_engine_init(module, set(), resolve("vllm==0.33.0"), empty="zeros")
    state = module.state_dict()
    assert applied["fc.weight"] == "torch.empty (zeros)" and not state["fc.weight"].any()
    assert not state["layers.0.mlp.down_proj.weight"].any() and not state["lm_head.weight"].any()
    assert torch.equal(state["norm.weight"], torch.ones(64))


def test_an_init_without_a_model_or_an_unknown_reading_is_refused(demo_dir: Path) -> None:
    module = _trained(demo_dir)
    profile = replace(resolve("sglang==0.5.11"), inits={"linear": "orthogonal"})
    with pytest.raises(ValueError, match="orthogonal"):
        apply_engine_init(module, {"fc.weight"}, profile)
    with pytest.raises(ValueError, match="noise, zeros"):
        apply_engine_init(module, set(), resolve("sglang==0.5.11"), empty="garbage")  # type: ignore[arg-type]

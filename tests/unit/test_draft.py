"""The reference draft module against a plain, independent computation; fc gates; layout loading."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _builders import layer_config, speculators_config, write
from safetensors.torch import load_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.draft import DraftConfig, Eagle3Draft, canonical_key, map_to_target
from eagle3lens.errors import CheckpointError


def plain_draft(W: dict[str, torch.Tensor], ids: torch.Tensor, feature: torch.Tensor, *, heads: int, kv_heads: int,
                eps: float = 1e-6, theta: float = 10000.0, apply_fc: bool = True, norm_before_residual: bool = False,
                norm_before_fc: bool = False, fc_norm: int = 0, norm_output: bool = False):
    """EAGLE-3 step written out by hand: (logits, state fed forward)."""
    def rms(x, w):
        return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))

    L = "layers.0."
    g = feature
    if apply_fc:
        if norm_before_fc:
            g = rms(g, W["input_norm.weight"])
        if fc_norm:
            width = g.shape[-1] // fc_norm
            g = torch.cat([rms(g[..., j * width:(j + 1) * width], W[f"fc_norm.{j}.weight"]) for j in range(fc_norm)], -1)
        g = g @ W["fc.weight"].T
    e = W["embed_tokens.weight"][ids]
    xe, xh = rms(e, W[L + "input_layernorm.weight"]), rms(g, W[L + "hidden_norm.weight"])
    x = torch.cat([xe, xh], -1)
    B, T, _ = x.shape
    q = (x @ W[L + "self_attn.q_proj.weight"].T).view(B, T, heads, -1)
    k = (x @ W[L + "self_attn.k_proj.weight"].T).view(B, T, kv_heads, -1)
    v = (x @ W[L + "self_attn.v_proj.weight"].T).view(B, T, kv_heads, -1)
    d = q.shape[-1]
    half = d // 2
    freq = theta ** (-torch.arange(half, dtype=torch.float32) * 2 / d)
    angle = torch.arange(T, dtype=torch.float32)[:, None] * freq  # [T, d/2]
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]

    def rotate(t):  # pair (j, j + d/2) rotated by angle j
        a, b = t[..., :half], t[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    q, k = rotate(q), rotate(k)
    out = torch.zeros(B, T, heads, d)
    for h in range(heads):
        kv = h // (heads // kv_heads)
        scores = q[:, :, h] @ k[:, :, kv].transpose(1, 2) / math.sqrt(d)  # [B, T, T]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out[:, :, h] = scores.softmax(-1) @ v[:, :, kv]
    attn = out.reshape(B, T, heads * d) @ W[L + "self_attn.o_proj.weight"].T
    h = attn + (xh if norm_before_residual else g)
    m = rms(h, W[L + "post_attention_layernorm.weight"])
    gate, up = m @ W[L + "mlp.gate_proj.weight"].T, m @ W[L + "mlp.up_proj.weight"].T
    h = h + (torch.nn.functional.silu(gate) * up) @ W[L + "mlp.down_proj.weight"].T
    n = rms(h, W["norm.weight"])
    return n @ W["lm_head.weight"].T, (n if norm_output else h)


def inputs(B: int = 2, T: int = 7, width: int = 192, vocab: int = 2048, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B, T), generator=gen), torch.randn(B, T, width, generator=gen)


@pytest.fixture(scope="module")
def demo_draft(demo_dir: Path) -> tuple[Eagle3Draft, dict[str, torch.Tensor]]:
    return (Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "speculators")),
            load_file(str(demo_dir / "speculators" / "model.safetensors")))


def test_logits_match_plain_computation_on_demo_weights(demo_draft) -> None:
    draft, W = demo_draft
    ids, aux = inputs()
    with torch.no_grad():
        out = draft(ids, aux)
    logits, state = plain_draft(W, ids, aux, heads=4, kv_heads=2)
    assert out.fc_applied and out.logits.shape == (2, 7, 512) and out.hidden_out.shape == (2, 7, 64)
    torch.testing.assert_close(out.logits, logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.hidden_out, state, rtol=1e-4, atol=1e-5)


def test_explicit_positions_shift_rope(demo_draft) -> None:
    draft, _ = demo_draft
    ids, aux = inputs(B=1, T=5)
    with torch.no_grad():
        base = draft(ids, aux).logits
        same = draft(ids, aux, position_ids=torch.arange(5)[None]).logits
        shifted = draft(ids, aux, position_ids=torch.arange(3, 8)[None]).logits
    torch.testing.assert_close(base, same)
    torch.testing.assert_close(base, shifted, rtol=1e-4, atol=1e-5)  # RoPE: only relative positions matter
    assert not torch.equal(base[0, 1:], draft(ids, aux, position_ids=torch.tensor([[0, 9, 1, 7, 2]])).logits[0, 1:].detach())


def test_fc_gates(demo_draft) -> None:
    draft, W = demo_draft
    ids, single = inputs(width=64)  # an H-wide state: one target layer instead of three
    with torch.no_grad():
        skipped = draft(ids, single, fc_gate="width-differs")
        aux_ids, aux = inputs()
        applied = draft(aux_ids, aux, fc_gate="width-differs")
    assert not skipped.fc_applied and applied.fc_applied  # SGLang: silent bypass on H-wide input
    logits, _ = plain_draft(W, ids, single, heads=4, kv_heads=2, apply_fc=False)
    torch.testing.assert_close(skipped.logits, logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(applied.logits, draft(aux_ids, aux).logits.detach())
    with pytest.raises(AssertionError, match="192"):  # vLLM: loud
        draft(ids, single, fc_gate="always-assert")
    with pytest.raises(RuntimeError):  # EAGLE / speculators: fc on the wrong width fails in the matmul
        draft(ids, single, fc_gate="always")
    with pytest.raises(ValueError, match="fc_gate"):
        draft(ids, single, fc_gate="sometimes")


def test_eagle_and_speculators_layouts_load_identically(demo_dir: Path, demo_draft) -> None:
    spec_draft, W = demo_draft
    eagle = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "eagle"), embed_tokens=W["embed_tokens.weight"])
    assert eagle.cfg == spec_draft.cfg
    a, b = spec_draft.state_dict(), eagle.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    no_embed = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "eagle"))
    assert torch.isnan(no_embed.embed_tokens.weight).all()  # never silently random


def test_model_prefixed_eagle_keys_load(demo_dir: Path, tmp_path: Path, demo_draft) -> None:
    spec_draft, W = demo_draft
    src = demo_dir / "eagle"
    tensors = {("model." + k if not k.startswith("lm_head") else k): v
               for k, v in load_file(str(src / "model.safetensors")).items()}
    write(tmp_path, tensors, json.loads((src / "config.json").read_text()))
    ckpt = Checkpoint.open(tmp_path)
    assert ckpt.spec.decoder_prefix == "model.midlayer."
    loaded = Eagle3Draft.from_checkpoint(ckpt, embed_tokens=W["embed_tokens.weight"])
    assert all(torch.equal(v, spec_draft.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_missing_d2t_loads_as_identity_and_bad_shapes_raise(demo_dir: Path, tmp_path: Path) -> None:
    draft = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "broken-d2t-missing"))
    assert torch.equal(map_to_target(torch.arange(512), draft.d2t), torch.arange(512))
    tensors = load_file(str(demo_dir / "speculators" / "model.safetensors"))
    tensors["fc.weight"] = tensors["fc.weight"][:, :128].contiguous()  # two aux states wide
    config = json.loads((demo_dir / "speculators" / "config.json").read_text())
    config["target_hidden_size"] = 48  # fc width 128 is no multiple of it: declared 3 aux states
    write(tmp_path, tensors, config)
    with pytest.raises(CheckpointError, match="fc.weight"):
        Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path))
    tensors = load_file(str(demo_dir / "speculators" / "model.safetensors"))
    tensors["layers.0.self_attn.q_norm.weight"] = torch.ones(16)  # a key the module has no place for
    write(tmp_path, tensors, json.loads((demo_dir / "speculators" / "config.json").read_text()))
    with pytest.raises(CheckpointError, match="q_norm"):
        Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path))


def test_option_flags_round_trip(tmp_path: Path) -> None:
    cfg = DraftConfig(hidden=32, target_hidden=24, num_aux=3, intermediate=48, heads=4, kv_heads=1, head_dim=8,
                      draft_vocab=40, vocab=100, rope_theta=500.0, norm_before_residual=True, fc_norm=True,
                      norm_output=True)
    torch.manual_seed(0)
    draft = Eagle3Draft(cfg)
    with torch.no_grad():  # non-trivial norm weights, so a skipped norm would show
        for p in draft.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    state = draft.state_dict()
    layer = layer_config(32, 100, heads=4, intermediate_size=48, num_key_value_heads=1, head_dim=8,
                         rms_norm_eps=1e-6, rope_theta=500.0)
    config = speculators_config((1, 2, 3), draft_vocab=40, layer=layer, verifier=None, arch="Eagle3Speculator",
                                norm_before_residual=True, norm_before_fc=False, fc_norm=True, norm_output=True,
                                target_hidden_size=24)
    write(tmp_path, state, config)
    loaded = Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path))
    assert loaded.cfg == cfg
    ids, aux = inputs(T=6, width=72, vocab=100)
    with torch.no_grad():
        out = loaded(ids, aux)
    logits, state_out = plain_draft(state, ids, aux, heads=4, kv_heads=1, theta=500.0, norm_before_residual=True,
                                    fc_norm=3, norm_output=True)
    torch.testing.assert_close(out.logits, logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.hidden_out, state_out, rtol=1e-4, atol=1e-5)

    norm_cfg = DraftConfig(**{**cfg.__dict__, "fc_norm": False, "norm_before_fc": True})
    normed = Eagle3Draft(norm_cfg)
    with torch.no_grad():
        normed.input_norm.weight.uniform_(0.5, 1.5)
        out = normed(ids, aux)
    W = {k: v for k, v in normed.state_dict().items()}
    logits, _ = plain_draft(W, ids, aux, heads=4, kv_heads=1, theta=500.0, norm_before_residual=True,
                            norm_before_fc=True, norm_output=True)
    torch.testing.assert_close(out.logits, logits, rtol=1e-4, atol=1e-5)


def test_names_and_mapping() -> None:
    assert canonical_key("midlayer.mlp.up_proj.weight") == "layers.0.mlp.up_proj.weight"
    assert canonical_key("model.midlayer.hidden_norm.weight") == "layers.0.hidden_norm.weight"
    assert canonical_key("model.layers.0.self_attn.q_proj.weight") == "layers.0.self_attn.q_proj.weight"
    assert canonical_key("fc.weight") == "fc.weight"
    d2t = torch.tensor([0, 0, 3, 5])
    assert map_to_target(torch.tensor([[0, 1, 2, 3]]), d2t).tolist() == [[0, 1, 5, 8]]
    cfg = DraftConfig(hidden=16, target_hidden=16, num_aux=3, intermediate=32, heads=2, kv_heads=2, head_dim=8,
                      draft_vocab=10, vocab=20)
    names = set(Eagle3Draft(cfg).state_dict())
    assert {"fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight", "d2t", "t2d",
            "layers.0.self_attn.q_proj.weight", "layers.0.hidden_norm.weight"} <= names
    assert not any(n.startswith(("input_norm", "fc_norm")) for n in names)


def test_rollout_chains_steps_like_an_explicit_forward_loop(demo_dir: Path, demo_draft) -> None:
    draft, _ = demo_draft
    no_d2t = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "broken-d2t-missing"))
    for model in (draft, no_d2t):  # with the demo's d2t (offsets) and without (identity)
        ids, aux = inputs(B=2, T=6)
        with torch.no_grad():
            steps = model.rollout(ids, aux, steps=3)
            first = model(ids, aux)
            # step 2 by hand: predicted target ids, step 1's state (H wide: fc skipped), positions + 1
            ids2 = first.logits.argmax(-1) + model.d2t[first.logits.argmax(-1)]
            second = model(ids2, first.hidden_out, position_ids=torch.arange(1, 7).expand(2, -1),
                           fc_gate="width-differs")
            ids3 = second.logits.argmax(-1) + model.d2t[second.logits.argmax(-1)]
            third = model(ids3, second.hidden_out, position_ids=torch.arange(2, 8).expand(2, -1),
                          fc_gate="width-differs")
        assert [s.fc_applied for s in steps] == [True, False, False] and not second.fc_applied
        for got, want in zip(steps, (first, second, third), strict=True):
            torch.testing.assert_close(got.logits, want.logits)
            torch.testing.assert_close(got.hidden_out, want.hidden_out)
        assert not torch.allclose(steps[0].logits, steps[1].logits)
    assert torch.any(draft.d2t != 0)  # the mapping really took part above
    with pytest.raises(ValueError, match="steps"):
        draft.rollout(ids, aux, steps=0)


@pytest.mark.parametrize("config, theta", [
    ({"rope_theta": 500.0}, 500.0),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}}, 250000.0),
    ({}, None),
])
def test_spec_reads_rope_theta_and_the_draft_uses_it(config, theta) -> None:
    from eagle3lens.checkpoint import build_spec

    flat = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 32, "intermediate_size": 48,
            "num_attention_heads": 4, "vocab_size": 100, **config}
    nested = {"speculators_model_type": "eagle3", "transformer_layer_config": flat}
    for cfg in (flat, nested):
        spec = build_spec(cfg, {})
        assert spec.rope_theta == theta
        assert DraftConfig.from_spec(spec).rope_theta == (theta or 10000.0)


# -- the MLA (Kimi-K2.x / DeepSeek-V3) draft ----------------------------------------------------
MLA_FIELDS = {"q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4, "v_head_dim": 5}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}


def mla_config(**over) -> DraftConfig:
    from eagle3lens.mla_config import read_mla

    fields = {**MLA_FIELDS, **over}
    return DraftConfig(hidden=16, target_hidden=12, num_aux=3, intermediate=24, heads=3, kv_heads=3, head_dim=5,
                       draft_vocab=30, vocab=50, mla=read_mla(fields))


@pytest.mark.parametrize("over", [{}, {"q_lora_rank": None, "rope_interleave": False}, {"rope_parameters": YARN}],
                         ids=["q-lora", "plain-q-halves-rope", "yarn"])
def test_mla_attention_matches_transformers_deepseek_v3(over) -> None:
    """The reference MLA against transformers' own DeepSeek-V3 attention on the same weights: HF's attention built
    2H wide (its input), its o_proj cut to the draft's H output rows."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    from eagle3lens.draft import MLAttention

    H = 16
    fields = {**MLA_FIELDS, **{k: v for k, v in over.items() if k != "rope_parameters"}}
    hf_cfg = DeepseekV3Config(hidden_size=2 * H, num_attention_heads=3, num_key_value_heads=3, rms_norm_eps=1e-6,
                              max_position_embeddings=128, **fields,
                              **({"rope_parameters": over["rope_parameters"]} if "rope_parameters" in over else {}))
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = DeepseekV3Attention(hf_cfg, 0).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
    mine = MLAttention(mla_config(**over))
    state = dict(hf.state_dict())
    state["o_proj.weight"] = state["o_proj.weight"][:H]
    mine.load_state_dict(state, strict=True)  # the same parameter names and shapes, bar o_proj's output rows
    x = torch.randn(2, 40, 2 * H, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(40).expand(2, -1)  # beyond the yarn case's original 16 positions
    with torch.no_grad():
        want = hf(x, DeepseekV3RotaryEmbedding(hf_cfg)(x, positions), None)[0][..., :H]
        got = mine(x, positions)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _save_mla_draft(path: Path, draft: Eagle3Draft, *, prefix: str = "layers.0.", **config_over) -> dict:
    state = {k.replace("layers.0.", prefix): v for k, v in draft.state_dict().items()}
    config = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 16,
              "intermediate_size": 24, "num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 5,
              **MLA_FIELDS, "num_hidden_layers": 1, "vocab_size": 50, "draft_vocab_size": 30,
              "target_hidden_size": 12, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "use_aux_hidden_state": True},
              **config_over}
    write(path, state, config)
    return state


def test_mla_draft_loads_its_keys_and_runs(tmp_path: Path) -> None:
    cfg = mla_config()
    torch.manual_seed(0)
    draft = Eagle3Draft(cfg)
    with torch.no_grad():
        draft.d2t.copy_(torch.arange(30) // 2)
        for p in draft.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)  # norms away from 1.0, so a norm left at init would show
    names = set(draft.state_dict())
    attn = "layers.0.self_attn."
    assert {attn + n + ".weight" for n in ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                           "kv_a_layernorm", "kv_b_proj", "o_proj")} <= names
    assert not any(n.endswith(("k_proj.weight", "v_proj.weight")) for n in names)
    shapes = {n: tuple(t.shape) for n, t in draft.state_dict().items()}
    assert shapes[attn + "q_a_proj.weight"] == (12, 32) and shapes[attn + "kv_a_proj_with_mqa.weight"] == (8 + 4, 32)
    assert shapes[attn + "q_b_proj.weight"] == (3 * 10, 12) and shapes[attn + "kv_b_proj.weight"] == (3 * (6 + 5), 8)
    assert shapes[attn + "o_proj.weight"] == (16, 3 * 5) and shapes["fc.weight"] == (16, 36)

    state = _save_mla_draft(tmp_path / "sglang", draft)
    _save_mla_draft(tmp_path / "midlayer", draft, prefix="midlayer.")
    ids, aux = inputs(T=5, width=36, vocab=50)
    with torch.no_grad():
        want = draft(ids, aux)
    for layout in ("sglang", "midlayer"):
        loaded = Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path / layout))
        assert loaded.cfg == cfg
        for name, tensor in loaded.state_dict().items():
            assert torch.equal(tensor, state[name]), name
        with torch.no_grad():
            out = loaded(ids, aux)
        assert out.logits.shape == (2, 5, 30) and out.hidden_out.shape == (2, 5, 16) and out.fc_applied
        torch.testing.assert_close(out.logits, want.logits)

    (tmp_path / "sglang" / "config.json").write_text(json.dumps(
        {**json.loads((tmp_path / "sglang" / "config.json").read_text()), "kv_lora_rank": None}))
    with pytest.raises(CheckpointError, match="kv_lora_rank"):
        Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path / "sglang"))
    bad = _save_mla_draft(tmp_path / "bad", draft)
    write(tmp_path / "bad", {**bad, attn + "kv_b_proj.weight": torch.zeros(3, 8)})
    with pytest.raises(CheckpointError, match="kv_b_proj"):
        Eagle3Draft.from_checkpoint(Checkpoint.open(tmp_path / "bad"))


def test_mla_trace_shows_fc_and_the_aux_width() -> None:
    from eagle3lens.probes.trace import Tracer

    draft = Eagle3Draft(mla_config()).eval()
    assert draft.decoder_input_path == "layers.0.self_attn.q_a_proj"
    assert Eagle3Draft(mla_config(q_lora_rank=None)).decoder_input_path == "layers.0.self_attn.q_proj"
    ids, aux = inputs(T=4, width=36, vocab=50)
    include = ["fc", draft.decoder_input_path, "layers.0.self_attn.kv_a_proj_with_mqa", "lm_head"]
    with Tracer(draft, include=include) as tracer, torch.no_grad():
        draft(ids, aux, fc_gate="width-differs")
    rows = {(r["path"], r["call"]): r for r in tracer.table()}
    assert rows[("fc", 0)]["input"] == "f32[2, 4, 36]@cpu" and rows[("fc", 0)]["output"] == "f32[2, 4, 16]@cpu"
    assert rows[("layers.0.self_attn.q_a_proj", 0)]["input"] == "f32[2, 4, 32]@cpu"  # [embedding ; feature]: 2H
    assert rows[("layers.0.self_attn.kv_a_proj_with_mqa", 0)]["output"] == "f32[2, 4, 12]@cpu"  # latent + rope key
    assert rows[("lm_head", 0)]["output"] == "f32[2, 4, 30]@cpu"
    with Tracer(draft, include=include) as tracer, torch.no_grad():  # an H-wide feature under SGLang's gate
        out = draft(ids, torch.randn(2, 4, 16), fc_gate="width-differs")
    assert not out.fc_applied and not tracer.find("fc") and tracer.find("layers.0.self_attn.q_a_proj")


def test_mla_config_detection_and_errors() -> None:
    from eagle3lens.mla_config import YarnScaling, is_mla, read_mla

    flat = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], **MLA_FIELDS}
    assert is_mla(flat) and is_mla({"kv_lora_rank": 8}) and is_mla({}, ["layers.0.self_attn.kv_a_proj_with_mqa.weight"])
    assert not is_mla({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8}, ["fc.weight"])
    nested = {"speculators_model_type": "eagle3", "transformer_layer_config": {"model_type": "deepseek_v3", **MLA_FIELDS}}
    assert is_mla(nested) and read_mla(nested) == read_mla(flat)
    assert read_mla({**MLA_FIELDS, "rope_scaling": {**YARN, "type": "yarn"}}).yarn == YarnScaling(
        factor=8.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=0.8)
    assert read_mla({**MLA_FIELDS, "rope_parameters": {"rope_type": "default", "rope_theta": 5.0}}).yarn is None
    for bad, problem in (({**MLA_FIELDS, "v_head_dim": 0}, "v_head_dim"), ({**MLA_FIELDS, "q_lora_rank": "x"}, "q_lora_rank"),
                         ({**MLA_FIELDS, "qk_rope_head_dim": 3}, "even"),
                         ({**MLA_FIELDS, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama3")):
        with pytest.raises(CheckpointError, match=problem):
            read_mla(bad, "cfg.json")

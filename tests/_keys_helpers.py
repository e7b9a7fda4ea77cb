"""Tiny EAGLE-3 draft checkpoints in the layouts engines disagree about (speculators, SGLang/SpecForge, prefixed)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

H, HEADS, KV, INTER, V, N, L_TARGET = 16, 4, 2, 32, 64, 24, 10
DECODER = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
           "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
           "hidden_norm.weight", "post_attention_layernorm.weight")


def draft_tensors(prefix: str = "layers.0.", n_aux: int = 3, seed: int = 0, extra: dict | None = None) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    d = H // HEADS
    shapes = {
        "self_attn.q_proj.weight": (HEADS * d, 2 * H), "self_attn.k_proj.weight": (KV * d, 2 * H),
        "self_attn.v_proj.weight": (KV * d, 2 * H), "self_attn.o_proj.weight": (H, HEADS * d),
        "mlp.gate_proj.weight": (INTER, H), "mlp.up_proj.weight": (INTER, H), "mlp.down_proj.weight": (H, INTER),
        "input_layernorm.weight": (H,), "hidden_norm.weight": (H,), "post_attention_layernorm.weight": (H,),
    }
    out = {prefix + k: torch.randn(s, dtype=torch.bfloat16) for k, s in shapes.items()}
    ids = torch.arange(0, 2 * N, 2)  # every other target id
    out.update({
        "fc.weight": torch.randn(H, n_aux * H, dtype=torch.bfloat16),
        "norm.weight": torch.randn(H, dtype=torch.bfloat16),
        "lm_head.weight": torch.randn(N, H, dtype=torch.bfloat16),
        "embed_tokens.weight": torch.randn(V, H, dtype=torch.bfloat16),
        "d2t": ids - torch.arange(N),
        "t2d": torch.zeros(V, dtype=torch.bool).index_fill_(0, ids, True),
    })
    out.update(extra or {})
    return out


def llama_fields(layers: int = 1) -> dict:
    return {"model_type": "llama", "hidden_size": H, "intermediate_size": INTER, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "num_hidden_layers": layers, "vocab_size": V, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": False}


def speculators_config(ids=(2, 5, 7), **flags) -> dict:
    return {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": N,
        "eagle_aux_hidden_state_layer_ids": list(ids), "norm_before_residual": False, "target_hidden_size": None,
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "default_proposal_method": "greedy", "verifier": {"name_or_path": "org/target", "architectures": ["LlamaForCausalLM"]}},
        "transformer_layer_config": llama_fields(), **flags,
    }


def sglang_config(ids=(1, 4, 6)) -> dict:
    return {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": N,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}}


def write(dir: Path, tensors: dict, config: dict | None, shards: int = 1) -> Path:
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    if shards == 1:
        save_file(tensors, str(dir / "model.safetensors"), metadata={"format": "pt"})
    else:
        names = list(tensors)
        weight_map = {}
        for s in range(shards):
            part = {n: tensors[n] for n in names[s::shards]}
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file(part, str(dir / fname), metadata={"format": "pt"})
            weight_map.update({n: fname for n in part})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        (dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    if config is not None:
        (dir / "config.json").write_text(json.dumps(config, indent=2))
    return dir


def speculators_draft(dir: Path, **kw) -> Path:
    return write(dir, draft_tensors("layers.0."), speculators_config(), **kw)


# -- a Kimi-K2.5-like MLA draft (Eagle3DeepseekV2ForCausalLM: DeepSeek-V2 multi-latent attention) --------------
Q_RANK, KV_RANK, NOPE, ROPE, V_DIM = 8, 8, 4, 2, 4
MLA_DECODER = ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
               "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
               "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
               "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")


def mla_draft_tensors(prefix: str = "layers.0.", extra: dict | None = None) -> dict[str, torch.Tensor]:
    """Checkpoint names as SpecForge writes a Kimi-K2.5 EAGLE-3 draft (q_a_proj and kv_a_proj_with_mqa unfused)."""
    torch.manual_seed(0)
    shapes = {
        "self_attn.q_a_proj.weight": (Q_RANK, 2 * H), "self_attn.q_a_layernorm.weight": (Q_RANK,),
        "self_attn.q_b_proj.weight": (HEADS * (NOPE + ROPE), Q_RANK),
        "self_attn.kv_a_proj_with_mqa.weight": (KV_RANK + ROPE, 2 * H), "self_attn.kv_a_layernorm.weight": (KV_RANK,),
        "self_attn.kv_b_proj.weight": (HEADS * (NOPE + V_DIM), KV_RANK), "self_attn.o_proj.weight": (H, HEADS * V_DIM),
        "mlp.gate_proj.weight": (INTER, H), "mlp.up_proj.weight": (INTER, H), "mlp.down_proj.weight": (H, INTER),
        "input_layernorm.weight": (H,), "hidden_norm.weight": (H,), "post_attention_layernorm.weight": (H,),
    }
    out = {prefix + k: torch.randn(s, dtype=torch.bfloat16) for k, s in shapes.items()}
    base = draft_tensors(prefix)
    out.update({k: base[k] for k in ("fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight", "d2t", "t2d")})
    out.update(extra or {})
    return out


def mla_config(ids=(1, 4, 6), arch: str = "Eagle3DeepseekV2ForCausalLM") -> dict:
    return {**llama_fields(), "model_type": "kimi_k2", "architectures": [arch], "draft_vocab_size": N,
            "q_lora_rank": Q_RANK, "kv_lora_rank": KV_RANK, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
            "v_head_dim": V_DIM, "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids),
                                                  "use_aux_hidden_state": True}}

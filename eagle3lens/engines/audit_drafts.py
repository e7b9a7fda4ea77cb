"""The built-in draft checkpoints the execution audit runs through a release: every layout and draft class the
project knows, each tiny (zeros, a few KB) and written fresh into a directory.

Layouts: speculators (``Eagle3Speculator``, nested layer config, ``layers.0.``), SpecForge (``midlayer.``, no
embeddings), SGLang ``layers.0.`` with embeddings, Hugging Face ``save_pretrained`` (``model.``-prefixed), vLLM's
own class name, and the MLA drafter (``Eagle3DeepseekV2ForCausalLM``). Variants the engines treat differently: no
``lm_head``, ``t2d`` without ``d2t``, a full draft vocabulary without mappings, an MLA rope config without
``factor``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

H, HEADS, KV, HEAD_DIM, INTER, V, N = 64, 4, 2, 16, 128, 256, 64
Q_RANK, KV_RANK, NOPE, ROPE, V_DIM = 32, 16, 16, 8, 16
AUX_IDS = [2, 5, 7]  # speculators / vLLM convention
SGLANG_AUX_IDS = [1, 4, 6]  # SGLang / SpecForge convention

Shapes = dict[str, tuple[int, ...]]


def _llama_layer(prefix: str) -> Shapes:
    return {prefix + k: s for k, s in {
        "self_attn.q_proj.weight": (HEADS * HEAD_DIM, 2 * H), "self_attn.k_proj.weight": (KV * HEAD_DIM, 2 * H),
        "self_attn.v_proj.weight": (KV * HEAD_DIM, 2 * H), "self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        "mlp.gate_proj.weight": (INTER, H), "mlp.up_proj.weight": (INTER, H), "mlp.down_proj.weight": (H, INTER),
        "input_layernorm.weight": (H,), "hidden_norm.weight": (H,), "post_attention_layernorm.weight": (H,),
    }.items()}


def mla_layer_shapes(prefix: str, *, hidden: int = H, heads: int = HEADS, inter: int = INTER, q_rank: int = Q_RANK,
                     kv_rank: int = KV_RANK, nope: int = NOPE, rope: int = ROPE, v_dim: int = V_DIM) -> Shapes:
    """One MLA decoder layer as SpecForge writes a Kimi-K2.5 EAGLE-3 draft (q_a_proj and kv_a_proj_with_mqa unfused,
    the first layer reading 2 x hidden), each name's shape."""
    return {prefix + k: s for k, s in {
        "self_attn.q_a_proj.weight": (q_rank, 2 * hidden), "self_attn.q_a_layernorm.weight": (q_rank,),
        "self_attn.q_b_proj.weight": (heads * (nope + rope), q_rank),
        "self_attn.kv_a_proj_with_mqa.weight": (kv_rank + rope, 2 * hidden),
        "self_attn.kv_a_layernorm.weight": (kv_rank,), "self_attn.kv_b_proj.weight": (heads * (nope + v_dim), kv_rank),
        "self_attn.o_proj.weight": (hidden, heads * v_dim),
        "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
        "input_layernorm.weight": (hidden,), "hidden_norm.weight": (hidden,), "post_attention_layernorm.weight": (hidden,),
    }.items()}


def _head(embed: bool = True, lm_head: bool = True, vocab: int = N, d2t: bool = True, t2d: bool = True,
          prefix: str = "") -> Shapes:
    out: Shapes = {prefix + "fc.weight": (H, 3 * H), prefix + "norm.weight": (H,)}
    if embed:
        out[prefix + "embed_tokens.weight"] = (V, H)
    if lm_head:
        out["lm_head.weight"] = (vocab, H)
    if d2t:
        out["d2t"] = (N,)
    if t2d:
        out["t2d"] = (V,)
    return out


def _llama_config(arch: str, aux: list[int] = SGLANG_AUX_IDS, draft_vocab: int = N) -> dict[str, Any]:
    return {"architectures": [arch], "model_type": "llama", "hidden_size": H, "intermediate_size": INTER,
            "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HEAD_DIM, "num_hidden_layers": 1,
            "vocab_size": V, "draft_vocab_size": draft_vocab, "target_hidden_size": H, "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02, "tie_word_embeddings": False,
            "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True}}


def _speculators_config() -> dict[str, Any]:
    layer = {k: v for k, v in _llama_config("LlamaForCausalLM").items()
             if k not in ("draft_vocab_size", "target_hidden_size", "eagle_config")}
    return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.3.0",
            "draft_vocab_size": N, "norm_before_residual": False, "target_hidden_size": H,
            "eagle_aux_hidden_state_layer_ids": AUX_IDS, "transformer_layer_config": layer,
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                   "verifier": {"name_or_path": "org/target", "architectures": ["LlamaForCausalLM"]}},
            "torch_dtype": "float32"}


def _mla_config(rope_scaling: dict[str, Any] | None = None) -> dict[str, Any]:
    config = _llama_config("Eagle3DeepseekV2ForCausalLM")
    config.update({"model_type": "deepseek_v3", "num_key_value_heads": HEADS, "q_lora_rank": Q_RANK,
                   "kv_lora_rank": KV_RANK, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE, "v_head_dim": V_DIM,
                   "rope_interleave": True, "rope_scaling": rope_scaling})
    del config["head_dim"], config["mlp_bias"]
    return config


# name -> (what it is, tensors, config)
DRAFTS: dict[str, tuple[str, Callable[[], Shapes], Callable[[], dict[str, Any]]]] = {
    "speculators": ("speculators Eagle3Speculator, layers.0., embeddings",
                    lambda: {**_llama_layer("layers.0."), **_head()}, _speculators_config),
    "specforge": ("SpecForge LlamaForCausalLMEagle3, midlayer., no embeddings",
                  lambda: {**_llama_layer("midlayer."), **_head(embed=False)},
                  lambda: _llama_config("LlamaForCausalLMEagle3")),
    "sglang-layers0": ("LlamaForCausalLMEagle3, layers.0., embeddings",
                       lambda: {**_llama_layer("layers.0."), **_head()},
                       lambda: _llama_config("LlamaForCausalLMEagle3")),
    "hf-prefixed": ("LlamaForCausalLMEagle3 saved with model. prefixes (model.midlayer., model.fc)",
                    lambda: {**_llama_layer("model.midlayer."), **_head(prefix="model.")},
                    lambda: _llama_config("LlamaForCausalLMEagle3")),
    "vllm-class": ("vLLM's class name Eagle3LlamaForCausalLM, midlayer., no embeddings",
                   lambda: {**_llama_layer("midlayer."), **_head(embed=False)},
                   lambda: _llama_config("Eagle3LlamaForCausalLM", AUX_IDS)),
    "no-lm-head": ("SpecForge without lm_head (reduced draft vocabulary)",
                   lambda: {**_llama_layer("midlayer."), **_head(embed=False, lm_head=False)},
                   lambda: _llama_config("LlamaForCausalLMEagle3")),
    "t2d-only": ("SpecForge storing t2d but no d2t",
                 lambda: {**_llama_layer("midlayer."), **_head(embed=False, d2t=False)},
                 lambda: _llama_config("LlamaForCausalLMEagle3")),
    "full-vocab": ("SpecForge with the target's full vocabulary, no d2t/t2d",
                   lambda: {**_llama_layer("midlayer."), **_head(embed=False, vocab=V, d2t=False, t2d=False)},
                   lambda: _llama_config("LlamaForCausalLMEagle3", draft_vocab=V)),
    "kimi-mla": ("Eagle3DeepseekV2ForCausalLM (MLA), layers.0., embeddings",
                 lambda: {**mla_layer_shapes("layers.0."), **_head()}, _mla_config),
    "mla-yarn-no-factor": ("Eagle3DeepseekV2ForCausalLM whose yarn rope config lacks factor",
                           lambda: {**mla_layer_shapes("layers.0."), **_head()},
                           lambda: _mla_config({"rope_type": "yarn", "original_max_position_embeddings": 128})),
}

def write_draft(path: Path, tensors: Shapes, config: dict[str, Any]) -> Path:
    """One draft: ``model.safetensors`` of zeros (float32; d2t int64, t2d bool) and ``config.json``."""
    import torch
    from safetensors.torch import save_file

    from ..io.safewrite import write_text_atomic

    dtypes = {"d2t": torch.int64, "t2d": torch.bool}
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(s, dtype=dtypes.get(k, torch.float32)) for k, s in sorted(tensors.items())},
              str(path / "model.safetensors"), metadata={"format": "pt"})
    write_text_atomic(path / "config.json", json.dumps(config, indent=2) + "\n")
    return path


def build_drafts(out: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Write the built-in drafts (all, or ``names``) under ``out``; name -> directory."""
    unknown = sorted(set(names or ()) - set(DRAFTS))
    if unknown:
        raise KeyError(f"no built-in draft {', '.join(unknown)} (known: {', '.join(DRAFTS)})")
    return {name: write_draft(out / name, DRAFTS[name][1](), DRAFTS[name][2]())
            for name in (names or list(DRAFTS))}

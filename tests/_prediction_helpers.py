"""Kimi-K2.5-sized configs and a sparse SGLang-layout EAGLE-3 draft (real headers, holes for bytes)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

KIMI_H, KIMI_L, KIMI_V, KIMI_N = 7168, 61, 163840, 32000


def kimi_target_config(dir: Path, architecture: str = "KimiK25ForConditionalGeneration") -> Path:
    """A Kimi-K2.5-style target: the multimodal wrapper with its DeepSeek-V3 text widths in ``text_config``."""
    dir.mkdir(parents=True, exist_ok=True)
    text = {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": KIMI_H,
            "num_hidden_layers": KIMI_L, "vocab_size": KIMI_V, "num_attention_heads": 64}
    config = {"architectures": [architecture], "model_type": "kimi_k25", "text_config": text}
    (dir / "config.json").write_text(json.dumps(config))
    return dir


def sparse_eagle3_draft(dir: Path, hidden: int = KIMI_H, target_hidden: int = KIMI_H, ids=(1, 29, 57)) -> Path:
    """An SGLang/SpecForge-layout Llama EAGLE-3 draft whose tensors are header entries over a sparse file."""
    dir.mkdir(parents=True, exist_ok=True)
    H, P, inter, heads, kv, d = hidden, "midlayer.", 18432, 56, 8, 128
    shapes = {
        P + "self_attn.q_proj.weight": (heads * d, 2 * H), P + "self_attn.k_proj.weight": (kv * d, 2 * H),
        P + "self_attn.v_proj.weight": (kv * d, 2 * H), P + "self_attn.o_proj.weight": (H, heads * d),
        P + "mlp.gate_proj.weight": (inter, H), P + "mlp.up_proj.weight": (inter, H),
        P + "mlp.down_proj.weight": (H, inter), P + "input_layernorm.weight": (H,), P + "hidden_norm.weight": (H,),
        P + "post_attention_layernorm.weight": (H,), "fc.weight": (H, len(ids) * target_hidden),
        "norm.weight": (H,), "lm_head.weight": (KIMI_N, H),
    }
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2
        for n in shape:
            size *= n
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(dir / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
              "intermediate_size": inter, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d,
              "num_hidden_layers": 1, "vocab_size": KIMI_V, "draft_vocab_size": KIMI_N, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "target_hidden_size": target_hidden,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}}
    (dir / "config.json").write_text(json.dumps(config))
    return dir

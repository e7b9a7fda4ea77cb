"""The shared test builders: tiny EAGLE-3 draft checkpoints in the layouts engines disagree about (speculators,
SGLang/SpecForge, prefixed, MLA), the one checkpoint writer, config builders, vocabulary mappings as training
libraries build them, weight initialisers, the finding-code views tests compare against, hand-written malformed
safetensors bytes, and Kimi-K2.5-sized sparse drafts."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines.audit_drafts import mla_layer_shapes

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


def layer_config(hidden: int, vocab: int, heads: int, **extra) -> dict:
    """A minimal one-layer Llama ``transformer_layer_config`` (only the widths a probe reads)."""
    return {"model_type": "llama", "hidden_size": hidden, "vocab_size": vocab, "num_hidden_layers": 1,
            "num_attention_heads": heads, **extra}


def speculators_config(ids=(2, 5, 7), *, draft_vocab: int = N, layer: dict | None = None,
                       verifier: str | None = "org/target", arch: str = "Eagle3DraftModel", **flags) -> dict:
    """A speculators-format draft config. ``ids=None`` leaves out the aux layer ids; ``layer`` replaces the full
    ``llama_fields()`` transformer_layer_config; ``verifier=None`` leaves out what the trainer writes beside the
    layer (norm_before_residual, target_hidden_size, the speculators_config block); ``flags`` override/add keys."""
    config: dict = {"architectures": [arch], "speculators_model_type": "eagle3", "draft_vocab_size": draft_vocab}
    if ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = list(ids)
    if verifier is not None:
        config.update({
            "norm_before_residual": False, "target_hidden_size": None,
            "speculators_config": {"algorithm": "eagle3",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                   "default_proposal_method": "greedy",
                                   "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}},
        })
    config["transformer_layer_config"] = llama_fields() if layer is None else layer
    return {**config, **flags}


def sglang_config(ids=(1, 4, 6)) -> dict:
    return {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": N,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}}


def write(dir: Path, tensors: dict, config: dict | None = None, shards: int = 1) -> Path:
    """The one tiny-checkpoint writer: safetensors (one file, or ``shards`` files plus an index) and config.json."""
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
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


def checkpoint(dir: Path, tensors: dict, config: dict | None = None, shards: int = 1) -> Checkpoint:
    """``write`` then open it."""
    return Checkpoint.open(write(dir, tensors, config, shards))


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
    shapes = mla_layer_shapes(prefix, hidden=H, heads=HEADS, inter=INTER, q_rank=Q_RANK, kv_rank=KV_RANK, nope=NOPE,
                              rope=ROPE, v_dim=V_DIM)
    out = {k: torch.randn(s, dtype=torch.bfloat16) for k, s in shapes.items()}
    base = draft_tensors(prefix)
    out.update({k: base[k] for k in ("fc.weight", "norm.weight", "lm_head.weight", "embed_tokens.weight", "d2t", "t2d")})
    out.update(extra or {})
    return out


def mla_config(ids=(1, 4, 6), arch: str = "Eagle3DeepseekV2ForCausalLM") -> dict:
    return {**llama_fields(), "model_type": "kimi_k2", "architectures": [arch], "draft_vocab_size": N,
            "q_lora_rank": Q_RANK, "kv_lora_rank": KV_RANK, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
            "v_head_dim": V_DIM, "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(ids),
                                                  "use_aux_hidden_state": True}}


# -- vocabulary mappings (the vocab probe's tests) ------------------------------------------------------------
VOCAB_HIDDEN = 8


def build_mapping(counts: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-N by frequency (ties -> smaller id), sorted ascending; d2t = ids - arange, t2d = mask."""
    v = counts.numel()
    order = sorted(range(v), key=lambda j: (-int(counts[j]), j))[:n]
    ids = torch.tensor(sorted(order), dtype=torch.int64)
    d2t = ids - torch.arange(n, dtype=torch.int64)
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d


def write_target(path: Path, v: int, seed: int = 0) -> torch.Tensor:
    """A headers-plus-lm_head 'target' (HF Llama config); returns its lm_head."""
    torch.manual_seed(seed)
    head = torch.randn(v, VOCAB_HIDDEN).to(torch.bfloat16)
    write(path, {"lm_head.weight": head, "model.embed_tokens.weight": head.clone()},
          {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": VOCAB_HIDDEN, "vocab_size": v})
    return head


def write_draft(path: Path, v: int, n: int, d2t: torch.Tensor | None, t2d: torch.Tensor | None,
                lm_head: torch.Tensor | None = None, seed: int = 1) -> Path:
    """A speculators-style draft: config with draft_vocab_size / nested vocab_size, d2t, t2d, lm_head [N, H]."""
    if lm_head is None:
        torch.manual_seed(seed)
        lm_head = torch.randn(n, VOCAB_HIDDEN).to(torch.bfloat16)
    tensors = {"lm_head.weight": lm_head, "fc.weight": torch.zeros(VOCAB_HIDDEN, 3 * VOCAB_HIDDEN)}
    if d2t is not None:
        tensors["d2t"] = d2t
    if t2d is not None:
        tensors["t2d"] = t2d
    config = speculators_config(None, draft_vocab=n, layer=layer_config(VOCAB_HIDDEN, v, heads=2), verifier=None)
    return write(path, tensors, config)


# -- weight initialisers (the weights probe's tests) -----------------------------------------------------------
def heavy_tailed(*shape: int, scale: float = 0.02) -> torch.Tensor:
    """Trained-looking weights: Student-t with 3 degrees of freedom (excess kurtosis far above 0)."""
    return torch.distributions.StudentT(3.0).sample(shape) * scale


def kaiming_uniform(out_features: int, in_features: int) -> torch.Tensor:
    """What nn.Linear does by default (and the EAGLE reference code keeps): U(±1/sqrt(fan_in))."""
    return torch.nn.Linear(in_features, out_features, bias=False).weight.detach().clone()


# -- finding codes as tests compare them ------------------------------------------------------------------------
def codes(result) -> list[str]:
    """The finding codes in the order the probe emitted them."""
    return [f.code for f in result.findings]


def code_set(result) -> set[str]:
    """The distinct finding codes."""
    return {f.code for f in result.findings}


def severities(result) -> dict[str, str]:
    """Finding code -> its severity's value."""
    return {f.code: f.severity.value for f in result.findings}


# -- malformed checkpoints: raw safetensors bytes written by hand, so every reader rule is exercised ----------
def raw_safetensors(header: dict[str, Any], data: bytes, *, header_bytes: bytes | None = None,
                    length: int | None = None) -> bytes:
    """Header JSON (or raw header bytes) + data, with the u64 length prefix (overridable)."""
    body = header_bytes if header_bytes is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(body) if length is None else length) + body + data


def good_header() -> tuple[dict[str, Any], bytes]:
    """Two F32 tensors a[2] and b[3] stored back to back."""
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]},
    }
    return header, bytes(20)


def write_bytes(path: Path, content: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def sharded(root: Path, weight_map: dict[str, str], shards: dict[str, dict[str, Any]]) -> Path:
    """A sharded checkpoint: ``shards`` maps file name -> {tensor name: numel} of F32 tensors."""
    root.mkdir(parents=True, exist_ok=True)
    for name, tensors in shards.items():
        header, offset = {}, 0
        for tensor, numel in tensors.items():
            header[tensor] = {"dtype": "F32", "shape": [numel], "data_offsets": [offset, offset + 4 * numel]}
            offset += 4 * numel
        write_bytes(root / name, raw_safetensors(header, bytes(offset)))
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return root


BIAS = "midlayer.self_attn.q_proj.bias"  # no parameter takes it: vLLM's params_dict[name] raises KeyError


def two_shards_with_bias(root: Path, config: dict) -> Checkpoint:
    """A draft in model-2 and model-10 (unpadded numbers: string and natural order differ), the raising bias in
    model-10."""
    tensors = {**draft_tensors("midlayer."), BIAS: torch.zeros(H)}
    names = sorted(tensors)
    tens = [n for i, n in enumerate(names) if i % 2 == 0 and n != BIAS] + [BIAS]
    files = {"model-10.safetensors": tens, "model-2.safetensors": [n for n in names if n not in tens]}
    root.mkdir(parents=True)
    for file, members in files.items():
        save_file({n: tensors[n].contiguous() for n in members}, str(root / file))
    weight_map = {n: file for file, members in files.items() for n in members}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps(config))
    return Checkpoint.open(root)


# -- Kimi-K2.5-sized configs and a sparse SGLang-layout draft (real headers, holes for bytes) ------------------
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

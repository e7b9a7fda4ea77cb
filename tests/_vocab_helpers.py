"""Tiny draft / target checkpoints with a vocabulary mapping built the way training libraries build it."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

HIDDEN = 8


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
    head = torch.randn(v, HIDDEN).to(torch.bfloat16)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                  "hidden_size": HIDDEN, "vocab_size": v}))
    save_file({"lm_head.weight": head, "model.embed_tokens.weight": head.clone()}, str(path / "model.safetensors"))
    return head


def write_draft(path: Path, v: int, n: int, d2t: torch.Tensor | None, t2d: torch.Tensor | None,
                lm_head: torch.Tensor | None = None, seed: int = 1) -> Path:
    """A speculators-style draft: config with draft_vocab_size / nested vocab_size, d2t, t2d, lm_head [N, H]."""
    path.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": n,
              "transformer_layer_config": {"model_type": "llama", "hidden_size": HIDDEN, "vocab_size": v,
                                           "num_hidden_layers": 1, "num_attention_heads": 2}}
    (path / "config.json").write_text(json.dumps(config))
    if lm_head is None:
        torch.manual_seed(seed)
        lm_head = torch.randn(n, HIDDEN).to(torch.bfloat16)
    tensors = {"lm_head.weight": lm_head.contiguous(), "fc.weight": torch.zeros(HIDDEN, 3 * HIDDEN)}
    if d2t is not None:
        tensors["d2t"] = d2t.contiguous()
    if t2d is not None:
        tensors["t2d"] = t2d.contiguous()
    save_file(tensors, str(path / "model.safetensors"))
    return path

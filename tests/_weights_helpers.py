"""Tiny checkpoints for the weights probe tests: safetensors files plus a config, built in a tmp dir."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint


def save_ckpt(path: Path, tensors: dict[str, torch.Tensor], config: dict | None = None) -> Checkpoint:
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"))
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return Checkpoint.open(path)


def speculators_config(hidden: int = 32, vocab: int = 64, draft_vocab: int = 16) -> dict:
    return {
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": draft_vocab,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
        "transformer_layer_config": {"model_type": "llama", "hidden_size": hidden, "vocab_size": vocab,
                                     "num_hidden_layers": 1, "num_attention_heads": 4, "initializer_range": 0.02},
    }


def heavy_tailed(*shape: int, scale: float = 0.02) -> torch.Tensor:
    """Trained-looking weights: Student-t with 3 degrees of freedom (excess kurtosis far above 0)."""
    return torch.distributions.StudentT(3.0).sample(shape) * scale


def kaiming_uniform(out_features: int, in_features: int) -> torch.Tensor:
    """What nn.Linear does by default (and the EAGLE reference code keeps): U(±1/sqrt(fan_in))."""
    return torch.nn.Linear(in_features, out_features, bias=False).weight.detach().clone()

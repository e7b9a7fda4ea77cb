"""The MLA (multi-head latent attention) sizes of an EAGLE-3 draft, read from its config.json.

Kimi-K2.x and DeepSeek-V3 drafts (SGLang 0.5.12+ ``kimi_k25_eagle3.py``, vLLM 0.18+ ``deepseek_eagle3.py``,
both registering ``Eagle3DeepseekV2ForCausalLM``) replace the Llama q/k/v projections with DeepSeek's
low-rank ones; these five sizes, plus the rope layout, are all the reference draft needs to build them.
No torch here: the data side can read a config without importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from .errors import CheckpointError

MLA_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
SIZE_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
MLA_KEY_MARK = "kv_a_proj_with_mqa"  # a tensor name only an MLA decoder has


@dataclass(frozen=True)
class YarnScaling:
    """DeepSeek's YaRN rope scaling (``rope_scaling`` / ``rope_parameters`` with ``rope_type: yarn``)."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0


@dataclass(frozen=True)
class MLAConfig:
    """Sizes of DeepSeek multi-head latent attention (per head unless named a rank)."""

    q_lora_rank: int | None  # None: a plain q_proj (vLLM allows it; SGLang's MLA drafter requires a rank)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope_interleave: bool = True  # DeepSeek rotates adjacent pairs (x0, x1), (x2, x3), ...
    yarn: YarnScaling | None = None

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def layer_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The dict holding the decoder's sizes: speculators' ``transformer_layer_config``, a ``text_config``, or the
    config itself."""
    if not isinstance(config, Mapping):
        return {}
    inner = config.get("transformer_layer_config")
    layer = inner if isinstance(inner, Mapping) else config
    text = layer.get("text_config")
    return dict(text if isinstance(text, Mapping) else layer)


def is_mla(config: Mapping[str, Any] | None, tensor_names: Any = ()) -> bool:
    """An MLA draft: an MLA architecture, a ``kv_lora_rank`` in the layer config, or MLA tensor names."""
    archs = config.get("architectures") if isinstance(config, Mapping) else None
    if isinstance(archs, list) and any(a in MLA_ARCHITECTURES for a in archs):
        return True
    if layer_config(config).get("kv_lora_rank") is not None:
        return True
    return any(MLA_KEY_MARK in name for name in tensor_names)


def read_mla(config: Mapping[str, Any] | None, source: Any = "draft") -> MLAConfig:
    """The MLA sizes of a draft config (flat, speculators-nested or ``text_config``); CheckpointError naming
    ``source`` when one is missing or not a positive integer."""
    layer = layer_config(config)
    missing = [name for name in SIZE_FIELDS if not _positive_int(layer.get(name))]
    if missing:
        raise CheckpointError(source, f"an MLA draft config must give {', '.join(missing)} "
                                      "(positive integers): cannot build its attention")
    q_rank = layer.get("q_lora_rank")
    if q_rank is not None and not _positive_int(q_rank):
        raise CheckpointError(source, f"q_lora_rank must be a positive integer or null, got {q_rank!r}")
    if layer["qk_rope_head_dim"] % 2:
        raise CheckpointError(source, f"qk_rope_head_dim must be even for rope, got {layer['qk_rope_head_dim']}")
    interleave = layer.get("rope_interleave", True)
    return MLAConfig(q_lora_rank=q_rank, kv_lora_rank=layer["kv_lora_rank"],
                     qk_nope_head_dim=layer["qk_nope_head_dim"], qk_rope_head_dim=layer["qk_rope_head_dim"],
                     v_head_dim=layer["v_head_dim"], rope_interleave=interleave if isinstance(interleave, bool) else True,
                     yarn=_yarn(layer, source))


def _yarn(layer: Mapping[str, Any], source: Any) -> YarnScaling | None:
    """YaRN scaling from ``rope_scaling`` (transformers 4) or ``rope_parameters`` (5); None for default rope."""
    scaling = next((s for s in (layer.get("rope_parameters"), layer.get("rope_scaling")) if isinstance(s, Mapping)), None)
    if scaling is None:
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return None
    if kind not in ("yarn", "deepseek_yarn"):
        raise CheckpointError(source, f"rope scaling {kind!r} is not modelled by the reference MLA draft "
                                      "(default and yarn are)")
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings")
    if not _number(factor) or not _positive_int(original):
        raise CheckpointError(source, "yarn rope scaling needs a numeric factor and original_max_position_embeddings")
    extra = {name: float(scaling[name]) for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")
             if _number(scaling.get(name))}
    return YarnScaling(factor=float(cast(float, factor)), original_max_position_embeddings=cast(int, original), **extra)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

"""What a draft class's constructor raises for a config before ``load_weights`` runs (headers and configs only).

vLLM 0.18.0-0.27.x ``Eagle3DeepseekV2ForCausalLM`` (deepseek_eagle3.py, ``DeepseekV2Eagle3DecoderLayer.__init__``):
``rope_scaling = getattr(config, "rope_scaling", None)``; when it is truthy it is copied with
``rope_type = "deepseek_yarn"`` and ``get_rope`` reads ``rope_parameters["factor"]`` (then
``["original_max_position_embeddings"]``; rotary_embedding/__init__.py, 0.20.0 line 281): a rope config without
``factor`` stops the server with ``KeyError: 'factor'``. Under transformers 5 ``rope_scaling`` is an alias of
``rope_parameters``, never empty (``standardize_rope_params`` puts ``rope_theta`` in it and, for yarn, defaults
``original_max_position_embeddings`` to ``max_position_embeddings``); under 4 it is config.json's own field.

Before any class is built, both engines read the draft's config.json with transformers' ``AutoConfig``, whose config
classes validate the rope (4.x: ``rope_config_validation`` from ``LlamaConfig`` / ``DeepseekV3Config`` / ``Qwen3Config``
``__init__``; 5.x: ``validate_rope`` under ``@strict``; modeling_rope_utils.py ``_check_received_keys``, read in 4.56.2,
5.6.0 and 5.16.1, executed under 5.24): a scaled rope without its required keys raises ``KeyError`` in every release.
Transformers 5 fills ``original_max_position_embeddings`` from ``max_position_embeddings`` first; 4 requires only
the factors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..draft_spec import DraftSpec
from ..mla_config import layer_config
from .profile import EngineProfile

ROPE_INCOMPLETE = "transformers refuses this config in every release (its scaled rope lacks a required key)"
NEUTRAL = "factor 1.0 yarn (the same frequencies and scale as the default rope)"


def effective_rope(profile: EngineProfile, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``config.rope_scaling`` as the release's transformers gives it to the draft class (None: falsy)."""
    layer = layer_config(config)
    own = layer.get("rope_scaling")
    if profile.rope_yarn == "transformers-4":
        return dict(own) if isinstance(own, Mapping) and own else None
    params = layer.get("rope_parameters")
    rope = dict(params) if isinstance(params, Mapping) else dict(own) if isinstance(own, Mapping) else {}
    rope.setdefault("rope_type", rope.get("type", "default"))
    if layer.get("rope_theta") is not None:
        rope.setdefault("rope_theta", layer["rope_theta"])
    if rope["rope_type"] in ("yarn", "deepseek_yarn"):
        rope.setdefault("original_max_position_embeddings", layer.get("max_position_embeddings"))
    return rope


# the config classes an EAGLE-3 draft's model_type resolves to that validate their rope (transformers 4.56.2 on)
ROPE_VALIDATED = frozenset({"llama", "deepseek_v2", "deepseek_v3", "qwen2", "qwen3"})
# rope type -> the keys transformers requires besides rope_type (the common subset of 4.x and 5.x)
ROPE_REQUIRED = {"linear": ("factor",), "dynamic": ("factor",), "yarn": ("factor",),
                 "longrope": ("short_factor", "long_factor"), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}


def config_rope_error(config: Mapping[str, Any] | None) -> str | None:
    """transformers' error reading ``config`` (``AutoConfig``) when its scaled rope lacks a required key."""
    if not isinstance(config, Mapping) or config.get("model_type") not in ROPE_VALIDATED:
        return None
    rope = next((r for r in (config.get("rope_parameters"), config.get("rope_scaling")) if isinstance(r, Mapping)), {})
    kind = rope.get("rope_type", rope.get("type"))
    missing = sorted(k for k in ROPE_REQUIRED.get(kind, ()) if k not in rope) if isinstance(kind, str) else []
    if not missing:
        return None
    return (f"KeyError: \"Missing required keys in `rope_parameters` for 'rope_type'='{str(kind)[:40]}': "
            f"{{{', '.join(map(repr, missing))}}}\" (transformers' AutoConfig, reading config.json; transformers 4 names it `rope_scaling`)")


def construct_error(profile: EngineProfile, config: Mapping[str, Any] | None) -> str | None:
    """The engine's error when reading ``config`` and building the draft class for it (None: the constructor runs)."""
    refused = config_rope_error(config)
    if refused is not None or profile.rope_yarn is None:
        return refused
    rope = effective_rope(profile, config)
    if not rope:
        return None
    for key in ("factor", "original_max_position_embeddings"):
        if rope.get(key) is None:
            how = ("transformers 5 reads rope_parameters for it" if profile.rope_yarn == "transformers-5"
                   else "config.json's rope_scaling")
            return (f"KeyError: {key!r} (deepseek_eagle3.py copies config.rope_scaling as deepseek_yarn rope and "
                    f"get_rope reads rope_parameters[{key!r}]; {how}: {_shown(rope)})")
    return None


def neutral_rope(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """``rope_scaling`` that gives a default-rope draft the same rope under deepseek_yarn: factor 1.0 (None when the
    config's rope is scaled some other way, which only its trainer can complete)."""
    layer = layer_config(config)
    rope = next((r for r in (layer.get("rope_parameters"), layer.get("rope_scaling")) if isinstance(r, Mapping)), {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in (None, "default"):
        return None
    return {"rope_type": "yarn", "factor": 1.0,
            "original_max_position_embeddings": layer.get("max_position_embeddings") or 8192}


def _shown(rope: Mapping[str, Any]) -> str:
    keys = [repr(str(k)[:40]) for k in list(rope)[:8]]
    return "it has only " + ", ".join(keys)


def layers_error(profile: EngineProfile, spec: DraftSpec) -> str | None:
    """The draft class's constructor refusing more decoder layers than it builds (SGLang before 0.5.12 raises for any
    num_hidden_layers other than 1, before it builds a module: no key is read)."""
    layers = spec.num_hidden_layers or spec.num_decoder_layers
    if profile.max_layers and profile.too_many_layers and layers and layers > profile.max_layers:
        return f"{profile.too_many_layers} (the draft has {layers} decoder layers)"
    return None

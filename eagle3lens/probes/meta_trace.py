"""Full-size, shape-only wiring traces on the meta device: no weights, no GPU, seconds.

>>> r = trace_full_size("kimi-k2.5")
>>> r.feature.shape[-1], r.fc_in_features      # 3 x 7168 flowing into fc
(21504, 21504)

``arch="llama"`` (default) builds a Llama-architecture stand-in with the target's widths, so the aux
widths and fc are exact while attention/MLP internals are Llama's. ``arch="native"`` builds the real
architecture (DeepSeek-V3 MoE for Kimi-K2.5) where transformers can run it on meta; if its forward
needs data (MoE routing on values), :class:`MetaTraceUnsupported` says so and names the fallback.

``num_layers=N`` keeps the widths with fewer target layers; the draft then reads the default aux
layers for N layers (HF indices 2, N//2, N-3), as a draft trained on that shallower target would,
instead of the preset's ids, which would be out of range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..checkpoint import DraftSpec
from ..draft import DraftConfig, Eagle3Draft
from ..engines import EngineProfile, resolve
from ..aux_ids import default_aux_ids
from ..errors import UsageError
from ..served.aux_layers import resolve_aux_layers
from .wiring import WiringResult, wire_on_meta


@dataclass(frozen=True)
class Preset:
    """Target widths plus the matching EAGLE-3 draft."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    draft_vocab: int
    aux_ids: tuple[int, ...]  # speculators convention (input of layer k)
    rope_theta: float = 500000.0
    native: dict[str, Any] = field(default_factory=dict)  # config of the real architecture, when not Llama
    note: str = ""  # what the Llama-architecture build is
    native_note: str = ""  # what the native build is

    def note_for(self, arch: str) -> str:
        """What a trace with ``arch`` stands for (report note)."""
        return self.native_note if arch == "native" and self.native_note else self.note


PRESETS = {
    "llama-3.1-405b": Preset("llama-3.1-405b", 16384, 126, 128, 8, 53248, 128256, 32000, (2, 63, 123),
                             note="Llama-3.1-405B widths; the draft mirrors its attention and MLP sizes"),
    "kimi-k2.5": Preset(
        "kimi-k2.5", 7168, 61, 56, 8, 18432, 163840, 32000, (2, 30, 58), rope_theta=50000.0,
        native={"model_type": "deepseek_v3", "n_routed_experts": 384, "num_experts_per_tok": 8,
                "moe_intermediate_size": 2048, "first_k_dense_replace": 1, "n_shared_experts": 1,
                "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512,
                "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128},
        note="Kimi-K2.5 text widths (hidden 7168, 61 layers, V 163840) on a Llama-architecture stand-in: "
             "the real model is DeepSeek-V3 (MLA + MoE); aux widths and fc are exact, attention/MLP internals are not",
        native_note="Kimi-K2.5 text model on its native DeepSeek-V3 architecture (MLA attention, 384-expert MoE; "
                    "hidden 7168, 61 layers, V 163840); aux widths, fc and layer internals are the real ones"),
}


def build_target(preset: Preset, arch: str = "llama", num_layers: int | None = None, device: str = "meta",
                 dtype: torch.dtype = torch.bfloat16):
    """The preset's target as an HF causal LM (on meta: shapes only)."""
    from transformers import AutoConfig

    from ..hf_load import causal_lm_from_config

    layers = num_layers or preset.layers
    common = dict(hidden_size=preset.hidden, num_hidden_layers=layers, intermediate_size=preset.intermediate,
                  vocab_size=preset.vocab, rope_theta=preset.rope_theta, tie_word_embeddings=False)
    if arch == "llama":
        config = AutoConfig.for_model("llama", num_attention_heads=preset.heads, num_key_value_heads=preset.kv_heads,
                                      head_dim=preset.hidden // preset.heads, **common)
    elif arch == "native" and preset.native:
        native = dict(preset.native)
        config = AutoConfig.for_model(native.pop("model_type"), **native, **common)
    else:
        raise UsageError(f"preset {preset.name!r} has no native architecture other than Llama: use arch='llama'")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # MoE grouped matmuls on meta accept bf16 only
    try:
        with torch.device(device):
            return causal_lm_from_config(config).eval()
    finally:
        torch.set_default_dtype(previous)


def draft_spec(preset: Preset, num_layers: int | None = None) -> DraftSpec:
    """A speculators-style DraftSpec for the preset's EAGLE-3 draft (Llama decoder, 3 aux layers).

    With ``num_layers`` other than the preset's, the aux ids are the defaults for that many layers.
    """
    aux_ids = preset.aux_ids if num_layers in (None, preset.layers) else default_aux_ids(num_layers)
    return DraftSpec(
        flavour="speculators", hidden_size=preset.hidden, target_hidden_size=preset.hidden, num_aux=3,
        aux_layer_ids=aux_ids, aux_ids_source="top-level", aux_ids_by_source={"top-level": aux_ids},
        draft_vocab_size=preset.draft_vocab, vocab_size=preset.vocab, num_hidden_layers=1, num_decoder_layers=1,
        decoder_prefix="layers.0.", intermediate_size=preset.intermediate, num_attention_heads=preset.heads,
        num_key_value_heads=preset.kv_heads, head_dim=preset.hidden // preset.heads, rms_norm_eps=1e-5,
        rope_theta=preset.rope_theta,
        has_fc=True, has_d2t=True, fc_in_features=3 * preset.hidden, fc_out_features=preset.hidden)


def trace_full_size(preset: str = "kimi-k2.5", *, engine: EngineProfile | str = "vllm", scenario: str | None = None,
                    arch: str = "llama", seq_len: int = 8, num_layers: int | None = None) -> WiringResult:
    """Shape-only wiring trace of a full-size target and draft on the meta device."""
    try:
        p = PRESETS[preset]
    except KeyError:
        raise UsageError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}") from None
    profile = resolve(engine)
    spec = draft_spec(p, num_layers)
    target = build_target(p, arch, num_layers)
    layers = num_layers or p.layers
    with torch.device("meta"):
        draft = Eagle3Draft(DraftConfig.from_spec(spec)).to(torch.bfloat16).eval()
    resolution = resolve_aux_layers(spec, layers, profile)
    fallback = (f"trace_full_size({preset!r}, arch='llama') keeps every width on a Llama stand-in that runs on meta; "
                f"or real small weights at the same widths with fewer layers: wire(build_target(PRESETS[{preset!r}], "
                f"arch={arch!r}, num_layers=2, device='cpu'), ...)")
    return wire_on_meta(target, draft, resolution, profile, f"{p.name} ({arch})", fallback, scenario, seq_len)

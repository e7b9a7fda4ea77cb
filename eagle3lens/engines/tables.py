"""Parameter tables of the EAGLE-3 draft classes: Llama (and its aliases), Qwen3 (q/k norms) and MLA (DeepSeek/Kimi).

Each builder returns the parameters one class creates for a DraftSpec, with shapes, shards of fused
parameters and what a never-written parameter holds (the profile's ``inits``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from ..checkpoint import DraftSpec
from .params import ParamSpec

Add = Callable[..., None]


class TableProfile(Protocol):
    """What a builder reads of an engine profile (``EngineProfile`` has it all)."""

    @property
    def name(self) -> str: ...
    @property
    def table(self) -> str: ...
    @property
    def param_prefix(self) -> str: ...
    @property
    def fc_hidden(self) -> str: ...
    @property
    def fc_bias(self) -> str: ...
    @property
    def embed_param(self) -> bool: ...
    @property
    def fused(self) -> bool: ...
    @property
    def qkv_bias(self) -> bool: ...
    @property
    def later_layers(self) -> str: ...
    @property
    def vocab_params(self) -> str: ...
    @property
    def verifier_params(self) -> bool: ...
    @property
    def inits(self) -> Mapping[str, str]: ...

    def init_for(self, role: str, kind: str) -> str: ...
    def flag_on(self, spec: DraftSpec, flag: str) -> bool: ...
    def num_aux(self, spec: DraftSpec) -> int: ...
    def num_layers(self, spec: DraftSpec) -> int: ...
    def decoder_prefix(self, i: int) -> str: ...


def build_table(profile: TableProfile, spec: DraftSpec, source: str | Path | None) -> dict[str, ParamSpec]:
    H = _need(spec.hidden_size, "hidden_size", source)
    V = _need(spec.vocab_size, "vocab_size", source)
    heads = _need(spec.num_attention_heads, "num_attention_heads", source)
    inter = _need(spec.intermediate_size, "intermediate_size", source)
    N = spec.draft_vocab_size or V
    h_in = (spec.target_hidden_size_declared or H) if profile.fc_hidden == "target" else H
    n_aux = profile.num_aux(spec)
    P = profile.param_prefix
    out: dict[str, ParamSpec] = {}

    def add(name: str, shape: tuple[int, ...], role: str, kind: str, shards: dict | None = None,
            dtype: str | None = None, init: str | None = None) -> None:
        out[name] = ParamSpec(name, tuple(shape), init or profile.init_for(role, kind), role, dict(shards or {}), dtype)

    tied = profile.flag_on(spec, "tie_word_embeddings")
    if profile.embed_param or tied:
        add(P + "embed_tokens.weight", (V, H), "embed", "embed")
    if profile.flag_on(spec, "use_aux_hidden_state"):
        add(P + "fc.weight", (H, n_aux * h_in), "fc", "fc")
        if profile.fc_bias == "always" or (profile.fc_bias == "config.bias" and spec.fc_bias_config):
            add(P + "fc.bias", (H,), "fc", "fc", init=profile.inits.get("fc.bias"))
        if profile.flag_on(spec, "norm_before_fc"):
            add(P + "input_norm.weight", (n_aux * h_in,), "aux-norm", "norm")
        if profile.flag_on(spec, "fc_norm"):
            for j in range(n_aux):
                add(f"{P}fc_norm.{j}.weight", (h_in,), "aux-norm", "norm")
    layer = _mla_layer if profile.table == "mla" else _llama_layer
    for i in range(profile.num_layers(spec)):
        layer(profile, spec, add, P + profile.decoder_prefix(i), i, H, heads, inter, source)
    add(P + "norm.weight", (H,), "norm", "norm")
    if not tied:
        add("lm_head.weight", (N, H), "lm_head", "linear")
    reduced = N != V
    if profile.vocab_params == "mapping" or profile.vocab_params == "mapping-if-reduced" and reduced:
        add("draft_id_to_target_id", (N,), "vocab", "zeros", dtype="I64")
    elif profile.vocab_params == "buffers" or profile.vocab_params == "buffers-if-reduced" and reduced:
        add("d2t", (N,), "vocab", "zeros", dtype="I64")
        add("t2d", (V,), "vocab", "false", dtype="BOOL")
    if profile.verifier_params:
        add("verifier_norm.weight", (H,), "verifier", "norm")
        add("verifier_lm_head.weight", (N, H), "verifier", "linear")
    return out


def _llama_layer(profile: TableProfile, spec: DraftSpec, add: Add, D: str, i: int, H: int, heads: int,
                 inter: int, source: str | Path | None) -> None:  # noqa: ARG001 (same signature as _mla_layer)
    kv = spec.num_key_value_heads or heads
    d = spec.head_dim or H // heads
    width = 2 * H if i == 0 else H
    q, k = (heads * d, width), (kv * d, width)
    if profile.fused:
        add(D + "self_attn.qkv_proj.weight", ((heads + 2 * kv) * d, width), "decoder", "linear",
            {"q": q, "k": k, "v": k})
        if profile.qkv_bias and spec.attention_bias:
            add(D + "self_attn.qkv_proj.bias", ((heads + 2 * kv) * d,), "decoder", "linear",
                {"q": (heads * d,), "k": (kv * d,), "v": (kv * d,)})
        add(D + "self_attn.o_proj.weight", (H, heads * d), "decoder", "linear")
        add(D + "mlp.gate_up_proj.weight", (2 * inter, H), "decoder", "linear", {"gate": (inter, H), "up": (inter, H)})
    else:
        add(D + "self_attn.q_proj.weight", q, "decoder", "linear")
        add(D + "self_attn.k_proj.weight", k, "decoder", "linear")
        add(D + "self_attn.v_proj.weight", k, "decoder", "linear")
        add(D + "self_attn.o_proj.weight", (H, heads * d), "decoder", "linear")
        add(D + "mlp.gate_proj.weight", (inter, H), "decoder", "linear")
        add(D + "mlp.up_proj.weight", (inter, H), "decoder", "linear")
    if profile.table == "qwen3":  # Qwen3Attention: per-head RMSNorm on q and k
        add(D + "self_attn.q_norm.weight", (d,), "decoder", "norm")
        add(D + "self_attn.k_norm.weight", (d,), "decoder", "norm")
    add(D + "mlp.down_proj.weight", (H, inter), "decoder", "linear")
    add(D + "input_layernorm.weight", (H,), "decoder", "norm")
    if i == 0 or profile.later_layers == "eagle3":
        add(D + "hidden_norm.weight", (H,), "decoder", "norm")
    add(D + "post_attention_layernorm.weight", (H,), "decoder", "norm")


def _mla_layer(profile: TableProfile, spec: DraftSpec, add: Add, D: str, i: int, H: int, heads: int,
               inter: int, source: str | Path | None) -> None:
    """DeepSeek-V2 multi-latent attention (SGLang DeepseekV2AttentionMLA, vLLM DeepseekV2MLAAttention)."""
    kv_rank = _need(spec.kv_lora_rank, "kv_lora_rank", source)
    nope = spec.qk_nope_head_dim or 0
    rope = spec.qk_rope_head_dim or 0
    v = spec.v_head_dim or 0
    q_rank = spec.q_lora_rank
    width = 2 * H if i == 0 else H
    A = D + "self_attn."
    fused_a = "fused_qkv_a_proj_with_mqa" if profile.name == "sglang" else "fused_qkv_a_proj"
    if q_rank:
        add(A + fused_a + ".weight", (q_rank + kv_rank + rope, width), "decoder", "linear",
            {"q_a": (q_rank, width), "kv_a": (kv_rank + rope, width)})
        add(A + "q_a_layernorm.weight", (q_rank,), "decoder", "norm")
        add(A + "q_b_proj.weight", (heads * (nope + rope), q_rank), "decoder", "linear")
    else:
        add(A + "q_proj.weight", (heads * (nope + rope), width), "decoder", "linear")
        add(A + "kv_a_proj_with_mqa.weight", (kv_rank + rope, width), "decoder", "linear")
    add(A + "kv_a_layernorm.weight", (kv_rank,), "decoder", "norm")
    add(A + "kv_b_proj.weight", (heads * (nope + v), kv_rank), "decoder", "linear")
    add(A + "o_proj.weight", (H, heads * v), "decoder", "linear")
    add(D + "mlp.gate_up_proj.weight", (2 * inter, H), "decoder", "linear", {"gate": (inter, H), "up": (inter, H)})
    add(D + "mlp.down_proj.weight", (H, inter), "decoder", "linear")
    add(D + "input_layernorm.weight", (H,), "decoder", "norm")
    add(D + "hidden_norm.weight", (H,), "decoder", "norm")
    add(D + "post_attention_layernorm.weight", (H,), "decoder", "norm")


def _need(value: int | None, what: str, source: str | Path | None) -> int:
    if not value:
        from ..errors import CheckpointError, UsageError

        problem = f"the draft config does not give {what}: cannot build the engine's parameter table"
        raise CheckpointError(source, problem) if source is not None else UsageError(problem)
    return value

"""The reference EAGLE-3 draft module: one decoder layer on top of the target's aux hidden states.

One draft step (FACTS.md §1), for token ids and a feature ``g``:

    e = embed_tokens(ids)                              # H wide (the target's table)
    g = fc(norms(concat(aux_0, aux_1, aux_2)))         # n_aux*H_t -> H   (see ``fc_gate``)
    h = self_attn(concat(input_layernorm(e), hidden_norm(g))) + residual(g)
    h = mlp(post_attention_layernorm(h)) + h
    logits = lm_head(norm(h))                          # N wide: draft vocab, map with d2t

Later steps (``rollout``) feed the draft its own output: the token it predicted (``i + d2t[i]``) and
``h`` in place of ``g`` (already H wide, so fc is not applied), one position further on. ``ttt_step`` is that
step as speculators trains it and engines chain it at topk 1: each step's queries also read the earlier steps'
keys (``StepKeys``) at their own position; the acceptance probe's chain runs it.

``self_attn`` is Llama GQA attention, or, for Kimi-K2.x / DeepSeek-V3 drafts (``Eagle3DeepseekV2ForCausalLM``),
DeepSeek's multi-head latent attention (:class:`MLAttention`, sizes from ``mla_config``); everything around
it is the same layer.

Parameter names are the speculators names (``layers.0.self_attn.q_proj.weight``, ``fc.weight``,
``lm_head.weight``, ``d2t``...), so a speculators state dict loads as is; EAGLE / SpecForge
(``midlayer.*``, ``model.``-prefixed) keys are renamed on load. Every stage is a named submodule
(``fc``, ``layers[0].self_attn``, ``layers[0].mlp``, ``norm``, ``lm_head``) so forward hooks see it.
An MLA draft's attention keys are DeepSeek's (``layers.0.self_attn.q_a_proj.weight``, ``kv_a_proj_with_mqa``,
``kv_b_proj``...), as the Kimi-K2.x EAGLE-3 checkpoints store them.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import nn

from .errors import CheckpointError, UsageError
from .mla_config import MLAConfig, YarnScaling, is_mla, read_mla
from .io.safetensors_header import torch_dtype

if TYPE_CHECKING:
    from pathlib import Path

    from .checkpoint import Checkpoint, DraftSpec

FcGate = Literal["width-differs", "always", "always-assert"]
QUERY_CHUNK = 256  # query rows per test-time-training attention block (bounds the [heads, rows, T] score tensor)
FC_GATES: tuple[str, ...] = ("width-differs", "always", "always-assert")
OPTIONAL_KEYS = ("d2t", "t2d", "embed_tokens.weight")  # absent in some layouts; buffers/tables stay as built


@dataclass(frozen=True)
class DraftConfig:
    """Sizes and option flags of an EAGLE-3 draft (one decoder layer)."""

    hidden: int  # H
    target_hidden: int  # H_t
    num_aux: int  # n_aux: fc reads num_aux * target_hidden
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    draft_vocab: int  # N
    vocab: int  # V
    rms_eps: float = 1e-6
    rope_theta: float = 10000.0
    initializer_range: float = 0.02
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    mla: MLAConfig | None = None  # None: Llama attention (q/k/v_proj); else DeepSeek MLA sizes

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> DraftConfig:
        """Sizes from a checkpoint: its DraftSpec, plus the MLA sizes of its config when it is an MLA draft."""
        mla = read_mla(ckpt.config, ckpt.path) if is_mla(ckpt.config, ckpt.tensors) else None
        return replace(cls.from_spec(ckpt.spec, ckpt.path, llama_heads=mla is None), mla=mla)

    @classmethod
    def from_spec(cls, spec: DraftSpec, source: str | Path = "draft", llama_heads: bool = True) -> DraftConfig:
        """Sizes from a checkpoint's DraftSpec (flags also switched on by the tensors that need them).

        ``source`` names the checkpoint in the error raised when its config does not give the sizes;
        ``llama_heads`` False skips the q/k/v head checks (an MLA draft's head sizes are its MLA config's).
        """
        hidden, intermediate, heads, vocab = (spec.hidden_size, spec.intermediate_size, spec.num_attention_heads,
                                              spec.vocab_size)
        if hidden is None or intermediate is None or heads is None or vocab is None:
            missing = [name for name in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
                       if getattr(spec, name) is None]
            raise CheckpointError(source, f"the config does not give {', '.join(missing)} (no config.json beside "
                                          "the weights?): cannot build the draft")
        kv_heads = spec.num_key_value_heads or heads
        head_dim = spec.head_dim or hidden // heads
        if llama_heads and heads % kv_heads:
            raise CheckpointError(source, f"the config's num_attention_heads {heads} is not a multiple of "
                                          f"num_key_value_heads {kv_heads}: cannot build the draft")
        if llama_heads and (head_dim % 2 or not head_dim):
            raise CheckpointError(source, f"the config gives head dimension {head_dim} (hidden_size {hidden} / "
                                          f"{heads} heads or head_dim): rotary embeddings need an even one")
        return cls(
            hidden=hidden,
            target_hidden=spec.target_hidden_size or hidden,
            num_aux=spec.num_aux or 3,
            intermediate=intermediate,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            draft_vocab=spec.draft_vocab_size or spec.lm_head_rows or vocab,
            vocab=vocab,
            rms_eps=float(spec.rms_norm_eps or 1e-6),
            rope_theta=float(spec.rope_theta or 10000.0),
            initializer_range=float(spec.initializer_range or 0.02),
            norm_before_residual=spec.flag("norm_before_residual"),
            norm_before_fc=spec.flag("norm_before_fc") or spec.has_input_norm,
            fc_norm=spec.flag("fc_norm") or spec.has_fc_norm,
            norm_output=spec.flag("norm_output"),
        )


@dataclass
class StepKeys:
    """The keys and values of the draft steps run so far over one sequence (test-time-training attention), each
    [1, heads, T, d] with the kv heads repeated: step k's queries read step 0's causally, steps 1..k's at their
    own position only."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class DraftOutput:
    logits: torch.Tensor  # [B, T, N] draft-vocab logits
    hidden_out: torch.Tensor  # [B, T, H] state fed to the next draft step
    fc_applied: bool  # False when the fc gate let the feature through untouched


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Llama rotary embedding (halves rotated) of ``x`` [B, heads, T, d] at ``positions`` [B, T]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    angles = positions[:, None, :, None].float() * inv_freq  # [B, 1, T, d/2]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    x1, x2 = x.float().chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    """Causal GQA self-attention whose q/k/v read 2H features: [embedding ; hidden]."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.q_proj = nn.Linear(2 * cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)

    first_projection = "q_proj"  # the submodule that reads the 2H input first

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
        group = cfg.heads // cfg.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, cfg.heads * cfg.head_dim))

    def ttt(self, x: torch.Tensor, positions: torch.Tensor, steps: StepKeys) -> torch.Tensor:
        """Attention of one draft step over one sequence ``x`` [1, T, 2H]: this step's keys and values join
        ``steps``, and its queries attend to step 0's keys causally and to later steps' at their own position
        (speculators' ``extend_*_mask_for_draft_tokens``; at decode time, the chain's own earlier tokens)."""
        cfg = self.cfg
        T = x.shape[1]
        q = self.q_proj(x).view(1, T, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = rope(q, positions, cfg.rope_theta), rope(k, positions, cfg.rope_theta)
        group = cfg.heads // cfg.kv_heads
        steps.keys.append(k.repeat_interleave(group, dim=1))
        steps.values.append(v.repeat_interleave(group, dim=1))
        y = ttt_attention(q, steps.keys, steps.values)
        return self.o_proj(y.transpose(1, 2).reshape(1, T, cfg.heads * cfg.head_dim))


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                  first_row: int = 0) -> torch.Tensor:
    """Attention of ``q`` [B, h, T, d] over step 0's keys (causal) and steps 1..k's keys (own position only),
    in blocks of :data:`QUERY_CHUNK` query rows. Query row ``r`` (and row ``r`` of steps 1..k's keys) sits at
    position ``first_row + r`` of step 0's keys: a training step may run its later draft steps on the rows it
    scores only."""
    T, d = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    k0, v0 = keys[0], values[0]
    diag_scores = [(q.float() * kk.float()).sum(-1, keepdim=True) * scale for kk in keys[1:]]  # [B, h, T, 1] each
    out = []
    for start in range(0, T, QUERY_CHUNK):
        stop = min(start + QUERY_CHUNK, T)
        end = first_row + stop  # step 0's keys beyond the block's last row are all masked
        qc = q[:, :, start:stop].float()
        s0 = (qc @ k0[:, :, :end].float().transpose(-1, -2)) * scale
        rows = torch.arange(first_row + start, end, device=q.device)[:, None]
        s0 = s0.masked_fill(torch.arange(end, device=q.device)[None, :] > rows, float("-inf"))
        scores = torch.cat([s0, *(s[:, :, start:stop] for s in diag_scores)], dim=-1)
        p = torch.softmax(scores, dim=-1)
        y = p[..., :end] @ v0[:, :, :end].float()
        for m, vv in enumerate(values[1:]):
            y = y + p[..., end + m:end + m + 1] * vv[:, :, start:stop].float()
        out.append(y)
    return torch.cat(out, dim=2).to(q.dtype)


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1 when not stretching)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_frequencies(d: int, theta: float, yarn: YarnScaling | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies of a ``d``-wide rotary embedding and the factor on cos/sin.

    YaRN (DeepSeek's form) keeps the fast dimensions as they are, divides the slow ones by ``factor`` and
    blends linearly between the dimensions that turn ``beta_fast`` and ``beta_slow`` times over the original
    context; cos/sin are scaled by ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)``.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    if yarn is None:
        return inv_freq, 1.0

    def dim_turning(turns: float) -> float:  # the dimension that turns ``turns`` times over the original context
        return d * math.log(yarn.original_max_position_embeddings / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(dim_turning(yarn.beta_fast)), 0)
    high = min(math.ceil(dim_turning(yarn.beta_slow)), d - 1)
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
    inv_freq = inv_freq / yarn.factor * ramp + inv_freq * (1 - ramp)
    return inv_freq, yarn_mscale(yarn.factor, yarn.mscale) / yarn_mscale(yarn.factor, yarn.mscale_all_dim)


def rope_pairs(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, interleaved: bool,
               scale: float = 1.0) -> torch.Tensor:
    """Rotary embedding of ``x`` [B, heads, T, d]: DeepSeek's adjacent pairs (x0, x1), (x2, x3), ... when
    ``interleaved``, else Llama's halves (x_j, x_{j+d/2}); pair j turns by ``position * inv_freq[j]``."""
    angles = positions[:, None, :, None].float() * inv_freq.to(x.device)  # [B, 1, T, d/2]
    cos, sin = angles.cos() * scale, angles.sin() * scale
    x32 = x.float()
    a, b = (x32[..., 0::2], x32[..., 1::2]) if interleaved else x32.chunk(2, dim=-1)
    ra, rb = a * cos - b * sin, b * cos + a * sin
    out = torch.stack([ra, rb], dim=-1).flatten(-2) if interleaved else torch.cat([ra, rb], dim=-1)
    return out.to(x.dtype)


class MLAttention(nn.Module):
    """DeepSeek multi-head latent attention whose two down-projections read 2H features: [embedding ; hidden].

    Queries go through a low-rank bottleneck (``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``; a plain
    ``q_proj`` when ``q_lora_rank`` is None). Keys and values share one latent: ``kv_a_proj_with_mqa`` gives
    ``kv_lora_rank`` latent features plus one ``qk_rope_head_dim`` rotary key shared by every head; the latent
    is normed (``kv_a_layernorm``) and ``kv_b_proj`` expands it to per-head no-rope keys and values. Each head's
    key is [k_nope ; k_rope], its query [q_nope ; q_rope]; rope touches only the rope part. Engines fuse
    ``q_a_proj`` and ``kv_a_proj_with_mqa`` into one 2H-input projection; here they stay separate, as stored.
    """

    inv_freq: torch.Tensor

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        assert cfg.mla is not None
        self.cfg, m = cfg, cfg.mla
        width = 2 * cfg.hidden
        if m.q_lora_rank is None:
            self.q_proj = nn.Linear(width, cfg.heads * m.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(width, m.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(m.q_lora_rank, cfg.rms_eps)
            self.q_b_proj = nn.Linear(m.q_lora_rank, cfg.heads * m.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(width, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(m.kv_lora_rank, cfg.rms_eps)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, cfg.heads * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(cfg.heads * m.v_head_dim, cfg.hidden, bias=False)
        inv_freq, self.rope_scale = rope_frequencies(m.qk_rope_head_dim, cfg.rope_theta, m.yarn)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        mscale = yarn_mscale(m.yarn.factor, m.yarn.mscale_all_dim) if m.yarn and m.yarn.mscale_all_dim else 1.0
        self.softmax_scale = m.qk_head_dim ** -0.5 * mscale * mscale

    @property
    def first_projection(self) -> str:
        """The submodule that reads the 2H input first (where a trace sees what the decoder was fed)."""
        return "q_a_proj" if self.cfg.mla and self.cfg.mla.q_lora_rank is not None else "q_proj"

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cfg, m = self.cfg, self.cfg.mla
        assert m is not None
        B, T, _ = x.shape
        q = self.q_proj(x) if m.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_rope = q.view(B, T, cfg.heads, m.qk_head_dim).transpose(1, 2).split(
            [m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(B, T, cfg.heads, m.qk_nope_head_dim + m.v_head_dim)
        k_nope, v = kv.transpose(1, 2).split([m.qk_nope_head_dim, m.v_head_dim], dim=-1)
        q_rope = rope_pairs(q_rope, positions, self.inv_freq, m.rope_interleave, self.rope_scale)
        k_rope = rope_pairs(k_rope.view(B, 1, T, m.qk_rope_head_dim), positions, self.inv_freq, m.rope_interleave,
                            self.rope_scale).expand(B, cfg.heads, T, m.qk_rope_head_dim)
        q, k = torch.cat([q_nope, q_rope], dim=-1), torch.cat([k_nope, k_rope], dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, cfg.heads * m.v_head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """The single EAGLE-3 decoder layer: attention (Llama GQA or DeepSeek MLA) over [normed embedding ; normed feature]."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.hidden_norm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.self_attn: Attention | MLAttention = MLAttention(cfg) if cfg.mla else Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, embeds: torch.Tensor, g: torch.Tensor, positions: torch.Tensor,
                steps: StepKeys | None = None) -> torch.Tensor:
        """The layer over ``embeds`` and feature ``g``; with ``steps``, attention as a test-time-training step
        (:meth:`Attention.ttt`, Llama attention only)."""
        xe, xh = self.input_layernorm(embeds), self.hidden_norm(g)
        residual = xh if self.cfg.norm_before_residual else g
        x = torch.cat([xe, xh], dim=-1)  # embeddings FIRST
        if steps is None:
            h = self.self_attn(x, positions) + residual
        elif isinstance(self.self_attn, Attention):
            h = self.self_attn.ttt(x, positions, steps) + residual
        else:  # MLA's latent path has no per-head keys to carry between steps here
            raise UsageError("test-time-training steps run drafts with Llama-style attention only; this draft "
                             "uses MLA")
        return self.mlp(self.post_attention_layernorm(h)) + h


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft model with speculators parameter names.

    >>> draft = Eagle3Draft.from_checkpoint(Checkpoint.open("demo/speculators"))
    >>> out = draft(input_ids, aux_hidden)          # aux_hidden: [B, T, n_aux * H_t]
    >>> target_ids = map_to_target(out.logits.argmax(-1), draft.d2t)
    """

    d2t: torch.Tensor
    t2d: torch.Tensor

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        fc_in = cfg.num_aux * cfg.target_hidden
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        if cfg.norm_before_fc:
            self.input_norm = RMSNorm(fc_in, cfg.rms_eps)
        if cfg.fc_norm:
            self.fc_norm = nn.ModuleList(RMSNorm(cfg.target_hidden, cfg.rms_eps) for _ in range(cfg.num_aux))
        self.fc = nn.Linear(fc_in, cfg.hidden, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg)])
        self.norm = RMSNorm(cfg.hidden, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab, dtype=torch.bool))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """HF-style init: Linear and Embedding ~ normal(0, initializer_range), RMSNorm weights 1.0."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.initializer_range)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    @property
    def decoder_input_path(self) -> str:
        """Module path of the projection that first reads the decoder's 2H input (a hook there sees it)."""
        layer = self.layers[0]
        assert isinstance(layer, DecoderLayer)
        return f"layers.0.self_attn.{layer.self_attn.first_projection}"

    # -- forward ---------------------------------------------------------------------------
    def project(self, hidden: torch.Tensor, fc_gate: FcGate = "always") -> tuple[torch.Tensor, bool]:
        """The feature entering the decoder: fc over the (normed) aux concat, as the gate decides."""
        cfg = self.cfg
        width = hidden.shape[-1]
        if fc_gate == "width-differs":  # SGLang: fc only when the width is not H, silently skipped otherwise
            if width == cfg.hidden:
                return hidden, False
        elif fc_gate == "always-assert":  # vLLM: fc always, loud shape check
            if width != self.fc.in_features:
                raise AssertionError(f"fc expects {self.fc.in_features}-wide aux features "
                                     f"({cfg.num_aux} x {cfg.target_hidden}), got {width}")
        elif fc_gate != "always":  # EAGLE / speculators: fc always
            raise ValueError(f"fc_gate must be one of {FC_GATES}, got {fc_gate!r}")
        if cfg.norm_before_fc:
            hidden = self.input_norm(hidden)
        if cfg.fc_norm:
            chunks = hidden.split(cfg.target_hidden, dim=-1)
            hidden = torch.cat([norm(chunk) for norm, chunk in zip(self.fc_norm, chunks, strict=True)], dim=-1)
        return self.fc(hidden), True

    def forward(self, input_ids: torch.Tensor, hidden: torch.Tensor, position_ids: torch.Tensor | None = None,
                fc_gate: FcGate = "always") -> DraftOutput:
        """One draft step over ``input_ids`` [B, T] with feature ``hidden`` [B, T, n_aux*H_t or H]."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
        g, fc_applied = self.project(hidden, fc_gate)
        return self._decode(input_ids, g, position_ids, fc_applied)

    def rollout(self, input_ids: torch.Tensor, hidden: torch.Tensor, steps: int,
                fc_gate: FcGate = "always") -> list[DraftOutput]:
        """``steps`` chained draft steps from every position at once (the paper's draft loop, greedy).

        Step 1 is :meth:`forward`: tokens ``input_ids`` at positions 0..T-1, the aux feature through fc.
        Step k+1 reads, at each position, the token step k predicted there (argmax mapped to target ids
        with d2t) and step k's ``hidden_out`` as its feature (H wide: fc is not applied), one position
        further on. Each step attends causally within its own row only: no tree and no keys from earlier
        steps (so the uniform position shift leaves RoPE scores as they are), and step k+1 sees the
        draft's guesses, not the tokens the target would have accepted.
        """
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        B, T = input_ids.shape
        positions = torch.arange(T, device=input_ids.device).expand(B, -1)
        out = self(input_ids, hidden, positions, fc_gate)
        outputs = [out]
        for _ in range(steps - 1):
            positions = positions + 1
            ids = map_to_target(out.logits.argmax(-1), self.d2t)
            out = self._decode(ids, out.hidden_out, positions, fc_applied=False)
            outputs.append(out)
        return outputs

    def ttt_step(self, input_ids: torch.Tensor, g: torch.Tensor, positions: torch.Tensor,
                 steps: StepKeys) -> DraftOutput:
        """One draft step over one sequence (``input_ids`` [1, T], H-wide feature ``g``) whose attention also
        reads the earlier steps' keys in ``steps`` (speculators' TTT; engines' chain drafting at topk 1), to
        which it adds its own. Step 0 is ``ttt_step(ids, project(aux)[0], positions, StepKeys())``."""
        return self._decode(input_ids, g, positions, fc_applied=False, steps=steps)

    def _decode(self, input_ids: torch.Tensor, g: torch.Tensor, positions: torch.Tensor,
                fc_applied: bool, steps: StepKeys | None = None) -> DraftOutput:
        """Decoder layer, final norm and lm_head over tokens and an H-wide feature ``g``."""
        h = self.layers[0](self.embed_tokens(input_ids), g, positions, steps=steps)  # a kwarg: traces stay as they were
        n = self.norm(h)
        return DraftOutput(logits=self.lm_head(n), hidden_out=n if self.cfg.norm_output else h, fc_applied=fc_applied)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint, embed_tokens: torch.Tensor | None = None) -> Eagle3Draft:
        """Build from a speculators or EAGLE/SpecForge checkpoint (keys renamed to speculators names).

        ``embed_tokens`` supplies the target's table for layouts that do not save it (SpecForge);
        without it such a draft keeps a NaN table, so nothing silently runs on random embeddings.
        Absent ``d2t``/``t2d`` stay zero (identity mapping). Unknown keys or shape mismatches raise.
        """
        cfg = DraftConfig.from_checkpoint(ckpt)
        check_config_fits(cfg, ckpt)
        model = cls(cfg)
        state = {canonical_key(name): ckpt.read(name) for name in ckpt.tensors}
        if embed_tokens is not None:
            state["embed_tokens.weight"] = embed_tokens
        own = model.state_dict()
        unexpected = sorted(set(state) - set(own))
        missing = sorted(set(own) - set(state) - set(OPTIONAL_KEYS))
        if unexpected or missing:
            raise CheckpointError(ckpt.path, f"not an EAGLE-3 draft of this shape: unexpected {unexpected[:4]}, "
                                             f"missing {missing[:4]}")
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(own[name].shape):
                raise CheckpointError(ckpt.path, f"tensor {name!r} has shape {list(tensor.shape)}, "
                                                 f"expected {list(own[name].shape)}")
        if "embed_tokens.weight" not in state:
            nn.init.constant_(model.embed_tokens.weight, math.nan)
        model.load_state_dict(state, strict=False)
        return model.eval()


def check_config_fits(cfg: DraftConfig, ckpt: Checkpoint, budget_bytes: int | None = None) -> None:
    """Before any real tensor is allocated: every checkpoint tensor the draft module has must have the shape the
    config's sizes give it (built on the meta device, which allocates nothing), and the parameters the config
    adds beyond the checkpoint's tensors must fit in ``budget_bytes`` (default: half the machine's memory).

    A config that does not describe its weights (``hidden_size`` 4096 over 16-wide tensors, or sizes asking for
    petabytes) is one CheckpointError naming config.json, not a shape error or an allocation failure later.
    """
    with torch.device("meta"):
        own = {name: tuple(t.shape) for name, t in Eagle3Draft(cfg).state_dict().items()}
    for key, info in ckpt.tensors.items():
        name = canonical_key(key)
        if name in own and torch_dtype(info.dtype) is None:
            raise CheckpointError(info.file, f"tensor {key!r} is stored as {info.dtype} (packed 4/6-bit values): the "
                                             "reference draft cannot run it")
        if name in own and tuple(info.shape) != own[name]:
            raise CheckpointError(ckpt.root / "config.json", f"does not describe the weights: {key} has shape "
                                                             f"{list(info.shape)}, the config's sizes give {list(own[name])}")
    present = {canonical_key(key) for key in ckpt.tensors}
    extra = sum(math.prod(shape) for name, shape in own.items() if name not in present) * 4
    budget = budget_bytes if budget_bytes is not None else _memory_bytes() // 2
    if extra > budget:
        raise CheckpointError(ckpt.root / "config.json", f"its sizes ask for {extra / 2**30:,.1f} GiB of draft "
                                                         f"parameters the checkpoint does not hold (more than "
                                                         f"{budget / 2**30:,.1f} GiB): cannot build the draft")


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


_RENAMES = ((re.compile(r"^model\."), ""), (re.compile(r"^midlayer\."), "layers.0."))


def canonical_key(name: str) -> str:
    """Speculators name of a checkpoint key: drop a ``model.`` prefix, ``midlayer.`` -> ``layers.0.``."""
    for pattern, repl in _RENAMES:
        name = pattern.sub(repl, name)
    return name


def map_to_target(draft_ids: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    """Target-vocab ids of draft-vocab ids: ``target = i + d2t[i]``."""
    return draft_ids + d2t[draft_ids]

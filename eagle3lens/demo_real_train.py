"""Training the real demo's EAGLE-3 drafter on CPU, speculators-style with test-time training (TTT).

The drafter is :class:`~eagle3lens.draft.Eagle3Draft`: ``embed_tokens`` and ``lm_head = target lm_head[t2d]``
copied and frozen, fc + decoder layer + norm trained, started from the target (:func:`target_start`: the layer a
copy of the one that reads the last aux state, fc passing that state through). Row ``i`` of a sequence reads token ``i+1`` and the target's
aux states at ``i``; step 0 predicts the target's next token at ``i+1``. Step ``k`` reads the ground-truth token
``i+1+k`` and step ``k-1``'s hidden output one position further on, attending to step 0's keys causally and to
steps 1..k's keys at its own row (speculators' TTT mask: what the served chain attends to), and predicts the
target's next token at ``i+1+k``. The loss is speculators': the KL from the target's distribution over the draft
vocabulary (its final state through the same frozen lm_head, so no logits are stored) to the draft's, on reply
positions only.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Any

import torch
import torch.nn.functional as F

from .demo_real_data import Sequence
from .draft import Attention, DecoderLayer, DraftConfig, Eagle3Draft, rope


def draft_for(cfg: DraftConfig, embed: torch.Tensor, lm_head: torch.Tensor, d2t: torch.Tensor,
              t2d: torch.Tensor, seed: int, start: dict[str, torch.Tensor] | None = None) -> Eagle3Draft:
    """A drafter with the target's tables copied in (and frozen); with ``start`` (:func:`target_start`), its other
    weights start from the target instead of a random init."""
    torch.manual_seed(seed)
    draft = Eagle3Draft(cfg)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(embed)
        draft.lm_head.weight.copy_(lm_head[t2d])
        draft.d2t.copy_(d2t)
        draft.t2d.copy_(t2d)
        for name, value in (start or {}).items():
            draft.get_parameter(name).copy_(value)
    draft.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)
    return draft


def target_start(target: Any, cfg: DraftConfig, last_aux: int) -> dict[str, torch.Tensor]:
    """Draft weights that start where the target is: fc passes the last aux state through (an identity block),
    the decoder layer is a copy of the target layer that reads that state (q/k/v on the feature half of their
    [embedding ; feature] input, zeros on the embedding half) and the norm is the target's final norm. The
    embedding half and the other aux states then learn from zero. ``last_aux``: the HF ``hidden_states`` index of
    the last aux state, the input of decoder layer ``last_aux``."""
    H, n_aux = cfg.hidden, cfg.num_aux
    layer = {k: v.detach() for k, v in target.model.layers[last_aux].state_dict().items()}
    fc = torch.zeros(H, n_aux * cfg.target_hidden)
    fc[:, (n_aux - 1) * cfg.target_hidden:] = torch.eye(H)
    start = {"fc.weight": fc, "norm.weight": target.model.norm.weight.detach(),
             "layers.0.hidden_norm.weight": layer["input_layernorm.weight"],
             "layers.0.input_layernorm.weight": layer["input_layernorm.weight"]}
    for name in ("q_proj", "k_proj", "v_proj"):
        half = layer[f"self_attn.{name}.weight"]
        start[f"layers.0.self_attn.{name}.weight"] = torch.cat([torch.zeros_like(half), half], dim=1)
    for name in ("self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                 "mlp.up_proj.weight", "mlp.down_proj.weight"):
        start[f"layers.0.{name}"] = layer[name]
    return start


def ttt_forward(draft: Eagle3Draft, ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Hidden outputs (pre-norm) of ``steps`` TTT steps over rows [B, n]: ``ids`` [B, n + steps - 1] are the
    tokens rows read (row i reads ``ids[:, i + k]`` at step k), ``aux`` [B, n, n_aux*H]."""
    from .probes.acceptance import ttt_attention

    cfg = draft.cfg
    layer = draft.layers[0]
    assert isinstance(layer, DecoderLayer) and isinstance(layer.self_attn, Attention)
    attn = layer.self_attn
    B, n = aux.shape[0], aux.shape[1]
    g = draft.fc(aux)
    positions = torch.arange(n).expand(B, -1)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    outs = []
    group = cfg.heads // cfg.kv_heads
    for k in range(steps):
        xe, xh = layer.input_layernorm(draft.embed_tokens(ids[:, k:k + n])), layer.hidden_norm(g)
        x = torch.cat([xe, xh], dim=-1)
        q = attn.q_proj(x).view(B, n, cfg.heads, cfg.head_dim).transpose(1, 2)
        kk = attn.k_proj(x).view(B, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(B, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, kk = rope(q, positions + k, cfg.rope_theta), rope(kk, positions + k, cfg.rope_theta)
        keys.append(kk.repeat_interleave(group, dim=1))
        values.append(v.repeat_interleave(group, dim=1))
        y = ttt_attention(q, keys, values) if k else F.scaled_dot_product_attention(q, keys[0], values[0],
                                                                                    is_causal=True)
        h = attn.o_proj(y.transpose(1, 2).reshape(B, n, cfg.heads * cfg.head_dim)) + g
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        outs.append(h)
        g = h
    return outs


def batch_of(seqs: Seq[Sequence], steps: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor],
                                                         list[torch.Tensor]]:
    """Right-padded rows of ``seqs``: tokens read, aux features, and per step the target's final (post-norm) state
    at the position whose next token is predicted, with the mask of scored rows (reply tokens only)."""
    n = max(len(s.aux) for s in seqs)
    ids = torch.zeros(len(seqs), n + steps, dtype=torch.long)
    aux = torch.zeros(len(seqs), n, seqs[0].aux.shape[-1])
    lasts = [torch.zeros(len(seqs), n, seqs[0].last.shape[-1]) for _ in range(steps)]
    masks = [torch.zeros(len(seqs), n, dtype=torch.bool) for _ in range(steps)]
    row = torch.arange(n)
    for b, s in enumerate(seqs):
        T, rows = len(s.ids), len(s.aux)
        ids[b, :T - 1] = s.ids[1:]
        aux[b, :rows] = s.aux
        for k in range(steps):
            span = max(0, min(rows - 1 - k, T - 1 - k))  # rows whose step-k position has a target state
            lasts[k][b, :span] = s.last[1 + k:1 + k + span]
            masks[k][b] = (row < span) & (row + 2 + k >= s.reply_start)
    return ids, aux, lasts, masks


def train(draft: Eagle3Draft, seqs: Seq[Sequence], held: Seq[Sequence], *, steps: int, ttt: int, batch: int,
          lr: float, seed: int) -> dict[str, Any]:
    """AdamW on fc + decoder + norm over ``steps`` batches of ``batch`` sequences, speculators' loss: the KL from
    the target's next-token distribution over the draft vocabulary (its final state through the same frozen
    lm_head) to the draft's, TTT steps weighted 0.8^k; held-out per-step accuracy."""
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / steps))
    gen = torch.Generator().manual_seed(seed)
    weights = [0.8 ** k for k in range(ttt)]
    draft.train()
    loss = torch.zeros(())
    for _ in range(steps):
        pick = torch.randint(0, len(seqs), (batch,), generator=gen).tolist()
        ids, aux, lasts, masks = batch_of([seqs[i] for i in pick], ttt)
        outs = ttt_forward(draft, ids, aux, ttt)
        loss = sum((w * _loss(draft, h, last[m], m) for w, h, last, m in zip(weights, outs, lasts, masks, strict=True)),
                   torch.zeros(())) / sum(weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
    draft.eval()
    return {"final_train_loss": round(float(loss.detach()), 4), "heldout_accuracy_by_step": accuracy(draft, held, ttt),
            "accuracy_definition": "held-out reply positions, teacher-forced TTT step k: draft argmax == the "
                                   "target's argmax over the draft vocabulary",
            "loss": "KL(target || draft) over the draft vocabulary", "steps": steps, "ttt_steps": ttt,
            "batch_sequences": batch, "lr": lr, "train_sequences": len(seqs), "heldout_sequences": len(held)}


def _loss(draft: Eagle3Draft, h: torch.Tensor, last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if not mask.any():
        return torch.zeros(())
    with torch.no_grad():
        target = F.log_softmax(draft.lm_head(last), dim=-1)
    logits = draft.lm_head(draft.norm(h[mask]))
    return F.kl_div(F.log_softmax(logits, dim=-1), target, log_target=True, reduction="batchmean")


def accuracy(draft: Eagle3Draft, seqs: Seq[Sequence], ttt: int) -> list[float]:
    """Teacher-forced accuracy of each TTT step on the reply positions of ``seqs``: the draft's argmax against the
    target's over the draft vocabulary."""
    hits, total = [0] * ttt, [0] * ttt
    with torch.no_grad():
        for start in range(0, len(seqs), 8):
            ids, aux, lasts, masks = batch_of(seqs[start:start + 8], ttt)
            for k, (h, last, m) in enumerate(zip(ttt_forward(draft, ids, aux, ttt), lasts, masks, strict=True)):
                want = draft.lm_head(last[m]).argmax(-1)
                hits[k] += int((draft.lm_head(draft.norm(h[m])).argmax(-1) == want).sum())
                total[k] += int(m.sum())
    return [round(h / t, 4) if t else 0.0 for h, t in zip(hits, total, strict=True)]

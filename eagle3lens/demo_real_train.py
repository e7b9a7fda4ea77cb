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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .demo_real_data import Sequence
from .draft import Attention, DecoderLayer, DraftConfig, Eagle3Draft, rope, ttt_attention


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


def ttt_forward(draft: Eagle3Draft, ids: torch.Tensor, aux: torch.Tensor, steps: int,
                first_row: int = 0) -> list[torch.Tensor]:
    """Hidden outputs (pre-norm) of ``steps`` TTT steps over rows [B, n]: ``ids`` [B, n + steps - 1] are the
    tokens rows read (row i reads ``ids[:, i + k]`` at step k), ``aux`` [B, n, n_aux*H]. Steps after the first run
    on rows ``first_row..n-1`` only (a row's later steps read its own earlier steps and step 0's keys, so the rows
    before it are not needed when they are not scored): step 0's output is [B, n, H], the others' [B, n - first_row, H]."""
    cfg = draft.cfg
    layer = draft.layers[0]
    assert isinstance(layer, DecoderLayer) and isinstance(layer.self_attn, Attention)
    attn = layer.self_attn
    B, n = aux.shape[0], aux.shape[1]
    g = draft.fc(aux)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    outs = []
    group = cfg.heads // cfg.kv_heads
    for k in range(steps):
        lo = first_row if k else 0
        rows = n - lo
        positions = torch.arange(lo, n).expand(B, -1) + k
        xe, xh = layer.input_layernorm(draft.embed_tokens(ids[:, lo + k:k + n])), layer.hidden_norm(g)
        x = torch.cat([xe, xh], dim=-1)
        q = attn.q_proj(x).view(B, rows, cfg.heads, cfg.head_dim).transpose(1, 2)
        kk = attn.k_proj(x).view(B, rows, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(B, rows, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, kk = rope(q, positions, cfg.rope_theta), rope(kk, positions, cfg.rope_theta)
        keys.append(kk.repeat_interleave(group, dim=1))
        values.append(v.repeat_interleave(group, dim=1))
        y = ttt_attention(q, keys, values, first_row) if k else F.scaled_dot_product_attention(
            q, keys[0], values[0], is_causal=True)
        h = attn.o_proj(y.transpose(1, 2).reshape(B, rows, cfg.heads * cfg.head_dim)) + g
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        outs.append(h)
        g = h[:, first_row:] if not k else h
    return outs


@dataclass(frozen=True)
class Batch:
    """Right-padded rows of some sequences. ``ids`` [B, n + steps]: the tokens rows read; ``aux`` [B, n, n_aux*H];
    ``last`` [B, n + steps - 1, H]: at column j the target's final (post-norm) state at the position whose next token
    row j - k predicts at step k; ``scored`` [B, n + steps - 1]: the columns a loss reads (reply tokens only);
    ``first_row``: the first row any step after the first scores."""

    ids: torch.Tensor
    aux: torch.Tensor
    last: torch.Tensor
    scored: torch.Tensor
    first_row: int

    def mask(self, k: int) -> torch.Tensor:
        """The rows step ``k`` scores, [B, n] for step 0, [B, n - first_row] after it."""
        n, lo = self.aux.shape[1], self.first_row if k else 0
        return self.scored[:, k + lo:k + n]

    def at_step(self, columns: torch.Tensor, k: int) -> torch.Tensor:
        """``columns`` [B, n + steps - 1, ...] (laid out like ``last``) at the rows step ``k`` scores."""
        n, lo = self.aux.shape[1], self.first_row if k else 0
        return columns[:, k + lo:k + n][self.mask(k)]


def batch_of(seqs: Seq[Sequence], steps: int) -> Batch:
    """The :class:`Batch` of ``seqs`` for ``steps`` TTT steps."""
    n = max(len(s.aux) for s in seqs)
    ids = torch.zeros(len(seqs), n + steps, dtype=torch.long)
    aux = torch.zeros(len(seqs), n, seqs[0].aux.shape[-1])
    last = torch.zeros(len(seqs), n + steps - 1, seqs[0].last.shape[-1])
    scored = torch.zeros(len(seqs), n + steps - 1, dtype=torch.bool)
    column = torch.arange(n + steps - 1)
    for b, s in enumerate(seqs):
        rows = len(s.aux)
        ids[b, :len(s.ids) - 1] = s.ids[1:]
        aux[b, :rows] = s.aux
        last[b, :rows - 1] = s.last[1:]
        scored[b] = (column < rows - 1) & (column + 2 >= s.reply_start)  # a state there, predicting a reply token
    first = max(0, min(s.reply_start for s in seqs) - 2 - (steps - 1))
    return Batch(ids, aux, last, scored, first)


def train(draft: Eagle3Draft, seqs: Seq[Sequence], held: Seq[Sequence], *, steps: int, ttt: int, batch: int,
          lr: float, seed: int) -> dict[str, Any]:
    """AdamW on fc + decoder + norm over ``steps`` batches of ``batch`` sequences, speculators' loss: the KL from
    the target's next-token distribution over the draft vocabulary (its final state through the same frozen
    lm_head, in float32, once a batch) to the draft's, TTT steps weighted 0.8^k; the draft's forward in bfloat16
    autocast (float32 weights, optimizer and loss); held-out per-step accuracy (float32)."""
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / steps))
    gen = torch.Generator().manual_seed(seed)
    weights = [0.8 ** k for k in range(ttt)]
    head = draft.lm_head.weight.detach().to(torch.bfloat16)  # frozen: autocast would cast it again every call
    draft.train()
    loss = torch.zeros(())
    for _ in range(steps):
        pick = torch.randint(0, len(seqs), (batch,), generator=gen).tolist()
        b = batch_of([seqs[i] for i in pick], ttt)
        with torch.no_grad():
            teacher = F.log_softmax(draft.lm_head(b.last[b.scored]), dim=-1)
            probs = teacher.exp()  # once a batch, not once a step and again in its backward
        where = torch.full(b.scored.shape, -1, dtype=torch.long)
        where[b.scored] = torch.arange(len(teacher))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs = ttt_forward(draft, b.ids, b.aux, ttt, b.first_row)
            logits = [F.linear(draft.norm(h[b.mask(k)]), head) for k, h in enumerate(outs)]
        rows = [b.at_step(where, k) for k in range(ttt)]
        losses = [_kl(z, teacher[r], probs[r]) for z, r in zip(logits, rows, strict=True)]
        loss = sum((w * part for w, part in zip(weights, losses, strict=True)), torch.zeros(())) / sum(weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
    draft.eval()
    return {"final_train_loss": round(float(loss.detach()), 4), "heldout_accuracy_by_step": accuracy(draft, held, ttt),
            "accuracy_definition": "held-out reply positions, teacher-forced TTT step k: draft argmax == the "
                                   "target's argmax over the draft vocabulary",
            "loss": "KL(target || draft) over the draft vocabulary", "precision": "bfloat16 autocast forward",
            "steps": steps, "ttt_steps": ttt, "batch_sequences": batch, "lr": lr, "train_sequences": len(seqs),
            "heldout_sequences": len(held)}


def _kl(logits: torch.Tensor, teacher: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """KL(teacher || draft) per row, batch mean: ``teacher`` the target's log-probabilities, ``probs`` their exp
    (``F.kl_div`` with ``log_target`` takes that exp twice a call, forward and backward)."""
    if not len(logits):
        return torch.zeros(())
    return (probs * (teacher - F.log_softmax(logits.float(), dim=-1))).sum() / len(logits)


def accuracy(draft: Eagle3Draft, seqs: Seq[Sequence], ttt: int) -> list[float]:
    """Teacher-forced accuracy of each TTT step on the reply positions of ``seqs``: the draft's argmax against the
    target's over the draft vocabulary."""
    hits, total = [0] * ttt, [0] * ttt
    with torch.no_grad():
        for start in range(0, len(seqs), 8):
            b = batch_of(seqs[start:start + 8], ttt)
            for k, h in enumerate(ttt_forward(draft, b.ids, b.aux, ttt, b.first_row)):
                m = b.mask(k)
                want = draft.lm_head(b.at_step(b.last, k)).argmax(-1)
                hits[k] += int((draft.lm_head(draft.norm(h[m])).argmax(-1) == want).sum())
                total[k] += int(m.sum())
    return [round(h / t, 4) if t else 0.0 for h, t in zip(hits, total, strict=True)]

"""Scoring one view over the samples: the draft chain (the reference draft's test-time-training steps), the
teacher-forced metrics speculators reports, and the per-start / per-round counts the serving views report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..draft import Attention, Eagle3Draft, FcGate, StepKeys, map_to_target
from ..errors import UsageError
from .acceptance_result import TEACHER_FORCED, AcceptanceView
from .acceptance_samples import Prepared
from .acceptance_setup import Setup, d2t
from .rounds import per_round, round_counts
from .traffic_result import PerStart


@dataclass
class Counts:
    """Summed counts of one view over the samples."""

    steps: int
    full_hit: list[float] = field(default_factory=list)
    full_total: list[float] = field(default_factory=list)
    cond_total: list[float] = field(default_factory=list)
    blocks: float = 0.0
    block_len: float = 0.0
    rounds: float = 0.0  # drafting rounds of the engine's walk (serving views)
    round_hit: list[float] = field(default_factory=list)  # rounds whose positions 0..k were all accepted
    error: str | None = None
    unavailable: str | None = None

    def __post_init__(self) -> None:
        self.full_hit, self.full_total, self.cond_total, self.round_hit = ([0.0] * self.steps for _ in range(4))

    def view(self, name: str, setup: dict[str, Any], engine: str | None, serving: bool) -> AcceptanceView:
        if self.error or self.unavailable:
            return AcceptanceView(name, (), (), None, 0, setup, engine, error=self.error, unavailable=self.unavailable)
        full = tuple(_ratio(h, t) for h, t in zip(self.full_hit, self.full_total, strict=True))
        cond = tuple(_ratio(h, t) for h, t in zip(self.full_hit, self.cond_total, strict=True))
        positions = int(self.full_total[0])
        if not serving:
            accept = self.block_len / self.blocks if self.blocks else None
            return AcceptanceView(name, full, cond, accept, positions, setup, engine, count=TEACHER_FORCED)
        start = PerStart(1.0 + sum(full) if self.full_total[0] else None, full, cond)
        accept, r_full, r_cond = per_round(self.rounds, self.round_hit)
        return AcceptanceView(name, r_full, r_cond, accept, positions, setup, engine, rounds=int(self.rounds),
                              per_start=start)


def _ratio(hit: float, total: float) -> float:
    return hit / total if total > 0 else 0.0


def shared_counts(setups: dict[str, Setup], K: int,
                  known: list[tuple[Setup, Counts]] | None = None) -> dict[str, Counts]:
    """One Counts per distinct way of running (same weights, features and effective fc gate)."""
    pool = list(known or [])
    out: dict[str, Counts] = {}
    for name, setup in setups.items():
        match = next((c for other, c in pool if _runs_alike(setup, other)), None)
        if match is None:
            match = Counts(K)
            pool.append((setup, match))
        out[name] = match
    return out


def _runs_alike(a: Setup, b: Setup) -> bool:
    if (a.layers, a.aux_off, a.feed) != (b.layers, b.aux_off, b.feed) or _effective_gate(a) != _effective_gate(b):
        return False
    sa, sb = a.draft.state_dict(), b.draft.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa if k != "t2d")


def _effective_gate(setup: Setup) -> str:
    """What the gate does with this setup's feature width: fc applied, skipped, or the engine's assert firing."""
    cfg = setup.draft.cfg
    width = cfg.target_hidden if setup.aux_off else len(setup.layers) * cfg.target_hidden
    if setup.gate == "width-differs":
        return "skip" if width == cfg.hidden else "fc"
    if setup.gate == "always-assert" and width != cfg.num_aux * cfg.target_hidden:
        return "assert"
    return "fc"


def _feature(setup: Setup, p: Prepared) -> torch.Tensor:
    if setup.aux_off:
        if p.final is None:
            raise UsageError("aux-off needs the target's final hidden state")
        return p.final
    if setup.feed == "stored" and p.stored is not None:  # as wide as fc reads: the training features as stored
        return p.stored
    missing = [k for k in setup.layers if k not in p.feats]
    if missing:
        raise _MissingLayers(setup.layers, p.recorded)
    return torch.cat([p.feats[k] for k in setup.layers], dim=-1)


class _MissingLayers(Exception):
    def __init__(self, wanted: tuple[int, ...], recorded: tuple[int, ...] | None) -> None:
        held = (f"the dump holds {list(recorded)}" if recorded is not None else
                "the dump does not record which layers it holds")
        super().__init__(f"the engine captures hidden_states {list(wanted)}, {held}, and the target cannot be run "
                         "here to capture them (its checkpoint lacks decoder weights): give a full target, or "
                         "--target T --prompts F")


def score(setup: Setup, p: Prepared, K: int, counts: Counts, serving: bool) -> list[torch.Tensor] | None:
    """Score one sample into ``counts``; the chain's predictions (None when the view cannot run)."""
    if counts.error or counts.unavailable:
        return None
    try:
        feature = _feature(setup, p)
        preds = chain(setup.draft, p.ids, feature, setup.gate, K,
                      teacher_forced=None if serving else p.ids)
    except _MissingLayers as exc:
        counts.unavailable = str(exc)
        return None
    except (AssertionError, RuntimeError) as exc:  # the engine's fc shape check, or fc's matmul on the wrong width
        counts.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return None
    if serving:
        _score_serving(setup.draft, preds, p, K, counts)
    else:
        _score_metrics(preds, p, K, counts)
    return preds


def _score_metrics(preds: list[torch.Tensor], p: Prepared, K: int, counts: Counts) -> None:
    """speculators' compute_accuracy_single_step after align_for_step, summed (restated, not imported)."""
    T = p.ids.shape[0]
    prev = p.mask.clone()  # prev_correct starts as the (shifted) loss mask
    block_ok = torch.ones(T, dtype=torch.bool, device=p.ids.device)
    block_valid = torch.zeros(T, dtype=torch.bool, device=p.ids.device)
    block_run = torch.zeros(T, device=p.ids.device)
    for k in range(min(K, T)):
        n = T - k
        correct = preds[k][:n] == p.teacher_draft[k:]
        counts.cond_total[k] += float(prev[:n].sum())
        prev[:n] &= correct
        slot_mask = p.mask[k:]
        counts.full_hit[k] += float((prev[:n] & slot_mask).sum())
        counts.full_total[k] += float(slot_mask.sum())
        # compute_accepted_length_counts: leading run of correct & valid slots per block, + 1
        block_ok[:n] &= correct & slot_mask
        block_ok[n:] = False
        block_run += block_ok.float()
        block_valid[:n] |= slot_mask
    counts.blocks += float(block_valid.sum())
    counts.block_len += float(((block_run + 1) * block_valid.float()).sum())


def _score_serving(module: Eagle3Draft, preds: list[torch.Tensor], p: Prepared, K: int, counts: Counts,
                   teacher: torch.Tensor | None = None) -> None:
    """Per start (every verify start) and per round (the starts the engine's walk drafts at, :mod:`.rounds`);
    the chain checked against ``teacher`` (target ids per position; default the target's greedy tokens)."""
    teacher = p.teacher_full if teacher is None else teacher
    T = p.ids.shape[0]
    n = T - K + 1  # verify starts with all K draft positions inside the sequence
    if n <= 0:
        return
    starts = p.mask[:n]
    run = torch.ones_like(starts)
    runs = []
    for k in range(K):
        proposed = map_to_target(preds[k][:n], d2t(module))
        counts.cond_total[k] += float((run & starts).sum())
        run = run & (proposed == teacher[k:k + n])
        runs.append(run)
        counts.full_hit[k] += float((run & starts).sum())
        counts.full_total[k] += float(starts.sum())
    rounds, hits = round_counts(torch.stack(runs), starts)
    counts.rounds += rounds
    counts.round_hit = [a + b for a, b in zip(counts.round_hit, hits, strict=True)]


def score_in_vocab(module: Eagle3Draft, preds: list[torch.Tensor], p: Prepared, K: int, counts: Counts) -> None:
    """The serving chain checked against the target's greedy token over the draft vocabulary (what training's
    metrics check): the chain's acceptance were the target never to want a token the draft cannot propose."""
    _score_serving(module, preds, p, K, counts, teacher=map_to_target(p.teacher_draft, d2t(module)))


def chain(module: Eagle3Draft, ids: torch.Tensor, feature: torch.Tensor, gate: FcGate, steps: int,
          teacher_forced: torch.Tensor | None = None) -> list[torch.Tensor]:
    """``steps`` draft steps from every position of one sequence; the draft-vocab argmax of each step.

    Step 0 reads ``ids`` [T] and ``feature`` [T, width] through fc (as ``gate`` decides); step k reads step k-1's
    hidden output and either its own prediction mapped to target ids (serving) or, with ``teacher_forced``, the
    ground-truth ids shifted k to the left (speculators' TTT). Each step is the reference draft's
    :meth:`~eagle3lens.draft.Eagle3Draft.ttt_step`: its queries attend to step 0's keys causally and to steps
    1..k's keys at their own position.
    """
    if not isinstance(module.layers[0].self_attn, Attention):  # MLA's latent path has no q/k/v projections
        raise UsageError("the acceptance chain runs drafts with Llama-style attention only; this draft uses MLA")
    T = ids.shape[0]
    with torch.no_grad():
        g, _ = module.project(feature[None].to(next(module.parameters()).dtype), gate)
        positions = torch.arange(1, T + 1, device=ids.device)[None]  # shift_batch: positions start at 1
        x_ids = ids[None]
        keys = StepKeys()
        preds = []
        for k in range(steps):
            out = module.ttt_step(x_ids, g, positions, keys)
            pred = out.logits.argmax(-1)
            preds.append(pred[0])
            g = out.hidden_out
            if teacher_forced is not None:
                x_ids = F.pad(teacher_forced[k + 1:], (0, k + 1))[None]
            else:
                x_ids = map_to_target(pred, d2t(module))
            positions = positions + 1
    return preds

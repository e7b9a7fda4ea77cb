"""Samples as the acceptance views read them: checked against the draft and target, shifted as speculators shifts
them, with the teacher's tokens, the target's states the served views need, and whether the data is its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint
from ..errors import CheckpointError
from ..target_runtime import Teacher
from .acceptance_setup import Setup, draft_rows
from .data import Sample
from .limits import check_length, check_token_ids, max_positions

ORIGIN_SAMPLES = 4  # samples whose last hidden states are checked against the target's (the whole forward runs)


@dataclass
class Prepared:
    """One sample as every view reads it (position i: token i+1, aux state of i, teacher after i+1)."""

    ids: torch.Tensor  # [T'] token i+1 at position i (speculators' shift_batch)
    stored: torch.Tensor | None  # [T', n_aux * H] the data's own aux states of position i (the training features)
    feats: dict[int, torch.Tensor]  # HF index -> [T', H] aux state of position i (recorded, or captured again)
    recorded: tuple[int, ...] | None  # the HF layers the data records for its chunks
    rows: torch.Tensor  # [T', H] the target's final-norm state of position i+1 (its logits give teacher_full)
    tokens: torch.Tensor  # [T'+1] the sample's own token ids (unshifted)
    final: torch.Tensor | None  # [T', H] the target's final post-norm state (aux-off feed)
    mask: torch.Tensor  # [T'] loss mask of position i (that of token i+1)
    teacher_full: torch.Tensor  # [T'] target greedy token after position i+1 (full vocab)
    teacher_draft: torch.Tensor  # [T'] the same, restricted to the draft vocab (index into it)
    agree: float
    agree_total: float


def checked(samples: Iterator[Sample], ckpt: Checkpoint, teacher: Teacher, trained: Setup) -> Iterator[Sample]:
    """Samples whose widths fit the draft and target (else one clear error naming the file and both widths)."""
    cfg = trained.draft.cfg
    positions = max_positions(teacher.model.config if teacher.model is not None else
                              (teacher.ckpt.config if teacher.ckpt is not None else None) or {})
    for s in samples:
        check_length(len(s), positions, s.source)
        if s.last is not None and s.last.shape[-1] != teacher.hidden:
            raise CheckpointError(s.source, f"last hidden state is {s.last.shape[-1]} wide, the target's hidden size "
                                            f"is {teacher.hidden} ({teacher.source})")
        width = s.aux.shape[-1]
        H_t = cfg.target_hidden
        if width % H_t or (s.layers is not None and width != len(s.layers) * H_t):
            raise CheckpointError(s.source, f"aux hidden states are {width} wide, the draft reads {cfg.num_aux} x {H_t} "
                                            f"= {cfg.num_aux * H_t} ({ckpt.path})")
        if s.layers is None and width != cfg.num_aux * H_t:
            raise CheckpointError(s.source, f"aux hidden states are {width} wide, the draft's fc reads "
                                            f"{cfg.num_aux} x {H_t} = {cfg.num_aux * H_t} ({ckpt.path})")
        if s.last is None:
            raise CheckpointError(s.source, "the dump holds no last hidden state: the teacher cannot be computed")
        for name, values in (("aux hidden states", s.aux), ("last hidden state", s.last)):
            bad = (~torch.isfinite(values)).nonzero()
            if bad.numel():
                raise CheckpointError(s.source, f"non-finite values in the {name} (first at position "
                                                f"{int(bad[0][0])}): the dump is not usable")
        check_token_ids(s.token_ids, int(teacher.lm_head.shape[0]), s.source)
        yield s


def prepare(s: Sample, teacher: Teacher, trained: Setup, dev: torch.device, capture: tuple[int, ...],
            origin: Origin, each: Callable[[torch.Tensor], None] | None = None) -> Prepared:
    """speculators' shift_batch (position i: token i+1, aux state of i, last hidden of i+1) and the teacher; the
    target's states at ``capture`` (HF indices the served setups read) taken from the data where it records them,
    else captured again by running the target on the sample's tokens (when it can run here)."""
    module = trained.draft
    feats, stored = _recorded(s, trained, dev)
    assert s.last is not None
    missing = tuple(k for k in capture if k not in feats)
    check = origin.checked < ORIGIN_SAMPLES
    if (missing or (check and origin.verify)) and teacher.runnable:
        captured, pre, post = teacher.states(s.token_ids, missing, full=check)
        feats.update({k: v[:-1].to(dev) for k, v in captured.items()})
        origin.captured = origin.captured or bool(missing)
        if pre is not None and post is not None:
            origin.check(s, pre, post)
    normed = s.last.to(dev, torch.float32) if s.last_normed else teacher.final_norm(s.last.to(dev))
    rows = draft_rows(module)
    full, draft = teacher.greedy(normed[1:], rows.to(dev) if rows is not None else None, each=each)
    ids = s.token_ids.to(dev)
    mask = s.loss_mask.to(dev)[1:]
    follows = (ids[2:] == full[:-1]) & mask[:-1]
    return Prepared(ids[1:], stored, feats, s.layers, normed[1:], ids, normed[:-1], mask, full, draft,
                    float(follows.sum()), float(mask[:-1].sum()))


def _recorded(s: Sample, trained: Setup,
              dev: torch.device) -> tuple[dict[int, torch.Tensor], torch.Tensor | None]:
    """The data's own aux states: per recorded HF layer, and as one feature when it is as wide as fc reads."""
    module = trained.draft
    H_t = module.cfg.target_hidden
    chunks = s.aux.split(H_t, dim=-1)
    feats: dict[int, torch.Tensor] = {}
    if s.layers is not None:
        if len(s.layers) != len(chunks):
            raise CheckpointError(s.source, f"the dump holds {len(chunks)} aux layers but records {len(s.layers)} "
                                            f"({list(s.layers)})")
        feats = {k: c[:-1].to(dev, torch.float32) for k, c in zip(sorted(s.layers), chunks, strict=True)}
    stored = s.aux[:-1].to(dev, torch.float32) if s.aux.shape[-1] == module.cfg.num_aux * H_t else None
    if stored is None and not all(k in feats for k in trained.layers):
        raise CheckpointError(s.source, f"the dump holds {len(chunks)} aux layers, the draft was trained with "
                              f"{module.cfg.num_aux} ({list(trained.layers)})")
    return feats, stored


class Origin:
    """Whether the data's last hidden states are this target's own: checked wherever the target is run again to
    capture layers, and with ``verify`` (a dump, whatever the views need) on the first samples in any case."""

    def __init__(self, verify: bool = False) -> None:
        self.verify = verify
        self.captured = False  # the target was run to capture layers the data does not hold
        self.checked = self.foreign = 0
        self.worst = 0.0
        self.first_foreign: str | None = None

    def check(self, s: Sample, pre: torch.Tensor, post: torch.Tensor) -> None:
        from .provenance import MATCH_TOLERANCE, relative_error

        assert s.last is not None
        error = min(relative_error(s.last, pre), relative_error(s.last, post))
        self.checked += 1
        self.worst = max(self.worst, error)
        if error > MATCH_TOLERANCE:
            self.foreign += 1
            self.first_foreign = self.first_foreign or s.source


def count(data: Any, limit: int | None) -> int | None:
    """How many samples will be scored, where that is known up front (a dump's files, a sized collection)."""
    if isinstance(data, (str, Path)):
        from .data import dump_files

        n: int | None = len(dump_files(data)[1])
    else:
        n = len(data) if hasattr(data, "__len__") else None
    return min(n, limit) if n is not None and limit is not None else n

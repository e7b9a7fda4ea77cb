"""d2t / t2d: is the draft -> target vocabulary mapping the one training built, and what do engines do with it?

Training keeps the N most frequent target ids, sorted ascending (``ids``), and stores offsets
``d2t[i] = ids[i] - i`` plus a mask ``t2d[j] = j in ids``. Engines read only d2t: SGLang
``hot_token_id = d2t + arange(N)``, vLLM scatters N logits into a V-wide row at ``arange(N) + d2t``,
EAGLE decodes ``topk + d2t[topk]``. The probe checks the invariants, classifies what is wrong by
testing which *candidate* table (stored, arange added back, arange removed, rebuilt from t2d) is
valid and agrees with t2d and, given a target, with the draft's ``lm_head`` rows; the repair is
the candidate the evidence singles out.

The probe is split along its seams: ``vocab_mapping`` reads the tables and checks the invariants,
``vocab_diagnosis`` classifies the candidate readings, ``vocab_findings`` words the findings,
``vocab_coverage`` measures the token mass the draft vocabulary keeps; this module assembles the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from ..checkpoint import CheckpointLike, as_checkpoint
from ..errors import ConversionRefused
from ..findings import Finding, Severity, to_jsonable
from .vocab_coverage import Coverage, load_token_counts, measure_coverage
from .vocab_diagnosis import CODE_OF, Diagnosis
from .vocab_findings import ENGINE_USE, NO_D2T_USE
from .vocab_mapping import (CANDIDATES, HEAD_BLOCK_ROWS, SHOW, CandidateCheck, compare_head_rows, head_key, ids_valid,
                            invariant_breaks, is_valid, leading_zeros, readable_table, recover_ids_from_head,
                            target_ids)


# -- results ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VocabResult:
    """The mapping, its invariants, the candidate readings and the findings."""

    path: str
    d2t_key: str | None
    t2d_key: str | None
    draft_vocab_size: int | None  # N
    vocab_size: int | None  # V
    status: str  # "valid" | "full-vocab" | "broken" | "not-a-draft"
    diagnosis: str | None  # main finding code, None when valid
    repair: str | None  # candidate name the evidence supports (see CANDIDATES), None if none / not needed
    invariants: dict[str, Any] = field(compare=False)
    candidates: tuple[CandidateCheck, ...] = ()
    t2d_count: int | None = None
    leading_zeros: int | None = None
    head: dict[str, Any] | None = None  # lm_head vs target summary
    coverage: Coverage | None = None
    notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    d2t: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def candidate(self, name: str) -> CandidateCheck | None:
        return next((c for c in self.candidates if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        inv = {k: v for k, v in self.invariants.items() if k != "bad"}
        return to_jsonable({
            "d2t_key": self.d2t_key, "t2d_key": self.t2d_key, "draft_vocab_size": self.draft_vocab_size,
            "vocab_size": self.vocab_size, "status": self.status, "diagnosis": self.diagnosis,
            "repair": self.repair, "invariants": inv, "t2d_count": self.t2d_count,
            "leading_zeros": self.leading_zeros, "candidates": [c.to_dict() for c in self.candidates],
            "head": self.head, "coverage": self.coverage.to_dict() if self.coverage else None,
            "notes": list(self.notes), "findings": [f.to_dict() for f in self.findings],
        })


@dataclass(frozen=True)
class D2tRepair:
    """Tensors to write (under the checkpoint's own key names) and why."""

    tensors: dict[str, torch.Tensor]
    reason: str
    evidence: dict[str, Any]



# -- the probe ----------------------------------------------------------------------------------
def inspect_vocab(draft: CheckpointLike, *, target: CheckpointLike | None = None, tokenizer: Any = None,
                  token_counts: Any = None, text: str | None = None, served: bool = False) -> VocabResult:
    """Check a draft's d2t / t2d, classify what is wrong and say what each engine does with it.

    ``draft`` / ``target``: checkpoints or their paths; the target's ``lm_head`` rows are compared with the
    draft's (``target.lm_head[ids]``).
    ``token_counts``: target-token frequencies (path to .json list/dict or .npy, or a sequence/tensor/dict);
    ``tokenizer`` (object or directory) + ``text``: counts from a text sample; the tokenizer also
    decodes the most frequent missed tokens. ``served``: the counts are served traffic, so coverage is measured
    on the mapping as stored (the ids the draft proposes when served, as acceptance counts them), the repaired
    mapping's coverage in a note; else on the mapping a proven repair gives (what the draft should cover).
    """
    return _result(Diagnosis(as_checkpoint(draft), as_checkpoint(target)), tokenizer=tokenizer,
                   token_counts=token_counts, text=text, served=served)


def compare_mappings(drafts: Sequence[CheckpointLike], *, target: CheckpointLike | None = None) -> list[dict[str, Any]]:
    """The vocab probe on several drafts against one target, a summary row each: draft, status, diagnosis."""
    tgt = as_checkpoint(target)
    rows = []
    for draft in drafts:
        ckpt = as_checkpoint(draft)
        r = inspect_vocab(ckpt, target=tgt)
        rows.append({"draft": ckpt.path.name, "status": r.status, "diagnosis": r.diagnosis})
    return rows


def plan_d2t_repair(draft: CheckpointLike, target: CheckpointLike | None = None) -> D2tRepair:
    """The repaired d2t (and t2d when it must change) that the evidence proves; refuses when ambiguous."""
    ckpt = as_checkpoint(draft)
    analysis = Diagnosis(ckpt, as_checkpoint(target))
    result = _result(analysis)
    if result.status in ("valid", "full-vocab"):
        critical = [f.title for f in result.findings if f.severity is Severity.CRITICAL]
        if critical:  # the verdict `vocab` prints for the same file: valid values, but a critical finding
            raise ConversionRefused(f"{ckpt.path}: d2t's values are a valid mapping, but the vocab probe reports "
                                    f"{'; '.join(critical)}: --repair-d2t rewrites d2t values and cannot fix that")
        raise ConversionRefused(f"{ckpt.path}: the d2t/t2d mapping is already valid; nothing to repair")
    if result.repair is None:
        why = "; ".join(f.title for f in result.findings) or "no usable mapping"
        hint = ("; a target whose lm_head rows the draft copies may prove one (add --target T)"
                if target is None and head_key(ckpt) == "lm_head.weight" else "")
        raise ConversionRefused(f"{ckpt.path}: no repair is proven ({why}); "
                                f"rebuild the mapping from the training data's token counts{hint}")
    chosen = result.candidate(result.repair)
    if chosen is None or not chosen.valid:
        raise ConversionRefused(f"{ckpt.path}: the proposed d2t repair is not a valid mapping; refusing to write it")
    n, v = result.draft_vocab_size, result.vocab_size
    tensors = {analysis.d2t_key or _sibling(analysis.t2d_key, "d2t"): chosen.d2t.to(torch.int64).contiguous()}
    if analysis.t2d_key is None and analysis.d2t_key is None:  # restore both tensors training writes
        tensors[_sibling(None, "t2d")] = _mask(target_ids(chosen.d2t), v)
    elif analysis.t2d_key is not None and not chosen.matches_t2d:
        tensors[analysis.t2d_key] = _mask(target_ids(chosen.d2t), v)
    evidence = {"diagnosis": result.diagnosis, "candidate": chosen.to_dict(), "draft_vocab_size": n, "vocab_size": v,
                "changed_entries": int((chosen.d2t != analysis.d2t).sum()) if analysis.d2t is not None else n,
                "tensors": sorted(tensors)}
    return D2tRepair(tensors=tensors, reason=f"{result.diagnosis}: use {CANDIDATES[chosen.name]}", evidence=evidence)


def _proposed_ids(analysis: Diagnosis) -> torch.Tensor | None:
    """The target ids the draft proposes with its mapping as stored (acceptance's served vocabulary)."""
    from .served_vocab import in_draft_vocab

    if analysis.n is None or analysis.v is None:
        return None
    return torch.nonzero(in_draft_vocab(analysis.d2t, analysis.n, analysis.v)).flatten()


def _mask(ids: torch.Tensor, vocab_size: int | None) -> torch.Tensor:
    t2d = torch.zeros(vocab_size or int(ids.max()) + 1, dtype=torch.bool)
    t2d[ids] = True
    return t2d


def _sibling(key: str | None, leaf: str) -> str:
    return leaf if key is None else key.rsplit(".", 1)[0] + "." + leaf if "." in key else leaf



def _result(analysis: Diagnosis, tokenizer: Any = None, token_counts: Any = None, text: str | None = None,
            served: bool = False) -> VocabResult:
    """The diagnosis's verdict, the lm_head summary and (given counts or text) the coverage, as one result."""
    verdict = analysis.verdict()
    coverage = None
    if token_counts is not None or text is not None:
        repaired = analysis.kept_ids(verdict)
        kept = _proposed_ids(analysis) if served else repaired
        if kept is not None:
            coverage = measure_coverage(kept, analysis.v, tokenizer=tokenizer, token_counts=token_counts, text=text)
            if served and repaired is not None and verdict.repair:
                fixed = measure_coverage(repaired, analysis.v, token_counts=coverage.counts)
                analysis.notes.append(f"coverage is of the mapping as stored (the ids the served draft proposes): "
                                      f"{coverage.covered:.1%}; after the proven repair ({verdict.repair}) "
                                      f"{fixed.covered:.1%}")
        else:
            analysis.notes.append("coverage not measured: no valid mapping to measure")
    return VocabResult(
        path=str(analysis.ckpt.path), d2t_key=analysis.d2t_key, t2d_key=analysis.t2d_key,
        draft_vocab_size=analysis.n, vocab_size=analysis.v, status=verdict.status, diagnosis=verdict.diagnosis,
        repair=verdict.repair, invariants=verdict.invariants, candidates=verdict.candidates,
        t2d_count=analysis.t2d_sum, leading_zeros=verdict.leading_zeros, head=analysis.head_summary(verdict),
        coverage=coverage, notes=tuple(analysis.notes), findings=tuple(analysis.findings), d2t=analysis.d2t)


__all__ = ["inspect_vocab", "compare_mappings", "plan_d2t_repair", "VocabResult", "D2tRepair", "CandidateCheck",
           "Coverage", "invariant_breaks", "is_valid", "ids_valid", "target_ids", "leading_zeros", "readable_table",
           "head_key", "compare_head_rows", "recover_ids_from_head", "load_token_counts", "measure_coverage",
           "CANDIDATES", "CODE_OF", "ENGINE_USE", "NO_D2T_USE", "SHOW", "HEAD_BLOCK_ROWS"]

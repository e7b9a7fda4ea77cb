"""The vocab probe's diagnosis: which candidate reading of the stored table (stored, arange added back, arange
removed, rebuilt from t2d, recovered from the lm_head rows) is valid and agrees with t2d and the target's lm_head,
hence the status, the main finding code and the repair the evidence singles out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from .vocab_findings import FindingProse
from .vocab_mapping import (CandidateCheck, compare_head_rows, head_key, ids_valid, invariant_breaks, leading_zeros,
                            no_breaks, recover_ids_from_head, target_ids)

CODE_OF = {"double-subtracted": "vocab/d2t-double-subtracted", "absolute": "vocab/d2t-absolute-ids"}


@dataclass(frozen=True)
class Verdict:
    """What the diagnosis concluded (the findings stay on the ``Diagnosis``)."""

    status: str  # "valid" | "full-vocab" | "broken" | "not-a-draft"
    diagnosis: str | None  # main finding code
    repair: str | None  # candidate name the evidence supports
    candidates: tuple[CandidateCheck, ...]
    invariants: dict[str, Any] = field(compare=False)
    leading_zeros: int | None


class Diagnosis(FindingProse):
    """Reads the mapping once (``MappingReader``), works out the candidates and classifies them."""

    # candidates ------------------------------------------------------------------------------
    @cached_property
    def t2d_ids(self) -> torch.Tensor | None:
        """Kept target ids per t2d, when t2d is filled (sum = N)."""
        if self.t2d is None or self.n is None or self.t2d_sum != self.n:
            return None
        return torch.from_numpy(np.flatnonzero(self.t2d.numpy()))

    def _check(self, name: str, table: torch.Tensor) -> CandidateCheck:
        """Validity and t2d agreement of one reading; nonzero(t2d) == arange(N) + table is checked as
        N distinct in-range ids (valid), all marked in t2d, and N marked in all."""
        ids = target_ids(table)
        valid = ids_valid(ids, self.v)
        matches = None
        if self.t2d is not None and self.n is not None and self.t2d_sum == self.n:
            matches = valid and table.numel() == self.n and bool(self.t2d.numpy()[ids.numpy()].all())
        return CandidateCheck(name, table, valid, matches)

    def _candidates(self) -> list[CandidateCheck]:
        checks = []
        if self.d2t is not None:
            stored = self._check("stored", self.d2t)
            if (stored.valid and stored.matches_t2d is not False and self._default_kind(self.d2t) is None
                    and self.target is None):
                return [stored]  # confirmed as far as this checkpoint can tell: no other reading needed
            checks.append(stored)
        arange = torch.arange(self.n or 0, dtype=torch.int64)
        if self.d2t is not None:
            checks.append(self._check("double-subtracted", self.d2t + arange))
            checks.append(self._check("absolute", self.d2t - arange))
        if self.t2d_ids is not None and self.t2d_ids.numel() == arange.numel():
            checks.append(self._check("from-t2d", self.t2d_ids - arange))
        return self._with_head(checks)

    def _with_head(self, checks: list[CandidateCheck]) -> list[CandidateCheck]:
        if self.target is None or self.v is None:
            return checks
        draft_head, target_head = head_key(self.ckpt), head_key(self.target)
        if draft_head != "lm_head.weight" and draft_head != "model.lm_head.weight" or target_head is None:
            self.notes.append("lm_head not compared: " + ("the draft has no lm_head" if target_head else "the target has no output head"))
            return checks
        rows = self.ckpt.info(draft_head).shape[0]
        usable = [c for c in checks if c.valid and c.d2t.numel() == rows]
        unique: dict[bytes, list[CandidateCheck]] = {}
        for c in usable:
            unique.setdefault(c.d2t.numpy().tobytes(), []).append(c)
        scores = compare_head_rows(self.ckpt, draft_head, self.target, target_head,
                                   [group[0].d2t for group in unique.values()])
        scored: dict[str, tuple[float, float]] = {}
        for group, score in zip(unique.values(), scores, strict=True):
            for c in group:
                scored[c.name] = score
        checks = [CandidateCheck(c.name, c.d2t, c.valid, c.matches_t2d, *scored[c.name]) if c.name in scored else c
                  for c in checks]
        stored = next((c for c in checks if c.name == "stored"), None)
        hopeless = stored is None or self._default_kind(stored.d2t) is not None or not any(c.valid for c in checks)
        if hopeless and not any(c.matches_head for c in checks) and rows == self.n:
            ids = recover_ids_from_head(self.ckpt, draft_head, self.target, target_head)
            if ids is not None:
                check = self._check("from-head", ids - torch.arange(rows, dtype=torch.int64))
                checks.append(CandidateCheck(check.name, check.d2t, check.valid, check.matches_t2d, 1.0, 1.0))
        return checks

    # diagnosis -------------------------------------------------------------------------------
    def verdict(self) -> Verdict:
        """Classify the mapping: status, main code, the repair the evidence proves; appends the findings."""
        n, v = self.n, self.v
        status, diagnosis, repair = "valid", None, None
        candidates: list[CandidateCheck] = []
        inv: dict[str, Any] = {"valid": self.d2t is None}
        zeros = None
        if n is None or (self.d2t_key is None and self.t2d_key is None and not self.ckpt.spec.is_draft):
            status = "not-a-draft"
            self.notes.append("no d2t/t2d and no draft vocabulary size: not a draft checkpoint, nothing to check")
        elif self.d2t_key is not None and self.d2t is None:
            status, diagnosis = "broken", "vocab/bad-shape"
        else:
            candidates = self._candidates()
            status, diagnosis, repair = self._diagnose(candidates)
            if self.d2t is not None:
                stored = candidates[0] if candidates and candidates[0].name == "stored" else None
                inv = invariant_breaks(self.d2t, v) if stored is None or not stored.valid else no_breaks()
                zeros = leading_zeros(self.d2t)
                if status == "valid" and zeros:
                    self.notes.append(f"d2t[0:{zeros}] = 0 is expected here because target ids 0..{zeros - 1} "
                                      "are in the draft vocab")
        if diagnosis is None and self.findings:
            diagnosis = sorted(self.findings, key=lambda f: -f.severity.rank)[0].code
        return Verdict(status, diagnosis, repair, tuple(candidates), inv, zeros)

    def kept_ids(self, verdict: Verdict) -> torch.Tensor | None:
        """The target ids the (repaired) mapping keeps, or None when no valid mapping is known."""
        chosen = next((c for c in verdict.candidates if c.name == (verdict.repair or "stored") and c.valid), None)
        if chosen is not None:
            return target_ids(chosen.d2t)
        if self.d2t is None and self.n == self.v and self.n is not None:
            return torch.arange(self.n)
        return None

    def head_summary(self, verdict: Verdict) -> dict[str, Any] | None:
        """The draft lm_head vs target lm_head comparison, summarised (None when not compared)."""
        scored = [c for c in verdict.candidates if c.head_rows_equal is not None]
        if not scored:
            return None
        match = [c.name for c in scored if c.matches_head]
        return {"draft": head_key(self.ckpt), "target": head_key(self.target) if self.target else None,
                "matches": match, "rows_equal": {c.name: c.head_rows_equal for c in scored},
                "cosine": {c.name: c.head_cosine for c in scored},
                "copy": bool(match), "note": ("lm_head rows are a copy of target.lm_head[ids] (speculators)" if match
                                              else "lm_head is not a copy of target rows (trained head)")}

    def _diagnose(self, candidates: list[CandidateCheck]) -> tuple[str, str | None, str | None]:
        """(status, diagnosis code, repair candidate); appends the findings on the way."""
        n, v = self.n, self.v
        by = {c.name: c for c in candidates}
        stored, from_t2d = by.get("stored"), by.get("from-t2d")
        t2d_sum = self.t2d_sum
        t2d_filled = self.t2d is not None and t2d_sum == n
        t2d_default = self.t2d is not None and n is not None and v is not None and n < v and t2d_sum in (0, v)
        if stored is None:
            if n == v:
                self.notes.append(f"full vocabulary (N = V = {n}): identity mapping, no d2t needed")
                return "full-vocab", None, None
            repair = next((c.name for c in candidates if c.name in ("from-t2d", "from-head") and c.valid), None)
            self._finding_missing(repair, candidates)
            return "broken", "vocab/d2t-missing", repair
        if n == v and not bool(stored.d2t.any()):
            self.notes.append(f"full vocabulary (N = V = {n}): identity mapping, all-zero d2t is expected")
            self._finding_unneeded()
            return "full-vocab", None, None
        if self.t2d is not None and not t2d_filled and not t2d_default:
            self._finding_t2d_count(t2d_sum)
        default = self._default_kind(stored.d2t)
        readings = [c for c in candidates if c.name != "from-t2d"]
        head_match = [c for c in candidates if c.matches_head]
        t2d_match = [c for c in readings if c.matches_t2d and c.valid]
        if head_match:  # the draft head is a copy of target rows: the strongest proof
            truth = head_match[0]
            if t2d_filled and not truth.matches_t2d:
                self._finding_t2d_inconsistent(stored, truth, truth)
                if truth.name == "stored" or (truth.name == "from-t2d" and default is None):
                    return "broken", "vocab/t2d-inconsistent", truth.name
        elif t2d_match:
            truth = t2d_match[0]
        elif stored.valid and default is None:
            if t2d_filled:
                self._finding_t2d_inconsistent(stored, from_t2d, None)
                return "broken", "vocab/t2d-inconsistent", None
            if t2d_default:
                self._finding_t2d_default(t2d_sum)
            return "valid", None, None
        elif from_t2d is not None and from_t2d.valid:
            truth = from_t2d
        else:
            fixes = [c for c in readings if c.name in CODE_OF and c.valid]
            if default is not None:
                self._finding_identity(default, None)
                return "broken", "vocab/identity-default", None
            if len(fixes) != 1:
                self._finding_invalid(stored, fixes)
                return "broken", "vocab/d2t-invalid", None
            truth = fixes[0]
        if truth.name == "stored":
            if t2d_default:
                self._finding_t2d_default(t2d_sum)
            return "valid", None, None
        return "broken", self._finding_for(truth, stored, t2d_default, default), truth.name

    def _default_kind(self, d2t: torch.Tensor) -> str | None:
        """"all-zero" (init, N < V), "arange" (a default, verl-SpeCo PR #67) or None."""
        a = d2t.numpy()
        if a.size and a[0] == 0 and a[-1] == 0 and not a.any() and self.n != self.v:
            return "all-zero"
        if a.size > 1 and a[1] == 1 and a[-1] == a.size - 1 and bool((a == np.arange(a.size)).all()):
            return "arange"
        return None

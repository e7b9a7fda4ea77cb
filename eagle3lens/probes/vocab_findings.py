"""The vocab probe's prose: each finding's title, detail, evidence and fix command, and what each engine does
with the stored table. The diagnosis (``vocab_diagnosis``) decides which finding applies; this module words it.

Engines read only d2t: SGLang ``hot_token_id = d2t + arange(N)``, vLLM scatters N logits into a V-wide row at
``arange(N) + d2t``, EAGLE decodes ``topk + d2t[topk]``.
"""

from __future__ import annotations

from typing import Any

from ..engines import all_profiles, resolve
from ..findings import Finding, Severity, fix_command
from .vocab_mapping import (CANDIDATES, SHOW, CandidateCheck, MappingReader, inv_summary, invariant_breaks,
                            is_valid, target_ids)

# what each engine family (its newest profile) does with a d2t, and without one
_NEWEST = {p.name: resolve(p.name) for p in all_profiles()}
ENGINE_USE = {name: p.d2t_use for name, p in _NEWEST.items() if p.d2t_use}
PAST_VOCAB = {name: (p.d2t_range_error, p.d2t_range_use) for name, p in _NEWEST.items() if p.d2t_range_use}
NO_D2T_USE = {name: p.missing_d2t_use for name, p in _NEWEST.items() if p.missing_d2t_use}


class FindingProse(MappingReader):
    """Appends the vocab findings, worded from the mapping that was read."""

    def _examples(self, stored: CandidateCheck, right: CandidateCheck | None) -> list[dict[str, Any]]:
        """First draft ids whose target id differs between the stored table and the right one."""
        ids = target_ids(stored.d2t)
        if right is None:
            bad = invariant_breaks(stored.d2t, self.v)["bad"]
            idx = bad.nonzero().flatten()[:SHOW]
            return [{"draft_id": int(i), "stored_d2t": int(stored.d2t[i]), "engines_use_target_id": int(ids[i])}
                    for i in idx]
        good = target_ids(right.d2t)
        idx = (ids != good).nonzero().flatten()[:SHOW]
        return [{"draft_id": int(i), "stored_d2t": int(stored.d2t[i]), "repaired_d2t": int(right.d2t[i]),
                 "engines_use_target_id": int(ids[i]), "training_meant_target_id": int(good[i])} for i in idx]

    def _engines(self, stored: CandidateCheck) -> dict[str, str]:
        ids = target_ids(stored.d2t)
        lo, hi = int(ids.min()), int(ids.max())
        out_of_range = lo < 0 or (self.v is not None and hi >= self.v)
        rng = f"target ids in [{lo}, {hi}]" + (f", outside [0, {self.v})" if out_of_range else "")
        past = self._past_vocab(ids)
        return {
            "sglang": f"{ENGINE_USE['sglang']}: proposes {rng}"
                      + (f"; {PAST_VOCAB['sglang'][1]}" if past is not None else
                         "; negative ids reach the verifier (wrong tokens or an index error)" if out_of_range
                         else "; wrong but plausible tokens, rejected by the target"),
            "vllm": self._vllm_crash(past) if past is not None else f"{ENGINE_USE['vllm']}: " + (
                "negative indices wrap to the end of the row" if out_of_range else "logits land on the wrong target columns"),
            "eagle": f"{ENGINE_USE['eagle']}: {rng}",
        }

    def _past_vocab(self, ids: Any) -> int | None:
        """The first target id (in draft-id order) outside [-V, V): where vLLM's scatter trips."""
        if self.v is None:
            return None
        bad = ((ids >= self.v) | (ids < -self.v)).nonzero().flatten()
        return int(ids[bad[0]]) if bad.numel() else None

    def _vllm_crash(self, past: int) -> str:
        error, use = PAST_VOCAB["vllm"]
        return f"vLLM: {use}: {error.format(index=past, size=self.v)}"

    def _fix(self, proof: CandidateCheck | None = None) -> str:
        """The repair command; names the target when only its lm_head proves the repair."""
        stored_valid = self.d2t is not None and is_valid(self.d2t, self.v)
        needs_target = (proof is not None and proof.matches_head and not proof.matches_t2d
                        and (proof.name == "from-head" or stored_valid))
        if needs_target and self.target is not None:  # only the target's lm_head proves it
            return fix_command("convert", self.ckpt.path, "--repair-d2t", "--target", self.target.path, "OUT")
        return fix_command("convert", self.ckpt.path, "--repair-d2t", "OUT")

    def _finding_for(self, right: CandidateCheck, stored: CandidateCheck, t2d_default: bool, default: str | None) -> str:
        proof = " and ".join(p for p, ok in (("t2d", right.matches_t2d), ("the target lm_head rows", right.matches_head)) if ok)
        proof = proof or "the invariants (it is the only valid reading)"
        evidence = {"tensor": self.d2t_key, "draft_vocab_size": self.n, "vocab_size": self.v,
                    "stored_invariants": inv_summary(invariant_breaks(stored.d2t, self.v)),
                    "first_offending": self._examples(stored, right), "proven_by": proof,
                    "engines": self._engines(stored)}
        if right.name in ("from-t2d", "from-head"):
            if default is not None:
                self._finding_identity(default, right, evidence)
                return "vocab/identity-default"
            if stored.valid and right.name == "from-t2d":
                self.findings.append(Finding(
                    "vocab/t2d-inconsistent", Severity.CRITICAL, f"{self.d2t_key} disagrees with t2d; t2d is right",
                    detail=f"Rebuilding d2t from t2d is confirmed by {proof}. Engines use d2t only, so they propose "
                           "the wrong target ids.", evidence=evidence, fix=self._fix(right)))
                return "vocab/t2d-inconsistent"
            self.findings.append(Finding(
                "vocab/d2t-invalid", Severity.CRITICAL, f"{self.d2t_key} is not a valid mapping; {proof} rebuilds it",
                detail=f"The stored table is not a mapping (nor arange off by one); {CANDIDATES[right.name]} is.",
                evidence=evidence, fix=self._fix(right)))
            return "vocab/d2t-invalid"
        if right.name == "double-subtracted":
            code = "vocab/d2t-double-subtracted"
            title = f"{self.d2t_key} had arange(N) subtracted twice (stored ids[i] - 2i)"
            detail = ("Adding arange(N) back gives a valid mapping" + f", confirmed by {proof}. "
                      "Engines add arange once, so draft id i is proposed as target id ids[i] - i.")
        else:
            code = "vocab/d2t-absolute-ids"
            title = f"{self.d2t_key} holds absolute target ids, not offsets"
            detail = (f"d2t - arange(N) is the valid mapping, confirmed by {proof}. "
                      "Engines add arange again, so draft id i is proposed as target id ids[i] + i.")
        past = self._past_vocab(target_ids(stored.d2t))
        if past is not None:  # not a silent shift under vLLM: the server dies on its first decode
            detail += (f" Some of those ids are past the target vocabulary (first: {past}, V = {self.v}): under vLLM "
                       f"this is no silent shift, the server crashes on the first decode "
                       f"({PAST_VOCAB['vllm'][0].format(index=past, size=self.v)}, then EngineDeadError: every "
                       "request fails); under SGLang such proposals are never accepted (at TP 1 the first one crashes the server).")
            evidence["first_decode_error"] = {"vllm": PAST_VOCAB["vllm"][0].format(index=past, size=self.v)}
        self.findings.append(Finding(code, Severity.CRITICAL, title, detail=detail, evidence=evidence, fix=self._fix(right)))
        if t2d_default:
            self._finding_t2d_default(self.t2d_sum)
        return code

    def _finding_missing(self, repair: str | None, candidates: list[CandidateCheck]) -> None:
        self.findings.append(Finding(
            "vocab/d2t-missing", Severity.CRITICAL,
            f"no d2t although the draft vocab is smaller than the target's (N = {self.n} < V = {self.v})",
            detail="Engines silently fall back to draft id i = target id i, so only target ids < N are ever proposed. "
                   + (f"The mapping is recoverable: {CANDIDATES[repair]}." if repair else "Nothing here recovers it "
                      "(no t2d; pass --target if lm_head copies target rows): rebuild it from the training token counts."),
            evidence={"draft_vocab_size": self.n, "vocab_size": self.v, "t2d": self.t2d_key, "engines": dict(NO_D2T_USE)},
            fix=self._fix(next((c for c in candidates if c.name == repair), None)) if repair else None))

    def _finding_identity(self, kind: str, right: CandidateCheck | None, evidence: dict[str, Any] | None = None) -> None:
        ids_note = {"all-zero": "all-zero d2t (init value, never filled): draft id i -> target id i, only ids < N",
                    "arange": "d2t = arange(N) (a default, not a mapping): draft id i -> target id 2i",
                    "nonzero-full": "non-zero d2t although N = V: the identity mapping is d2t = 0"}[kind]
        stored = CandidateCheck("stored", self.d2t, False, None) if self.d2t is not None else None
        ev = dict(evidence or {"tensor": self.d2t_key, "draft_vocab_size": self.n, "vocab_size": self.v,
                              "engines": self._engines(stored) if stored is not None else {}})
        ev["default"] = kind
        if kind == "all-zero":
            ev["engines"] = {k: f"{ENGINE_USE[k]}: every draft id i is proposed as target id i (ids < {self.n} only)"
                             for k in ENGINE_USE}
        self.findings.append(Finding(
            "vocab/identity-default", Severity.CRITICAL, f"{self.d2t_key} is a default, not a trained mapping: {ids_note}",
            detail=(f"The real mapping is recoverable: {CANDIDATES[right.name]}." if right is not None else
                    "No evidence of the real mapping in this checkpoint: rebuild it from the training data's token counts."),
            evidence=ev, fix=self._fix(right) if right is not None else None))

    def _finding_t2d_default(self, t2d_sum: int | None) -> None:
        kind = "all True (SpecForge init)" if t2d_sum == self.v else "all False (speculators / EAGLE init)"
        self.findings.append(Finding(
            "vocab/identity-default", Severity.WARNING, f"{self.t2d_key} is the untouched default: {kind}",
            detail="Engines read only d2t, so serving is unaffected; but tools that use t2d (the teacher's "
                   "logits[..., t2d], the speculators lm_head copy target.lm_head[t2d]) see the wrong vocabulary.",
            evidence={"tensor": self.t2d_key, "t2d_sum": t2d_sum, "draft_vocab_size": self.n, "vocab_size": self.v},
            fix=self._fix()))

    def _finding_t2d_count(self, t2d_sum: int | None) -> None:
        self.findings.append(Finding(
            "vocab/t2d-inconsistent", Severity.WARNING, f"{self.t2d_key} marks {t2d_sum} ids, expected N = {self.n}",
            detail="sum(t2d) must equal the draft vocab size; engines ignore t2d, training tools do not.",
            evidence={"tensor": self.t2d_key, "t2d_sum": t2d_sum, "draft_vocab_size": self.n}))

    def _finding_t2d_inconsistent(self, stored: CandidateCheck, other: CandidateCheck | None,
                                  head: CandidateCheck | None) -> None:
        if head is None:
            who = "no target given to decide which is right (pass --target to compare lm_head rows)"
        else:
            who = f"the draft lm_head matches target.lm_head at ids from {CANDIDATES[head.name]}"
        severity = Severity.CRITICAL if head is not None and head.name != "stored" else Severity.WARNING
        self.findings.append(Finding(
            "vocab/t2d-inconsistent", severity, f"{self.d2t_key} and {self.t2d_key} describe different vocabularies",
            detail=f"nonzero(t2d) != arange(N) + d2t; {who}. Engines use d2t only.",
            evidence={"tensor": self.d2t_key, "t2d": self.t2d_key,
                      "first_offending": self._examples(stored, other) if other is not None else [],
                      "consistent_with_lm_head": head.name if head is not None else None,
                      "engines": self._engines(stored)},
            fix=self._fix(head) if head is not None else None))

    def _finding_invalid(self, stored: CandidateCheck, fixes: list[CandidateCheck]) -> None:
        self.findings.append(Finding(
            "vocab/d2t-invalid", Severity.CRITICAL, f"{self.d2t_key} breaks the mapping invariants and no repair is proven",
            detail="Neither adding nor removing arange(N) gives a single valid table, and no t2d/target head decides.",
            evidence={"tensor": self.d2t_key, "stored_invariants": inv_summary(invariant_breaks(stored.d2t, self.v)),
                      "first_offending": self._examples(stored, None), "valid_readings": [c.name for c in fixes],
                      "engines": self._engines(stored)}))


    def _finding_unneeded(self) -> None:
        n, v = self.n, self.v
        self.findings.append(Finding(
            "vocab/unneeded-mapping", Severity.WARNING, f"{self.d2t_key} is shipped although N = V = {n}",
            detail=f"{_NEWEST['vllm'].label} creates no {_NEWEST['vllm'].d2t_handling} parameter when N = V, so "
                   "loading this key fails (ValueError from its weight loader); SGLang adds it as an identity. "
                   "Training libraries omit d2t/t2d for a full vocabulary.",
            evidence={"tensor": self.d2t_key, "t2d": self.t2d_key, "draft_vocab_size": n, "vocab_size": v},
            fix=fix_command("convert", self.ckpt.path, "--to", "vllm", "OUT")))

"""The acceptance probe's judgements: ``acceptance/gap`` (served below trained), whether the fix restores what was
trained, and the offline estimate held against the server's logged accept len."""

from __future__ import annotations

from typing import Any

from ..checkpoint import Checkpoint
from ..findings import Finding, Severity, fix_command
from .acceptance_result import CAUSE_LABELS, AcceptanceResult, within_noise

ZERO_ACCEPT_LEN = 1.05
GAP_ABS, GAP_REL = 0.1, 0.1  # as served below as trained by more than both: a gap


def gap_findings(result: AcceptanceResult, ckpt: Checkpoint) -> list[Finding]:
    """``acceptance/gap``: the engine serves the draft worse than it was trained (with what fixes it)."""
    trained, served = result.accept_len("as_trained"), result.accept_len("as_served")
    if result.engine is None or trained is None:
        return []
    fixed = result.accept_len("fixed")
    view = result.views.get("as_served")
    if served is None:
        error = view.error if view is not None else None
        if error is None:  # not scored (data lacking a layer): nothing to judge
            return []
        return [Finding("acceptance/gap", Severity.CRITICAL, f"as served by {result.engine}: not servable ({error})",
                        f"As trained the draft reaches accept len {trained:.2f}; the engine as modelled stops first.",
                        evidence=evidence(result))]
    if trained - served <= max(GAP_ABS, GAP_REL * (trained - 1)):
        return []
    severity = Severity.CRITICAL if served <= ZERO_ACCEPT_LEN else Severity.WARNING
    toggles = "; ".join(f"{CAUSE_LABELS.get(c, c)}: {v:.2f}" if v is not None else f"{CAUSE_LABELS.get(c, c)}: n/a"
                        for c, v in result.toggles.items())
    title = (f"as served by {result.engine}: accept len {served:.2f}; as trained: {trained:.2f}"
             + (f"; after convert: {fixed:.2f}" if fixed is not None else ""))
    return [Finding("acceptance/gap", severity, title,
                    f"Offline, on {result.samples} samples with K = {result.steps}: the draft as {result.engine} loads "
                    f"and wires it accepts {served:.2f} tokens per drafting round (the engine's count), as trained "
                    f"{trained:.2f}."
                    + (f" Each cause fixed alone: {toggles}." if toggles else ""),
                    evidence=evidence(result), fix=_gap_fix(result, ckpt, trained, fixed))]


def restored(result: AcceptanceResult) -> bool | None:
    """Whether the fixed view accepts what the draft accepts as trained, within noise (None: not both scored)."""
    trained, fixed = result.accept_len("as_trained"), result.accept_len("fixed")
    if trained is None or fixed is None:
        return None
    return within_noise(fixed, trained)


def _gap_fix(result: AcceptanceResult, ckpt: Checkpoint, trained: float, fixed: float | None) -> str | None:
    """convert when it restores as trained; with aux capture off, switching capture on (and convert if needed)."""
    def restores(value: float | None) -> bool:
        return within_noise(value, trained)

    convert = fix_command("convert", ckpt.path, "--to", result.engine or "", "OUT")
    view = result.views.get("as_served")
    if view is not None and view.setup.get("scenario") == "aux-off":
        capture = "switch aux hidden-state capture on (SGLang: --speculative-algorithm EAGLE3)"
        if restores(result.toggles.get("aux-capture")):
            return capture
        return f"{capture}, and {convert}" if restores(fixed) else None
    return convert if restores(fixed) else None


def evidence(result: AcceptanceResult) -> dict[str, Any]:
    return {"accept_len": {n: v.accept_len for n, v in result.views.items()}, "toggles": dict(result.toggles),
            "steps": result.steps, "samples": result.samples}


def log_comparison(result: AcceptanceResult, logged: float, log_path: str,
                   log_steps: int | None = None) -> tuple[Finding | None, str | None]:
    """Hold the offline estimate against the server's logged accept len, like with like: per drafting round (the
    engine's count), as served (as trained without an engine), sampled where the result was scored with a
    temperature. ``acceptance/served-vs-log-mismatch``, or the note of agreement. ``log_steps``: K the log's
    server drafts, when it says (a different K scored is named in the finding)."""
    name = "as_served" if "as_served" in result.views else "as_trained"
    sampled = result.traffic.sampled.get(name) if result.traffic is not None else None
    served = sampled.accept_len if sampled is not None else result.accept_len(name)
    if served is None:
        return None, None
    label = name.replace("_", " ") + (f", sampled ({sampled.sampling.label()})" if sampled is not None else "")
    tolerance = max(0.05, 0.1 * (served - 1))
    if abs(served - logged) <= tolerance:
        return None, (f"{label}: accept len {served:.2f} per round (your log: {logged:.2f}): the served acceptance "
                      "is explained by the causes above")
    other_k = (f" The log's server drafts K = {log_steps}, the estimate scored K = {result.steps}: score with "
               f"--steps {log_steps}." if log_steps is not None and log_steps != result.steps else "")
    return Finding("acceptance/served-vs-log-mismatch", Severity.WARNING,
                   f"offline {label}: accept len {served:.2f} per round; the log says {logged:.2f}",
                   "Something outside the checkpoint differs from what was modelled: sampling (temperature > 0), "
                   "tree width (topk > 1), a different K, other data, or a wiring path not modelled." + other_k,
                   evidence={"estimated": served, "logged": logged, "log": log_path, "steps": result.steps,
                             "log_steps": log_steps, "view": name, "count": "per-round",
                             "sampled": sampled.sampling.label() if sampled is not None else None,
                             "engine": result.engine}), None

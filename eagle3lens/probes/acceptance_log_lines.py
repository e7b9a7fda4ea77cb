"""The acceptance line an engine's log would print for an offline estimate, release by release.

Which release prints which line (SGLang's accept-rate formula, vLLM's bonus-token convention) is read from the
same release table the log parser reads (:data:`.log_formats.ERAS`): one place says it.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from .acceptance_result import AcceptanceView
from .log_formats import ERAS, Era, era_of


def log_lines(view: AcceptanceView, steps: int, engine: str | None) -> dict[str, str]:
    """The acceptance part of the line each engine's log would print for this view (topk 1, K = steps): from its
    per-round figures, the engine's own count (never the per-start average). ``engine`` (``NAME==VERSION``)
    picks the engine and its release; without one (or a version not PEP 440), both engines' newest lines."""
    if view.accept_len is None:
        return {}
    name = engine.split("==")[0] if engine else None
    lines: dict[str, str] = {}
    for family in ("sglang", "vllm"):
        if name in (None, family):
            era = release_era(family, engine if name == family else None)
            lines[family] = _line(era, view.accept_len, view.full_acc, steps)
    return lines


def release_era(family: str, engine: str | None) -> Era:
    """The release range of ``family`` that ``engine`` (``NAME==VERSION``) names; the newest without a version."""
    version = None
    if engine and "==" in engine:
        try:
            version = Version(engine.split("==", 1)[1])
        except InvalidVersion:
            version = None
    if version is None:
        return [e for e in ERAS if e.engine == family][-1]
    return era_of(family, version)


def _line(era: Era, length: float, per_pos: tuple[float, ...], steps: int) -> str:
    if era.engine == "sglang":
        if era.formula is None:  # no accept rate before 0.5.3.post2
            return f"accept len: {length:.2f}"
        if era.formula == "0.5.5":  # accept_len / (K + 1): steps + 1, or num_draft_tokens = K + 1 at topk 1
            return f"accept len: {length:.2f}, accept rate: {length / (steps + 1):.2f}"
        # 0.5.11+: (accept_len - 1) / (num_draft_tokens - 1), num_draft_tokens = K + 1 at topk 1
        return f"accept len: {length:.2f}, accept rate: {(length - 1) / steps:.2f}"
    mean = length if era.bonus_included else length - 1  # 0.8.5-0.8.5.post1: the mean leaves the bonus token out
    return (f"Mean acceptance length: {mean:.2f}, Per-position acceptance rate: "
            + ", ".join(f"{r:.3f}" for r in per_pos)
            + f", Avg Draft acceptance rate: {100 * (length - 1) / steps:.1f}%")

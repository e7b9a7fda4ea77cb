"""The engine's verdict or the harness's failure: whether an execution that stopped before ``load_weights`` says
anything about the checkpoint.

An execution stops before the load for one of two reasons. The engine's own code judged the checkpoint's config (its
constructor refuses two decoder layers, transformers refuses a rope without ``factor``): that is a verdict. Or the
execution could not reproduce the engine here (a stand-in the release needs is missing, a runtime context the
launcher publishes is not set up, an import this environment cannot satisfy, a transformers release the engine does
not support): that says nothing about the checkpoint. The evidence that tells them apart: the same construction on
a built-in draft of the same class (:mod:`.audit_drafts`, a known-good config). When it stops at the same place with
the same exception, the harness failed, and the execution is ``engine/not-executed``.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..checkpoint import Checkpoint
from ..io.textsafe import clip
from ..engines.audit_drafts import DRAFTS, write_draft
from ..engines.execute import Execution, release_profile

# built-in drafts tried as the known-good control, in this order: the first whose class is the draft's
CONTROLS = ("specforge", "vllm-class", "speculators", "kimi-mla", "hf-prefixed", "sglang-layers0")
BEFORE_LOAD = ("import", "construct")
_DOING = {"construct": "importing the engine and building the draft"}

Runner = Callable[[Path, str], Execution]  # (checkpoint directory, fallback class) -> its execution


def judged(ckpt: Checkpoint, ex: Execution, run: Runner) -> Execution:
    """``ex``, or ``ex`` marked ``not_executed`` when its stop before the load is the harness's failure (the same
    construction on a known-good built-in draft of its class, run by ``run``, stops the same way)."""
    if ex.not_executed or ex.error is None or ex.phase not in BEFORE_LOAD:
        return ex
    err = ex.error
    said = f"{err.get('type')}: {clip(err.get('message', ''), 200)} (at {err.get('file')}:{err.get('line')})"
    if ex.phase == "import":  # the execution's own preparation, before any of the engine's code ran
        return replace(ex, not_executed=f"could not be prepared here, before any of its code ran: {said}")
    cls = ex.draft_class or release_profile(ex.engine, ex.version, ckpt.config).draft_class
    with tempfile.TemporaryDirectory(prefix="eagle3lens-control-") as tmp:
        control = _control(Path(tmp), ex, cls)
        if control is None:
            return ex
        name, path = control
        again = run(path, cls)
    if again.not_executed or again.phase != ex.phase or not _same(again.error, err):
        return ex
    return replace(ex, not_executed=(
        f"fails the same way on the built-in {name} draft, a config of the same class ({cls}) that it accepts: "
        f"{said} while {_DOING[ex.phase]}. The execution harness cannot reproduce this release here (a stand-in, "
        "a runtime context or an import this environment does not give): no verdict on this checkpoint"))


def _control(tmp: Path, ex: Execution, cls: str) -> tuple[str, Path] | None:
    """The first built-in draft whose config this release builds with ``cls`` and accepts (its simulation stops
    nowhere before the load: vLLM stops at start on an MLA draft whose config it rewrites), written under ``tmp``."""
    from .keys import simulate_load

    for name in CONTROLS:
        _what, tensors, config = DRAFTS[name]
        made = config()
        profile = release_profile(ex.engine, ex.version, made)
        if profile.draft_class != cls:
            continue
        path = write_draft(tmp / name, tensors(), made)
        sim = simulate_load(path, profile)
        if sim.refused_at not in ("config", "construct") and not any(f.code == "config/unrecognized"
                                                                      for f in sim.findings):
            return name, path
    return None


def _same(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    return a is not None and all(a.get(k) == b.get(k) for k in ("type", "file", "line", "function"))


__all__ = ["judged"]

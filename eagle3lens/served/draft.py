"""serve_draft: one derivation of what an engine release runs for a draft (headers and configs; of tensor data only
the loaded d2t's N ids, to see whether the engine's mapping leaves the target vocabulary).

    served = serve_draft("demo/mismatched-ids", engine="sglang==0.5.11", target="demo/target")
    served.stops, served.captured, served.fc, served.loaded_keys

The steps, in the order a server takes them: the release and runtime path (a launch's ``--disable-cuda-graph``
selects SGLang's eager path); the class the release builds for the config, or why it stops (class not shipped in
that release, a config-time gate on the target, a target class that cannot capture aux states, a loader that
raises); every parameter's source (a checkpoint key, the target's embed / head, or the init the engine leaves);
whether aux capture is on (the speculative algorithm) and which HF ``hidden_states`` it captures; what fc does with
the width it receives; the vocabulary mapping (a d2t mapping past the target vocabulary fails vLLM's first decode).
Every probe that needs one of these facts reads them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..checkpoint import Checkpoint, CheckpointLike, as_checkpoint
from ..engines import EngineProfile, resolve
from ..errors import CheckpointError, UsageError
from ..findings import Finding, Severity, to_jsonable
from ..launch import Launch
from ..aux_ids import trained_with
from .aux_layers import AuxResolution, resolve_aux_layers
from ..engines.config_writer import with_convert_fix
from .load import LoadResult, raises_fix, walk_load
from ..engines.stops import ServerStop, class_absent, config_gate, config_rewrite, target_capture
from ..engines.target_shape import TargetShape, read_target_shape

FcOutcome = Literal["runs", "bypassed", "asserts", "fails", "unknown"]
# SGLang: NEXTN is EAGLE (server_args); only EAGLE3 switches on aux capture (model_runner / spec_aux_hidden_state)
_SGLANG_ALIASES = {"NEXTN": "EAGLE"}


@dataclass(frozen=True)
class ServedParam:
    """One parameter of the served draft class and what fills it."""

    name: str
    role: str
    shape: tuple[int, ...]
    source: Literal["checkpoint", "target", "init"]
    keys: tuple[str, ...] = ()  # the checkpoint keys written into it
    holds: str = ""  # the init it keeps (source "init") or how the target fills it (source "target")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "shape": list(self.shape), "source": self.source,
                "keys": list(self.keys), "holds": self.holds}


@dataclass(frozen=True)
class ServedDraft:
    """What one engine release runs for one draft, from headers and configs."""

    checkpoint: str
    engine: str  # the profile's spec (release and path)
    release: str | None
    runtime_path: str | None
    draft_class: str | None  # None: the server stops before it builds one
    stops: ServerStop | None
    load: LoadResult
    params: tuple[ServedParam, ...]
    algorithm: str | None  # the speculative algorithm as the engine reads it (None: no launch, EAGLE-3 assumed)
    launched: bool  # a launch was given
    aux_capture: bool
    aux: AuxResolution | None  # the layers captured (None when capture is off)
    trained_layers: tuple[int, ...]  # HF indices the draft's config says it was trained with
    trained_source: str
    target: TargetShape | None
    received_width: int | None  # width of the feature the draft's first step receives
    hidden_size: int | None  # the draft's
    fc_in_features: int | None
    fc: FcOutcome
    fc_error: str | None  # the engine's error when fc asserts or fails
    vocab: str  # how draft ids become target ids, in words
    eagle_mode_vocab: str | None  # capture off on SGLang: "full" / "first-n" rows of the installed target head
    findings: tuple[Finding, ...] = ()  # serving findings (server stops, fc); the load's own are in ``load``
    notes: tuple[str, ...] = field(default=())
    # the engine's error on the first decode when arange(N) + d2t reaches past the target vocabulary (vLLM)
    vocab_error: str | None = None

    @property
    def captured(self) -> tuple[int, ...]:
        """HF ``hidden_states`` indices the draft is fed (empty with capture off: the final state instead)."""
        return self.aux.captured if self.aux is not None and self.aux_capture else ()

    @property
    def runs(self) -> bool:
        """The server starts and the draft proposes tokens."""
        return self.stops is None and self.fc not in ("asserts", "fails") and self.vocab_error is None

    @property
    def loaded_keys(self) -> tuple[str, ...]:
        return self.load.loaded_keys

    @property
    def outcome(self) -> str:
        """wired | fc-bypassed | fails-at-start | fails-at-first-decode | no-speculation."""
        if self.launched and self.algorithm is None:
            return "no-speculation"
        if self.stops is not None:
            return "fails-at-start"
        if self.fc in ("asserts", "fails") or self.vocab_error is not None:
            return "fails-at-first-decode"
        return "fc-bypassed" if self.fc == "bypassed" else "wired"

    @property
    def error(self) -> str | None:
        return self.stops.error if self.stops is not None else self.fc_error or self.vocab_error

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "checkpoint": self.checkpoint, "engine": self.engine, "release": self.release,
            "runtime_path": self.runtime_path, "draft_class": self.draft_class,
            "stops": self.stops.to_dict() if self.stops else None, "outcome": self.outcome,
            "params": [p.to_dict() for p in self.params], "algorithm": self.algorithm,
            "aux_capture": self.aux_capture, "captured_hf": list(self.captured),
            "trained_hf": list(self.trained_layers), "trained_source": self.trained_source,
            "target": self.target.to_dict() if self.target else None, "received_width": self.received_width,
            "hidden_size": self.hidden_size, "fc_in_features": self.fc_in_features,
            "fc": self.fc, "fc_error": self.fc_error, "vocab": self.vocab, "vocab_error": self.vocab_error,
            "eagle_mode_vocab": self.eagle_mode_vocab,
            "findings": [f.to_dict() for f in self.findings], "notes": list(self.notes)})


def serve_draft(draft: CheckpointLike, *, engine: str | EngineProfile, target: str | Path | Checkpoint | None = None,
                launch: Launch | None = None, num_target_layers: int | None = None,
                load: LoadResult | None = None, headers_only: bool = False) -> ServedDraft:
    """What ``engine`` runs for ``draft``: headers and configs of the draft and ``target`` (its ``config.json``
    is enough), with ``launch`` deciding the algorithm and runtime path (without one: EAGLE-3, the default path).
    ``num_target_layers`` stands in for a target when only its layer count is known. ``load``: the draft's load
    as already decided (the engine's own loader executed, ``keys --execute``) instead of the simulated one.
    ``headers_only``: read no tensor byte (a trace on the meta device): the d2t's range is then not checked."""
    ckpt = as_checkpoint(draft).require_draft()
    if ckpt.config is None:
        raise CheckpointError(ckpt.path, "no config.json beside the weights? the engine builds the draft from it")
    profile = resolve(engine)
    if launch is not None and profile.name != launch.engine:
        raise UsageError(f"the launch starts {launch.engine}, but --engine names {profile.spec}: "
                         "pass the engine the launch runs")
    if launch is not None and launch.cuda_graph is False and "eager" in profile.paths and ":" not in profile.spec:
        profile = profile.with_path("eager")  # --disable-cuda-graph: every decode batch runs the eager path
    shape = read_target_shape(target) if target is not None else None
    L = shape.num_hidden_layers if shape is not None else num_target_layers
    spec = ckpt.spec
    load = load if load is not None else walk_load(ckpt, profile, num_target_layers=L)
    notes: list[str] = []
    findings: list[Finding] = []
    algorithm = _algorithm(launch, spec, notes) if launch is not None else None
    capture = launch is None or algorithm == ("EAGLE3" if profile.name == "sglang" else "eagle3")
    if launch is not None and algorithm is None:
        findings.append(Finding(
            "launch/speculation-off", Severity.WARNING, "the launch runs no speculative decoding",
            f"The {launch.source} names no speculative algorithm, so the draft is never loaded.",
            evidence={"launch": launch.to_dict()}))
    stop = _stop(profile, ckpt, load, shape, capture and algorithm is not None or launch is None, algorithm, notes)
    # without a launch, a class the engine never resolves is the load's own finding (config/unrecognized)
    resolved_elsewhere = stop is not None and (stop.stage == "class-absent" or "rewritten_to" in stop.details)
    if stop is not None and profile.kind == "serving" and (not resolved_elsewhere or launch is not None):
        findings.append(_stop_finding(profile, stop, shape, launch))
    H_t = shape.hidden_size if shape is not None else spec.target_hidden_size
    aux = resolve_aux_layers(spec, L, profile, checkpoint=ckpt.path) if capture else None
    if aux is not None:
        aux = replace(aux, findings=with_convert_fix(aux.findings, ckpt, profile))
    received = (len(aux.captured) * H_t if aux is not None and H_t and (aux.captured or L is not None)
                else H_t if not capture else None)
    fc, fc_error = _fc(profile, spec, capture, received, notes)
    if stop is None and fc == "bypassed" and launch is not None:
        findings.append(_bypassed(profile, spec, algorithm, received, launch))
    elif stop is None and fc in ("asserts", "fails") and launch is not None and not capture:
        findings.append(Finding(
            "launch/server-fails", Severity.CRITICAL,
            f"predicted: {profile.spec} fails at the first decode when launched as {algorithm}",
            f"Launched as {algorithm}, the EAGLE-3 draft gets no aux states; {fc_error}",
            evidence={"error": fc_error, "algorithm": algorithm, "received_width": received,
                      "fc_in_features": spec.fc_in_features, "draft_hidden_size": spec.hidden_size, "predicted": True},
            fix=_eagle3_fix(launch)))
    if launch is not None and launch.cuda_graph is False:
        notes.append("the launch disables CUDA graphs (eager decode)"
                     + (": aux layers as the eager path captures them" if profile.path == "eager" else ""))
    trained, trained_source = trained_with(spec, L)
    vocab_error, vocab_text = _vocab(profile, load, ckpt, spec.vocab_size if capture and not headers_only else None)
    return ServedDraft(
        str(ckpt.path), profile.spec, profile.release, profile.path, None if stop else load.draft_class, stop, load,
        _params(load), algorithm, launch is not None, capture, aux, tuple(trained), trained_source,
        shape, received, spec.hidden_size, spec.fc_in_features, fc, fc_error, vocab_text,
        profile.eagle_mode_vocab if not capture else None, tuple(findings), tuple(notes), vocab_error)


# -- the steps ----------------------------------------------------------------------------------
def _stop(profile: EngineProfile, ckpt: Checkpoint, load: LoadResult, shape: TargetShape | None, capture: bool,
          algorithm: str | None, notes: list[str]) -> ServerStop | None:
    spec = ckpt.spec
    archs = tuple(spec.architectures)
    if profile.name == "vllm" and algorithm == "eagle" and archs and not archs[0].startswith("Eagle"):
        # vLLM's EagleConfig prefixes 'Eagle' for method eagle: no such class
        return ServerStop("config-gate", f"ValueError: Model architectures ['Eagle{archs[0]}'] are not supported "
                                         "for now.")
    # in the order a server meets them: the speculative config is validated at start-up, the target loads (and is
    # asked to capture aux states), then the draft worker resolves the draft's class and loads it
    stop = config_rewrite(profile, spec) if capture else None  # the draft's config, as the speculative config reads it
    if stop is None and shape is not None and capture:
        stop = config_gate(profile, shape)
    if stop is None and shape is not None and capture:
        stop = target_capture(profile, shape, notes)
    if stop is None and load.refused_at == "config":  # transformers reads config.json before the class is resolved
        stop = ServerStop("config", load.refused or "", raises_fix(ckpt, profile.for_config(ckpt.config), load))
    if stop is None:
        stop = class_absent(profile, spec)
    if stop is None and load.refused_at == "construct":
        stop = ServerStop("construct", load.refused or "", raises_fix(ckpt, profile.for_config(ckpt.config), load))
    if stop is None:
        raising = [f for f in load.fates if f.fate == "raises"]
        required = profile.missing_required(spec)
        if raising:
            stop = ServerStop("load", raising[0].reason)
        elif required:
            stop = ServerStop("load", required[0][1])
        elif load.refused:
            stop = ServerStop("load", load.refused, raises_fix(ckpt, profile.for_config(ckpt.config), load))
        elif profile.missing_d2t == "raises" and not spec.has_d2t:
            stop = ServerStop("load", profile.missing_d2t_error)
    return stop


def _algorithm(launch: Launch, spec: Any, notes: list[str]) -> str | None:
    algorithm = launch.algorithm
    if algorithm is None:
        return None
    if launch.engine == "sglang":
        return _SGLANG_ALIASES.get(algorithm, algorithm)
    if algorithm in ("draft", ""):  # vLLM infers the method from the draft's path
        path = (launch.draft or "").lower()
        inferred = "eagle" if "eagle-" in path else "eagle3" if "eagle3" in path else None
        if inferred is None and spec.flavour == "speculators":
            inferred = "eagle3"  # the speculators adapter gives the method
        notes.append(f"no method in --speculative-config: vLLM infers {inferred or 'nothing'} from the draft path")
        return inferred
    return algorithm


def _fc(profile: EngineProfile, spec: Any, capture: bool, width: int | None,
        notes: list[str]) -> tuple[FcOutcome, str | None]:
    """What fc does with the received width: runs, is bypassed (the width gate), asserts or fails (matmul)."""
    H, fc_in = spec.hidden_size, spec.fc_in_features
    if width is None or H is None or fc_in is None:
        return "unknown", None
    if not capture:
        if profile.name == "vllm":
            if H != width:
                return "asserts", "AssertionError: hidden_states and input_embeds must have the same last dimension"
            notes.append("vLLM runs combine_hidden_states (fc) only for method eagle3 (v1/spec_decode, vllm 0.33.0)")
            return "bypassed", None
        if width == H:
            return "bypassed", None
        return "fails", (f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (fc is applied to a {width}-wide "
                         f"state, but its weight expects {fc_in})")
    if profile.fc_gate == "width-differs" and width == H:
        return "bypassed", None
    if width == fc_in:
        return "runs", None
    if profile.fc_gate == "always-assert":
        return "asserts", f"AssertionError: fc expects {fc_in} features, the draft receives {width}"
    return "fails", (f"RuntimeError: mat1 and mat2 shapes cannot be multiplied ({width}-wide aux feature, fc "
                     f"expects {fc_in})")


def _params(load: LoadResult) -> tuple[ServedParam, ...]:
    """Each parameter's source as the load simulation decided it (the release's sharing rule included)."""
    return tuple(ServedParam(s.param.name, s.param.role, s.param.shape, s.source,  # type: ignore[arg-type]
                             s.sources, {"target": s.target or "", "init": s.param.init}.get(s.source, ""))
                 for s in load.params)


def _vocab(profile: EngineProfile, load: LoadResult, ckpt: Checkpoint, vocab_size: int | None) -> tuple[str | None, str]:
    """(the engine's first-decode error, or None; how draft ids become target ids, in words). The one place the
    served draft reads tensor data: the loaded d2t's N ids, to see whether ``arange(N) + d2t`` leaves the target
    vocabulary (vLLM's scatter then fails on every first decode; SGLang proposes ids the target never accepts)."""
    words = load.missing_d2t or profile.d2t_use or "draft ids index the target vocabulary directly"
    key = next((k for k in load.mapping if k.rsplit(".", 1)[-1] == "d2t"), None)
    if key is None or vocab_size is None or not (profile.d2t_range_error or profile.d2t_range_use):
        return None, words
    past = _past_vocab(ckpt, key, vocab_size)
    if past is None:
        return None, words
    error = profile.d2t_range_error.format(index=past, size=vocab_size) or None
    return error, (f"{words}; {key} maps draft ids past the target vocabulary (target id {past}, V = {vocab_size}): "
                   f"{profile.d2t_range_use}")


_INT_DTYPES = {"I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1"}


def _past_vocab(ckpt: Checkpoint, key: str, vocab_size: int) -> int | None:
    """The first target id ``i + d2t[i]`` (in draft-id order) outside [-V, V), the index the engine trips on (the
    table's safetensors bytes read as integers: no torch here)."""
    import numpy as np

    info = ckpt.info(key)
    if len(info.shape) != 1 or not info.shape[0] or info.dtype not in _INT_DTYPES or info.begin is None:
        return None
    ids = np.arange(info.shape[0], dtype=np.int64) + np.frombuffer(ckpt.read_bytes(key), _INT_DTYPES[info.dtype])
    bad = np.flatnonzero((ids >= vocab_size) | (ids < -vocab_size))
    return int(ids[bad[0]]) if bad.size else None


# -- findings -----------------------------------------------------------------------------------
def _stop_finding(profile: EngineProfile, stop: ServerStop, shape: TargetShape | None,
                  launch: Launch | None) -> Finding:
    what = {"class-absent": "the release does not ship the draft's class",
            "config-gate": "the release refuses EAGLE-3 for this target at config validation",
            "target-capture": "the target class cannot capture EAGLE-3 aux states",
            "load": "the loader raises", "construct": "the draft class's constructor raises",
            "config": ("the engine resolves the draft's config to a class it does not have" if "rewritten_to"
                       in stop.details else "transformers refuses the draft's config.json")}[stop.stage]
    return Finding(
        "launch/server-fails", Severity.CRITICAL, f"{'predicted: ' if launch else ''}the server stops at start: {what}",
        f"{profile.spec} stops before the draft runs: {stop.error}",
        evidence={**stop.details, "error": stop.error, "stage": stop.stage, "engine": profile.spec, "predicted": True,
                  "architecture": shape.architecture if shape else None,
                  "launch_source": launch.source if launch else None},
        fix=stop.remedy)


def _bypassed(profile: EngineProfile, spec: Any, algorithm: str | None, width: int | None, launch: Launch) -> Finding:
    H, fc_in = spec.hidden_size, spec.fc_in_features
    return Finding(
        "trace/fc-bypassed", Severity.CRITICAL,
        f"predicted: launched as {algorithm}, the draft gets one {width}-wide state and fc ({fc_in} wide) is skipped",
        f"{profile.spec} switches aux capture on only for the EAGLE-3 algorithm; launched as {algorithm}, the draft "
        f"receives the target's final hidden state ({width} wide). That equals the draft's hidden size ({H}), so "
        "the width gate skips fc without a word: the decoder reads features it was never trained on and acceptance "
        "drops to zero.",
        evidence={"received_width": width, "fc_in_features": fc_in, "draft_hidden_size": H, "algorithm": algorithm,
                  "launch_source": launch.source, "predicted": True},
        fix=_eagle3_fix(launch))


def _eagle3_fix(launch: Launch) -> str:
    return ("launch with --speculative-algorithm EAGLE3" if launch.engine == "sglang"
            else 'launch with --speculative-config \'{"method": "eagle3", ...}\'')

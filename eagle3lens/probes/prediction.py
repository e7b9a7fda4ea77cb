"""Predict the EAGLE-3 wiring from the launch: will the target's aux states reach the draft's fc?

    predict_wiring("kimi-eagle3", target="kimi-target/config.json", engine="sglang==0.5.9",
                   launch=parse_launch("python -m sglang.launch_server ... --speculative-algorithm EAGLE"))

Decided before any GPU runs, from the target's ``config.json`` (architecture, text widths, layer count),
the draft's config and headers, the engine release and the launch: whether the server captures aux states
at all (SGLang and vLLM switch capture on only for the EAGLE-3 algorithm), whether the target class can
capture them in that release (else start-up fails with the engine's error), which layers it captures, and
the width the draft receives against fc's in-features (the width gate that skips fc silently). No weights,
no torch: it runs for a 1T-parameter target on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..engines import EngineProfile, resolve
from ..engines.target_support import CaptureSupport, capture_support
from ..errors import UsageError
from ..findings import Finding, Severity, to_jsonable
from ..io.jsonio import read_json
from ..launch import Launch
from .aux_layers import AuxResolution, resolve_aux_layers

_TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")
# SGLang: NEXTN is EAGLE (server_args); only EAGLE3 switches on aux capture (model_runner / spec_aux_hidden_state)
_SGLANG_ALIASES = {"NEXTN": "EAGLE"}


@dataclass(frozen=True)
class TargetShape:
    """What the wiring depends on in a target's config.json."""

    path: str
    architecture: str
    hidden_size: int
    num_hidden_layers: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "architecture": self.architecture, "hidden_size": self.hidden_size,
                "num_hidden_layers": self.num_hidden_layers}


@dataclass(frozen=True)
class WiringPrediction:
    """The predicted wiring of one launch, and the live observation beside it when a trace was run."""

    engine: str
    launch: Launch
    target: TargetShape
    algorithm: str | None  # as the engine reads it (aliases resolved)
    aux_capture: bool  # the server switches aux capture on
    support: CaptureSupport | None  # the target class's capture support (when capture is on)
    outcome: str  # "wired" | "fc-bypassed" | "fails-at-start" | "fails-at-first-decode" | "no-speculation"
    resolution: AuxResolution | None  # the layers captured and their checks (when capture is on)
    received_width: int | None  # width of the feature the draft receives at its first step
    fc_in_features: int | None
    draft_hidden_size: int | None
    error: str | None  # the engine's error, for the outcomes that fail
    observed: dict[str, Any] | None = None  # from a live wiring check: fc_ran, feature width
    notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "engine": self.engine, "launch": self.launch.to_dict(), "target": self.target.to_dict(),
            "algorithm": self.algorithm, "aux_capture": self.aux_capture,
            "support": self.support.to_dict() if self.support else None, "outcome": self.outcome,
            "resolution": self.resolution.to_dict() if self.resolution else None,
            "received_width": self.received_width, "fc_in_features": self.fc_in_features,
            "draft_hidden_size": self.draft_hidden_size, "error": self.error, "observed": self.observed,
            "notes": list(self.notes), "findings": [f.to_dict() for f in self.findings]})


def read_target_shape(target: str | Path | Checkpoint) -> TargetShape:
    """Architecture, hidden size and layer count from a target's config.json (a directory or the file itself)."""
    path = target.root if isinstance(target, Checkpoint) else Path(target)
    config_path = path / "config.json" if path.is_dir() else path
    config = read_json(config_path, "target config")
    if not isinstance(config, dict):
        raise UsageError(f"{config_path}: the target config is not a JSON object")
    archs = config.get("architectures")
    if not (isinstance(archs, list) and archs and isinstance(archs[0], str)):
        raise UsageError(f"{config_path}: the target config names no architectures (a list of class names)")
    text = next((config[k] for k in _TEXT_CONFIG_KEYS if isinstance(config.get(k), dict)), config)
    sizes = {}
    for key in ("hidden_size", "num_hidden_layers"):
        value = text.get(key, config.get(key))
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 24:
            raise UsageError(f"{config_path}: the target config's {key} is not a positive integer")
        sizes[key] = value
    return TargetShape(str(config_path), archs[0], sizes["hidden_size"], sizes["num_hidden_layers"])


def predict_wiring(draft: str | Path | Checkpoint, *, target: str | Path | Checkpoint,
                   engine: str | EngineProfile | None = None, launch: Launch,
                   observed: Any = None) -> WiringPrediction:
    """Predict what ``launch`` feeds ``draft`` on ``target`` under ``engine`` (default: the launch's engine, newest
    release). ``observed``: a :class:`~eagle3lens.probes.wiring.WiringResult` from a live trace, shown beside."""
    shape = read_target_shape(target)
    ckpt = (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    profile = resolve(engine if engine is not None else launch.engine)
    if profile.name != launch.engine:
        raise UsageError(f"the launch starts {launch.engine}, but --engine names {profile.spec}: "
                         "pass the engine the launch runs")
    version = profile.release
    if launch.cuda_graph is False and "eager" in profile.paths and ":" not in profile.spec:
        profile = profile.with_path("eager")  # --disable-cuda-graph: every decode batch runs the eager path
    spec = ckpt.spec
    fc_in, H, H_t = spec.fc_in_features, spec.hidden_size, shape.hidden_size
    notes: list[str] = []
    findings: list[Finding] = []
    algorithm = _algorithm(launch, spec, notes)
    capture = algorithm == ("EAGLE3" if launch.engine == "sglang" else "eagle3")
    support = resolution = None
    error = None
    received: int | None = None

    if algorithm is None:
        outcome = "no-speculation"
        findings.append(Finding(
            "launch/speculation-off", Severity.WARNING, "the launch runs no speculative decoding",
            f"The {launch.source} names no speculative algorithm, so the draft is never loaded.",
            evidence={"launch": launch.to_dict()}))
    elif capture:
        support = capture_support(launch.engine, version, shape.architecture)
        if not support.exact:
            notes.append(f"target-class support read from {launch.engine} {support.release}, the nearest "
                         f"release scanned (asked: {version or 'newest'})")
        if not support.captures:
            outcome, error = "fails-at-start", support.error
            findings.append(_fails(profile.spec, shape, support, launch))
        else:
            resolution = resolve_aux_layers(spec, shape.num_hidden_layers, profile, checkpoint=ckpt.path)
            findings.extend(resolution.findings)
            received = len(resolution.captured) * H_t
            outcome = "wired"
    else:
        received = H_t  # no aux states: the target's final hidden state is handed over
        outcome, error = _without_capture(profile, algorithm, spec, H_t, notes)
        if outcome == "fc-bypassed":
            findings.append(Finding(
                "trace/fc-bypassed", Severity.CRITICAL,
                f"predicted: launched as {algorithm}, the draft gets one {H_t}-wide state and fc ({fc_in} wide) "
                "is skipped",
                f"{profile.spec} switches aux capture on only for the EAGLE-3 algorithm; launched as {algorithm}, "
                f"the draft receives the target's final hidden state ({H_t} wide). That equals the draft's hidden "
                f"size ({H}), so the width gate skips fc without a word: the decoder reads features it was never "
                "trained on and acceptance drops to zero.",
                evidence={"received_width": H_t, "fc_in_features": fc_in, "draft_hidden_size": H,
                          "algorithm": algorithm, "launch_source": launch.source, "predicted": True},
                fix=_eagle3_fix(launch)))
        elif error:
            findings.append(Finding(
                "launch/server-fails", Severity.CRITICAL,
                f"predicted: {profile.spec} fails {'at start' if outcome == 'fails-at-start' else 'at the first decode'}"
                f" when launched as {algorithm}",
                f"Launched as {algorithm}, the EAGLE-3 draft gets no aux states; {error}",
                evidence={"error": error, "algorithm": algorithm, "received_width": H_t, "fc_in_features": fc_in,
                          "draft_hidden_size": H, "predicted": True},
                fix=_eagle3_fix(launch)))
    if launch.cuda_graph is False:
        notes.append("the launch disables CUDA graphs (eager decode)"
                     + (": aux layers as the eager path captures them" if profile.path == "eager" else ""))
    return WiringPrediction(profile.spec, launch, shape, algorithm, capture, support, outcome, resolution, received,
                            fc_in, H, error, _observed(observed), tuple(notes), tuple(findings))


def _algorithm(launch: Launch, spec: Any, notes: list[str]) -> str | None:
    algorithm = launch.algorithm
    if algorithm is None:
        return None
    if launch.engine == "sglang":
        return _SGLANG_ALIASES.get(algorithm, algorithm)
    if algorithm == "draft" or algorithm == "":  # vLLM infers the method from the draft's path
        path = (launch.draft or "").lower()
        inferred = "eagle" if "eagle-" in path else "eagle3" if "eagle3" in path else None
        if inferred is None and spec.flavour == "speculators":
            inferred = "eagle3"  # the speculators adapter gives the method
        notes.append(f"no method in --speculative-config: vLLM infers {inferred or 'nothing'} from the draft path")
        return inferred
    return algorithm


def _without_capture(profile: EngineProfile, algorithm: str, spec: Any, H_t: int,
                     notes: list[str]) -> tuple[str, str | None]:
    """Outcome when the launch feeds the draft the final hidden state (no aux capture)."""
    H, fc_in = spec.hidden_size, spec.fc_in_features
    if profile.name == "vllm":
        archs = tuple(spec.architectures)
        if algorithm == "eagle" and archs and not archs[0].startswith("Eagle"):
            arch = "Eagle" + archs[0]  # vLLM's EagleConfig prefixes 'Eagle' for method eagle
            return "fails-at-start", f"ValueError: Model architectures ['{arch}'] are not supported for now."
        if H != H_t:
            return "fails-at-first-decode", ("AssertionError: hidden_states and input_embeds must have the same last "
                                             "dimension")
        notes.append("vLLM runs combine_hidden_states (fc) only for method eagle3 (v1/spec_decode, vllm 0.33.0)")
        return "fc-bypassed", None
    if H_t == H:
        return "fc-bypassed", None
    return "fails-at-first-decode", (f"RuntimeError: mat1 and mat2 shapes cannot be multiplied (fc is applied "
                                     f"to a {H_t}-wide state, but its weight expects {fc_in})")


def _fails(engine: str, shape: TargetShape, support: CaptureSupport, launch: Launch) -> Finding:
    served = support.served_by
    later = f" {support.engine} {support.first_capture} is the first release whose class captures them." \
        if support.first_capture and served == shape.architecture else ""
    what = (f"{engine} has no class for {shape.architecture}" if served is None else
            f"{served} in {engine} cannot capture EAGLE-3 aux states" if served == shape.architecture else
            f"{shape.architecture} runs through the {served} fallback in {engine}, which cannot capture aux states")
    return Finding(
        "launch/server-fails", Severity.CRITICAL, f"predicted: the server stops at start: {what}",
        f"Launched with the EAGLE-3 algorithm, the server asks the target class to capture aux hidden states: "
        f"{support.error}.{later}",
        evidence={"error": support.error, "architecture": shape.architecture, "served_by": served,
                  "release": support.release, "first_capture": support.first_capture, "predicted": True,
                  "launch_source": launch.source},
        fix=(f"serve with {support.engine}>={support.first_capture}" if support.first_capture else None))


def _eagle3_fix(launch: Launch) -> str:
    return ("launch with --speculative-algorithm EAGLE3" if launch.engine == "sglang"
            else 'launch with --speculative-config \'{"method": "eagle3", ...}\'')


def _observed(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    feature = getattr(result, "feature", None)
    return {"fc_ran": getattr(result, "fc_ran", None), "scenario": getattr(result, "scenario", None),
            "feature_width": feature.shape[-1] if feature is not None and getattr(feature, "shape", None) else None,
            "layers_used": list(getattr(result, "layers_used", ()))}

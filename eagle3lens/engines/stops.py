"""Why a server stops before the draft ever runs: the class is not in the release, a config-time gate, the target.

Each rule returns a :class:`ServerStop` with the engine's own error for that release (read from its source), or
None. Headers and configs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..draft_spec import DraftSpec
from .gates import eagle3_target_gate
from .profile import EngineProfile
from .target_support import capture_support
from .target_shape import TargetShape


@dataclass(frozen=True)
class ServerStop:
    """The server stops at ``stage`` with ``error`` (the engine's message); ``remedy`` says what serves it."""

    stage: str  # "class-absent" | "config-gate" | "target-capture" | "config" | "construct" | "load"
    error: str
    remedy: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # what the rule read (release row, class, list)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "error": self.error, "remedy": self.remedy, **self.details}


def class_absent(profile: EngineProfile, spec: DraftSpec) -> ServerStop | None:
    """The draft's architecture is an EAGLE-3 class of a later release of this engine, not shipped by this one."""
    from .registry import all_profiles

    arch = spec.architectures[0] if spec.architectures else None
    if arch is None or spec.flavour == "speculators" or profile.any_architecture or arch in profile.all_architectures():
        return None
    later = [p for p in all_profiles() if p.name == profile.name and p.kind == "serving" and p.releases
             and arch in p.all_architectures()]
    if not later:
        return None
    first = min(later, key=lambda p: p.versions[0] if p.versions else 0).releases[0]  # type: ignore[arg-type]
    return ServerStop("class-absent", CLASS_ABSENT[profile.name].format(arch=arch),
                      f"serve with {profile.name}>={first} (the first release that ships {arch})")


def config_rewrite(profile: EngineProfile, spec: DraftSpec) -> ServerStop | None:
    """vLLM rewrites a draft config of some model_types to an MTP model before the method's prefix is added (the
    class it then resolves, e.g. ``Eagle3DeepSeekMTPModel``, does not exist): the server stops whatever
    architecture the config names, before any weight is read."""
    rewritten = profile.model_type_rewrites.get(spec.model_type or "")
    if rewritten is None or spec.flavour == "speculators" or profile.any_architecture:
        return None
    prefix = profile.arch_prefix or ""
    served = rewritten if rewritten.startswith(prefix) or rewritten.endswith(prefix) else prefix + rewritten
    if served in profile.all_architectures():
        return None
    return ServerStop(
        "config", CLASS_ABSENT[profile.name].format(arch=served),
        f"write the draft config's model_type as one {profile.name} does not rewrite (the MLA class reads the same "
        "fields as deepseek_v2), or serve it with SGLang",
        {"model_type": spec.model_type, "rewritten_to": rewritten, "resolved": served,
         "file": "vllm/config/speculative.py (hf_config_override), transformers_utils/configs/eagle.py"})


# what the server prints when config.architectures names a class the release does not ship. SGLang (read from
# 0.5.11 / 0.5.12 model_loader/utils.py::resolve_transformers_arch, default --model-impl auto, a draft config without
# auto_map): the draft worker stops while loading it, after the target loaded.
CLASS_ABSENT = {
    "sglang": ("ValueError: Cannot find model module. '{arch}' is not a registered model in the Transformers library "
               "(only relevant if the model is meant to be in Transformers) and 'AutoModel' is not present in the "
               "model config's 'auto_map' (relevant if the model is custom)."),
    "vllm": "ValueError: Model architectures ['{arch}'] are not supported for now.",
}


def target_capture(profile: EngineProfile, shape: TargetShape, notes: list[str]) -> ServerStop | None:
    """With aux capture asked for, the target class must capture aux states in this release (scanned tables)."""
    if profile.kind != "serving":
        return None
    support = capture_support(profile.name, profile.release, shape.architecture)
    if not support.exact:
        notes.append(f"target-class support read from {profile.name} {support.release}, the nearest release scanned "
                     f"(asked: {profile.release or 'newest'})")
    if support.captures:
        return None
    remedy = (f"serve with {profile.name}>={support.first_capture}"
              if support.first_capture and support.served_by == shape.architecture else None)
    return ServerStop("target-capture", support.error or "", remedy,
                      {"served_by": support.served_by, "release": support.release,
                       "first_capture": support.first_capture})


def config_gate(profile: EngineProfile, shape: TargetShape) -> ServerStop | None:
    """vLLM's config-time gate: EAGLE-3 only for target ``model_type``\\ s in a fixed list (some releases)."""
    if profile.kind != "serving" or profile.release is None:
        return None
    gate = eagle3_target_gate(profile.name, profile.release)
    if gate is None or gate.admits(shape.model_type):
        return None
    return ServerStop("config-gate", gate.message(shape.model_type), gate.remedy,
                      {"model_type": shape.model_type, "admitted": list(gate.allowed), "file": gate.file})

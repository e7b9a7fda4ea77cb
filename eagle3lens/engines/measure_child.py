"""Serve a draft with the real engine and count what it accepts: run as a script by the engine's own Python.

This file is executed by ``eagle3lens.engines.measure`` as ``ENGINE_PYTHON -I measure_child.py REQUEST.json
RECORD.json`` in the engine's environment (which need not have eagle3lens installed: the script imports only the
standard library and the engine: vLLM's ``LLM``, or SGLang's ``Engine`` on a GPU host). It starts the engine with the target and the EAGLE-3 draft, generates from the
given token ids, reads the engine's own speculative-decoding counters before and after, and writes one JSON record.
A failure is a record too (``ok: false`` with the stage, the exception and where it was raised), so the caller
reports the engine's own error instead of guessing from a traceback; a target or draft that is no directory where
the engine runs (a path on the GPU host, with ``--host``) is the stage ``input``, before the engine starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any

_VLLM_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
}


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _failure(stage: str, exc: BaseException) -> dict[str, Any]:
    cause = exc
    while cause.__cause__ is not None:  # the engine wraps a worker's error in its own: report the root
        cause = cause.__cause__
    return {"ok": False, "stage": stage, "error": {"type": type(cause).__name__, "message": str(cause)[:2000],
                                                  "where": _where(cause), "outer": f"{type(exc).__name__}: {exc}"[:500]}}


def _vllm_counters(llm: Any) -> dict[str, Any]:
    totals: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    for metric in llm.get_metrics():
        key = _VLLM_COUNTERS.get(metric.name)
        if key == "accepted_per_pos":
            values = list(metric.values)
            previous = totals[key] + [0] * (len(values) - len(totals[key]))
            totals[key] = [a + b for a, b in zip(previous, values, strict=False)]
        elif key is not None:
            totals[key] += int(metric.value)
    return totals


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    per_pos_before = before["accepted_per_pos"] + [0] * len(after["accepted_per_pos"])
    return {"drafts": after["drafts"] - before["drafts"], "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
            "accepted": after["accepted"] - before["accepted"],
            "accepted_per_pos": [a - b for a, b in zip(after["accepted_per_pos"], per_pos_before, strict=False)]}


def _vllm(request: dict[str, Any]) -> dict[str, Any]:
    try:
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.platforms import current_platform
    except BaseException as exc:  # noqa: BLE001 - any import failure is the record's answer
        return _failure("import", exc)
    identity = {"engine": "vllm", "version": str(getattr(vllm, "__version__", "")),
                "build": str(getattr(current_platform, "device_type", "") or "")}
    sampling = request["sampling"]
    try:
        llm = LLM(model=request["target"], tokenizer=request["target"], skip_tokenizer_init=True,
                  speculative_config={"method": "eagle3", "model": request["draft"],
                                      "num_speculative_tokens": request["k"]},
                  max_model_len=request["max_model_len"], enforce_eager=True, disable_log_stats=False,
                  seed=sampling["seed"], dtype=request["dtype"], trust_remote_code=False)
    except BaseException as exc:  # noqa: BLE001 - the engine refusing the draft at start is a finding, not a crash
        return {**identity, **_failure("start", exc)}
    params = [SamplingParams(temperature=sampling["temperature"], top_p=sampling["top_p"], top_k=sampling["top_k"],
                             max_tokens=limit, stop_token_ids=request["stop_token_ids"] or None, seed=sampling["seed"])
              for limit in request["max_tokens"]]
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in request["prompts"]]
    try:
        before = _vllm_counters(llm)
        outputs = llm.generate(prompts, params, use_tqdm=False)
        counters = _delta(before, _vllm_counters(llm))
    except BaseException as exc:  # noqa: BLE001 - a crash on the first decode is the engine's verdict
        return {**identity, **_failure("generate", exc)}
    _flush_stats(llm)
    return {**identity, "ok": True, "counters": counters,
            "outputs": [list(out.outputs[0].token_ids) for out in outputs]}


def _flush_stats(llm: Any) -> None:
    """The stat logger's lines ("SpecDecoding metrics: ...") as the server's periodic ``do_log_stats`` prints them:
    the offline LLM logs only from a step past ``VLLM_LOG_STATS_INTERVAL`` and never the rest. A release without
    the method, or whose flush fails, keeps its counts: the log is a by-product, never the verdict."""
    flush = getattr(getattr(llm, "llm_engine", None), "do_log_stats", None)
    if callable(flush):
        with contextlib.suppress(Exception):
            flush()


def _sglang_counters(outputs: list[Any], k: int) -> dict[str, Any]:
    """SGLang's per-request speculative statistics (``meta_info``), summed: verify steps are its drafting rounds;
    its acceptance histogram (rounds by accepted count) gives the per-position counts."""
    totals: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": [0] * k}
    for out in outputs:
        meta = out.get("meta_info", {})
        rounds = int(meta.get("spec_verify_ct", 0))
        accepted = meta.get("spec_accepted_drafts")
        totals["drafts"] += rounds
        totals["draft_tokens"] += rounds * k
        totals["accepted"] += int(accepted) if accepted is not None else \
            max(int(meta.get("completion_tokens", 0)) - rounds, 0)
        for n, count in enumerate(meta.get("spec_accept_histogram") or ()):
            for position in range(min(n, k)):
                totals["accepted_per_pos"][position] += int(count)
    return totals


def _sglang(request: dict[str, Any]) -> dict[str, Any]:
    try:
        import sglang
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("SGLang serves EAGLE-3 on a GPU, and none is visible here")
    except BaseException as exc:  # noqa: BLE001 - any import failure is the record's answer
        return _failure("import", exc)
    identity = {"engine": "sglang", "version": str(getattr(sglang, "__version__", "")), "build": "cuda"}
    sampling, k = request["sampling"], request["k"]
    try:
        engine = sglang.Engine(model_path=request["target"], speculative_algorithm="EAGLE3",
                               speculative_draft_model_path=request["draft"], speculative_num_steps=k,
                               speculative_eagle_topk=1, speculative_num_draft_tokens=k + 1, skip_tokenizer_init=True,
                               dtype=request["dtype"], random_seed=sampling["seed"], trust_remote_code=False,
                               log_level="error")
    except BaseException as exc:  # noqa: BLE001 - the engine refusing the draft at start is a finding, not a crash
        return {**identity, **_failure("start", exc)}
    params = [{"temperature": sampling["temperature"], "top_p": sampling["top_p"], "top_k": sampling["top_k"],
               "max_new_tokens": limit, "stop_token_ids": request["stop_token_ids"] or None}
              for limit in request["max_tokens"]]
    try:
        outputs = engine.generate(input_ids=request["prompts"], sampling_params=params)
    except BaseException as exc:  # noqa: BLE001 - a crash on the first decode is the engine's verdict
        return {**identity, **_failure("generate", exc)}
    finally:
        engine.shutdown()
    return {**identity, "ok": True, "counters": _sglang_counters(outputs, k),
            "outputs": [list(out.get("output_ids", ())) for out in outputs]}


def main(argv: list[str]) -> int:
    request_path, record_path = argv[1], argv[2]
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    absent = [p for p in (request["target"], request["draft"]) if not os.path.isdir(p)]
    if absent:  # the engine would take a missing path for a hub id: say so before it starts
        record = {"ok": False, "stage": "input", "error": {"type": "NotADirectoryError", "where": "",
                                                          "message": f"{absent[0]}: no such model directory"}}
    else:
        record = _vllm(request) if request["engine"] == "vllm" else _sglang(request)
    with open(record_path, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":  # the engine starts worker processes by spawn, which re-imports this file
    sys.exit(main(sys.argv))

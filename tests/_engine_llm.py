"""The tests' own, independent run of the real engine (executed by the engine's Python, not imported by pytest).

``python _engine_llm.py TARGET DRAFT K REQUEST.json``: serves the prompts of REQUEST.json (``prompts``: id lists,
``max_tokens``: one per prompt, ``stop``: ids, ``max_model_len``) greedily through ``vllm.LLM`` with the draft as EAGLE-3 and prints
one JSON line: the spec-decode counters' deltas and the generated ids. Written apart from eagle3lens's own child on
purpose: the test holds the two against each other.
"""

import json
import sys


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.metrics.reader import Counter, Vector

    target, draft, k, request_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(request_path) as f:
        request = json.load(f)
    llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, disable_log_stats=False,
              max_model_len=request["max_model_len"], speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": k})

    def counters() -> dict:
        out: dict = {}
        for m in llm.get_metrics():
            if m.name.startswith("vllm:spec_decode") and isinstance(m, (Counter, Vector)):
                out[m.name] = m.values if isinstance(m, Vector) else m.value
        return out

    before = counters()
    params = [SamplingParams(temperature=0.0, max_tokens=n, stop_token_ids=request["stop"]) for n in request["max_tokens"]]
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in request["prompts"]], params, use_tqdm=False)
    after = counters()
    delta = {name: ([a - b for a, b in zip(v, before[name], strict=True)] if isinstance(v, list) else v - before[name])
             for name, v in after.items()}
    print("RESULT " + json.dumps({"counters": delta, "outputs": [list(o.outputs[0].token_ids) for o in outs]}))


if __name__ == "__main__":
    main()

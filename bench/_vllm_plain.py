"""The bench's baseline for ``--measure``: a plain ``vllm.LLM(...).generate`` of the same prompts (run by the engine's
Python: ``python _vllm_plain.py TARGET DRAFT K PROMPTS.json``), nothing read around it."""

import json
import sys


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    target, draft, k, prompts_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(prompts_path) as f:
        request = json.load(f)
    llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=256,
              speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": k})
    params = [SamplingParams(temperature=0.0, max_tokens=n, stop_token_ids=request["stop"]) for n in request["max_tokens"]]
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in request["prompts"]], params, use_tqdm=False)


if __name__ == "__main__":
    main()

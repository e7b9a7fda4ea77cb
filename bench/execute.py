"""Benchmark: ``keys --execute`` on the demo's eagle draft with a real SGLang release unpacked ``--no-deps``.

    .venv/bin/python bench/execute.py [--release 0.5.11] [--demo DIR]

Cold: a fresh interpreter imports the engine and runs its loader (``execute_isolated``), budget 20 s.
Warm: the same execution again in this process once the engine is imported, budget 2 s. Peak RSS of the
cold worker, budget 1 GB. Baseline (named "simulated"): ``simulate_load`` of the same draft and release,
measured in the same run; the ratios executed / simulated are printed beside the budgets.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from eagle3lens.engines.execute import execute_isolated, record_execution
from eagle3lens.engines.wheels import unpacked
from eagle3lens.probes.keys import simulate_load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="0.5.11")
    parser.add_argument("--demo", type=Path, default=None, help="a built demo (default: build one)")
    args = parser.parse_args()
    root = unpacked("sglang", args.release)
    demo = args.demo
    if demo is None:
        from eagle3lens.demo import build_demo

        demo = build_demo(Path(tempfile.mkdtemp()) / "demo").root
    draft = demo / "eagle"
    t = time.perf_counter()
    simulate_load(draft, f"sglang=={args.release}")
    simulated = time.perf_counter() - t
    t = time.perf_counter()
    execute_isolated(draft, root)
    cold = time.perf_counter() - t
    rss_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20)
    record_execution(draft, root)  # imports the engine into this process
    t = time.perf_counter()
    record_execution(draft, root)
    warm = time.perf_counter() - t
    print(f"simulated (baseline) {simulated:.3f} s")
    print(f"cold  {cold:7.2f} s  budget 20 s  ({cold / 20:.2f} of budget, {cold / simulated:.0f}x simulated)")
    print(f"warm  {warm:7.2f} s  budget  2 s  ({warm / 2:.2f} of budget, {warm / simulated:.0f}x simulated)")
    print(f"peak RSS (cold worker) {rss_gb:.2f} GB  budget 1 GB  ({rss_gb:.2f} of budget)")


if __name__ == "__main__":
    main()

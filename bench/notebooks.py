"""Overhead of the notebook path: ``eagle3lens notebook 00_triage`` vs ``eagle3lens doctor`` on the same inputs.

Baseline: the CLI ``doctor`` (same checkpoint, engine, target and log as the walkthrough runs). Measured:
the headless walkthrough (kernel start, the same ``diagnose`` call, its displays, papermill bookkeeping,
offline HTML export and findings read-back). Both run as subprocesses, alternately, in the same run on the
demo incident. Prints medians, the ratio and the difference; target: difference <= 3 s.

    .venv/bin/python bench/notebooks.py [--repeat 3] [--demo DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eagle3lens.demo import build_demo

TARGET_OVERHEAD_S = 3.0


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: the demo's findings are critical, as they should be
        sys.exit(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--demo", metavar="DIR", help="a built demo (default: build one in a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo = build_demo(args.demo or Path(tmp) / "demo")
        inputs = {"checkpoint": demo.speculators, "engine": "sglang==0.5.11", "target": demo.target,
                  "log": demo.sglang_log}
        cli = [sys.executable, "-m", "eagle3lens"]
        doctor = [*cli, "doctor", str(demo.speculators), "--engine", "sglang==0.5.11", "--target", str(demo.target),
                  "--log", str(demo.sglang_log), "--json"]
        notebook = [*cli, "notebook", "00_triage", "--out", str(Path(tmp) / "out"), "--no-progress", "--json"]
        for key, value in inputs.items():
            notebook += ["-p", key, str(value)]
        timed(doctor)  # warm the file cache and bytecode once
        doctor_s, notebook_s = [], []
        for _ in range(args.repeat):
            doctor_s.append(timed(doctor))
            notebook_s.append(timed(notebook))
    d, n = statistics.median(doctor_s), statistics.median(notebook_s)
    print(f"eagle3lens doctor (baseline):   {d:6.2f} s  (median of {args.repeat})")
    print(f"eagle3lens notebook 00_triage:  {n:6.2f} s  (median of {args.repeat})")
    print(f"ratio notebook / doctor: {n / d:.2f}x; difference: {n - d:+.2f} s "
          f"(target <= {TARGET_OVERHEAD_S:.0f} s: {'met' if n - d <= TARGET_OVERHEAD_S else 'NOT met'})")


if __name__ == "__main__":
    main()

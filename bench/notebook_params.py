"""A large notebook parameter: ``eagle3lens notebook NB -p blob <1.5 MB>`` vs the same run with a 10-byte value.

    .venv/bin/python bench/notebook_params.py

Baseline (same run): the same tiny notebook, run headless by the CLI with a 10-byte parameter. Measured: CPU seconds
of the CLI and its kernel (``RUSAGE_CHILDREN`` around each run) and their peak RSS (``ru_maxrss`` of the waited-for
descendants: the kernel is the CLI's child, out of reach of a ``VmHWM`` read (bench/_rss.py); it also holds this
light parent's own high-water mark, a few tens of MB in both runs). Before parameters were passed by
file, the 1.5 MB value was embedded in the notebook JSON and cost 116 s of CPU and 1.9 GB. Target: <= 1.5x the
baseline's CPU and <= 100 MB more peak RSS.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

SIZE = 1_500_000
TARGET_RATIO, TARGET_EXTRA_MB = 1.5, 100.0

NOTEBOOK = {
    "nbformat": 4, "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                 "language_info": {"name": "python"}},
    "cells": [
        {"cell_type": "code", "id": "p", "metadata": {"tags": ["parameters"]}, "source": "blob = ''",
         "outputs": [], "execution_count": None},
        {"cell_type": "code", "id": "u", "metadata": {}, "source": "print(len(blob))", "outputs": [],
         "execution_count": None},
    ],
}


def run(notebook: Path, value: str, out: Path) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of one headless run with ``blob`` = ``value``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    params = out.parent / f"{out.name}.json"
    params.write_text(json.dumps({"blob": value}))
    subprocess.run([sys.executable, "-m", "eagle3lens", "notebook", str(notebook), "--params-file", str(params),
                    "--out", str(out), "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, after.ru_maxrss / 1024


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="e3l-bench-nbparams-") as tmp:
        notebook = Path(tmp) / "params.ipynb"
        notebook.write_text(json.dumps(NOTEBOOK))
        small_cpu, small_rss = run(notebook, "x" * 10, Path(tmp) / "small")
        big_cpu, big_rss = run(notebook, "x" * SIZE, Path(tmp) / "big")
    ratio = big_cpu / small_cpu
    ok = ratio <= TARGET_RATIO and big_rss - small_rss <= TARGET_EXTRA_MB
    print(f"10-byte parameter (baseline): {small_cpu:6.2f} s CPU, peak RSS {small_rss:5.0f} MB")
    print(f"1.5 MB parameter:             {big_cpu:6.2f} s CPU, peak RSS {big_rss:5.0f} MB")
    print(f"ratio {ratio:.2f}x (target <= {TARGET_RATIO}x), RSS +{big_rss - small_rss:.0f} MB (target <= "
          f"{TARGET_EXTRA_MB:.0f} MB): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

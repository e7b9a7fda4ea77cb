"""Benchmark: ``convert`` of a ~2 GB draft vs a plain copy of the same bytes; peak RSS of convert.

    .venv/bin/python bench/convert.py            # ~1.9 GB Kimi-K2.5 draft without embeddings
    .venv/bin/python bench/convert.py --small    # quick check (~0.2 GB)

Baseline (named "copy"): ``shutil.copytree`` of the checkpoint directory. convert copies tensor bytes
into the new file and compares each slice with its source as it goes (byte for byte), simulates the load,
and fsyncs each written file once before the rename. Each runs in a subprocess under ``/usr/bin/time -v``;
its "Maximum resident set size" is the peak RSS. Each contender runs ``--repeat`` times, interleaved; median
wall times and the largest peak RSS are reported. Targets: convert / copy <= 2.0x wall time, convert peak
RSS <= 300 MB. For context, a third contender ("durable copy": the same copytree, then one fsync of every
file and directory) shows what the disk alone costs: the plain copy ends in the page cache, convert's output
is on disk, so where the disk is slow against memory, the durable copy alone can exceed 2.0x.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import make_sparse_draft  # noqa: E402

COPY = "import shutil, sys, time; t=time.perf_counter(); shutil.copytree(sys.argv[1], sys.argv[2]); print('WALL', time.perf_counter()-t)"
DURABLE = ("import os, shutil, sys, time; t=time.perf_counter(); shutil.copytree(sys.argv[1], sys.argv[2]); "
           "fds=[os.open(os.path.join(d, n), os.O_RDONLY) for d, _, fs in os.walk(sys.argv[2]) for n in fs + ['.']]; "
           "[os.fsync(fd) or os.close(fd) for fd in fds]; print('WALL', time.perf_counter()-t)")
CONVERT = ("import sys, time; from eagle3lens.convert import convert; t=time.perf_counter(); "
           "convert(sys.argv[1], 'sglang==0.5.11', sys.argv[2]); print('WALL', time.perf_counter()-t)")


def run(code: str, src: Path, dst: Path) -> tuple[float, float]:
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", code, str(src), str(dst)],
                          capture_output=True, text=True, check=True)
    wall = float(re.search(r"WALL ([0-9.]+)", proc.stdout).group(1))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return wall, rss_kb / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each contender; medians are reported")
    args = ap.parse_args()
    dims = dict(hidden=2048, vocab=32000, draft_vocab=8000, heads=16, kv_heads=4, head_dim=128, intermediate=5632) if args.small else {}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        src = make_sparse_draft(Path(tmp) / "src", with_embed=False, fill=True, **dims)
        size = (src / "model.safetensors").stat().st_size / 1e9
        run(COPY, src, Path(tmp) / "warm")  # page cache warm for both contenders
        shutil.rmtree(Path(tmp) / "warm")
        copies, durables, convs = [], [], []
        for _ in range(args.repeat):  # interleaved, so all see the same machine load
            for code, runs, name in ((COPY, copies, "copy"), (DURABLE, durables, "durable"), (CONVERT, convs, "conv")):
                runs.append(run(code, src, Path(tmp) / name))
                shutil.rmtree(Path(tmp) / name)
                os.sync()  # no contender pays for another's write-back
    copy_wall, conv_wall = statistics.median(w for w, _ in copies), statistics.median(w for w, _ in convs)
    durable_wall = statistics.median(w for w, _ in durables)
    copy_rss, conv_rss = max(r for _, r in copies), max(r for _, r in convs)
    print(f"draft: {size:.2f} GB")
    print(f"copy (baseline, median of {args.repeat}): {copy_wall:.2f} s, peak RSS {copy_rss:.0f} MB")
    print(f"durable copy (context, median of {args.repeat}): {durable_wall:.2f} s = {durable_wall / copy_wall:.2f}x copy")
    print(f"convert (write + verify, median of {args.repeat}): {conv_wall:.2f} s, peak RSS {conv_rss:.0f} MB "
          f"= {conv_wall / durable_wall:.2f}x the durable copy")
    ratio = conv_wall / copy_wall
    print(f"time ratio convert/copy = {ratio:.2f} (target <= 2.0) -> {'PASS' if ratio <= 2.0 else 'FAIL'}")
    print(f"peak RSS {conv_rss:.0f} MB (target <= 300) -> {'PASS' if conv_rss <= 300 else 'FAIL'}")


if __name__ == "__main__":
    main()

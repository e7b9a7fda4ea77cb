"""Benchmark: ``eagle3lens info`` on a full-size (Kimi-K2.5 widths, ~2 GB bf16) sparse draft vs the tiny demo-size draft.

    .venv/bin/python bench/info.py

Baseline (named "tiny"): the same command, in the same process and run, on a draft with the demo's sizes
(hidden 64, V 2048, N 512). `info` reads headers only, so the target is full-size / tiny <= 1.5x.
The full-size file is sparse: a real header and a hole where the tensor bytes would be.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import make_sparse_draft  # noqa: E402

from eagle3lens.cli import main  # noqa: E402

TINY = dict(hidden=64, vocab=2048, draft_vocab=512, heads=4, kv_heads=2, head_dim=16, intermediate=128, ids=(2, 5, 7))
TARGET_RATIO = 1.5


def timed_info(path: Path, runs: int = 21) -> float:
    times = []
    for _ in range(runs):
        sink = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(sink):
            code = main(["info", str(path), "--json"])
        times.append(time.perf_counter() - t0)
        assert code == 0, f"info failed on {path}"
    return statistics.median(times)


def run() -> float:
    with tempfile.TemporaryDirectory(prefix="e3l-bench-info-") as tmp:
        full = make_sparse_draft(Path(tmp) / "full", with_embed=False)
        tiny = make_sparse_draft(Path(tmp) / "tiny", with_embed=False, **TINY)
        size = sum(f.stat().st_size for f in Path(full).glob("*.safetensors"))
        timed_info(tiny, runs=3)  # warm imports
        t_tiny = timed_info(tiny)
        t_full = timed_info(full)
    ratio = t_full / t_tiny
    print(f"full-size draft ({size / 1e9:.2f} GB apparent, sparse): info {t_full * 1e3:.1f} ms")
    print(f"baseline tiny draft:                              info {t_tiny * 1e3:.1f} ms")
    print(f"ratio full/tiny = {ratio:.2f}x (target <= {TARGET_RATIO}x) {'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
    return ratio


if __name__ == "__main__":
    run()

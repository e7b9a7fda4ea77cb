"""Benchmark: ``simulate_load`` and names-only ``diff`` on a full-size (Kimi-K2.5) sparse draft vs a tiny one.

    .venv/bin/python bench/keys.py

Baseline (named "tiny"): the same calls on a draft with the demo's sizes (hidden 64, V 2048, N 512).
Both read headers only, so the target is full-size / tiny <= 1.5x. Median of several runs each.
The load simulation runs under the oldest and the newest release group of each engine (their loaders
differ most: KeyError-raising delegation vs legacy renames; KeyError vs AutoWeightsLoader's module walk).
Then ``engines --detect`` on this interpreter's real site-packages (target <= 1 s).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import make_sparse_draft  # noqa: E402

from eagle3lens.checkpoint import Checkpoint  # noqa: E402
from eagle3lens.engines import families  # noqa: E402
from eagle3lens.engines.detect import detect  # noqa: E402
from eagle3lens.probes.diff import diff  # noqa: E402
from eagle3lens.probes.keys import simulate_load  # noqa: E402

TINY = dict(hidden=64, vocab=2048, draft_vocab=512, heads=4, kv_heads=2, head_dim=16, intermediate=128, ids=(2, 5, 7))


def timed(fn, runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


ENGINES = [spec for name in ("sglang", "vllm") for spec in (families()[name][0].spec, families()[name][-1].spec)]


def work(path: Path) -> None:
    ckpt = Checkpoint.open(path)  # opened each time: header parsing is part of the cost
    for engine in ENGINES:
        simulate_load(ckpt, engine)
    diff(ckpt, Checkpoint.open(path), names_only=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full = make_sparse_draft(Path(tmp) / "full")
        tiny = make_sparse_draft(Path(tmp) / "tiny", **TINY)
        work(full), work(tiny)  # warm imports and caches
        t_full, t_tiny = timed(lambda: work(full)), timed(lambda: work(tiny))
        size = Checkpoint.open(full).total_bytes / 1e9
    print(f"keys+diff(names only), full-size sparse draft ({size:.1f} GB): {t_full * 1e3:.1f} ms")
    print(f"keys+diff(names only), tiny baseline: {t_tiny * 1e3:.1f} ms")
    ratio = t_full / t_tiny
    print(f"engines: {', '.join(ENGINES)}")
    print(f"ratio full/tiny = {ratio:.2f} (target <= 1.5) -> {'PASS' if ratio <= 1.5 else 'FAIL'}")
    t0 = time.perf_counter()
    found = detect()
    t_detect = time.perf_counter() - t0
    names = ", ".join(f"{e.name} {e.version}" for e in found.engines) or "no sglang/vllm installed"
    print(f"engines --detect on {sys.prefix} ({names}): {t_detect * 1e3:.1f} ms (target <= 1000 ms) -> "
          f"{'PASS' if t_detect <= 1.0 else 'FAIL'}")


if __name__ == "__main__":
    main()

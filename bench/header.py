"""Benchmark: safetensors header handling is linear, a small multiple of ``json.loads`` of the same header.

    .venv/bin/python bench/header.py [N_TENSORS]

Builds a header-only file of N zero-size tensors (default 1,000,000: ~80 MB of header JSON, under the
100 MB cap) and times, in the same run and on the same bytes: ``json.loads`` (the baseline), ``read_header``
(validation included) and ``Checkpoint.open`` (header, tensor table and DraftSpec). Targets: each <= 5x the
baseline; the ratios at N and N/4 stay alike (linear, no quadratic step).
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
import time
from pathlib import Path

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.io.safetensors_header import read_header

TARGET_RATIO = 5.0


def write_header(path: Path, n: int) -> bytes:
    header = {f"model.layers.{i}.mlp.experts.{i % 384}.weight": {"dtype": "BF16", "shape": [0, 7168],
                                                               "data_offsets": [0, 0]} for i in range(n)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return raw


def best(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(n: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="e3l-bench-header-") as tmp:
        path = Path(tmp) / "model.safetensors"
        raw = write_header(path, n)
        text = raw.decode()
        t_json = best(lambda: json.loads(text))
        t_header = best(lambda: read_header(path))
        t_open = best(lambda: Checkpoint.open(path))
    print(f"{n:>9,} tensors ({len(raw) / 1e6:.1f} MB header): json.loads {t_json:.2f} s, read_header {t_header:.2f} s "
          f"({t_header / t_json:.2f}x), Checkpoint.open {t_open:.2f} s ({t_open / t_json:.2f}x)")
    return t_json, t_header / t_json, t_open / t_json


def run(n: int = 1_000_000) -> float:
    _, small_header, small_open = measure(n // 4)
    _, header, opened = measure(n)
    worst = max(header, opened)
    print(f"ratio vs json.loads: read_header {header:.2f}x, Checkpoint.open {opened:.2f}x (target <= {TARGET_RATIO}x) "
          f"{'OK' if worst <= TARGET_RATIO else 'MISSED'}; growth N/4 -> N: {opened / small_open:.2f}x "
          "(1.0 = linear)")
    return worst


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)

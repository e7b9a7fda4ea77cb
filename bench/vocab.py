"""Vocab probe on a full-size mapping (N = 32000, V = 163840) vs loading d2t + t2d with safetensors alone.

Baseline: ``safetensors.safe_open`` + ``get_tensor`` of the two tensors. Probe: ``inspect_vocab`` on an
opened ``Checkpoint`` (reads both tensors, shape/dtype checks, invariants, t2d agreement); also shown
with ``Checkpoint.open`` (header + config parsing, shared by every probe) included.
Prints the median times and the ratios; target <= 3x.

    .venv/bin/python bench/vocab.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.probes.vocab import inspect_vocab

N, V, H = 32000, 163840, 16


def build(path: Path) -> None:
    """A speculators-style draft whose mapping is built like training builds it (Zipf-like counts)."""
    torch.manual_seed(0)
    counts = torch.distributions.Pareto(1.0, 1.2).sample((V,))
    ids = counts.topk(N).indices.sort().values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    d2t = ids - torch.arange(N)
    path.mkdir()
    (path / "config.json").write_text(json.dumps({
        "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": N,
        "transformer_layer_config": {"model_type": "llama", "hidden_size": H, "vocab_size": V}}))
    save_file({"d2t": d2t, "t2d": t2d, "lm_head.weight": torch.zeros(N, H, dtype=torch.bfloat16)},
              str(path / "model.safetensors"))


def baseline(path: Path) -> None:
    with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
        fh.get_tensor("d2t"), fh.get_tensor("t2d")


def probe(ckpt: Checkpoint) -> None:
    result = inspect_vocab(ckpt)
    assert result.status == "valid" and not result.findings, result.findings


def open_and_probe(path: Path) -> None:
    probe(Checkpoint.open(path))


def median_time(fn, arg, repeat: int) -> float:
    fn(arg)  # warm the page cache and imports
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "draft"
        build(path)
        base = median_time(baseline, path, args.repeat)
        ours = median_time(probe, Checkpoint.open(path), args.repeat)
        opened = median_time(open_and_probe, path, args.repeat)
    print(f"baseline: safetensors load of d2t + t2d       {base * 1e3:.3f} ms")
    print(f"inspect_vocab on an opened checkpoint       {ours * 1e3:.3f} ms  ratio {ours / base:.2f}x")
    print(f"Checkpoint.open + inspect_vocab             {opened * 1e3:.3f} ms  ratio {opened / base:.2f}x")
    print(f"ratio: {ours / base:.2f}x (target <= 3x) -> {'OK' if ours / base <= 3 else 'OVER'}")


if __name__ == "__main__":
    main()

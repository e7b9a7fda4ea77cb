"""Benchmark: streaming ``weight_stats`` against the naive way, on a generated bf16 checkpoint.

    .venv/bin/python bench/weights.py            # ~2 GB (the issue's size)
    .venv/bin/python bench/weights.py --gb 0.2   # quick check

Baseline (named "naive"): ``safetensors.torch.load_file`` of everything, then per tensor
``.float()`` mean / std / min / max. Each contender runs in its own subprocess that reports its
wall time (after imports) and its own peak RSS (``VmHWM``, bench/_rss.py). A raw read
pass over the same bytes (plain reads into a reused 8 MiB buffer) sets the throughput ceiling.
Targets: wall-time ratio eagle3lens / naive <= 1.0, eagle3lens peak RSS <= 300 MB, throughput
>= 25% of the raw read pass. eagle3lens runs with its default threads (usable cores, at most 4), as a user
would; ``--threads 1`` measures one stream. The checkpoint lives in a temp dir under /tmp and is deleted after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import safetensors_prefix  # noqa: E402
from _rss import PEAK_RSS_KB  # noqa: E402

TENSOR_MB = 128

CHILD = {
    "raw": """
buf = bytearray(8 << 20)
for f in files:
    with open(f, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass
""",
    "naive": """
from safetensors.torch import load_file
stats = {}
for f in files:
    for name, t in load_file(f).items():
        x = t.float()
        stats[name] = (x.mean().item(), x.std().item(), x.min().item(), x.max().item())
""",
    "eagle3lens": """
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.probes.weights import weight_stats
result = weight_stats(Checkpoint.open(ckpt_dir), threads=THREADS)
""",
}

PRELUDE = """
import json, sys, time
import torch
ckpt_dir, files = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
"""
REPORT = """
print(json.dumps({"wall": time.perf_counter() - t0, "maxrss_mb": PEAK_RSS_KB / 1024}))
"""


def write_checkpoint(out: Path, gb: float) -> list[Path]:
    """bf16 tensors of TENSOR_MB each, written one at a time (header first, then each tensor's bytes)."""
    import torch

    torch.manual_seed(0)
    n_tensors = max(1, round(gb * 1024 / TENSOR_MB))
    rows, cols = TENSOR_MB * (1 << 20) // 2 // 4096, 4096
    prefix, _ = safetensors_prefix({f"layers.{i}.mlp.up_proj.weight": ("BF16", (rows, cols)) for i in range(n_tensors)})
    path = out / "model.safetensors"
    with open(path, "wb") as fh:
        fh.write(prefix)
        for _ in range(n_tensors):
            t = (torch.distributions.StudentT(4.0).sample((rows, cols)) * 0.02).to(torch.bfloat16)
            fh.write(t.view(torch.int16).numpy().tobytes())
    (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return [path]


def run_child(kind: str, ckpt_dir: Path, files: list[Path], threads: int | None = None) -> dict:
    code = PRELUDE + f"THREADS = {threads!r}\n" + CHILD[kind] + REPORT.replace("PEAK_RSS_KB", PEAK_RSS_KB)
    proc = subprocess.run([sys.executable, "-c", code, str(ckpt_dir), *map(str, files)], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # peak RSS: the whole process, imports included


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="checkpoint size in GB (default 2)")
    parser.add_argument("--threads", type=int, default=None, help="eagle3lens threads (default: its own default)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="eagle3lens-bench-", dir="/tmp"))
    try:
        files = write_checkpoint(tmp, args.gb)
        size = sum(f.stat().st_size for f in files)
        print(f"checkpoint: {size / 1e9:.2f} GB bf16 in {tmp}")
        raw = min((run_child("raw", tmp, files) for _ in range(2)), key=lambda r: r["wall"])  # warms the page cache
        naive = run_child("naive", tmp, files)
        ours = run_child("eagle3lens", tmp, files, args.threads)
        import torch

        from eagle3lens.probes.weights import default_threads

        print(f"threads: eagle3lens {args.threads or default_threads()}, naive torch's {torch.get_num_threads()} "
              "intra-op threads, raw read 1")
        for name, r in (("raw read", raw), ("naive", naive), ("eagle3lens", ours)):
            print(f"{name:>11}: {r['wall']:7.2f} s  {size / r['wall'] / 1e9:6.2f} GB/s  peak RSS {r['maxrss_mb']:7.0f} MB")
        print(f"wall-time ratio eagle3lens / naive: {ours['wall'] / naive['wall']:.2f}x  (target <= 1.0)")
        print(f"peak RSS eagle3lens {ours['maxrss_mb']:.0f} MB vs naive {naive['maxrss_mb']:.0f} MB  (target <= 300 MB)")
        print(f"throughput share of a raw read pass: {raw['wall'] / ours['wall']:.0%}  (target >= 25%)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: ``trace_provenance`` vs one plain forward of the target over the same sequences with hidden states.

    .venv/bin/python bench/provenance.py [--layers 24] [--hidden 256] [--samples 512]

Baseline (named "plain forward"): ``target(input_ids, output_hidden_states=True)`` over exactly the sequences the
probe compares, in the same process and run. The probe adds a hook on the final norm and the chunk-by-candidate
comparisons on the sampled positions: probe / plain <= 1.5x (reading the dump from disk included).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from eagle3lens.probes.data import iter_samples, write_speculators_dump
from eagle3lens.probes.provenance import PER_SEQUENCE, trace_provenance

TARGET_RATIO = 1.5


def build(root: Path, layers: int, hidden: int, sequences: int, length: int) -> tuple[Path, Path]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, vocab_size=4096,
                         num_attention_heads=max(hidden // 64, 1), num_key_value_heads=max(hidden // 128, 1),
                         intermediate_size=hidden * 3, max_position_embeddings=length)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(root / "target")
    ids = torch.randint(0, 4096, (sequences, length))
    with torch.no_grad():
        write_speculators_dump(root / "dump", model, ids, [2, layers // 2, layers - 3])
    return root / "target", root / "dump"


def plain(target: Path, dump: Path, sequences: int) -> float:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(target).eval()
    batches = [s.token_ids for s in iter_samples(dump, limit=sequences)]
    t0 = time.perf_counter()
    with torch.no_grad():
        for ids in batches:
            model(input_ids=ids[None], output_hidden_states=True, use_cache=False)
    return time.perf_counter() - t0


def run() -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args()
    sequences = -(-args.samples // PER_SEQUENCE)  # the probe takes PER_SEQUENCE positions from each sequence
    with tempfile.TemporaryDirectory(prefix="e3l-bench-prov-") as tmp:
        target, dump = build(Path(tmp), args.layers, args.hidden, sequences, args.length)
        trace_provenance(dump, target, samples=PER_SEQUENCE)  # warm-up (imports, caches)
        t_probe, t_plain = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            result = trace_provenance(dump, target, samples=args.samples)
            t_probe.append(time.perf_counter() - t0)
            t_plain.append(plain(target, dump, result.sequences))
    probe, base = statistics.median(t_probe), statistics.median(t_plain)
    ratio = probe / base
    print(f"provenance ({result.positions} positions, {result.sequences} sequences x {args.length} tokens, "
          f"{args.layers} layers, hidden {args.hidden}): {probe:.2f} s")
    print(f"baseline plain forward with output_hidden_states over the same sequences: {base:.2f} s")
    print(f"ratio probe/plain = {ratio:.2f}x (target <= {TARGET_RATIO}x) {'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
    return ratio


if __name__ == "__main__":
    run()

"""Streaming statistics across threads: spans of whole chunks, merged statistics equal to one stream's."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError, UsageError
from eagle3lens.probes import stats
from eagle3lens.probes.stats import HIST_SAMPLE_CAP, byte_spans, tensor_stats
from eagle3lens.probes.weights import weight_stats

from _builders import checkpoint

CHUNK = 256  # bytes


@pytest.fixture
def rng():
    torch.manual_seed(99)


@given(nbytes=st.integers(0, 10_000), chunk=st.integers(1, 700), threads=st.integers(1, 9))
def test_byte_spans_tile_the_tensor_in_whole_chunks(nbytes, chunk, threads):
    spans = byte_spans(nbytes, chunk, threads)
    assert spans[0][0] == 0 and spans[-1][1] == nbytes
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous, no overlap
    assert all(start % chunk == 0 for start, _ in spans)  # a span starts on a chunk boundary
    assert len(spans) <= max(1, min(threads, -(-nbytes // chunk)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, torch.float64], ids=str)
def test_threads_give_the_single_stream_statistics(tmp_path, rng, dtype):
    x = (torch.randn(5003) * 0.3 + 0.1).to(dtype)
    x[7], x[4000], x[2500], x[3333] = float("nan"), float("inf"), 0.0, float("-inf")  # in different spans
    ckpt = checkpoint(tmp_path, {"w": x})
    one = tensor_stats(ckpt, "w", chunk_bytes=CHUNK, threads=1)
    seen = []
    three = tensor_stats(ckpt, "w", chunk_bytes=CHUNK, threads=3, on_bytes=seen.append)
    assert sum(seen) == ckpt.info("w").nbytes  # progress counts every byte once, from every thread
    exact = ("nan", "inf", "zeros", "min", "max", "absmax", "hist_edges", "hist_counts", "hist_sample", "numel")
    assert {k: getattr(three, k) for k in exact} == {k: getattr(one, k) for k in exact}
    for key in ("mean", "std", "l2", "kurtosis"):  # merge order differs: float64 rounding only
        assert getattr(three, key) == pytest.approx(getattr(one, key), rel=1e-12, abs=1e-15)
    ref = x.double()[torch.isfinite(x.double())]
    assert (three.nan, three.inf, three.zeros) == (1, 2, 1)
    assert three.std == pytest.approx(float(ref.std(unbiased=False)), rel=1e-6)


def float64_moments(x: torch.Tensor) -> dict[str, float]:
    ref = x.double()[torch.isfinite(x.double())]
    c = ref - ref.mean()
    return {"mean": float(ref.mean()), "std": float(c.pow(2).mean().sqrt()), "l2": float(ref.norm()),
            "kurtosis": float(c.pow(4).mean() / c.pow(2).mean() ** 2 - 3)}


@pytest.mark.parametrize("dtype, scale", [(torch.float32, 1e10), (torch.float32, 1e19), (torch.float32, 1e30),
                                          (torch.bfloat16, 1e30), (torch.float32, 1e-12)], ids=str)
def test_huge_or_tiny_values_keep_exact_moments(tmp_path, rng, dtype, scale):
    # e.g. uninitialised torch.empty memory saved to disk: float32 fourth powers overflow (or underflow to zero)
    x = ((torch.randn(20_011) ** 3 + 0.5) * scale).to(dtype)
    s = tensor_stats(checkpoint(tmp_path, {"w": x}), "w", chunk_bytes=4096, threads=2)
    assert (s.nan, s.inf) == (0, 0)
    assert {k: getattr(s, k) for k in ("mean", "std", "l2", "kurtosis")} == pytest.approx(float64_moments(x), rel=1e-6)


def test_finite_values_whose_float32_sum_overflows_are_not_counted_non_finite(tmp_path, rng):
    x = torch.empty(10_000).uniform_(1e38, 3e38)
    x[5], x[9000] = float("nan"), float("-inf")
    s = tensor_stats(checkpoint(tmp_path, {"w": x}), "w", chunk_bytes=4096)
    assert (s.nan, s.inf, s.zeros, s.hist_sample) == (1, 1, 0, 9998)
    assert {k: getattr(s, k) for k in ("mean", "std", "l2", "kurtosis")} == pytest.approx(float64_moments(x), rel=1e-6)


def test_histogram_resolves_a_narrow_norm_weight(tmp_path, rng):
    # bf16-truncated values put normal(1, 0.002) in ~5 of 64 bins: bf16 spacing near 1.0 is 2**-7
    x = torch.randn(100_000, dtype=torch.float64).mul(0.002).add(1.0).float()
    s = tensor_stats(checkpoint(tmp_path, {"n": x}), "n", chunk_bytes=1 << 14)
    counts, edges = np.array(s.hist_counts), np.array(s.hist_edges)
    assert s.hist_sample == counts.sum() == x.numel()
    assert np.count_nonzero(counts) >= 48
    centres = (edges[:-1] + edges[1:]) / 2
    mean = (centres * counts).sum() / counts.sum()
    std = np.sqrt((counts * (centres - mean) ** 2).sum() / counts.sum())
    ref = float64_moments(x)
    assert mean == pytest.approx(ref["mean"], abs=0.02 * ref["std"])
    assert std == pytest.approx(ref["std"], rel=0.02)


def test_histogram_sample_of_a_tensor_beyond_the_cap_is_bounded_and_spread(tmp_path, rng):
    half = 1 << 20  # every value of a 4 KiB chunk is sampled until the cap halves the rate, twice
    x = torch.cat([torch.randn(half), torch.randn(half) + 10])
    ckpt = checkpoint(tmp_path, {"w": x})
    one, three = (tensor_stats(ckpt, "w", chunk_bytes=4096, threads=t) for t in (1, 3))
    hist = ("hist_edges", "hist_counts", "hist_sample")
    assert [getattr(three, k) for k in hist] == [getattr(one, k) for k in hist]
    assert one.hist_sample == sum(one.hist_counts) == HIST_SAMPLE_CAP
    below, above = sum(one.hist_counts[:32]), sum(one.hist_counts[32:])  # the middle bin edge lies near 5
    assert abs(below - above) <= 0.001 * one.hist_sample


@pytest.mark.parametrize("chunk_elems, threads, cap",
                         [(1000, 3, 300), (777, 4, 64), (4096, 2, 10_000), (37, 5, 1 << 19)])
def test_histogram_is_drawn_from_every_stride_th_value_however_the_spans_fall(tmp_path, rng, monkeypatch,
                                                                             chunk_elems, threads, cap):
    monkeypatch.setattr(stats, "HIST_SAMPLE_CAP", cap)
    x = torch.randn(30_011)
    x[0], x[4096] = float("nan"), float("inf")
    ckpt = checkpoint(tmp_path, {"w": x})
    one, many = (tensor_stats(ckpt, "w", chunk_bytes=4 * chunk_elems, threads=t) for t in (1, threads))
    hist = ("hist_edges", "hist_counts", "hist_sample")
    assert [getattr(many, k) for k in hist] == [getattr(one, k) for k in hist]
    stride = 1 << (-(-chunk_elems // stats.HIST_SAMPLES_PER_CHUNK) - 1).bit_length()
    while len(range(0, x.numel(), stride)) > cap:
        stride *= 2
    sample = x[::stride].numpy()
    counts, _ = np.histogram(sample, bins=64, range=(np.float64(one.min), np.float64(one.max)))
    assert one.hist_counts == tuple(counts) and one.hist_sample == np.isfinite(sample).sum() <= cap


def test_threads_merge_distinct_integers_across_spans(tmp_path):
    x = torch.cat([torch.arange(0, 300), torch.arange(200, 600), torch.tensor([-5, 0])]).to(torch.int32)
    ckpt = checkpoint(tmp_path, {"i": x})
    s = tensor_stats(ckpt, "i", chunk_bytes=64, threads=4)
    assert (s.min, s.max, s.distinct, s.zeros) == (-5, 599, 601, 2)


def test_threads_spread_work_over_threads_and_restore_torch_threads(tmp_path, rng, monkeypatch):
    ckpt = checkpoint(tmp_path, {"w": torch.randn(4096)})
    names = set()
    original = Checkpoint.iter_chunks
    both = threading.Barrier(2, timeout=10)  # else a span done before the next starts leaves its thread to reuse

    def spy(self, *args, **kwargs):
        names.add(threading.current_thread().name)
        both.wait()
        yield from original(self, *args, **kwargs)

    monkeypatch.setattr(Checkpoint, "iter_chunks", spy)
    before = torch.get_num_threads()
    tensor_stats(ckpt, "w", chunk_bytes=1024, threads=2)
    assert len(names) == 2 and all(n.startswith("eagle3lens-stats") for n in names)
    assert torch.get_num_threads() == before


def test_a_failing_span_raises_and_stops_the_others(tmp_path, rng):
    ckpt = checkpoint(tmp_path, {"w": torch.randn(20000)})
    path = ckpt.info("w").file
    path.write_bytes(path.read_bytes()[:-40000])  # truncated after the header was read: the second span fails
    with pytest.raises(CheckpointError, match="file ended after"):
        tensor_stats(ckpt, "w", chunk_bytes=4096, threads=2)


def test_iter_chunks_over_a_span_reads_exactly_those_bytes(tmp_path):
    x = torch.arange(100, dtype=torch.float32)
    ckpt = checkpoint(tmp_path, {"w": x})
    joined = b"".join(bytes(c) for c in ckpt.iter_chunks("w", 24, start=40, stop=200))
    assert joined == x[10:50].numpy().tobytes()
    with pytest.raises(ValueError, match="4-byte elements"):
        next(ckpt.iter_chunks("w", 24, start=2))


def test_weight_stats_threads_option(tmp_path, rng):
    ckpt = checkpoint(tmp_path, {"a.weight": torch.randn(64, 64), "b.weight": torch.randn(8)})
    by_threads = [weight_stats(ckpt, chunk_bytes=512, threads=t) for t in (1, 3)]
    stds = [[r.stats.std for r in res.tensors] for res in by_threads]
    assert stds[0] == pytest.approx(stds[1], rel=1e-12)
    with pytest.raises(UsageError, match="at least 1"):
        weight_stats(ckpt, threads=0)


def test_cli_threads_flag(tmp_path, rng, capsys):
    checkpoint(tmp_path, {"a.weight": torch.randn(32, 32)})
    assert main(["weights", str(tmp_path), "--threads", "2", "--json"]) in (0, 1)
    assert '"a.weight"' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["weights", str(tmp_path), "--threads", "0"])
    assert exc.value.code == 2 and "positive integer" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on GPU hosts)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.int64], ids=str)
def test_cuda_reduction_gives_the_cpu_statistics(tmp_path, rng, dtype):
    x = (torch.randn(20011) * 3).to(dtype)
    ckpt = checkpoint(tmp_path, {"w": x})
    cpu, gpu = (tensor_stats(ckpt, "w", chunk_bytes=4096, device=d) for d in ("cpu", "cuda"))
    exact = ("nan", "inf", "zeros", "min", "max", "distinct", "hist_counts", "hist_sample")
    assert {k: getattr(gpu, k) for k in exact} == {k: getattr(cpu, k) for k in exact}
    for key in ("mean", "std", "kurtosis"):
        if getattr(cpu, key) is not None:
            assert getattr(gpu, key) == pytest.approx(getattr(cpu, key), rel=1e-5, abs=1e-6)


def test_zero_chunks_skipped_give_the_numbers_of_the_full_reduction(tmp_path, rng, monkeypatch):
    """Chunks of zero bytes (a sparse file's holes) are counted, not reduced: every figure of every tensor, NaN,
    Inf, -0.0, all-zero and integer tensors included, equals what reducing each chunk gives."""
    def holed(dtype):
        x = (torch.randn(4096) * 0.02).to(dtype)
        x[:1024] = 0.0  # whole zero chunks at the start, in the middle and at the end
        x[2048:2560] = 0.0
        x[3584:] = 0.0
        x[1500], x[1501], x[3000] = float("nan"), float("inf"), -0.0
        return x

    tensors = {"bf16": holed(torch.bfloat16), "f16": holed(torch.float16), "f32": holed(torch.float32),
               "f64": holed(torch.float64), "zeros": torch.zeros(3000, dtype=torch.bfloat16),
               "neg_zeros": torch.full((700,), -0.0), "ones": torch.ones(500, dtype=torch.bfloat16),
               "empty": torch.zeros(0), "i64": torch.tensor([0] * 600 + [3, -2, 7]),
               "mask": torch.tensor([False] * 900 + [True] * 5),
               "e4m3": holed(torch.float32).nan_to_num(0.0).to(torch.float8_e4m3fn)}
    ckpt = checkpoint(tmp_path, tensors)
    fast = {(name, threads): tensor_stats(ckpt, name, chunk_bytes=CHUNK, threads=threads)
            for name in tensors for threads in (1, 3)}
    reduced: list[int] = []
    update_float = stats.StreamingStats._update_float
    monkeypatch.setattr(stats.StreamingStats, "_update_float", lambda self, x: reduced.append(1) or update_float(self, x))
    tensor_stats(ckpt, "bf16", chunk_bytes=CHUNK)
    assert len(reduced) == 32 - 8 - 4 - 4  # the zero chunks were skipped (128 values a chunk)
    monkeypatch.setattr(stats, "_all_zero_bytes", lambda raw: False)  # every chunk reduced, as before
    for name in tensors:
        for threads in (1, 3):
            assert tensor_stats(ckpt, name, chunk_bytes=CHUNK, threads=threads) == fast[name, threads], name
    assert fast["zeros", 1].zeros == 3000 and fast["zeros", 1].std == 0.0 and fast["neg_zeros", 1].zeros == 700
    assert (fast["bf16", 1].nan, fast["bf16", 1].inf) == (1, 1) and fast["bf16", 1].zeros == 2049

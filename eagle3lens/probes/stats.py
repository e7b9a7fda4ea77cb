"""Streaming statistics of one tensor, read in bounded chunks (peak memory set by the chunk, not the tensor).

Floats: per chunk, moments of the finite values are taken in the compute dtype (float32, float64 for F64
tensors; torch's cascaded sums) around the chunk's own mean, then merged into float64 running moments with
the pairwise update of Chan et al. / Pébay (2008), so no catastrophic cancellation even for norms near 1.0.
A chunk whose values are too large (or too small) for float32 fourth powers takes its moments in float64.
A chunk of zero bytes (a sparse file's hole, zero padding) is counted as that many +0.0 without a reduction.
min/max/zeros/NaN/Inf are exact. The histogram needs no range up front: it is drawn over [min, max] at the end
from a bounded sample of the values, those at tensor positions that are multiples of a power-of-two stride
(at most HIST_SAMPLES_PER_CHUNK per chunk); past HIST_SAMPLE_CAP values the stride doubles and every other kept
value goes, so the sample stays evenly spread over the whole tensor.
Integers and bool: min, max, zero count and distinct count (exact up to ``DISTINCT_CAP`` values).
A tensor of several chunks can be cut into byte spans of whole chunks, streamed by one thread each and merged:
the per-chunk numbers and the sampled positions do not change, only the float64 merge order.
"""

from __future__ import annotations

import functools
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import numpy as np

from ..checkpoint import Checkpoint
from ..io.safetensors_header import DTYPE_BITS, torch_dtype

DEFAULT_CHUNK_BYTES = 1048576
HIST_SAMPLES_PER_CHUNK = 1 << 12
HIST_SAMPLE_CAP = 1 << 19
HIST_BINS = 64
DISTINCT_CAP = 1 << 20
_F32_MAX = float(np.finfo(np.float32).max)
_NUMPY_FLOATS = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}
# float dtypes whose all-zero bit pattern is +0.0 (not F8_E8M0, a pure exponent: its 0x00 is 2**-127)
ZERO_BITS_ARE_ZERO = frozenset({"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})


@functools.cache
def dtype_kind(st_dtype: str) -> str:
    """How a safetensors dtype is summarised: float, int, bool, or unsupported (no torch dtype, or complex)."""
    import torch

    dtype = torch_dtype(st_dtype)
    if dtype is None or dtype.is_complex:
        return "unsupported"
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


def as_float64(t):  # (torch.Tensor) -> torch.Tensor
    """``t`` widened to float64 for comparisons; a complex tensor as its (real, imaginary) pairs, so nothing is
    discarded (and torch prints no "discards the imaginary part" warning)."""
    import torch

    return torch.view_as_real(t).to(torch.float64) if t.is_complex() else t.to(torch.float64)


def as_tensor(raw: memoryview, st_dtype: str):
    """Reinterpret little-endian bytes as a 1-D tensor (no copy); ValueError for a dtype torch lacks."""
    import torch

    dtype = torch_dtype(st_dtype)
    if dtype is None:
        raise ValueError(f"torch has no dtype for safetensors {st_dtype}")
    if len(raw) == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype)


@dataclass(frozen=True)
class TensorStats:
    """Statistics of one tensor. Floats fill mean..kurtosis and the histogram; ints/bool fill min/max/distinct."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str  # "float" | "int" | "bool" | "unsupported"
    numel: int
    nan: int = 0
    inf: int = 0
    zeros: int = 0
    min: float | None = None  # over finite values
    max: float | None = None
    absmax: float | None = None
    mean: float | None = None
    std: float | None = None  # population std of the finite values
    l2: float | None = None
    kurtosis: float | None = None  # excess: normal 0, uniform -1.2
    distinct: int | None = None  # ints/bool; None when more than DISTINCT_CAP
    hist_edges: tuple[float, ...] = ()
    hist_counts: tuple[int, ...] = ()
    hist_sample: int = 0  # values the histogram was drawn from

    @property
    def finite(self) -> int:
        return self.numel - self.nan - self.inf

    @property
    def zero_frac(self) -> float:
        return self.zeros / self.numel if self.numel else 0.0

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        data = asdict(self)
        data["zero_frac"] = self.zero_frac
        return data


@dataclass
class _Moments:
    """float64 running count, mean and central moment sums M2..M4 (pairwise merge)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    m3: float = 0.0
    m4: float = 0.0

    def merge(self, n: int, mean: float, m2: float, m3: float, m4: float) -> None:
        na, nb = self.n, n
        if nb == 0:
            return
        if na == 0:
            self.n, self.mean, self.m2, self.m3, self.m4 = n, mean, m2, m3, m4
            return
        tot = na + nb
        d = mean - self.mean
        d2 = d * d
        self.m4 = (self.m4 + m4 + d2 * d2 * na * nb * (na * na - na * nb + nb * nb) / tot ** 3
                   + 6 * d2 * (na * na * m2 + nb * nb * self.m2) / tot ** 2 + 4 * d * (na * m3 - nb * self.m3) / tot)
        self.m3 = (self.m3 + m3 + d * d2 * na * nb * (na - nb) / tot ** 2 + 3 * d * (na * m2 - nb * self.m2) / tot)
        self.m2 = self.m2 + m2 + d2 * na * nb / tot
        self.mean = self.mean + d * nb / tot
        self.n = tot


@dataclass
class StreamingStats:
    """Accumulates one tensor's statistics chunk by chunk; ``update`` with each chunk, then ``result``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    device: str = "cpu"
    start: int = 0  # element index of the first chunk (a span's offset): sampled positions are tensor positions
    _moments: _Moments = field(default_factory=_Moments)
    _nan: int = 0
    _inf: int = 0
    _zeros: int = 0
    _min: float = math.inf
    _max: float = -math.inf
    _distinct: Any = None  # sorted unique values so far (ints), None once capped
    _capped: bool = False
    _work: Any = None  # reused float workspace, see _workspace
    _seen: int = 0  # elements updated with (or merged in)
    # the values at positions p in [start, start + _seen) with p % _stride == 0, non-finite ones included (so a
    # value's position follows from its index); float64 for F64, else float32, exact for every other float dtype
    _sample: Any = field(default_factory=lambda: np.empty(0, np.float32))
    _sample_n: int = 0
    _stride: int = 1

    @property
    def kind(self) -> str:
        return dtype_kind(self.dtype)

    def update(self, raw: memoryview) -> None:
        """Add the next chunk of raw bytes (element-aligned)."""
        chunk = as_tensor(raw, self.dtype)
        if self.kind == "float" and chunk.numel():
            self._add_sample(raw, chunk)
        self._seen += chunk.numel()
        if chunk.numel() and self.dtype in ZERO_BITS_ARE_ZERO and _all_zero_bytes(raw):  # a hole, zero padding
            self._add_zeros(chunk.numel())
            return
        if self.device != "cpu":
            chunk = chunk.to(self.device)
        if self.kind == "float":
            self._update_float(chunk)
        else:
            self._update_int(chunk)

    def _update_float(self, chunk) -> None:
        import torch

        compute = torch.float64 if self.dtype == "F64" else torch.float32
        n = chunk.numel()
        work = self._workspace(n, compute, chunk.device)
        x = chunk if chunk.dtype == compute else work[0, :n].copy_(chunk)
        total = float(x.sum())
        if not math.isfinite(total):  # a finite sum proves every value finite; otherwise count and drop
            nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
            if nan or inf:
                self._nan += nan
                self._inf += inf
                x = x[torch.isfinite(x)]
                n = x.numel()
            total = float(x.sum(dtype=torch.float64))  # float32 overflow of a huge but finite chunk
        if n == 0:
            return
        lo, hi = (float(v) for v in torch.aminmax(x))
        self._min, self._max = min(self._min, lo), max(self._max, hi)
        self._zeros += _zero_count(x)
        if compute == torch.float32 and _beyond_float32_moments(max(-lo, hi), n):  # uninitialised memory, say
            x = x.double()
            total, d, d2 = float(x.sum()), x, torch.empty_like(x)
        else:
            d, d2 = work[0, :n], work[1, :n]  # x is done with once centred (or was the read buffer itself)
        mean = total / n
        d = torch.sub(x, mean, out=d)
        d2 = torch.mul(d, d, out=d2)
        # products then cascaded sums, not BLAS dots: ~100x more accurate than a float32 dot, and dots called
        # from two threads at once run slower than from one
        m2 = float(d2.sum())
        m3 = float(torch.mul(d2, d, out=d).sum())
        m4 = float(torch.mul(d2, d2, out=d).sum())
        self._moments.merge(n, mean, m2, m3, m4)

    def _add_zeros(self, n: int) -> None:
        """What ``_update_float`` makes of ``n`` values +0.0, without reading them again: the same numbers."""
        self._min, self._max = min(self._min, 0.0), max(self._max, 0.0)
        self._zeros += n
        self._moments.merge(n, 0.0, 0.0, 0.0, 0.0)

    def _workspace(self, n: int, dtype, device):
        """Two reused rows (value, then centred value; its square): no allocation and no page faults per chunk."""
        import torch

        if self._work is None or self._work.shape[1] < n or self._work.dtype != dtype:
            self._work = torch.empty(2, n, dtype=dtype, device=device)
        return self._work

    def _add_sample(self, raw: memoryview, chunk) -> None:
        """Keep the chunk's values at the sampled positions (at most HIST_SAMPLES_PER_CHUNK: a bigger chunk
        coarsens the stride first); past HIST_SAMPLE_CAP values, halve the sample and the rate for later chunks."""
        import torch

        n = chunk.numel()
        self._coarsen(1 << (-(-n // HIST_SAMPLES_PER_CHUNK) - 1).bit_length())
        first, step = -(self.start + self._seen) % self._stride, self._stride
        dst = self._reserve(len(range(first, n, step)))
        if self.dtype == "BF16":  # a bf16 value's bits are the top half of its float32 pattern
            np.left_shift(np.frombuffer(raw, "<u2")[first::step], 16, out=dst.view(np.uint32), dtype=np.uint32)
        elif self.dtype in _NUMPY_FLOATS:
            dst[:] = np.frombuffer(raw, _NUMPY_FLOATS[self.dtype])[first::step]
        else:  # float8 kinds: numpy has no such dtype
            dst[:] = chunk[first::step].to(torch.float32).numpy()
        self._sample_n += len(dst)
        while self._sample_n > HIST_SAMPLE_CAP:
            self._coarsen(2 * self._stride)

    def _reserve(self, k: int):
        """The next ``k`` free sample slots: one buffer of HIST_SAMPLE_CAP + one chunk's sample, made on first use."""
        if k and self._sample.size == 0:
            dtype = np.float64 if self.dtype == "F64" else np.float32
            self._sample = np.empty(HIST_SAMPLE_CAP + HIST_SAMPLES_PER_CHUNK, dtype)
        return self._sample[self._sample_n:self._sample_n + k]

    def _kept(self, stride: int):
        """The sampled values at positions that are multiples of ``stride`` (a power of two >= ``_stride``): a view."""
        first = -(-self.start // self._stride)  # position of the first sampled value, in strides
        step = stride // self._stride
        return self._sample[-first % step:self._sample_n:step]

    def _coarsen(self, stride: int) -> None:
        """Keep only the sampled positions that are multiples of ``stride`` (every other one per doubling)."""
        if stride > self._stride:
            kept = self._kept(stride)
            self._sample[:len(kept)] = kept
            self._sample_n, self._stride = len(kept), stride

    def merge(self, other: "StreamingStats") -> None:
        """Fold in the statistics of the span that follows this one (chunks streamed by another thread)."""
        if other.start != self.start + self._seen:
            raise ValueError(f"span at element {other.start} does not follow elements [{self.start}, "
                             f"{self.start + self._seen}); merge spans in order")
        m = other._moments
        self._moments.merge(m.n, m.mean, m.m2, m.m3, m.m4)
        self._nan, self._inf, self._zeros = self._nan + other._nan, self._inf + other._inf, self._zeros + other._zeros
        self._min, self._max = min(self._min, other._min), max(self._max, other._max)
        stride = max(self._stride, other._stride)  # both samples at one stride: the one a single stream would reach
        while len(self._kept(stride)) + len(other._kept(stride)) > HIST_SAMPLE_CAP:
            stride *= 2
        self._coarsen(stride)
        theirs = other._kept(stride)
        self._reserve(len(theirs))[:] = theirs
        self._sample_n += len(theirs)
        self._seen += other._seen
        if self._capped or other._capped:
            self._capped, self._distinct = True, None
        elif other._distinct is not None:
            self._merge_distinct(other._distinct)

    def _update_int(self, chunk) -> None:
        import torch

        if chunk.numel() == 0:
            return
        if chunk.dtype in (torch.bool, torch.uint16, torch.uint32, torch.uint64):
            chunk = chunk.to(torch.int64)  # U64 above 2**63 wraps; aminmax/unique need a signed or byte type
        lo, hi = torch.aminmax(chunk)
        self._min, self._max = min(self._min, int(lo)), max(self._max, int(hi))
        self._zeros += chunk.numel() - int(torch.count_nonzero(chunk))
        if self._capped:
            return
        self._merge_distinct(torch.unique(chunk).cpu())

    def _merge_distinct(self, uniq) -> None:
        import torch

        merged = uniq if self._distinct is None else torch.unique(torch.cat([self._distinct, uniq.to(self._distinct.dtype)]))
        if merged.numel() > DISTINCT_CAP:
            self._capped, self._distinct = True, None
        else:
            self._distinct = merged

    def result(self) -> TensorStats:
        base = TensorStats(self.name, self.dtype, tuple(self.shape), self.kind, math.prod(self.shape))
        if self.kind == "unsupported":
            return base
        has = self._min <= self._max
        lo, hi = (self._min, self._max) if has else (None, None)
        absmax = max(abs(self._min), abs(self._max)) if has else None
        if self.kind != "float":
            distinct = None if self._capped else (0 if self._distinct is None else int(self._distinct.numel()))
            return replace(base, zeros=self._zeros, min=lo, max=hi, distinct=distinct, absmax=absmax)
        m = self._moments
        std = math.sqrt(m.m2 / m.n) if m.n else None
        kurt = (m.n * m.m4 / (m.m2 * m.m2) - 3.0) if m.n and m.m2 > 0 else None
        edges, counts, sample = self._histogram(lo, hi)
        return replace(
            base, nan=self._nan, inf=self._inf, zeros=self._zeros, min=lo, max=hi,
            absmax=absmax, mean=m.mean if m.n else None, std=std,
            l2=math.sqrt(m.m2 + m.n * m.mean * m.mean) if m.n else None, kurtosis=kurt,
            hist_edges=edges, hist_counts=counts, hist_sample=sample,
        )

    def _histogram(self, lo: float | None, hi: float | None) -> tuple[tuple[float, ...], tuple[int, ...], int]:
        """Edges, counts and sample size of a HIST_BINS histogram over [lo, hi] of the finite sampled values."""
        if lo is None:
            return (), (), 0
        values = self._sample[:self._sample_n]
        if hi == lo:
            sample = int(np.isfinite(values).sum())
            return (lo, hi), (sample,), sample
        # NaN/Inf lie outside the range: not counted. float64 edges: float32 ones overflow for a range beyond 3.4e38
        # a range wider than float64 holds (-1e308 .. 1e308) is binned at half scale: hi - lo would overflow
        scale = 1.0 if hi is None or math.isfinite(hi - lo) else 0.5
        with np.errstate(over="ignore", invalid="ignore"):  # numpy's own warnings never reach the user's terminal
            counts, edges = np.histogram(values * scale if scale != 1.0 else values, bins=HIST_BINS,
                                         range=(np.float64(lo) * scale, np.float64(hi) * scale))
        edges = edges / scale
        return tuple(float(e) for e in edges), tuple(int(c) for c in counts), int(counts.sum())


def _beyond_float32_moments(absmax: float, n: int) -> bool:
    """Whether float32 cannot hold a chunk's central moments: as |x - mean| <= 2 absmax, n * (2 absmax)**4 bounds
    the fourth-power sum (overflow past 3.4e38, with slack for rounding); an absmax under 2**-20 puts typical
    fourth powers near float32's subnormals, where precision goes."""
    return 0 < absmax < 2.0 ** -20 or (2 * absmax) ** 4 * n > _F32_MAX / 4


def _all_zero_bytes(raw: memoryview) -> bool:
    """Every byte 0 (first a look at the first bytes, so a chunk of values costs nothing more)."""
    if any(raw[:64]):
        return False
    words = len(raw) // 8
    return not np.count_nonzero(np.frombuffer(raw, np.uint64, words)) and not any(raw[words * 8:])


def _zero_count(x) -> int:
    """Values exactly 0 (either sign); on CPU numpy's compare + count beats torch.count_nonzero ~3x."""
    import torch

    if x.device.type == "cpu":
        return int(np.count_nonzero(x.numpy() == 0))
    return x.numel() - int(torch.count_nonzero(x))


def tensor_stats(ckpt: Checkpoint, name: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES, device: str = "cpu",
                 on_bytes: Callable[[int], object] | None = None, threads: int = 1) -> TensorStats:
    """Stream one tensor of ``ckpt`` through StreamingStats; ``on_bytes(n)`` is called after each chunk.

    With ``threads`` > 1 (CPU only) a tensor of several chunks is cut into that many byte spans, each streamed by
    its own thread with its own buffer (torch and file reads release the GIL), and the spans' statistics merged.
    """
    info = ckpt.info(name)
    acc = StreamingStats(name, info.dtype, info.shape, device=device)
    if acc.kind == "unsupported":
        if on_bytes is not None:
            on_bytes(info.nbytes)
        return acc.result()
    elem = max(DTYPE_BITS[info.dtype] // 8, 1)
    chunk = max(chunk_bytes - chunk_bytes % elem, elem)
    spans = byte_spans(info.nbytes, chunk, threads if device == "cpu" else 1)
    with single_threaded(device):
        if len(spans) == 1:
            _stream_span(ckpt, name, acc, spans[0], chunk, on_bytes, threading.Event())
        else:
            parts = [StreamingStats(name, info.dtype, info.shape, device=device, start=start // elem)
                     for start, _ in spans]
            _stream_parallel(ckpt, name, parts, spans, chunk, on_bytes)
            for part in parts:
                acc.merge(part)
    return acc.result()


def byte_spans(nbytes: int, chunk: int, threads: int) -> list[tuple[int, int]]:
    """Split ``[0, nbytes)`` into at most ``threads`` contiguous spans of whole chunks (one span per chunk at most)."""
    chunks = max(1, -(-nbytes // chunk))
    per_span = -(-chunks // max(1, min(threads, chunks))) * chunk
    return [(start, min(start + per_span, nbytes)) for start in range(0, nbytes, per_span)] or [(0, 0)]


def _stream_span(ckpt: Checkpoint, name: str, acc: StreamingStats, span: tuple[int, int], chunk: int,
                 on_bytes: Callable[[int], object] | None, stop: threading.Event) -> None:
    for raw in ckpt.iter_chunks(name, chunk, *span):
        if stop.is_set():
            return
        acc.update(raw)
        if on_bytes is not None:
            on_bytes(len(raw))


def _stream_parallel(ckpt: Checkpoint, name: str, parts: list[StreamingStats], spans: list[tuple[int, int]],
                     chunk: int, on_bytes: Callable[[int], object] | None) -> None:
    """One thread per span; the first error (or Ctrl-C) stops every thread at its next chunk and is raised."""
    lock, stop = threading.Lock(), threading.Event()

    report: Callable[[int], None] | None = None
    if on_bytes is not None:
        callback = on_bytes

        def locked(n: int) -> None:
            with lock:
                callback(n)

        report = locked
    with ThreadPoolExecutor(len(spans), thread_name_prefix="eagle3lens-stats") as pool:
        futures = [pool.submit(_stream_span, ckpt, name, part, span, chunk, report, stop)
                   for part, span in zip(parts, spans, strict=True)]
        try:
            for future in futures:
                future.result()
        except BaseException:
            stop.set()
            raise


@contextmanager
def single_threaded(device: str) -> Iterator[None]:
    """Reduce chunks on one CPU thread: a few-MB chunk gains little from intra-op threads and, on a busy host,
    their synchronisation costs more than they give (measured 10x slower with 2 threads under load)."""
    import torch

    if device != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def iter_element_chunks(ckpt: Checkpoint, name: str, chunk_elems: int, start: int = 0,
                        stop: int | None = None) -> Iterator[tuple[int, Any]]:
    """Yield ``(first_element, tensor)`` over elements ``[start, stop)`` of a tensor (``Checkpoint.iter_chunks``:
    one reused buffer, one open file)."""
    info = ckpt.info(name)
    elem = max(DTYPE_BITS[info.dtype] // 8, 1)
    stop = info.numel if stop is None else stop
    first = start
    for raw in ckpt.iter_chunks(name, chunk_elems * elem, start * elem, stop * elem):
        yield first, as_tensor(raw, info.dtype)
        first += len(raw) // elem

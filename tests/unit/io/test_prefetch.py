"""Read-ahead: hints follow the reader in its order, never more than ``ahead`` bytes in front, none after close;
``weights`` hints exactly the tensors it streams; a hint brings the bytes into the page cache (counted by mincore)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from _builders import checkpoint
from _paths import ROOT

from eagle3lens.io import prefetch
from eagle3lens.io.prefetch import STEP, ReadAhead
from eagle3lens.probes import weights
from eagle3lens.probes.weights import byte_ranges, weight_stats

sys.path.insert(0, str(ROOT / "bench"))
from _fullsize import evict, resident_bytes  # noqa: E402


class Recorder:
    """Stands in for os.posix_fadvise: records each hint with the reader's position at that moment."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, int]] = []  # (path, offset, length, bytes consumed so far)
        self.consumed = 0
        self.called = threading.Semaphore(0)

    def __call__(self, fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_WILLNEED
        self.calls.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, self.consumed))
        self.called.release()


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(prefetch.os, "posix_fadvise", rec, raising=False)
    return rec


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_hints_follow_the_reader_within_ahead(tmp_path, recorder):
    a, b = sparse(tmp_path / "a", 3 * STEP), sparse(tmp_path / "b", STEP)
    ranges = [(a, STEP // 2, 3 * STEP), (b, 0, 100)]  # 2.5 steps of a, then 100 bytes of b
    with ReadAhead(ranges, ahead=STEP) as ahead:
        for _ in range(4):
            assert recorder.called.acquire(timeout=30), recorder.calls
            n = recorder.calls[-1][2]
            recorder.consumed += n
            ahead.consumed(n)
    assert [c[:3] for c in recorder.calls] == [(str(a), STEP // 2, STEP), (str(a), STEP // 2 + STEP, STEP),
                                               (str(a), STEP // 2 + 2 * STEP, STEP // 2), (str(b), 0, 100)]
    # each hint was given only once the reader was less than one step (ahead) behind the hints before it
    hinted_before = [0, STEP, 2 * STEP, 2 * STEP + STEP // 2]
    assert all(before - consumed < STEP for before, (*_, consumed) in zip(hinted_before, recorder.calls, strict=True))


def test_close_stops_the_hints(tmp_path, recorder):
    path = sparse(tmp_path / "a", 4 * STEP)
    with ReadAhead([(path, 0, 4 * STEP)], ahead=STEP) as ahead:
        assert recorder.called.acquire(timeout=30)
        thread = ahead._thread
    assert thread is not None and not thread.is_alive()
    assert len(recorder.calls) == 1  # the reader took nothing: no second hint, and none after leaving


def test_no_thread_without_room_or_ranges(tmp_path, recorder):
    path = sparse(tmp_path / "a", STEP)
    for ranges, ahead in (([(path, 0, STEP)], 0), ([(path, 5, 5)], STEP)):
        with ReadAhead(ranges, ahead=ahead) as r:
            assert r._thread is None
    assert recorder.calls == []


class Draining(ReadAhead):
    """A ReadAhead whose reader waits, on leaving, until every range was hinted: on a tiny checkpoint the reader
    would otherwise finish before the thread gives its first hint (and no hint follows a close, by design)."""

    def __exit__(self, *exc):
        total = sum(e - b for _, b, e in self.ranges)
        with self._cond:
            assert self._cond.wait_for(lambda: self.hinted >= total, timeout=30), (self.hinted, total)
        super().__exit__(*exc)


@pytest.mark.slow
def test_weights_hints_the_tensors_it_streams(tmp_path, recorder, monkeypatch):
    monkeypatch.setattr(weights, "ReadAhead", Draining)
    tensors = {f"layers.0.mlp.{n}.weight": torch.randn(64, 32) for n in ("down_proj", "gate_proj", "up_proj")}
    ckpt = checkpoint(tmp_path / "draft", {**tensors, "fc.weight": torch.randn(32, 96)})
    names = ["layers.0.mlp.up_proj.weight", "fc.weight"]
    weight_stats(ckpt, names=names)
    hinted = [(Path(p), off, off + n) for p, off, n, _ in recorder.calls]
    assert hinted == byte_ranges(ckpt, names)  # each under one step: one hint each, in the order streamed
    assert [(i.file, i.begin, i.end) for i in map(ckpt.info, names)] == hinted


def test_a_hint_brings_the_bytes_into_the_page_cache(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(os.urandom(4 * STEP))
    evict(path)
    if resident_bytes(path):
        pytest.skip("this filesystem keeps the file's pages (tmpfs?): nothing to count")
    deadline = time.monotonic() + 30
    with ReadAhead([(path, STEP, 3 * STEP)], ahead=4 * STEP) as ahead:
        while ahead.hinted < 2 * STEP and time.monotonic() < deadline:
            time.sleep(0.01)
    while resident_bytes(path, STEP, 3 * STEP) < 2 * STEP and time.monotonic() < deadline:
        time.sleep(0.05)
    assert resident_bytes(path, STEP, 3 * STEP) == 2 * STEP
    assert resident_bytes(path, 3 * STEP + (1 << 20)) == 0  # beyond the range (and the kernel's own readahead)

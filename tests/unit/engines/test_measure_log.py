"""``measure(..., log_to=L)`` keeps the engine's own output: vLLM's ``SpecDecoding metrics:`` lines as its server
prints them, read by the log probe into the figures the engine's counters hold. The ``engine`` tests serve the tiny
demo through vLLM's CPU build (``make engine``; ``EAGLE3LENS_ENGINE_PYTHON``)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from eagle3lens.engines.measure import measure
from eagle3lens.errors import MeasureFailed
from eagle3lens.probes.logs import parse_log

ENGINE_PYTHON = os.environ.get("EAGLE3LENS_ENGINE_PYTHON")
VLLM = "vllm==0.32.0"


def test_the_log_is_kept_when_the_engine_dies_before_its_record(tmp_path: Path) -> None:
    """A Python that prints and exits without a record: the failure names it, and the log holds what it printed."""
    crash = tmp_path / "python"
    crash.write_text("#!/bin/sh\necho 'engine: out of cheese' >&2\nexit 3\n")
    crash.chmod(0o755)
    log = tmp_path / "engine.log"
    with pytest.raises(MeasureFailed, match="status 3 before writing its record"):
        measure(tmp_path, tmp_path, [[1, 2]], k=3, max_tokens=4, python=str(crash), timeout_s=60, log_to=log)
    assert "engine: out of cheese" in log.read_text()


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(not ENGINE_PYTHON, reason="no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")
@pytest.mark.parametrize("interval", [None, "0.05"], ids=["one-interval", "many-intervals"])
def test_the_kept_log_says_what_the_counters_count(demo_dir: Path, tmp_path: Path, interval: str | None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the stats interval outlasts the run and the flushed line covers all of it: its accept length is the
    counters'. With a short interval the engine prints a line per interval, as a server does, and the flush after the
    run prints the rest: the lines' token counts add up to the counters'."""
    if interval is None:
        monkeypatch.delenv("VLLM_LOG_STATS_INTERVAL", raising=False)
    else:
        monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", interval)
    rng = random.Random(11)
    prompts = [[1, *(rng.randrange(3, 2048) for _ in range(8))] for _ in range(6)]
    log = tmp_path / "engine.log"
    served = measure(demo_dir / "target", demo_dir / "speculators", prompts, k=3, max_tokens=24,
                     stop_token_ids=[2], python=ENGINE_PYTHON, log_to=log)
    counts = served.counts
    assert counts is not None and counts.drafts > 0, served.stop
    summary = parse_log(log, engine=VLLM).summary
    assert (summary.accepted_tokens, summary.drafted_tokens) == (counts.accepted, counts.draft_tokens)
    if interval is None:
        assert summary.acceptance_lines == 1
        assert f"{summary.mean_accept_len:.2f}" == f"{counts.accept_len:.2f}"  # the line prints two decimals
        assert summary.mean_per_position == pytest.approx(counts.per_position, abs=5e-4)  # and three here
    else:
        assert summary.acceptance_lines > 1

"""The offline estimate's engine log lines: one release table (log_formats.ERAS) says which release prints what,
and each line, read back by the log parser at that release, gives the estimate's accept len again."""

from __future__ import annotations

import pytest

from eagle3lens.probes.acceptance_result import AcceptanceView
from eagle3lens.probes.log_formats import ERAS
from eagle3lens.probes.acceptance_log_lines import log_lines, release_era
from eagle3lens.probes.logs import parse_log

K = 3
VIEW = AcceptanceView("as_served", (0.6, 0.4, 0.2), (0.6, 0.667, 0.5), 2.2, 100, {}, None)


def _in_a_log(engine: str, line: str) -> str:
    if engine == "sglang":
        return "".join(f"[2026-05-04 09:12:{10 + i}] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, "
                       f"{line}, cuda graph: True, gen throughput (token/s): 24.81, #queue-req: 0\n" for i in range(3))
    return "".join(f"INFO 05-02 11:21:{10 + i} [metrics.py:82] SpecDecoding metrics: {line}, Accepted: 120 tokens, "
                   "Drafted: 300 tokens\n" for i in range(3))


@pytest.mark.parametrize("era", [e for e in ERAS if e.engine == "sglang" or e.first != "0"],
                         ids=lambda e: f"{e.engine}=={e.first}")
def test_each_release_line_reads_back_as_the_estimate(era) -> None:
    spec = f"{era.engine}=={'0.4.4.post2' if era.first == '0' else era.first}"
    assert release_era(era.engine, spec) == era
    line = log_lines(VIEW, K, spec)[era.engine]
    assert ("accept rate" in line) == (era.engine == "sglang" and era.formula is not None)
    parsed = parse_log(_in_a_log(era.engine, line), engine=spec)
    assert parsed.summary.mean_accept_len == pytest.approx(VIEW.accept_len, abs=0.006)


def test_without_an_engine_both_newest_lines_and_nothing_unscored() -> None:
    lines = log_lines(VIEW, K, None)
    assert lines["sglang"] == "accept len: 2.20, accept rate: 0.40"  # 0.5.11+: (len - 1) / K
    assert lines["vllm"].startswith("Mean acceptance length: 2.20, Per-position acceptance rate: 0.600, 0.400, 0.200")
    assert set(log_lines(VIEW, K, "sglang==not-a-version")) == {"sglang"}
    assert log_lines(AcceptanceView("as_served", (), (), None, 0, {}, None), K, None) == {}

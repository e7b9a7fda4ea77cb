"""Where the chain breaks: a server log's per-position acceptance beside the offline curve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lens import cli
from eagle3lens.probes.acceptance import estimate_acceptance
from eagle3lens.probes.chain_break import chain_note, compare_chain
from eagle3lens.probes.logs import parse_log


def _vllm_log(rates: list[float]) -> str:
    mean = 1 + sum(rates)
    line = (f"INFO 05-04 09:13:{{s:02d}} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: {mean:.2f}, "
            "Accepted throughput: 10.00 tokens/s, Drafted throughput: 50.00 tokens/s, Accepted: 100 tokens, "
            "Drafted: 500 tokens, Per-position acceptance rate: " + ", ".join(f"{r:.3f}" for r in rates)
            + f", Avg Draft acceptance rate: {100 * sum(rates) / len(rates):.1f}%\n")
    return "".join(line.format(s=s) for s in range(3))


@pytest.fixture(scope="module")
def offline(demo_dir: Path):
    return estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                               fixed=False)


def test_first_parting_position_is_named(offline, tmp_path: Path) -> None:
    curve = list(offline.views["as_trained"].full_acc)
    assert curve[0] > 0.1  # the demo's draft accepts: there is a curve to part from
    logged = [curve[0], *(min(1.0, c + 0.3) for c in curve[1:])]  # served like offline at 1, apart from 2 on
    path = tmp_path / "vllm.log"
    path.write_text(_vllm_log(logged))
    parsed = parse_log(path).summary.mean_per_position
    c = compare_chain(offline, parsed, log=str(path))
    assert c is not None and c.view == "as_trained" and c.first_parting == 2
    assert "part first at position 2" in chain_note(c)
    same = compare_chain(offline, tuple(round(x, 3) for x in curve))
    assert same is not None and same.first_parting is None
    assert compare_chain(offline, ()) is None


def test_cli_acceptance_with_log(demo_dir: Path, tmp_path: Path, capsys) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(_vllm_log([0.05, 0.0, 0.0, 0.0, 0.0]))  # a served curve far below the offline one at once
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"), "--target",
                   str(demo_dir / "target"), "--limit", "4", "--log", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["results"]["chain"]["first_parting"] == 1
    assert any("part first at position 1" in n for n in out["notes"])

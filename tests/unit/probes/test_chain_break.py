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


@pytest.mark.slow
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
    longer = compare_chain(offline, (*(round(x, 3) for x in curve), 0.01, 0.0))  # the server drafts two more
    assert longer is not None and longer.logged_positions == len(curve) + 2
    assert f"the server drafts {len(curve) + 2}, the offline run scored {len(curve)}" in chain_note(longer)
    assert f"--steps {len(curve) + 2}" in chain_note(longer) and "drafts" not in chain_note(same)


@pytest.mark.slow
def test_cli_acceptance_with_log(demo_dir: Path, tmp_path: Path, capsys) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(_vllm_log([0.05, 0.0, 0.0, 0.0, 0.0]))  # a served curve far below the offline one at once
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"), "--target",
                   str(demo_dir / "target"), "--limit", "4", "--log", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["results"]["chain"]["first_parting"] == 1
    assert any("part first at position 1" in n for n in out["notes"])


def _sglang_log(accept_len: float, ndt: int) -> str:
    rate = (accept_len - 1) / (ndt - 1)  # SGLang 0.5.11+'s formula
    head = (f"[2026-05-04 09:12:01] server_args=ServerArgs(model_path='target', speculative_algorithm='EAGLE3', "
            f"speculative_num_steps={ndt - 1}, speculative_eagle_topk=1, speculative_num_draft_tokens={ndt})\n")
    line = ("[2026-05-04 09:12:{s:02d}] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, accept len: "
            f"{accept_len:.2f}, accept rate: {rate:.2f}, cuda graph: True, gen throughput (token/s): 24.81, "
            "#queue-req: 0\n")
    return head + "".join(line.format(s=s) for s in range(10, 14))


@pytest.mark.slow
def test_sglang_log_accept_len_1_parts_the_chain_at_position_1(offline, demo_dir: Path) -> None:
    """The demo's SGLang log (accept len 1.00, rate 0.00) beside the draft as trained: no per-position rates, but
    a served position-1 rate of at most 0 against the offline one is a parting at position 1."""
    from eagle3lens.probes.chain_break import compare_with_log

    c = compare_with_log(offline, parse_log(demo_dir / "sglang.log"), path="sglang.log")
    assert c is not None and c.whole is not None and c.logged == ()
    curve = offline.views["as_trained"].full_acc
    # the log's launch drafts 4, the draft's config 5: the rounds depend on K, so the chain is not cut to 4 (that
    # would be neither count); the note asks for the server's K
    assert len(curve) == 5 and c.whole.served_steps == 4 and len(c.offline) == 5
    served = offline.views["as_trained"].accept_len
    assert abs(c.whole.offline_accept_len - served) < 1e-9 and abs(served - (1 + sum(curve))) < 1e-9
    assert c.whole.logged_accept_len == 1.0 and c.whole.parts and c.first_parting == 1
    assert c.whole.logged_rate == 0.0 and c.whole.rate_formula == "0.5.11+"
    assert c.whole.offline_rate is not None and abs(c.whole.offline_rate - (served - 1) / 4) < 1e-9
    assert "parts at position 1" in chain_note(c) and "score with --steps 4" in chain_note(c)


@pytest.mark.slow
def test_sglang_log_matching_the_offline_chain_agrees(offline, tmp_path: Path) -> None:
    from eagle3lens.probes.chain_break import compare_with_log

    steps = len(offline.views["as_trained"].full_acc)
    trained = 1 + sum(offline.views["as_trained"].full_acc)
    path = tmp_path / "sglang.log"
    path.write_text(_sglang_log(round(trained, 2), steps + 1))
    c = compare_with_log(offline, parse_log(path), path=str(path))
    assert c is not None and c.whole is not None and not c.whole.parts and c.first_parting is None
    assert abs(c.whole.logged_accept_len - trained) < 0.01
    assert c.whole.logged_rate is not None and c.whole.offline_rate is not None
    assert abs(c.whole.logged_rate - c.whole.offline_rate) < 0.01
    assert chain_note(c).endswith("they agree")
    # a chain served 0.5 shorter, not so short that position 1 must part: built on a chain long enough to show it
    # (the demo's draft accepts too little per round for a logged figure to part as a whole and not at position 1)
    from eagle3lens.probes.acceptance_result import AcceptanceResult, AcceptanceView

    full = (0.6, 0.4, 0.2)
    built = AcceptanceResult("draft", "data", None, 3, 1, {"as_trained": AcceptanceView(
        "as_trained", full, (0.6, 2 / 3, 0.5), 1 + sum(full), 10)})
    lower = tmp_path / "lower.log"
    lower.write_text(_sglang_log(round(1 + sum(full) - 0.5, 2), 4))
    c = compare_with_log(built, parse_log(lower), path=str(lower))
    assert c is not None and c.whole is not None and c.whole.parts
    assert c.first_parting is None and "a position the log cannot show" in chain_note(c)


@pytest.mark.slow
def test_cli_acceptance_with_an_sglang_log(demo_dir: Path, capsys) -> None:
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"), "--target",
                   str(demo_dir / "target"), "--limit", "4", "--no-fixed", "--log", str(demo_dir / "sglang.log"),
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["results"]["chain"]["first_parting"] == 1
    assert out["results"]["chain"]["whole"]["logged_accept_len"] == 1.0
    assert any("SGLang logs the accept length per decode step" in n for n in out["notes"])


@pytest.mark.slow
def test_whole_chain_views_render(offline, demo_dir: Path) -> None:
    """The terminal, HTML and plotly views of an SGLang-log comparison show both accept lengths and the
    position-1 bound (no per-position rows to pair)."""
    from rich.console import Console

    from eagle3lens.plots import figures, html_view, rich_view
    from eagle3lens.probes.chain_break import compare_with_log

    c = compare_with_log(offline, parse_log(demo_dir / "sglang.log"), path="sglang.log")
    assert c is not None and c.whole is not None
    console = Console(record=True, width=120)
    console.print(rich_view(c))
    text = console.export_text()
    assert "accept len" in text and "1.00" in text and f"{c.whole.offline_accept_len:.2f}" in text
    assert "<= 0.00" in text
    page = html_view(c)
    assert "<table>" in page and f"{c.whole.offline_accept_len:.2f}" in page
    (fig,) = figures(c)
    assert [len(t.x) for t in fig.data] == [len(c.offline), 1] and fig.data[1].y[0] == 0.0

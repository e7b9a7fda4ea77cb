"""The acceptance budget over real acceptance results on the demo: rows measured or named as not measured, deltas
that add up to the last row minus the first exactly, costs as findings, the promise from the dump or as stated."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from eagle3lens.probes.acceptance import estimate_acceptance
from eagle3lens.probes.budget import ROWS, acceptance_budget
from eagle3lens.probes.chat import chat_samples
from eagle3lens.probes.traffic_result import Sampling

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
SGLANG = "sglang==0.5.11"


@pytest.fixture(scope="module")
def scored(demo_dir: Path):
    """The eagle drafter on the demo's dump (the promise) and on its served conversations at T = 0.7, K = 4."""
    dump = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                               engine=SGLANG, steps=4, fixed=False)
    samples, teacher = chat_samples(demo_dir / "eagle", demo_dir / "target", demo_dir / "chat.jsonl", SGLANG)
    chat = estimate_acceptance(demo_dir / "eagle", samples, target=teacher, engine=SGLANG, steps=4, fixed=False,
                               sampling=Sampling(0.7), served_vocab=True, traffic="chat")
    return dump, chat


def _sum_of_deltas(budget) -> Decimal:
    return sum((Decimal(repr(r.delta)) for r in budget.rows if r.delta is not None), Decimal(0))


def test_rows_measured_in_order_and_adding_up_to_the_logged_figure(scored) -> None:
    dump, chat = scored
    budget = acceptance_budget(chat, promise=dump, logged=1.6, log="server.log")
    assert [r.name for r in budget.rows] == list(ROWS) and all(r.measured for r in budget.rows)
    values = {r.name: r.value for r in budget.rows}
    # each row is the probe's own figure, rounded to 0.01
    assert values["promised"] == round(dump.in_vocab_accept_len, 2)
    assert values["template"] == round(chat.in_vocab_accept_len, 2)
    assert values["vocabulary"] == round(chat.accept_len("as_trained"), 2)
    assert values["sampling"] == round(chat.traffic.sampled["as_trained"].accept_len, 2)
    assert values["engine"] == round(chat.traffic.sampled["as_served"].accept_len, 2)
    assert values["served"] == 1.6
    # the rows add up: sum of deltas == served - promised, exactly
    assert _sum_of_deltas(budget) == Decimal("1.60") - Decimal(f"{values['promised']:.2f}")
    assert Decimal(repr(budget.total)) == _sum_of_deltas(budget)
    # checked within the draft vocabulary the chain can only do better than against the whole vocabulary
    assert chat.in_vocab_accept_len >= chat.accept_len("as_trained")


def test_each_cost_beyond_noise_is_a_finding_naming_its_row(scored) -> None:
    dump, chat = scored
    budget = acceptance_budget(chat, promise=dump)
    costs = {f.code: f for f in budget.findings}
    for row in budget.rows:
        named = f"budget/{row.name}-cost"
        if named in costs:
            assert row.code == named and row.delta < 0 and costs[named].fix == row.fix
            assert costs[named].evidence["delta"] == row.delta
        elif row.name in ("template", "vocabulary", "sampling"):  # within noise, or a gain: it names nothing
            assert row.code is None and row.fix is None, row
    # and a row names a finding only where the budget raised it
    assert {row.code for row in budget.rows if row.code and row.code.startswith("budget/")} <= set(costs)
    # the sampled walk at T = 0.7 on the demo's near-flat target accepts less than greedy: sampling costs
    assert "budget/sampling-cost" in costs and budget.row("sampling").delta < 0


def test_a_lever_within_noise_names_no_finding_and_no_fix(scored) -> None:
    _, chat = scored
    budget = acceptance_budget(chat, promise=chat)  # the same traffic as its own promise: the template costs 0
    template = budget.row("template")
    assert template.measured and template.delta == 0
    assert template.code is None and template.fix is None
    assert "budget/template-cost" not in {f.code for f in budget.findings}


def test_absent_inputs_are_not_measured_and_say_which_flag(scored) -> None:
    dump, chat = scored
    budget = acceptance_budget(dump)  # the dump alone: no served traffic, no sampling, no log
    rows = {r.name: r for r in budget.rows}
    assert rows["promised"].measured and rows["vocabulary"].measured and rows["engine"].measured
    for name, flag in (("template", "--chat"), ("sampling", "--temperature"), ("served", "--log")):
        assert not rows[name].measured and rows[name].delta is None and flag in rows[name].source
    assert _sum_of_deltas(budget) == Decimal(f"{rows['engine'].value:.2f}") - Decimal(f"{rows['promised'].value:.2f}")
    # served traffic without a dump: the promise is what training reported, or not measured
    stated = acceptance_budget(chat, expected=2.5)
    assert stated.row("promised").value == 2.5 and stated.row("promised").source == "--expected-accept-len"
    assert stated.row("template").delta == float(Decimal(f"{chat.in_vocab_accept_len:.2f}") - Decimal("2.50"))
    bare = acceptance_budget(chat)
    assert not bare.row("promised").measured and "--expected-accept-len" in bare.row("promised").source
    assert bare.row("template").delta is None and bare.row("vocabulary").delta is not None
    assert bare.to_dict()["rows"][0] == {**bare.rows[0].to_dict(), "measured": False}


def test_rows_at_different_k_are_refused(demo_dir: Path, scored) -> None:
    dump, chat = scored
    other = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                                engine=SGLANG, steps=3, fixed=False, limit=2)
    with pytest.raises(ValueError, match="different K"):
        acceptance_budget(chat, promise=other)

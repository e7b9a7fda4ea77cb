"""The budget as both commands print it, on the demo: one truth for `doctor` and `acceptance`, K from the log,
acceptance's mismatch finding equal to the doctor's, and logs/low-acceptance's fix running and showing the budget."""

from __future__ import annotations

import json
import shlex
from decimal import Decimal
from pathlib import Path

import pytest

from eagle3lens import cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
SGLANG = "sglang==0.5.11"


def _log_at(demo_dir: Path, path: Path, accept_len: float) -> Path:
    """The demo's SGLang log (its launch drafts speculative_num_steps=4) with every decode line at ``accept_len``."""
    rate = (accept_len - 1) / 4
    path.write_text((demo_dir / "sglang.log").read_text().replace(
        "accept len: 1.00, accept rate: 0.00", f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}"))
    return path


def _run(argv: list[str], capsys) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    return code, json.loads(captured.out)


def test_doctor_and_acceptance_print_one_budget(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """Same inputs, same budget: rows, deltas, codes, fixes; K = 4 from the log; the mismatch finding in both."""
    log = _log_at(demo_dir, tmp_path / "sglang.log", 1.6)
    inputs = ["--target", str(demo_dir / "target"), "--chat", str(demo_dir / "chat.jsonl"), "--engine", SGLANG,
              "--temperature", "0.7", "--log", str(log), "--expected-accept-len", "2.5"]
    _, acceptance = _run(["acceptance", str(demo_dir / "eagle"), *inputs], capsys)
    _, doctor = _run(["doctor", str(demo_dir / "eagle"), *inputs, "--no-weights"], capsys)
    budget = acceptance["results"]["budget"]
    assert budget == doctor["results"]["budget"]
    assert budget["steps"] == 4 == acceptance["results"]["acceptance"]["steps"]  # K from the log, not the config's 5
    rows = {r["name"]: r for r in budget["rows"]}
    assert rows["promised"]["value"] == 2.5 and rows["served"]["value"] == 1.6
    assert all(r["measured"] for r in budget["rows"])
    deltas = sum(Decimal(repr(r["delta"])) for r in budget["rows"] if r["delta"] is not None)
    assert deltas == Decimal("1.60") - Decimal("2.50") == Decimal(repr(budget["total"]))
    # the log's 1.60 beside an offline 1.00: both commands raise the same mismatch, named by the served row
    mismatch = [[f for f in out["findings"] if f["code"] == "acceptance/served-vs-log-mismatch"]
                for out in (acceptance, doctor)]
    assert len(mismatch[0]) == 1 and mismatch[0] == mismatch[1]
    assert rows["served"]["code"] == "acceptance/served-vs-log-mismatch"
    assert not acceptance["findings"][0]["code"].startswith("logs/")  # the headline is a finding, not "OK"
    # the costs named in the rows are findings of both reports, and the doctor ranks them as causes
    for out in (acceptance, doctor):
        codes = {f["code"] for f in out["findings"]}
        assert {r["code"] for r in budget["rows"] if r["code"]} <= codes
    causes = {c["code"]: c for c in doctor["results"]["doctor"]["causes"]}
    assert "budget/sampling-cost" in causes and "of the budget" in causes["budget/sampling-cost"]["explains"]
    # the terminal shows the table
    assert cli.main(["acceptance", str(demo_dir / "eagle"), *inputs, "--no-fixed"]) in (0, 1)
    out = capsys.readouterr().out
    assert "acceptance budget: K = 4, 2.50 -> 1.60 (-0.90)" in out and "what the server logged" in out


def test_doctor_budget_with_a_dump_promises_what_the_dump_accepts(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """A dump and served conversations: the dump as trained is the promise, the conversations the traffic; a
    budget without --temperature says which flag gives the sampling row."""
    log = _log_at(demo_dir, tmp_path / "sglang.log", 1.6)
    _, doctor = _run(["doctor", str(demo_dir / "eagle"), "--target", str(demo_dir / "target"), "--data",
                      str(demo_dir / "hidden-states"), "--chat", str(demo_dir / "chat.jsonl"), "--engine", SGLANG,
                      "--log", str(log), "--no-weights"], capsys)
    rows = {r["name"]: r for r in doctor["results"]["budget"]["rows"]}
    dump = doctor["results"]["acceptance"]
    assert rows["promised"]["value"] == round(dump["in_vocab_accept_len"], 2) and dump["steps"] == 4
    assert not rows["sampling"]["measured"] and "--temperature" in rows["sampling"]["source"]
    assert rows["template"]["measured"] and rows["served"]["value"] == 1.6
    assert sum(Decimal(repr(r["delta"])) for r in rows.values() if r["delta"] is not None) == \
        Decimal("1.60") - Decimal(repr(rows["promised"]["value"]))
    # one mismatch: the served traffic's, not the dump's beside it
    assert [f["code"] for f in doctor["findings"]].count("acceptance/served-vs-log-mismatch") == 1


def test_low_acceptance_fix_runs_and_shows_the_budget(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """logs/low-acceptance names template and sampling among the causes and its fix is the doctor with the budget's
    inputs: run as printed (placeholders filled with the demo's files), it shows the budget down to the log."""
    log = _log_at(demo_dir, tmp_path / "sglang.log", 1.2)
    _, logs = _run(["logs", str(log), "--engine", SGLANG, "--expected-accept-len", "2.5"], capsys)
    (low,) = [f for f in logs["findings"] if f["code"] == "logs/low-acceptance"]
    assert "chat template" in low["detail"] and "sampling temperature" in low["detail"]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"messages": [{"role": "user", "content": "w1 w2"}], "temperature": 0.7}))
    filled = {"DRAFT_CHECKPOINT": str(demo_dir / "eagle"), "TARGET": str(demo_dir / "target"),
              "SERVED_CHATS.jsonl": str(demo_dir / "chat.jsonl"), "REQUEST.json": str(request)}
    words = shlex.split(low["fix"])
    assert words[:2] == ["eagle3lens", "doctor"] and "--expected-accept-len" in words
    _, doctor = _run([filled.get(w, w) for w in words[1:]] + ["--no-weights"], capsys)
    budget = doctor["results"]["budget"]
    rows = {r["name"]: r for r in budget["rows"]}
    assert rows["promised"]["value"] == 2.5 and rows["served"]["value"] == 1.2 and budget["steps"] == 4
    assert rows["sampling"]["measured"] and "T = 0.7" in rows["sampling"]["label"]
    # inside the doctor that shows the budget, the finding no longer points at a command: it is answered
    (again,) = [f for f in doctor["findings"] if f["code"] == "logs/low-acceptance"]
    assert again["fix"] is None


def test_the_steps_advice_runs_in_the_doctor(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """--steps 3 against a log that drafts 4: the mismatch advises --steps 4, which the doctor takes."""
    log = _log_at(demo_dir, tmp_path / "sglang.log", 1.6)
    argv = ["--target", str(demo_dir / "target"), "--chat", str(demo_dir / "chat.jsonl"), "--engine", SGLANG,
            "--log", str(log), "--no-fixed", "--limit", "2"]
    _, out = _run(["acceptance", str(demo_dir / "eagle"), *argv, "--steps", "3"], capsys)
    (mismatch,) = [f for f in out["findings"] if f["code"] == "acceptance/served-vs-log-mismatch"]
    advice = mismatch["detail"].rpartition("score with ")[2].rstrip(".")
    assert advice == "--steps 4"
    _, doctor = _run(["doctor", str(demo_dir / "eagle"), *argv[:-3], "--no-weights", *shlex.split(advice)], capsys)
    assert doctor["results"]["budget"]["steps"] == 4 == doctor["results"]["acceptance"]["steps"]

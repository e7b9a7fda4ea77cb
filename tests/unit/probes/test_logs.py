"""Acceptance-log probe: every format of FACTS.md §6 by label, unparsed lines, §6.4 arithmetic, CLI."""

from __future__ import annotations

import json

import pytest
from _builders import codes
from _paths import TESTS

from eagle3lens.cli import main
from eagle3lens.errors import LogFileError, UsageError
from eagle3lens.plots import figures, html_view, rich_view
from eagle3lens.probes.logs import infer_draft_tokens, parse_log

DATA = TESTS / "data" / "logs"


def finding(result, code: str):
    return next(f for f in result.findings if f.code == code)


# ---------------------------------------------------------------- SGLang formats

def test_sglang_0_4_10_accept_len_only_with_hybrid_and_prealloc_fields():
    r = parse_log(DATA / "sglang_0.4.10_dead.log")
    assert r.engine == "sglang"
    assert dict(r.formats) == {"sglang-0.4": 4}
    assert [s.line for s in r.samples] == [4, 5, 6, 7]  # prefill, startup and HTTP lines are not decode lines
    assert all(s.accept_len == 1.0 and s.accept_rate is None for s in r.samples)
    assert [s.gen_tps for s in r.samples] == [24.61, 24.83, 24.97, 24.79]
    assert r.samples[2].running_reqs == 8  # '#full token' / '#swa token' hybrid line
    assert r.inference.formula is None  # 0.4.10 logs no accept rate
    assert (r.inference.num_draft_tokens, r.inference.source) == (8, "server_args")  # from the ServerArgs line
    assert r.unparsed_lines == 0 and r.ignored_lines == 4
    assert codes(r) == ["logs/zero-acceptance"]


def test_sglang_0_5_5_iteration_hybrid_prealloc_and_cpu_graph_variants():
    r = parse_log(DATA / "sglang_0.5.5_dead.log")
    assert dict(r.formats) == {"sglang-0.5": 4}
    assert [(s.accept_len, s.accept_rate) for s in r.samples] == [(1.0, 0.2)] * 4
    assert [s.gen_tps for s in r.samples] == [24.80, 24.71, 24.88, 24.81]  # incl. '[4411]' and 'cpu graph' lines
    assert r.samples[2].time == "2025-11-03 14:06:08.123" and r.samples[2].seconds == pytest.approx(237.123)  # from 14:02:11
    assert r.summary.mean_gen_tps == pytest.approx(24.8, abs=0.01)


def test_sglang_0_5_11_backend_label_mfu_fields_and_lifetime_line():
    r = parse_log(DATA / "sglang_0.5.11_dead.log")
    assert dict(r.formats) == {"sglang-0.5": 3, "sglang-lifetime": 1}
    assert r.summary.lifetime_accept_len == 1.0
    assert r.summary.acceptance_lines == 3  # the lifetime average is not an interval sample
    assert r.summary.mean_accept_rate == 0.0
    assert r.unknown_fields == ()  # every field there is a real SGLang field


def test_sglang_0_5_23_extra_fields_and_fork_field_are_tolerated():
    r = parse_log(DATA / "sglang_0.5.23_healthy.log")
    # 'block accept len: 3.10' must not be read as 'accept len'
    assert [s.accept_len for s in r.samples] == [3.12, 2.88, 3.40, 3.00]
    assert [s.accept_rate for s in r.samples] == [0.53, 0.47, 0.60, 0.50]
    assert r.unknown_fields == ("spec verify ms",)
    assert r.findings == ()
    assert r.summary.mean_accept_len == pytest.approx(3.10)
    assert r.summary.median_accept_len == pytest.approx(3.06)
    assert r.summary.last_accept_len == 3.0
    assert r.summary.mean_running_reqs == pytest.approx(15.75)


def test_lifetime_average_alone_is_classified():
    r = parse_log("[2026-03-10 08:02:00 TP0] avg_spec_accept_length=1.0213\n")
    assert r.summary.acceptance_lines == 0 and r.summary.lifetime_accept_len == pytest.approx(1.0213)
    assert codes(r) == ["logs/zero-acceptance"]
    assert "lifetime" in finding(r, "logs/zero-acceptance").title
    json_form = parse_log('{"avg_spec_accept_length": 2.75, "last_gen_throughput": 300.1}\nplain line\n')
    assert json_form.summary.lifetime_accept_len == 2.75 and json_form.findings == ()


def test_decode_lines_without_speculation_only_give_throughput():
    text = ("[2026-03-10 08:01:12 TP0] Decode batch, #running-req: 4, #token: 900, token usage: 0.01, "
            "cuda graph: True, gen throughput (token/s): 88.00, #queue-req: 0\n")
    r = parse_log(text)
    assert dict(r.formats) == {"sglang-no-spec": 1}
    assert r.summary.acceptance_lines == 0 and r.summary.mean_gen_tps == 88.0
    assert codes(r) == ["logs/no-acceptance-lines"]  # nothing to judge acceptance by
    assert any("speculative decoding looks off" in n for n in r.notes)


# ---------------------------------------------------------------- vLLM formats

def test_vllm_0_33_0_format_and_engine_stats():
    r = parse_log(DATA / "vllm_0.33.0_dead.log")
    assert r.engine == "vllm"
    assert dict(r.formats) == {"vllm-throughput": 2, "vllm-engine-stats": 2}
    spec = r.acceptance_samples
    assert [s.accept_len for s in spec] == [1.0, 1.0]
    assert spec[0].per_position == (0.0,) * 5 and spec[0].accept_rate == 0.0
    assert (spec[0].accepted_tps, spec[0].drafted_tps, spec[0].drafted_tokens) == (0.0, 512.0, 5120)
    assert r.summary.drafted_tokens == 10105 and r.summary.accepted_tokens == 0
    assert r.summary.mean_gen_tps == pytest.approx(24.85)
    assert r.summary.mean_running_reqs == 8.0
    assert r.inference.num_draft_tokens == 5 and r.inference.source == "per-position count"
    assert spec[1].seconds == 20.0  # vLLM timestamps carry no year
    assert codes(r) == ["logs/zero-acceptance"]


def test_vllm_mean_length_format():
    r = parse_log(DATA / "vllm_mean_length.log")
    assert dict(r.formats) == {"vllm-mean-length": 2, "vllm-engine-stats": 2}
    spec = r.acceptance_samples
    assert [(s.accept_len, s.accept_rate) for s in spec] == [(1.12, pytest.approx(0.04)), (1.13, pytest.approx(0.043))]
    assert spec[0].per_position == (0.11, 0.01, 0.0)
    assert r.summary.mean_per_position == pytest.approx((0.115, 0.01, 0.0))
    assert codes(r) == ["logs/low-acceptance"]  # 1.125 < break-even 1 + 0.1 x 3


def test_vllm_rate_only_format_derives_length_only_when_it_can():
    r = parse_log(DATA / "vllm_rate_only.log")
    assert dict(r.formats) == {"vllm-rate-only": 2, "vllm-engine-stats": 2}
    assert [s.accept_len for s in r.acceptance_samples] == [1.0, 1.0]  # 0 accepted tokens: exactly 1.00
    assert codes(r) == ["logs/zero-acceptance"]
    partial = "INFO 05-02 11:21:10 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 40.0%, Accepted: 300 tokens, Drafted: 750 tokens\n"
    unknown_k = parse_log(partial)
    assert unknown_k.summary.mean_accept_len is None and unknown_k.summary.mean_accept_rate == pytest.approx(0.4)
    assert unknown_k.findings == () and "--num-draft-tokens" in unknown_k.inference.explanation
    known_k = parse_log(partial, num_draft_tokens=3)
    assert known_k.summary.mean_accept_len == pytest.approx(2.2)  # 1 + 3 x 0.40


def test_vllm_fork_fields_are_ignored_by_label():
    r = parse_log(DATA / "vllm_fork_fields.log")
    spec = r.acceptance_samples
    assert [s.accept_len for s in spec[:2]] == [2.61, 2.55]
    assert spec[0].per_position == (0.72, 0.53, 0.36)  # the histogram after it is not read as positions
    assert spec[1].per_position == (0.70, 0.51, 0.34)
    assert [s.accept_rate for s in spec] == [pytest.approx(0.537), pytest.approx(0.517), pytest.approx(0.52)]
    assert spec[2].accepted_tokens == 1560 and spec[2].drafted_tokens == 3000  # not 'Total accepted'
    assert {"Rejected", "Reverify", "Draft length histogram", "top2", "Total accepted",
            "Average accpetace length"} <= set(r.unknown_fields)
    assert r.findings == ()


# ---------------------------------------------------------------- robustness

def test_unparsed_lines_are_counted_with_examples_never_fatal():
    r = parse_log(DATA / "garbage_mixed.log")
    assert [s.accept_len for s in r.acceptance_samples] == [1.0, 1.02]
    assert r.unparsed_lines == 4
    assert [n for n, _ in r.unparsed_examples] == [2, 3, 4, 5]
    assert "garbled" in r.unparsed_examples[0][1]
    assert r.total_lines == 10 and r.ignored_lines == 4
    assert r.to_dict()["lines"] == {"total": 10, "parsed": 2, "ignored": 4, "unparsed": 4}


def test_ansi_colours_and_engine_override():
    text = ("\x1b[32mINFO\x1b[0m 08-20 12:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
            "\x1b[1m2.50\x1b[0m, Accepted: 150 tokens, Drafted: 300 tokens, Per-position acceptance rate: 0.800, "
            "0.700\n[2026-03-10 08:01:12 TP0] Decode batch, #running-req: 8, accept len: 1.00, accept rate: 0.00, "
            "gen throughput (token/s): 24.80, #queue-req: 0\n")
    assert parse_log(text).engine in {"sglang", "vllm"}
    as_vllm = parse_log(text, engine="vllm")
    assert as_vllm.engine == "vllm" and as_vllm.summary.mean_accept_len == 2.5 and as_vllm.findings == ()
    assert any("1 sglang lines ignored" in n for n in as_vllm.notes)
    as_sglang = parse_log(text, engine="sglang")
    assert codes(as_sglang) == ["logs/zero-acceptance"]
    with pytest.raises(UsageError):
        parse_log(text, engine="trtllm")


def test_nothing_parsed_is_a_warning_not_a_verdict(tmp_path):
    r = parse_log(DATA / "no_decode.log")
    assert r.engine is None and r.samples == ()
    assert r.format_era == "nothing parsed" and figures(r) == []
    assert "no decode or speculative-metrics lines parsed" in r.notes[0]
    assert codes(r) == ["logs/no-acceptance-lines"] and r.findings[0].severity.value == "warning"
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert parse_log(empty).total_lines == 0


def test_missing_file_and_directory_raise_log_file_error(tmp_path):
    with pytest.raises(LogFileError, match="no such log file"):
        parse_log(tmp_path / "nope.log")
    with pytest.raises(LogFileError, match="is a directory"):
        parse_log(tmp_path)


# ---------------------------------------------------------------- §6.4 arithmetic and K inference

def test_worked_example_pins_k_and_the_0_5_5_formula():
    text = (DATA / "sglang_0.5.5_dead.log").read_text()
    without_args = parse_log("".join(l for l in text.splitlines(keepends=True) if "server_args" not in l))
    inf = without_args.inference  # the len/rate pairs alone pin K and the formula
    assert (inf.formula, inf.num_draft_tokens, inf.draft_steps, inf.source) == ("0.5.5", 5, 4, "log")
    r = parse_log(DATA / "sglang_0.5.5_dead.log")
    inf = r.inference  # the ServerArgs line says the same
    assert (inf.formula, inf.num_draft_tokens, inf.source, inf.candidates) == ("0.5.5", 5, "server_args", (("0.5.5", 5),))
    f = finding(r, "logs/zero-acceptance")
    assert "1.00/5 = 0.20" in f.detail and "floor" in f.detail and "only the bonus token" in f.detail
    assert "(1.00-1)/(5-1) = 0.00" in f.detail  # what 0.5.11+ logs for the same run
    assert f.evidence["num_draft_tokens"] == 5 and f.evidence["rate_formula"] == "0.5.5"
    assert f.evidence["accepted_drafts_per_step"] == 0.0
    assert f.severity.value == "critical"


@pytest.mark.parametrize("steps_plus_one, rate", [(4, 0.25), (5, 0.20), (6, 0.17)])
def test_old_floor_identifies_k(steps_plus_one, rate):
    inf = infer_draft_tokens([(1.00, rate)])
    assert (inf.formula, inf.num_draft_tokens) == ("0.5.5", steps_plus_one)


def test_new_formula_dead_draft_leaves_k_open_and_new_format_0_20_needs_1_80():
    dead = infer_draft_tokens([(1.00, 0.00)] * 3)
    assert dead.formula == "0.5.11+" and dead.num_draft_tokens is None
    # §6.4: under 0.5.11+ a rate of 0.20 with 5 draft tokens needs accept len 1 + 0.20 x 4 = 1.80
    assert ("0.5.11+", 5) in infer_draft_tokens([(1.80, 0.20)]).candidates
    assert ("0.5.11+", 5) not in infer_draft_tokens([(1.00, 0.20)]).candidates


def test_several_lines_resolve_an_ambiguous_pair():
    assert {c[0] for c in infer_draft_tokens([(2.50, 0.50)]).candidates} == {"0.5.5", "0.5.11+"}
    r = parse_log(DATA / "sglang_0.5.5_healthy.log")
    assert (r.inference.formula, r.inference.num_draft_tokens) == ("0.5.5", 5)
    r23 = parse_log(DATA / "sglang_0.5.23_healthy.log")
    assert (r23.inference.formula, r23.inference.num_draft_tokens) == ("0.5.11+", 5)


def test_options_narrow_or_contradict_the_inference():
    pinned = parse_log(DATA / "sglang_0.5.11_dead.log", num_draft_tokens=5)
    assert (pinned.inference.num_draft_tokens, pinned.inference.source) == (5, "option")
    assert "(1.00-1)/4 = 0.00" in finding(pinned, "logs/zero-acceptance").detail
    by_version = parse_log(DATA / "sglang_0.5.5_healthy.log", engine="sglang==0.5.5")
    assert by_version.inference.formula == "0.5.5"
    contradicted = parse_log(DATA / "sglang_0.5.5_dead.log", engine="sglang==0.5.11")
    assert contradicted.inference.candidates == () and "fit no single formula" in contradicted.inference.explanation
    assert codes(contradicted) == ["logs/zero-acceptance"]  # accept len alone still decides
    wrong_k = infer_draft_tokens([(1.0, 0.2)], num_draft_tokens=4)
    assert wrong_k.num_draft_tokens == 4 and wrong_k.candidates == ()


# ---------------------------------------------------------------- classification

def test_zero_low_healthy_boundaries():
    def line(length: float, rate: float) -> str:
        return (f"[2026-03-10 08:01:12 TP0] Decode batch, #running-req: 8, accept len: {length:.2f}, "
                f"accept rate: {rate:.2f}, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0\n")

    assert codes(parse_log(line(1.05, 0.01))) == ["logs/zero-acceptance"]
    assert codes(parse_log(line(1.06, 0.02))) == ["logs/low-acceptance"]  # below heuristic break-even
    assert codes(parse_log(line(1.80, 0.20))) == []
    # with K = 8 (num_draft_tokens 9) the heuristic break-even is 1 + 0.1 x 8 = 1.80
    low = parse_log(line(1.64, 0.08), num_draft_tokens=9)
    assert codes(low) == ["logs/low-acceptance"]
    assert "1.80 = 1 + 0.1 x K (K = 8" in finding(low, "logs/low-acceptance").detail


def test_expected_accept_len_from_training():
    r = parse_log(DATA / "sglang_0.5.23_healthy.log", expected_accept_len=5.5)
    f = finding(r, "logs/low-acceptance")
    # 3.10 - 1 = 2.10 accepted drafts per step < 50% of 5.5 - 1 = 4.50
    assert "2.10 accepted draft tokens per step" in f.detail and "4.50" in f.detail
    assert codes(parse_log(DATA / "sglang_0.5.23_healthy.log", expected_accept_len=4.0)) == []


def test_baseline_comparison_incident_numbers():
    r = parse_log(DATA / "sglang_0.5.5_dead.log", baseline_tps=90)
    assert codes(r) == ["logs/zero-acceptance", "logs/speculation-slower"]
    slower = finding(r, "logs/speculation-slower")
    assert slower.severity.value == "critical"
    assert slower.evidence["ratio"] == pytest.approx(24.8 / 90, abs=1e-3)
    assert "24.8 tok/s vs 90.0" in slower.title and "72% loss" in slower.detail
    low = parse_log(DATA / "sglang_0.5.11_low.log", baseline_tps=90)
    assert codes(low) == ["logs/low-acceptance", "logs/speculation-slower"]
    assert "80.6 tok/s with speculation vs 90.0" in finding(low, "logs/low-acceptance").detail
    assert finding(low, "logs/speculation-slower").severity.value == "warning"
    faster = parse_log(DATA / "sglang_0.5.11_low.log", baseline_tps=70)
    assert codes(faster) == []  # measured faster than baseline: speculation pays despite 1.20


# ---------------------------------------------------------------- presentation and CLI

def test_figures_html_rich_and_dict():
    from rich.console import Console

    r = parse_log(DATA / "vllm_0.33.0_dead.log", baseline_tps=90)
    titles = [f.layout.title.text for f in figures(r)]
    assert titles == ["Acceptance over time (vllm)", "Per-position acceptance rate", "Throughput"]
    assert figures(r)[0].data[0].x == (10.0, 20.0)  # seconds since the first timestamp
    html = html_view(r)
    assert "vllm-throughput" in html and "0.000, 0.000" in html
    console = Console(record=True, width=160)
    console.print(rich_view(r))
    assert "per-position" in console.export_text()
    data = json.loads(json.dumps(r.to_dict()))
    assert data["summary"]["mean_accept_len"] == 1.0 and len(data["series"]) == 4


def test_cli_json_schema_and_exit_codes(capsys):
    rc = main(["logs", str(DATA / "sglang_0.5.5_dead.log"), "--json", "--baseline-tps", "90"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert set(out) >= {"tool", "version", "checkpoint", "engine", "findings", "results"}
    assert out["tool"] == "eagle3lens" and out["engine"] == "sglang"
    assert [f["code"] for f in out["findings"]] == ["logs/zero-acceptance", "logs/speculation-slower"]
    assert out["results"]["logs"]["inference"]["num_draft_tokens"] == 5
    assert main(["logs", str(DATA / "sglang_0.5.23_healthy.log"), "--json"]) == 0
    capsys.readouterr()
    assert main(["logs", str(DATA / "no_decode.log")]) == 0  # a warning: below the default --fail-on critical
    assert "nothing parsed" in capsys.readouterr().out


def test_cli_options_and_bad_input(tmp_path, capsys):
    assert main(["logs", str(DATA / "sglang_0.5.11_dead.log"), "--engine", "sglang==0.5.11",
                 "--num-draft-tokens", "5", "--json", "--fail-on", "warning"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "sglang==0.5.11" and out["results"]["logs"]["inference"]["source"] == "option"
    assert main(["logs", str(tmp_path / "missing.log")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.log: no such log file" in err
    assert main(["logs", str(DATA / "no_decode.log"), "--engine", "trtllm"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["logs", str(DATA / "no_decode.log"), "--num-draft-tokens", "0"])
    assert exc.value.code == 2


def test_demo_logs_give_zero_acceptance(demo_dir):
    for name, engine in (("sglang.log", "sglang"), ("vllm.log", "vllm")):
        r = parse_log(demo_dir / name)
        assert r.engine == engine and r.unparsed_lines == 0
        assert codes(r) == ["logs/zero-acceptance"]
        timed = [s.seconds for s in r.samples if s.accept_len is not None]
        assert None not in timed and timed == sorted(timed)  # every decode line carries a valid, increasing time


def test_fix_quotes_a_hostile_log_path(tmp_path):
    import shlex

    log = tmp_path / "server log;$(touch x).log"
    log.write_bytes((DATA / "sglang_0.4.10_dead.log").read_bytes())
    fixes = [f.fix for f in parse_log(log).findings if f.fix]
    assert fixes and all(shlex.split(f)[-2:] == ["--log", str(log)] for f in fixes)


def test_sglang_server_args_line_gives_num_draft_tokens():
    text = ("[2026-05-04 09:12:01] server_args=ServerArgs(model_path='t', speculative_algorithm='EAGLE3', "
            "speculative_num_steps=4, speculative_eagle_topk=1, speculative_num_draft_tokens=5)\n"
            "[2026-05-04 09:12:25] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, accept len: 1.00, "
            "accept rate: 0.00, cuda graph: True, gen throughput (token/s): 24.81, #queue-req: 0\n")
    r = parse_log(text)
    assert (r.inference.num_draft_tokens, r.inference.source, r.inference.formula) == (5, "server_args", "0.5.11+")
    assert "the 0.5.5 formula would have logged 1.00/5 = 0.20" in r.findings[0].detail
    forced = parse_log(text, num_draft_tokens=3)  # the user's option wins over the log
    assert (forced.inference.num_draft_tokens, forced.inference.source) == (3, "option")


# ---------------------------------------------------------------- conventions by release (issue 14 item 5)

V085 = ("INFO 05-02 11:21:10 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 16.7%, Mean acceptance "
        "length: {mean}, Accepted: 150 tokens, Drafted: 900 tokens, Per-position acceptance rate: 0.300, 0.150, 0.050\n")
STARTUP_085 = ("INFO 05-02 11:20:01 [core.py:58] Initializing a V1 LLM engine (v0.8.5) with config: model='t', "
               "speculative_config=SpeculativeConfig(method='eagle3', num_spec_tokens=3)\n")


def test_vllm_0_8_5_mean_length_excludes_the_bonus_token():
    """vllm 0.8.5 metrics.py:76 logs accepted/num_drafts: a 0.50 there is 1.50 with the bonus, not zero acceptance."""
    for engine in ("vllm==0.8.5", "vllm==0.8.5.post1", None):  # without --engine: under 1.00 only 0.8.5 prints
        r = parse_log(V085.format(mean="0.50"), engine=engine)
        assert r.summary.mean_accept_len == pytest.approx(1.5), engine
        assert r.samples[0].logged_accept_len == 0.5 and r.samples[0].accept_len == pytest.approx(1.5)
        assert codes(r) == [], engine
    dead = parse_log(V085.format(mean="0.00").replace("16.7%", "0.0%"), engine="vllm==0.8.5")
    assert dead.summary.mean_accept_len == 1.0 and codes(dead) == ["logs/zero-acceptance"]
    assert "without the bonus token (logged 0.00), so accept len = 0.00 + 1 = 1.00" in finding(
        dead, "logs/zero-acceptance").detail


def test_vllm_mean_length_without_engine_is_reported_with_both_readings():
    r = parse_log(V085.format(mean="1.00"))
    assert [(x.releases, x.mean_accept_len, x.chosen) for x in r.readings] == [
        ("vllm 0.9.0-0.10.1.1", 1.0, True), ("vllm 0.8.5-0.8.5.post1", 2.0, False)]
    zero = finding(r, "logs/zero-acceptance")
    assert "if the log is from vllm 0.8.5-0.8.5.post1" in zero.detail and "2.00" in zero.detail
    assert zero.evidence["readings"][1]["mean_accept_len"] == 2.0
    assert any("pass --engine vllm==VERSION" in n for n in r.notes)
    assert codes(parse_log(V085.format(mean="1.00"), engine="vllm==0.8.5")) == []  # 2.00 with the bonus
    assert codes(parse_log(V085.format(mean="1.00"), engine="vllm==0.10.1.1")) == ["logs/zero-acceptance"]
    from_log = parse_log(STARTUP_085 + V085.format(mean="1.00"))  # the log names its own release
    assert (from_log.version, from_log.version_source, from_log.readings) == ("0.8.5", "log", ())
    assert from_log.summary.mean_accept_len == 2.0 and codes(from_log) == []


def test_vllm_forms_are_labelled_by_release_and_checked_against_the_engine():
    from eagle3lens.probes.logs import FORMAT_DESCRIPTIONS

    assert "0.10.2+" in FORMAT_DESCRIPTIONS["vllm-throughput"] and "0.33.0 form" not in FORMAT_DESCRIPTIONS["vllm-throughput"]
    assert "0.8.3-0.8.4" in FORMAT_DESCRIPTIONS["vllm-rate-only"]
    assert "0.8.5-0.10.1.1" in FORMAT_DESCRIPTIONS["vllm-mean-length"]
    throughput = parse_log(DATA / "vllm_0.33.0_dead.log", engine="vllm==0.8.5")
    assert throughput.disagreement and "vllm-throughput lines are printed by vllm 0.10.2+" in throughput.disagreement
    assert throughput.version is None and throughput.summary.mean_accept_len == 1.0  # not 2.00 by 0.8.5's rule
    assert codes(throughput) == ["logs/engine-mismatch", "logs/zero-acceptance"]
    assert parse_log(DATA / "vllm_0.33.0_dead.log", engine="vllm==0.33.0:v1").disagreement is None
    assert parse_log(DATA / "vllm_rate_only.log").version == "0.8.4"  # its start-up line


SG = ("[2026-05-04 09:12:{s:02d}] Decode batch{form} #running-req: 8, #token: 5120, token usage: 0.02, "
      "accept len: {length}, {rate}cuda graph: True, gen throughput (token/s): 24.80, #queue-req: 0\n")
ARGS = ("[2026-05-04 09:12:00] server_args=ServerArgs(model_path='t', speculative_algorithm='EAGLE3', "
        "speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8)\n")


def sg(length: str, rate: str | None = None, form: str = ",", s: int = 1) -> str:
    return SG.format(s=s, form=form, length=length, rate=f"accept rate: {rate}, " if rate is not None else "")


def test_sglang_decode_batch_dot_form_with_a_rate_pins_0_5_3_post2():
    r = parse_log(sg("1.00", "0.20", form="."))
    assert dict(r.formats) == {"sglang-0.5.3": 1}
    assert (r.inference.formula, r.inference.num_draft_tokens) == ("0.5.5", 5)  # len/(steps+1)
    assert "0.5.3.post2-0.5.3.post3" in r.notes[0]
    later = parse_log(sg("1.00", "0.20", form="."), engine="sglang==0.5.11")
    assert "sglang-0.5.3 lines are printed by sglang 0.5.3.post2-0.5.3.post3" in later.disagreement
    assert later.inference.formula == "0.5.5" and codes(later) == ["logs/engine-mismatch", "logs/zero-acceptance"]


def test_sglang_no_accept_rate_before_0_5_3_post2():
    old = parse_log(sg("2.00", form="."), engine="sglang==0.5.3.post1")
    assert dict(old.formats) == {"sglang-0.4": 1} and old.disagreement is None
    assert "through 0.5.3.post1" in old.to_dict()["format_descriptions"]["sglang-0.4"]
    rated = parse_log(sg("2.50", "0.50"), engine="sglang==0.5.2")
    assert "sglang-0.5 lines are printed by sglang 0.5.4+" in rated.disagreement
    assert {c[0] for c in rated.inference.candidates} == {"0.5.5", "0.5.11+"}  # inferred from the log itself


@pytest.mark.parametrize("version, rate, fits", [
    ("0.5.4", "0.50", True),  # len/(steps+1) = 3.00/6: topk 4's num_draft_tokens 8 is not the denominator
    ("0.5.5.post2", "0.50", True),
    ("0.5.5.post3", "0.38", True),  # len/num_draft_tokens = 3.00/8
    ("0.5.5.post3", "0.50", False),
    ("0.5.11", "0.29", True),  # (len-1)/(num_draft_tokens-1) = 2/7
    ("0.5.23", "0.50", False),
])
def test_sglang_accept_rate_formula_by_release_with_topk_4(version, rate, fits):
    r = parse_log(ARGS + sg("3.00", rate), engine=f"sglang=={version}")
    assert (r.inference.candidates != ()) is fits, r.inference
    assert r.inference.draft_steps == 5  # speculative_num_steps, not num_draft_tokens - 1
    assert r.summary.break_even_accept_len == pytest.approx(1.5)


def test_sglang_rate_without_engine_is_reported_with_both_readings():
    r = parse_log(sg("2.50", "0.50"))
    assert r.inference.formula is None
    assert [x.releases for x in r.readings] == ["sglang 0.5.3.post2-0.5.10.post1", "sglang 0.5.11+"]
    assert "num_draft_tokens one of [5]" in r.readings[0].meaning and "[4]" in r.readings[1].meaning


def test_engine_and_log_disagree_the_log_is_read_by_its_own_format():
    """0.1.0: doctor --engine vllm==0.33.0 --log sglang.log said 'none of its 12 lines is an SGLang decode line'."""
    text = "".join(sg("1.00", "0.00", s=i) for i in range(6)) + "".join(f"[2026-05-04 09:13:0{i}] other\n" for i in range(6))
    r = parse_log(text, engine="vllm==0.33.0")
    assert r.engine == "sglang" and r.summary.acceptance_lines == 6
    assert codes(r) == ["logs/engine-mismatch", "logs/zero-acceptance"]
    mismatch = finding(r, "logs/engine-mismatch")
    assert "--engine vllm==0.33.0 names vllm" in mismatch.detail and "6 sglang lines" in mismatch.detail
    assert mismatch.severity.value == "warning"
    assert "no acceptance lines" not in " ".join(f.title for f in r.findings)


def test_doctor_with_the_other_engine_reads_the_log_by_its_format(demo_dir):
    from eagle3lens.doctor import diagnose

    report = diagnose(demo_dir / "eagle", engine="vllm==0.33.0", log=demo_dir / "sglang.log", weights=False)
    logs = report.results["logs"]
    assert logs.engine == "sglang" and logs.summary.mean_accept_len == 1.0
    found = [f.code for f in report.findings]
    assert "logs/engine-mismatch" in found and "logs/zero-acceptance" in found
    assert "logs/no-acceptance-lines" not in found


def test_a_stats_line_of_the_named_engine_does_not_hide_the_other_engines_acceptance():
    text = ("INFO 05-04 09:12:20 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            "throughput: 24.8 tokens/s, Running: 8 reqs\n" + "".join(sg("1.00", "0.00", s=i) for i in range(3)))
    r = parse_log(text, engine="vllm==0.33.0")
    assert r.engine == "sglang" and r.summary.acceptance_lines == 3
    assert codes(r) == ["logs/engine-mismatch", "logs/zero-acceptance"]


def test_release_ranges_follow_pep_440():
    from packaging.version import Version

    from eagle3lens.probes.log_formats import era_of

    cases = {("sglang", "0.5.11rc1"): "sglang 0.5.11+", ("sglang", "0.5.3.post2.dev1"): "sglang 0.5.3.post2-0.5.3.post3",
             ("sglang", "0.5.3.post1"): "sglang <= 0.5.3.post1", ("sglang", "0.5.10.post1"): "sglang 0.5.5.post3-0.5.10.post1",
             ("vllm", "0.8.5.post1"): "vllm 0.8.5-0.8.5.post1", ("vllm", "0.10.2rc1"): "vllm 0.10.2+",
             ("vllm", "0.0.dev1"): "vllm <= 0.8.4"}
    for (engine, version), releases in cases.items():
        assert era_of(engine, Version(version)).releases == releases
    rc = parse_log(V085.format(mean="1.00"), engine="vllm==0.8.5rc1")  # an 0.8.5 pre-release logs like 0.8.5
    assert rc.summary.mean_accept_len == 2.0


# ---------------------------------------------------------------- issue 23 residue: conventions from the line itself

V085_HEALTHY = ("INFO 05-02 11:21:10 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 34.0%, Mean "
                "acceptance length: {mean}, Accepted: 306 tokens, Drafted: 900 tokens, Per-position acceptance rate: "
                "0.500, 0.320, 0.200\n")


def test_vllm_mean_equal_to_the_sum_of_the_positions_is_the_0_8_5_convention():
    """vllm 0.8.5 metrics.py:76,82 logs mean = accepted/drafts = the sum of the per-position rates (0.9.0 adds 1):
    without a start-up version line, a healthy 0.8.5 draft's 1.02 is 2.02 with the bonus, not zero acceptance."""
    r = parse_log(V085_HEALTHY.format(mean="1.02"))
    assert r.summary.mean_accept_len == pytest.approx(2.02) and r.samples[0].logged_accept_len == 1.02
    assert codes(r) == [] and r.readings == ()
    assert any("equals the sum of the per-position rates" in n for n in r.notes)
    newer = parse_log(V085_HEALTHY.format(mean="2.02"))  # 1 + the sum: 0.9.0+, read as logged
    assert newer.summary.mean_accept_len == pytest.approx(2.02) and codes(newer) == [] and newer.readings == ()
    assert any("1 + the sum of the per-position rates" in n for n in newer.notes)
    # a named release still decides: 0.9.0 never prints a mean equal to the sum, so 1.02 is read as logged
    assert codes(parse_log(V085_HEALTHY.format(mean="1.02"), engine="vllm==0.9.0")) == ["logs/zero-acceptance"]


TREE = ("[2026-05-04 09:12:00] WARNING server_args.py:3477: Spec v1 is used for eagle/eagle3/standalone speculative "
        "decoding because spec v2 currently only supports topk = 1.\n")


def test_sglang_tree_launch_without_server_args_leaves_k_unknown():
    """3 steps, topk 4, 8 draft tokens under 0.5.11+: the rate's denominator is num_draft_tokens - 1 = 7, which is
    not K; the log's tree warning says so, and without speculative_num_steps K is unknown rather than 7."""
    decode = sg("3.10", "0.30")  # (3.10 - 1) / 7; no num_draft_tokens fits 3.10 / n = 0.30
    guessed = parse_log(decode)  # no tree evidence: topk 1 is assumed, K = num_draft_tokens - 1
    assert (guessed.inference.num_draft_tokens, guessed.inference.draft_steps) == (8, 7)
    r = parse_log(TREE + decode)
    assert (r.inference.formula, r.inference.num_draft_tokens, r.inference.draft_steps) == ("0.5.11+", 8, None)
    assert "drafts a tree (topk > 1)" in r.inference.explanation
    topk = parse_log(ARGS.replace("speculative_num_steps=5, ", "") + decode)  # topk 4 named, steps not
    assert (topk.inference.num_draft_tokens, topk.inference.draft_steps) == (8, None)
    with_steps = parse_log(ARGS.replace("speculative_num_steps=5", "speculative_num_steps=3") + decode)
    assert with_steps.inference.draft_steps == 3


# ---------------------------------------------------------------- the fast paths read what the general ones read

def test_block_escape_stripping_equals_stripping_each_line():
    import random

    from eagle3lens.io.textsafe import strip_escapes
    from eagle3lens.probes.logs import _BLOCK_ESCAPES

    rng = random.Random(0)
    alphabet = ["\x1b", "[", "]", "\x07", "\\", "P", "_", "X", "^", "m", "3", ";", "a", " ", "\n", "\r", "\x9c", "/", "~"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _BLOCK_ESCAPES.sub("", text).split("\n") == [strip_escapes(line) for line in text.split("\n")], repr(text)


@pytest.mark.parametrize("line", [
    "[t] Decode batch, #running-req: 9, #token: 5100, token usage: 0.02, accept len: 2.31, accept rate: 0.33, "
    "cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0",
    "[t] Decode batch, #running-req: 9, accept len: 2.31, accept rate: 1.33, gen throughput (token/s): 40.00",  # rate > 1
    "[t] Decode batch, #running-req: 9, block accept len: 3.00, accept len: 2.31, accept rate: 0.33, "
    "gen throughput (token/s): 40.00",  # a fork's label holding "accept len"
    "[t] Decode batch, #running-req: 9, accept len: 2.31, accept rate: 0.33, gen throughput (token/s): 40.00e3",
    "[t] Decode batch, #running-req: 9, accept len: 2.31, accept rate: 0.33, gen throughput (token/s): 4.5%",
    "[t] Decode batch. #running-req: 9, accept len: 2.31, accept rate: 0.33, gen throughput (token/s): 40.00",
])
def test_sglang_decode_fast_path_agrees_with_the_field_reader(line):
    from eagle3lens.probes import log_formats

    at = line.find(log_formats.SGLANG_DECODE)
    general = log_formats._SGLANG_FIELDS.read(line[at + len(log_formats.SGLANG_DECODE):])
    fast = log_formats._parse_sglang_fast(line, at)
    if fast is not None:
        assert (fast, []) == general
    fmt, values, rejected = log_formats._parse_sglang(line)
    assert (values, rejected) == general

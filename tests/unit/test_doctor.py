"""Doctor on the demo incident: each cause ranked first where it belongs, the fix command works, reports validate."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import jsonschema
import pytest

from eagle3lens.cli import main
from eagle3lens.doctor import diagnose

REPORT_SCHEMA = {
    "type": "object",
    "required": ["tool", "version", "checkpoint", "engine", "findings", "results"],
    "properties": {
        "tool": {"const": "eagle3lens"},
        "version": {"type": "string", "pattern": r"^\d+\.\d+\.\d+"},
        "checkpoint": {
            "type": "object",
            "required": ["path", "layout"],
            "properties": {"path": {"type": "string"}, "layout": {"enum": ["speculators", "eagle", "hf", "unknown"]}},
        },
        "engine": {"type": ["string", "null"]},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["code", "severity", "title", "detail", "evidence", "fix"],
                "properties": {
                    "code": {"type": "string", "pattern": r"^[a-z]+/[a-z0-9-]+$"},
                    "severity": {"enum": ["critical", "warning", "info"]},
                    "title": {"type": "string"},
                    "detail": {"type": "string"},
                    "evidence": {"type": "object"},
                    "fix": {"type": ["string", "null"]},
                },
            },
        },
        "results": {"type": "object"},
    },
}

DRAFTS = ["speculators", "eagle", "broken-d2t-double-subtracted", "broken-d2t-absolute", "broken-d2t-missing",
          "broken-untrained", "broken-lm-head-nan"]


def _doctor_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["doctor", *args, "--json"])
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, REPORT_SCHEMA)
    return code, data


def _first_cause(data: dict) -> dict:
    causes = data["results"]["doctor"]["causes"]
    assert causes, "no cause ranked"
    return causes[0]


def test_incident_step_1_dropped_decoder_first_and_fix_works(demo_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _doctor_json(capsys, str(demo_dir / "speculators"), "--engine", "sglang==0.5.11",
                              "--log", str(demo_dir / "sglang.log"))
    assert code == 1
    first = _first_cause(data)
    assert first["code"] == "keys/dropped"
    dropped = next(f for f in data["findings"] if f["code"] == "keys/dropped")
    assert dropped["severity"] == "critical"
    assert any(f["code"] == "logs/zero-acceptance" for f in data["findings"])
    # run the printed fix with OUT filled in, then doctor the result
    fix = shlex.split(first["fix"])
    assert fix[:2] == ["eagle3lens", "convert"] and fix[-1] == "OUT"
    out = tmp_path / "fixed"
    assert main(fix[1:-1] + [str(out)]) == 0
    capsys.readouterr()
    code, after = _doctor_json(capsys, str(out), "--engine", "sglang==0.5.11")
    assert code == 0, [f["code"] for f in after["findings"] if f["severity"] == "critical"]
    assert not [f for f in after["findings"] if f["severity"] == "critical"]


@pytest.mark.parametrize("variant, expected", [
    ("broken-d2t-double-subtracted", "vocab/d2t-double-subtracted"),
    ("broken-d2t-absolute", "vocab/d2t-absolute-ids"),
    ("broken-d2t-missing", "vocab/d2t-missing"),
    ("broken-untrained", "weights/init-like"),
    ("broken-lm-head-nan", "weights/nan"),
])
@pytest.mark.parametrize("engine", [None, "vllm==0.33.0"])
def test_each_broken_variant_names_its_own_cause_first(demo_dir: Path, variant: str, expected: str, engine: str | None) -> None:
    report = diagnose(demo_dir / variant, engine=engine)
    causes = report.results["doctor"].causes
    assert causes and causes[0].finding.code == expected, [c.finding.code for c in causes]


@pytest.mark.slow
def test_good_drafts_have_no_critical_finding(demo_dir: Path) -> None:
    # (speculators configs are recognised by no SGLang version: that pair is config/unrecognized by design)
    for draft, engine in (("speculators", "vllm==0.33.0"), ("eagle", "sglang==0.5.11"), ("eagle", "sglang==0.5.23")):
        report = diagnose(demo_dir / draft, engine=engine, target=demo_dir / "target")
        assert not report.fails("critical"), (draft, engine, [f.code for f in report.findings])


def test_aux_off_wiring_fc_bypass_is_first_cause(demo_dir: Path) -> None:
    report = diagnose(demo_dir / "eagle", engine="sglang==0.5.11", target=demo_dir / "target", scenario="aux-off")
    causes = report.results["doctor"].causes
    assert causes[0].finding.code == "trace/fc-bypassed"
    assert "wiring" in report.results["doctor"].ran


def test_skipped_probes_say_why(demo_dir: Path) -> None:
    report = diagnose(demo_dir / "eagle")
    skipped = report.results["doctor"].skipped
    assert "wiring" in skipped and "target" in skipped["wiring"]
    assert "logs" in skipped and "keys" in skipped


@pytest.mark.parametrize("name", DRAFTS + ["target"])
def test_info_and_doctor_json_on_every_demo_checkpoint(demo_dir: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(demo_dir / name), "--json"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), REPORT_SCHEMA)
    if name == "target":  # the target is no draft: refused in one line instead of "90 tensors dropped"
        assert main(["doctor", str(demo_dir / name), "--engine", "vllm==0.33.0"]) == 2
        assert "not an EAGLE-3 draft" in capsys.readouterr().err
        return
    code, data = _doctor_json(capsys, str(demo_dir / name), "--engine", "vllm==0.33.0", "--no-weights")
    assert code in (0, 1)
    assert data["engine"] == "vllm==0.33.0"


def test_a_draft_without_config_is_reported_not_a_traceback(demo_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(demo_dir / "eagle" / "model.safetensors", bare / "model.safetensors")
    code, data = _doctor_json(capsys, str(bare), "--engine", "sglang==0.5.11", "--target", str(demo_dir / "target"),
                              "--no-weights")
    assert code == 1 and data["findings"][0]["code"] == "config/missing"
    assert set(data["results"]["doctor"]["skipped"]) >= {"keys", "wiring"}
    assert main(["trace", "--draft", str(bare), "--target", str(demo_dir / "target")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no config.json beside the weights?" in err and len(err.splitlines()) == 1


def test_fail_on_gates(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(demo_dir / "speculators"), "--engine", "sglang==0.5.11", "--no-weights"]
    code, data = _doctor_json(capsys, *args)
    assert code == 1
    # the same checkpoint under an engine that loads it: only lower-severity findings, so a warning gate decides
    code, data = _doctor_json(capsys, str(demo_dir / "speculators"), "--engine", "vllm==0.33.0", "--no-weights",
                              "--fail-on", "info")
    assert code == (1 if data["findings"] else 0)


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "x").mkdir()
    assert main(["doctor", str(tmp_path / "x"), "--engine", "tensorrt==1"]) == 2


@pytest.mark.slow
def test_html_report_is_offline_and_has_figures(demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    code = main(["doctor", str(demo_dir / "speculators"), "--engine", "sglang==0.5.11", "--target", str(demo_dir / "target"),
                 "--log", str(demo_dir / "sglang.log"), "--html", str(out)])
    assert code == 1
    page = out.read_text()
    assert "Plotly.newPlot" in page and page.count("plotly.js v") >= 1
    # plotly.js is inlined (its bundle only mentions a CDN as the default for geo topojson, unused here)
    assert "src=\"http" not in page and "src='http" not in page
    embedded = page.split('id="eagle3lens-report">', 1)[1].split("</script>", 1)[0]
    assert json.loads(embedded)["findings"][0]["code"] == "keys/dropped"  # no entity escapes to undo
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.skip("Debian chromium not installed: figure drawing not checked in a browser")
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page_ = browser.new_page()
        page_.on("request", lambda r: requests.append(r.url))
        page_.goto(out.as_uri())
        page_.wait_for_selector(".main-svg", timeout=30_000)
        drawn = page_.locator(".js-plotly-plot").count()
        browser.close()
    assert drawn >= 3
    assert all(u.startswith(("file:", "data:", "about:")) for u in requests), requests


def test_without_engine_wiring_is_judged_as_the_layouts_own_loader(demo_dir: Path) -> None:
    report = diagnose(demo_dir / "eagle", target=demo_dir / "target", scenario="aux-off", weights=False)
    triage = report.results["doctor"]
    assert "wiring" in triage.ran and "keys" in triage.skipped
    assert any("judged as sglang==" in note for note in report.notes)
    assert triage.causes[0].finding.code == "trace/fc-bypassed"


def test_without_engine_headline_names_the_assumption_and_the_engines_that_break_it(
        demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", str(demo_dir / "speculators"), "--no-weights"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0  # an info finding: --fail-on critical does not trip
    # adjacent release groups that break the same way are one range (every EAGLE-3 release is simulated)
    assert out.startswith("as speculators loads it: INFO: under sglang 0.4.4.post2–0.4.8.post1: config not "
                          "recognised, the load raises, 3 tensors dropped; under sglang 0.4.9–0.5.11: config not "
                          "recognised, 10 tensors dropped; under sglang 0.5.12–0.5.23, ")
    assert "pass --engine" in out.split(" · ")[0]
    assert "Loads cleanly under: vllm 0.10.1–0.33.0." in out  # vLLM reads speculators configs from 0.10.1
    report = json.loads((main(["doctor", str(demo_dir / "speculators"), "--no-weights", "--json"]),
                         capsys.readouterr().out)[1])
    assert report["judged_as"] == "speculators" and report["engine"] is None
    (sweep,) = [f for f in report["findings"] if f["code"] == "keys/engine-sweep"]
    assert sweep["severity"] == "info" and sweep["evidence"]["clean"] == ["vllm 0.10.1–0.33.0"]
    assert sweep["fix"].endswith("--engine sglang==0.4.8.post1")  # the first release that breaks it
    # the same draft in SGLang's layout is judged as sglang loads it; vLLM reads its aux ids one off
    eagle = diagnose(demo_dir / "eagle", weights=False)
    (sweep_eagle,) = [f for f in eagle.findings if f.code == "keys/engine-sweep"]
    # (vLLM 0.22's V1 runner reads them one off; from 0.23 the default V2 runner ignores them and its default
    # happens to be the trained layers; SGLang 0.4.4.post2-0.4.8.post1 always builds a random fc.bias)
    # (vLLM before 0.10.2 maps no class to LlamaForCausalLMEagle3: the server stops, so nothing else is reported)
    assert sweep_eagle.title == ("under sglang 0.4.4.post2–0.4.8.post1: parameters left at init; under vllm "
                                 "0.9.0–0.10.0: config not recognised; under vllm 0.22.0–0.22.1: aux layers one off; "
                                 "pass --engine")
    # with an engine there is no sweep and no assumption
    served = diagnose(demo_dir / "speculators", engine="vllm==0.33.0", weights=False)
    assert served.judged_as is None and not [f for f in served.findings if f.code == "keys/engine-sweep"]


def test_unwritable_html_is_a_one_line_error(demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["doctor", str(demo_dir / "eagle"), "--no-weights", "--html", str(blocker / "report.html")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("eagle3lens: error:") and "cannot write the HTML report" in err
    assert len(err.splitlines()) == 1


def test_the_demo_manifest_tells_the_truth(demo_dir: Path) -> None:
    """Every variant's expected findings (own and per engine) are exactly what the doctor finds at warning or above."""
    manifest = json.loads((demo_dir / "manifest.json").read_text())
    for name, variant in {**manifest["variants"], **manifest["kimi"]["variants"]}.items():
        own = set(variant["expected_findings"])
        found = {f.code for f in diagnose(demo_dir / name).findings if f.severity.value != "info"}
        assert found == own, (name, found)
        for engine, extra in variant["expected_findings_by_engine"].items():
            found = {f.code for f in diagnose(demo_dir / name, engine=engine).findings if f.severity.value != "info"}
            assert found == own | set(extra), (name, engine, found)


def test_doctor_places_the_target_like_trace_does(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _doctor_json(capsys, str(demo_dir / "eagle"), "--engine", "sglang==0.5.11", "--target",
                              str(demo_dir / "target"), "--dtype", "bfloat16", "--no-weights")
    assert [f["code"] for f in data["findings"]] == ["trace/dtype-mismatch"] and code == 0


def test_a_code_reported_by_its_owning_probe_is_not_repeated(demo_dir: Path) -> None:
    report = diagnose(demo_dir / "broken-d2t-missing", engine="sglang==0.5.11", weights=False)
    assert [f.code for f in report.findings].count("vocab/d2t-missing") == 1
    kept = next(f for f in report.findings if f.code == "vocab/d2t-missing")
    assert kept in report.results["vocab"].findings  # the vocab probe's own, with its engine consequences


def test_the_log_is_read_with_the_engine_version(demo_dir: Path, tmp_path: Path) -> None:
    """accept rate 0.20 with accept len 1.00 is the 0.5.5 formula's floor: the version must reach the log probe."""
    log = tmp_path / "old.log"
    log.write_text("".join(
        f"[2026-05-04 09:12:{10 + i:02d}] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, "
        f"accept len: 1.00, accept rate: 0.20, cuda graph: True, gen throughput (token/s): 24.80, #queue-req: 0, \n"
        for i in range(3)))
    report = diagnose(demo_dir / "eagle", engine="sglang==0.5.5", log=log, weights=False)
    assert report.results["logs"].inference.formula == "0.5.5"
    assert diagnose(demo_dir / "eagle", engine="speculators", log=log, weights=False).results["logs"].engine == "sglang"


@pytest.mark.parametrize("option,value", [("--num-draft-tokens", "0"), ("--num-draft-tokens", "-3"),
                                          ("--baseline-tps", "0"), ("--baseline-tps", "nan"),
                                          ("--scenario", "aux-on"), ("--dtype", "float8")])
def test_bad_option_values_are_refused_like_logs_and_trace_refuse_them(tmp_path: Path, option: str, value: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["doctor", str(tmp_path / "x"), option, value])
    assert exc.value.code == 2 and option in capsys.readouterr().err


def test_doctor_offers_the_scenarios_and_dtypes_trace_offers() -> None:
    import argparse

    from eagle3lens.commands import doctor, trace

    choices = {}
    for module in (doctor, trace):
        parser = argparse.ArgumentParser()
        module.register(parser.add_subparsers())
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (cmd,) = sub.choices.values()
        choices[module] = {a.dest: a.choices for a in cmd._actions if a.dest in ("scenario", "dtype")}
    assert choices[doctor] == choices[trace] == {"scenario": trace.SCENARIO_NAMES, "dtype": trace.DTYPE_NAMES}


def test_low_acceptance_points_at_the_acceptance_budget_not_back_at_itself(demo_dir, tmp_path) -> None:
    """A log low but not zero (1.20 at K = 4, below the 1.40 break-even): the finding's fix is the doctor with the
    budget's inputs (served conversations and request), which prices template, sampling and vocabulary against the
    log; a doctor that shows no budget keeps it."""
    log = tmp_path / "sglang.log"
    log.write_text((demo_dir / "sglang.log").read_text().replace("accept len: 1.00, accept rate: 0.00",
                                                                 "accept len: 1.20, accept rate: 0.05"))
    report = diagnose(demo_dir / "speculators", engine="sglang==0.5.11", log=log, weights=False)
    (low,) = [f for f in report.findings if f.code == "logs/low-acceptance"]
    words = shlex.split(low.fix or "")
    assert words[:2] == ["eagle3lens", "doctor"] and "--chat" in words and words[-2:] == ["--log", str(log)]
    from eagle3lens.cli import build_parser

    args = build_parser().parse_args(words[1:])  # the command it names takes those options
    assert args.chat == "SERVED_CHATS.jsonl" and args.log == str(log) and args.engine == "sglang==0.5.11"

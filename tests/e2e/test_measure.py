"""The real engine as the instrument: ``--measure``, ``logs --metrics`` and the judgment of the two against the
estimate. The ``engine`` tests serve the demo through vLLM's CPU build (``make engine`` installs it; CI sets
``EAGLE3LENS_ENGINE_PYTHON``); the rest run anywhere."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from _paths import TESTS
from eagle3lens.engines.measure import (Measurement, ServedCounts, ServedStop,
                                        counters_from_prometheus, installed_engine, measure)
from eagle3lens.errors import MeasureFailed, UsageError
from eagle3lens.findings import Severity
from eagle3lens.probes.acceptance_result import AcceptanceResult, AcceptanceView
from eagle3lens.probes.measured import GREEDY_TOLERANCE, judge, tolerance

ENGINE_PYTHON = os.environ.get("EAGLE3LENS_ENGINE_PYTHON")
CLI = [sys.executable, "-m", "eagle3lens"]
needs_engine = pytest.mark.skipif(not ENGINE_PYTHON, reason="no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")


def vllm_exposition(engines: dict[str, tuple[int, int, int, list[int]]]) -> str:
    """A /metrics text as vLLM's prometheus_client registry writes it (counters named and labelled as vLLM's)."""
    registry = CollectorRegistry()
    names = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens")
    counters = [Counter(n, n, ["engine", "model_name"], registry=registry) for n in names]
    per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "per pos", ["engine", "model_name", "position"],
                      registry=registry)
    for engine, (drafts, tokens, accepted, positions) in engines.items():
        for counter, value in zip(counters, (drafts, tokens, accepted), strict=True):
            counter.labels(engine, "m").inc(value)
        for k, value in enumerate(positions):
            per_pos.labels(engine, "m", str(k)).inc(value)
    return generate_latest(registry).decode()


def test_prometheus_counters_summed_over_engines_by_position() -> None:
    counts = counters_from_prometheus(vllm_exposition({"0": (100, 300, 60, [40, 15, 5]),
                                                       "1": (50, 150, 10, [8, 2, 0])}), "m")
    assert (counts.drafts, counts.draft_tokens, counts.accepted) == (150, 450, 70)
    assert counts.accepted_per_pos == (48, 17, 5)
    assert counts.accept_len == pytest.approx(1 + 70 / 150)
    assert counts.per_position == pytest.approx((48 / 150, 17 / 150, 5 / 150))


def test_prometheus_text_without_spec_counters_is_one_line_error() -> None:
    registry = CollectorRegistry()
    Counter("vllm:prompt_tokens", "x", registry=registry).inc(3)
    with pytest.raises(UsageError, match="no vllm:spec_decode_"):
        counters_from_prometheus(generate_latest(registry).decode(), "m.txt")


def test_logs_metrics_cli_gives_the_counters_figures(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(vllm_exposition({"0": (200, 600, 4, [3, 1, 0])}))
    done = subprocess.run([*CLI, "logs", "--metrics", str(path), "--json"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr  # 1.02: zero acceptance is critical
    out = json.loads(done.stdout)
    summary = out["results"]["logs"]["summary"]
    assert summary["lifetime_accept_len"] == pytest.approx(1.02)
    assert summary["mean_per_position"] == pytest.approx([0.015, 0.005, 0.0])
    assert (summary["accepted_tokens"], summary["drafted_tokens"]) == (4, 600)
    assert [f["code"] for f in out["findings"]] == ["logs/zero-acceptance"]
    assert "--measure" in out["findings"][0]["fix"]


def test_logs_metrics_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    zero = tmp_path / "zero.txt"
    zero.write_text(vllm_exposition({"0": (0, 0, 0, [0, 0, 0])}))
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("vllm:spec_decode_num_drafts_total{engine=\"0\" 3\n")
    for args, expected in (([str(zero)], "not drafted yet"), ([str(garbage)], "not a Prometheus metrics text"),
                           ([str(tmp_path / "absent.txt")], "no such metrics file")):
        done = subprocess.run([*CLI, "logs", "--metrics", *args], capture_output=True, text=True)
        assert done.returncode == 2 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    both = subprocess.run([*CLI, "logs", str(zero), "--metrics", str(zero)], capture_output=True, text=True)
    assert both.returncode == 2 and "one of them" in both.stderr


def _result(accept_len: float | None, error: str | None = None) -> AcceptanceResult:
    view = AcceptanceView("as_served", (0.3,), (0.3,), accept_len, 10, error=error)
    return AcceptanceResult("d", "data", "vllm==0.32.0:v1", 3, 4, {"as_served": view})


def _measurement(counts: ServedCounts | None, temperature: float = 0.0, stop: ServedStop | None = None
                 ) -> Measurement:
    return Measurement("vllm==0.32.0", "cpu", 3, 4, 16, {"temperature": temperature}, counts=counts, stop=stop)


def test_tolerance_greedy_fixed_sampled_from_the_counters_own_variance() -> None:
    counts = ServedCounts(100, 300, 90, (50, 30, 10))
    assert tolerance(_measurement(counts)) == GREEDY_TOLERANCE
    # E[a] = 0.9, E[a^2] = 1*0.5 + 3*0.3 + 5*0.1 = 1.9: var 1.09 over 100 rounds
    assert tolerance(_measurement(counts, temperature=0.7)) == pytest.approx(3 * (1.09 / 100) ** 0.5)


def test_judge_agrees_within_noise_and_names_both_figures_beyond() -> None:
    counts = ServedCounts(100, 300, 90, (50, 30, 10))  # accept len 1.90
    assert judge(_result(1.91), _measurement(counts))[0] == ()
    (finding,), _ = judge(_result(2.10), _measurement(counts))
    assert finding.code == "engine/served-disagrees" and finding.severity is Severity.WARNING
    assert "1.900" in finding.title and "2.100" in finding.title
    assert judge(_result(2.10), _measurement(counts, temperature=1.0))[0] == ()  # one sampled draw: wider noise


def test_judge_a_stop_is_critical_unless_predicted() -> None:
    stop = ServedStop("start", "ValueError", "Model architectures ['X'] are not supported for now", "registry.py:1")
    (finding,), _ = judge(_result(1.5), _measurement(None, stop=stop))
    assert finding.code == "engine/served-disagrees" and finding.severity is Severity.CRITICAL
    assert "not supported for now" in finding.detail
    findings, notes = judge(_result(None, error="the server stops: X"), _measurement(None, stop=stop))
    assert findings == () and "predicted the stop" in notes[0]
    (served,), _ = judge(_result(None, error="the server stops: X"), _measurement(ServedCounts(10, 30, 3, (2, 1, 0))))
    assert served.severity is Severity.CRITICAL and "predicted a stop" in served.title


def test_measure_without_an_engine_says_so(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no sglang or vllm is installed"):
        installed_engine(sys.executable)
    with pytest.raises(MeasureFailed, match="does not import"):
        measure(tmp_path, tmp_path, [[1, 2]], k=3, max_tokens=4, python=sys.executable, timeout_s=120)


def test_measure_time_limit_kills_the_engine_and_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    hang = tmp_path / "python"
    hang.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nwait\n")
    hang.chmod(hang.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(MeasureFailed, match="did not finish within 2 s"):
        measure(tmp_path, tmp_path, [[1, 2]], k=3, max_tokens=4, python=str(hang), timeout_s=2)
    pid = int(marker.read_text())

    def gone() -> bool:
        try:
            return "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously: the child dies moments after killpg
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()


# ---------------------------------------------------------------- through the real engine


def _prompts(path: Path, n: int = 6, length: int = 8) -> Path:
    import random

    rng = random.Random(7)
    path.write_text("\n".join(" ".join(str(rng.randrange(3, 2048)) for _ in range(length)) for _ in range(n)) + "\n")
    return path


def _acceptance(demo: Path, draft: str, prompts: Path, *extra: str) -> dict:
    done = subprocess.run([*CLI, "acceptance", str(demo / draft), "--target", str(demo / "target"), "--prompts",
                           str(prompts), "--engine", "installed", "--measure", "--new-tokens", "16", "--steps", "3",
                           "--json", *extra], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _independent(demo: Path, draft: str, prompts: list[list[int]], max_tokens: list[int], max_model_len: int) -> dict:
    request = demo.parent / f"independent-{draft}.json"
    request.write_text(json.dumps({"prompts": prompts, "max_tokens": max_tokens, "stop": [2],
                                   "max_model_len": max_model_len}))
    done = subprocess.run([ENGINE_PYTHON, str(TESTS / "_engine_llm.py"), str(demo / "target"),
                           str(demo / draft), "3", str(request)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                               "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})  # vLLM's reproducible offline runs
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.engine
@needs_engine
def test_measure_equals_an_independent_engine_run_and_the_estimate(demo_dir: Path, tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "prompts.txt")
    out = _acceptance(demo_dir, "speculators", prompts)
    assert out["engine"] == "vllm==0.32.0+cpu"  # the CPU build runs the V1 model runner
    acc = out["results"]["acceptance"]
    measured = acc["measured"]
    assert (measured["engine"], measured["build"], measured["k"]) == ("vllm==0.32.0", "cpu", 3)
    ids = [[int(t) for t in line.split()] for line in prompts.read_text().splitlines()]
    own = _independent(demo_dir, "speculators", ids, measured["limits"], measured["max_model_len"])
    counters = own["counters"]
    assert measured["drafts"] == counters["vllm:spec_decode_num_drafts"]
    assert measured["accepted"] == counters["vllm:spec_decode_num_accepted_tokens"]
    assert measured["accepted_per_pos"] == counters["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert acc["as_served"]["accept_len"] == pytest.approx(measured["accept_len"], abs=0.02)
    assert acc["as_served"]["full_acc"] == pytest.approx(measured["per_position"], abs=0.02)
    assert not [f for f in out["findings"] if f["code"] == "engine/served-disagrees"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.engine
@needs_engine
def test_logs_read_the_servers_own_metrics_and_log_lines(demo_dir: Path, tmp_path: Path) -> None:
    """A real OpenAI-compatible server on loopback: its /metrics text (saved and live) and its SpecDecoding log
    lines give the figures its counters hold."""
    import time
    import urllib.request

    port = _free_port()
    log = tmp_path / "server.log"
    spec = json.dumps({"method": "eagle3", "model": str(demo_dir / "speculators"), "num_speculative_tokens": 3})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": "1"}
    with open(log, "wb") as out:
        server = subprocess.Popen([ENGINE_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model",
                                   str(demo_dir / "target"), "--host", "127.0.0.1", "--port", str(port),
                                   "--dtype", "float32", "--enforce-eager", "--max-model-len", "256",
                                   "--speculative-config", spec], stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while True:
            assert server.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "server did not come up"
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                time.sleep(2)
        for prompt in ([1, 40, 41, 42, 43], [1, 700, 33, 9], [1, 5, 6]):
            body = json.dumps({"model": str(demo_dir / "target"), "prompt": prompt, "max_tokens": 24,
                               "temperature": 0}).encode()
            request = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=120).read()
        time.sleep(3)  # one more stats interval: the log's last SpecDecoding line covers the last request
        text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        saved = tmp_path / "metrics.txt"
        saved.write_text(text)
        counts = counters_from_prometheus(text, "metrics")
        live = subprocess.run([*CLI, "logs", "--metrics", f"{base}/metrics", "--json"], capture_output=True, text=True)
    finally:
        os.killpg(server.pid, 9)
        server.wait()
    assert counts.drafts > 0
    from_file = subprocess.run([*CLI, "logs", "--metrics", str(saved), "--json"], capture_output=True, text=True)
    for done in (from_file, live):
        summary = json.loads(done.stdout)["results"]["logs"]["summary"]
        assert summary["lifetime_accept_len"] == pytest.approx(counts.accept_len)
        assert summary["mean_per_position"] == pytest.approx(list(counts.per_position))
    logged = subprocess.run([*CLI, "logs", str(log), "--engine", "vllm==0.32.0", "--json"], capture_output=True,
                            text=True)
    summary = json.loads(logged.stdout)["results"]["logs"]["summary"]
    assert (summary["accepted_tokens"], summary["drafted_tokens"]) == (counts.accepted, counts.draft_tokens)


def test_sglang_statistics_summed_as_rounds_and_positions() -> None:
    """SGLang (GPU host only) reports per request: verify steps, accepted drafts and the histogram of rounds by
    accepted count (meta_info, tokenizer_manager.py in 0.5.11); they sum to the same counters as vLLM's."""
    from eagle3lens.engines.measure_child import _sglang_counters

    outputs = [{"meta_info": {"spec_verify_ct": 4, "spec_accepted_drafts": 5, "completion_tokens": 9,
                              "spec_accept_histogram": [1, 1, 1, 1]}},  # rounds accepting 0, 1, 2, 3
               {"meta_info": {"spec_verify_ct": 2, "completion_tokens": 3}}]  # an older release: no drafts count
    totals = _sglang_counters(outputs, 3)
    assert totals == {"drafts": 6, "draft_tokens": 18, "accepted": 6, "accepted_per_pos": [3, 2, 1]}


@pytest.mark.engine
@needs_engine
def test_doctor_measure_puts_the_engines_count_beside_the_estimate(demo_dir: Path, tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "prompts.txt", n=4)
    done = subprocess.run([*CLI, "doctor", str(demo_dir / "eagle"), "--engine", "installed", "--measure", "--target",
                           str(demo_dir / "target"), "--prompts", str(prompts), "--no-weights", "--json"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode in (0, 1), done.stderr
    out = json.loads(done.stdout)
    acc = out["results"]["acceptance"]
    assert out["engine"] == "vllm==0.32.0+cpu" and acc["measured"]["drafts"] > 0
    assert acc["as_served"]["accept_len"] == pytest.approx(acc["measured"]["accept_len"], abs=0.02)
    assert not [f for f in out["findings"] if f["code"] == "engine/served-disagrees"]


def test_doctor_measure_needs_samples_to_serve(demo_dir: Path) -> None:
    done = subprocess.run([*CLI, "doctor", str(demo_dir / "eagle"), "--engine", "installed", "--measure"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--measure serves the samples" in done.stderr


# every other demo variant the CPU build serves (speculators is held against an independent run above)
SERVED_VARIANTS = ("eagle", "mismatched-ids", "broken-d2t-double-subtracted", "broken-d2t-missing", "broken-untrained",
                   "broken-lm-head-nan")


@pytest.fixture(scope="module")
def engine_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _prompts(tmp_path_factory.mktemp("engine-prompts") / "prompts.txt")


@pytest.mark.engine
@needs_engine
@pytest.mark.parametrize("variant", SERVED_VARIANTS)
def test_every_variant_the_engine_serves_is_measured_as_an_independent_run_and_estimated(demo_dir: Path, engine_prompts: Path,
                                                                             variant: str) -> None:
    out = _acceptance(demo_dir, variant, engine_prompts)
    acc = out["results"]["acceptance"]
    measured = acc["measured"]
    assert "stop" not in measured and measured["drafts"] > 0
    ids = [[int(t) for t in line.split()] for line in engine_prompts.read_text().splitlines()]
    counters = _independent(demo_dir, variant, ids, measured["limits"], measured["max_model_len"])["counters"]
    assert (measured["drafts"], measured["accepted"], measured["accepted_per_pos"]) == (
        counters["vllm:spec_decode_num_drafts"], counters["vllm:spec_decode_num_accepted_tokens"],
        counters["vllm:spec_decode_num_accepted_tokens_per_pos"])
    assert acc["as_served"]["accept_len"] == pytest.approx(measured["accept_len"], abs=0.02)
    assert acc["as_served"]["full_acc"] == pytest.approx(measured["per_position"], abs=0.02)


@pytest.mark.engine
@needs_engine
def test_convert_measure_serves_the_repair_and_the_source(demo_dir: Path, tmp_path: Path) -> None:
    """The repair the vocab probe proves, served: it restores what the healthy draft is served at."""
    prompts = _prompts(tmp_path / "prompts.txt", n=4)
    out = tmp_path / "repaired"
    done = subprocess.run([*CLI, "convert", str(demo_dir / "broken-d2t-double-subtracted"), "--repair-d2t", str(out),
                           "--measure", "--target", str(demo_dir / "target"), "--prompts", str(prompts),
                           "--new-tokens", "16", "--json"], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)["results"]["measured"]
    healthy = measure(demo_dir / "target", demo_dir / "speculators",
                      [[int(t) for t in line.split()] for line in prompts.read_text().splitlines()], k=3,
                      max_tokens=16, stop_token_ids=[2], python=ENGINE_PYTHON)
    assert measured["source"]["accept_len"] < measured["output"]["accept_len"]
    assert measured["output"]["accepted_per_pos"] == list(healthy.counts.accepted_per_pos)  # restored exactly


def test_convert_measure_needs_prompts_and_a_target(demo_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "convert", str(demo_dir / "broken-d2t-double-subtracted"), "--repair-d2t",
                           str(tmp_path / "o"), "--measure"], capture_output=True, text=True)
    assert done.returncode == 2 and "needs --target T and --prompts F" in done.stderr


@pytest.mark.engine
@needs_engine
def test_refused_and_crashing_drafts_give_the_engines_own_error_as_predicted(demo_dir: Path, tmp_path: Path) -> None:
    """kimi-mla: vLLM rewrites a deepseek_v3 draft config to its MTP model and refuses Eagle3DeepSeekMTPModel at
    start; broken-d2t-absolute maps past the target vocabulary and dies on the first decode. eagle3lens's served
    draft names both stops before any engine runs."""
    ids = [[1, 40, 41, 42, 43]]
    refused = measure(demo_dir / "kimi-target", demo_dir / "kimi-mla", ids, k=3, max_tokens=8, stop_token_ids=[2],
                      python=ENGINE_PYTHON)
    assert refused.stop is not None and refused.stop.stage == "start"
    assert "Eagle3DeepSeekMTPModel" in refused.stop.message
    keys = subprocess.run([*CLI, "keys", str(demo_dir / "kimi-mla"), "--engine", "vllm==0.32.0+cpu", "--json"],
                          capture_output=True, text=True)
    predicted = [f for f in json.loads(keys.stdout)["findings"] if "Eagle3DeepSeekMTPModel" in f["detail"]]
    assert predicted and predicted[0]["severity"] == "critical"
    crashed = measure(demo_dir / "target", demo_dir / "broken-d2t-absolute", ids, k=3, max_tokens=8,
                      stop_token_ids=[2], python=ENGINE_PYTHON)
    assert crashed.stop is not None and crashed.stop.stage == "generate"
    assert "out of bounds" in crashed.stop.message or "out of bounds" in crashed.stop.text()
    doctor = subprocess.run([*CLI, "doctor", str(demo_dir / "broken-d2t-absolute"), "--engine", "vllm==0.32.0+cpu",
                             "--no-weights", "--json"], capture_output=True, text=True)
    (absolute,) = [f for f in json.loads(doctor.stdout)["findings"] if f["code"] == "vocab/d2t-absolute-ids"]
    assert "first decode" in absolute["detail"]


def _served_accepted(demo: Path, draft: Path, prompts: Path) -> ServedCounts:
    ids = [[int(t) for t in line.split()] for line in prompts.read_text().splitlines()]
    served = measure(demo / "target", draft, ids, k=3, max_tokens=16, stop_token_ids=[2], python=ENGINE_PYTHON)
    assert served.counts is not None, served.stop
    return served.counts


@pytest.mark.engine
@needs_engine
def test_every_fix_printed_for_the_cpu_build_serves_at_least_as_well(demo_dir: Path, engine_prompts: Path,
                                                                     tmp_path: Path) -> None:
    """Each `convert` fix the doctor prints under the CPU build, applied and served: never worse than the draft it
    fixes; a d2t repair or a layout fix restores what the healthy draft is served at."""
    import shlex

    healthy = _served_accepted(demo_dir, demo_dir / "speculators", engine_prompts)
    applied = 0
    for variant in ("eagle", "mismatched-ids", "broken-d2t-double-subtracted", "broken-d2t-missing"):
        doctor = subprocess.run([*CLI, "doctor", str(demo_dir / variant), "--engine", "vllm==0.32.0+cpu", "--target",
                                 str(demo_dir / "target"), "--prompts", str(engine_prompts), "--no-weights", "--json"],
                                capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        fixes = {f["fix"] for f in json.loads(doctor.stdout)["findings"]
                 if f.get("fix") and f["fix"].startswith("eagle3lens convert ")}
        if not fixes:
            continue
        before = _served_accepted(demo_dir, demo_dir / variant, engine_prompts)
        for n, fix in enumerate(sorted(fixes)):
            out = tmp_path / f"{variant}-{n}"
            words = [str(out) if w == "OUT" else w for w in shlex.split(fix)[1:]]
            done = subprocess.run([*CLI, *words], capture_output=True, text=True)
            assert done.returncode in (0, 1), (fix, done.stderr)
            after = _served_accepted(demo_dir, out, engine_prompts)
            applied += 1
            assert after.accept_len >= before.accept_len - GREEDY_TOLERANCE, (variant, fix)
            if before.accept_len < healthy.accept_len - GREEDY_TOLERANCE:  # a real defect: restored
                assert after.accept_len == pytest.approx(healthy.accept_len, abs=GREEDY_TOLERANCE), (variant, fix)
    assert applied  # the CPU build has something to fix among these


def test_an_engine_that_died_is_reported_by_the_error_its_worker_logged(tmp_path: Path) -> None:
    """vLLM's frontend raises EngineDeadError ("see stack trace above"); the root cause is the exception its
    worker process logged, in vLLM's log format (the real one is in the engine test above)."""
    from eagle3lens.engines.measure import _with_root_cause

    log = tmp_path / "engine.log"
    prefix = "(Worker pid=24093) ERROR 12-05 16:45:41 [multiproc_executor.py:1063] "
    log.write_text("\n".join([
        "(MainProcess pid=1) WARNING 12-05 16:45:41 [base.py:380] ValueError: a warning's traceback, not the cause",
        prefix + "Traceback (most recent call last):",
        prefix + '  File "/venv/vllm/model_executor/models/llama_eagle3.py", line 394, in compute_logits',
        prefix + "    logits = logits[..., self.draft_id_to_target_id]",
        prefix + "IndexError: index 2049 is out of bounds for dimension 0 with size 2048",
        "(EngineCore pid=2) ERROR 12-05 16:45:41 [core.py:1512] RuntimeError: Worker failed with error 'index 2049'",
    ]) + "\n")
    dead = {"ok": False, "stage": "generate", "error": {"type": "EngineDeadError", "message": "EngineCore "
            "encountered an issue. See stack trace (above) for the root cause.", "where": "core_client.py:996"}}
    error = _with_root_cause(dead, log)["error"]
    assert (error["type"], error["where"]) == ("IndexError", "/venv/vllm/model_executor/models/llama_eagle3.py:394")
    assert error["message"].startswith("index 2049 is out of bounds") and error["outer"].startswith("EngineDeadError")
    refused = {"ok": False, "stage": "start", "error": {"type": "ValueError", "message": "not supported for now"}}
    assert _with_root_cause(refused, log) == refused  # an exception that is its own cause stays

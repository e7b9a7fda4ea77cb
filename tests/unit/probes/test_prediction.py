"""Wiring predicted from the launch: target-class capture support per release, the algorithm's gate, the widths."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from _builders import KIMI_H, codes, kimi_target_config, sparse_eagle3_draft
from eagle3lens.engines.capture_scan import compress, scan_wheel
from eagle3lens.engines.target_support import capture_support, known_releases
from eagle3lens.errors import UsageError
from eagle3lens.launch import launch_from_log, parse_launch
from eagle3lens.probes.prediction import predict_wiring

SGLANG = "python -m sglang.launch_server --model-path /models/kimi-k2.5 --speculative-draft-model-path /d/kimi-eagle3 " \
         "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --tp 8"


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kimi")
    return kimi_target_config(root / "target"), sparse_eagle3_draft(root / "draft")


def sglang(algorithm: str) -> str:
    return f"{SGLANG} --speculative-algorithm {algorithm}"


def test_kimi_k25_wrapper_without_capture_fails_at_start_on_0_5_9(kimi):
    target, draft = kimi
    result = predict_wiring(draft, target=target, engine="sglang==0.5.9", launch=parse_launch(sglang("EAGLE3")))
    assert result.outcome == "fails-at-start"
    assert codes(result) == ["launch/server-fails"]
    finding = result.findings[0]
    assert finding.severity.value == "critical"
    assert finding.evidence["error"] == ("AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute "
                                         "'set_eagle3_layers_to_capture'")
    assert finding.evidence["first_capture"] == "0.5.10"


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.15", "0.5.23"])
def test_kimi_k25_captures_three_layers_from_0_5_10(kimi, version):
    target, draft = kimi
    result = predict_wiring(draft, target=target, engine=f"sglang=={version}", launch=parse_launch(sglang("EAGLE3")))
    assert result.outcome == "wired" and result.aux_capture
    assert len(result.resolution.captured) == 3
    assert result.received_width == 3 * KIMI_H == result.fc_in_features == 21504
    assert not [c for c in codes(result) if c.startswith(("trace/", "launch/"))]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.11", "0.5.23"])
@pytest.mark.parametrize("algorithm", ["EAGLE", "NEXTN"])
def test_eagle3_draft_launched_as_eagle_bypasses_fc(kimi, version, algorithm):
    target, draft = kimi
    result = predict_wiring(draft, target=target, engine=f"sglang=={version}", launch=parse_launch(sglang(algorithm)))
    assert result.outcome == "fc-bypassed" and not result.aux_capture
    [finding] = result.findings
    assert finding.code == "trace/fc-bypassed" and finding.severity.value == "critical"
    assert finding.evidence["received_width"] == 7168 and finding.evidence["fc_in_features"] == 21504
    assert "EAGLE3" in finding.fix


def test_launched_as_eagle_with_a_narrower_draft_fails_at_the_first_decode(tmp_path):
    target = kimi_target_config(tmp_path / "t")
    draft = sparse_eagle3_draft(tmp_path / "d", hidden=4096)  # H != H_t: the gate applies fc to a 7168-wide state
    result = predict_wiring(draft, target=target, engine="sglang==0.5.23", launch=parse_launch(sglang("EAGLE")))
    assert result.outcome == "fails-at-first-decode"
    assert codes(result) == ["launch/server-fails"] and "mat1 and mat2" in result.error


@pytest.mark.parametrize("version, error", [
    ("0.4.5", "ValueError: Model architectures ['FooBarForCausalLM'] are not supported for now."),
    ("0.5.9", "AttributeError: 'TransformersForCausalLM' object has no attribute 'set_eagle3_layers_to_capture'"),
    ("0.5.23", "ValueError: Model TransformersForCausalLM does not implement set_eagle3_layers_to_capture, which "
               "EAGLE3 aux hidden-state capture requires."),
])
def test_architecture_no_release_supports(tmp_path, version, error):
    target = kimi_target_config(tmp_path / "t", architecture="FooBarForCausalLM")
    draft = sparse_eagle3_draft(tmp_path / "d")
    result = predict_wiring(draft, target=target, engine=f"sglang=={version}", launch=parse_launch(sglang("EAGLE3")))
    assert result.outcome == "fails-at-start" and result.error == error
    assert capture_support("sglang", version, "FooBarForCausalLM").first_capture is None


def test_command_line_and_server_args_line_predict_the_same(kimi, tmp_path):
    target, draft = kimi
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-05-04 09:12:01] server_args=ServerArgs(model_path='/models/kimi-k2.5', tokenizer_path=None, "
        "speculative_algorithm='EAGLE', speculative_draft_model_path='/d/kimi-eagle3', speculative_num_steps=3, "
        "speculative_eagle_topk=1, speculative_num_draft_tokens=4, disable_cuda_graph=False, "
        "json_model_override_args='{\"a\": [1, 2]}', tp_size=8, model_impl=ModelImpl.AUTO)\n"
        "[2026-05-04 09:12:30] Decode batch, #running-req: 8, accept len: 1.00, accept rate: 0.00\n")
    from_log = launch_from_log(log)
    from_cmd = parse_launch(sglang("EAGLE"))
    assert from_log.algorithm == from_cmd.algorithm == "EAGLE"
    assert (from_log.target, from_log.draft, from_log.num_steps, from_log.topk, from_log.num_draft_tokens) == \
        (from_cmd.target, from_cmd.draft, from_cmd.num_steps, from_cmd.topk, from_cmd.num_draft_tokens)
    a = predict_wiring(draft, target=target, engine="sglang==0.5.23", launch=from_log).to_dict()
    b = predict_wiring(draft, target=target, engine="sglang==0.5.23", launch=from_cmd).to_dict()
    for d in (a, b):
        d.pop("launch")
        for f in d["findings"]:
            f["evidence"].pop("launch_source", None)
    assert a == b and a["outcome"] == "fc-bypassed"


def test_shell_metacharacters_are_parsed_never_run(tmp_path):
    marker = tmp_path / "ran"
    text = (f"CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model-path '/m/$(touch {marker})' "
            f"--speculative-algorithm EAGLE3 --speculative-draft-model-path `touch {marker}` "
            f"--speculative-num-steps 3; touch {marker} && rm -rf / | cat")
    launch = parse_launch(text)
    assert not marker.exists()
    assert launch.engine == "sglang" and launch.algorithm == "EAGLE3" and launch.num_steps == 3
    assert launch.target == f"/m/$(touch {marker})"
    assert launch.draft == "`touch"  # backticks are text: the word ends at the space, nothing runs


def test_vllm_speculative_config_and_method_eagle(tmp_path):
    target = kimi_target_config(tmp_path / "t", architecture="DeepseekV3ForCausalLM")
    draft = sparse_eagle3_draft(tmp_path / "d")
    eagle = parse_launch("vllm serve /m/kimi --speculative-config "
                         "'{\"method\": \"eagle\", \"model\": \"/d/kimi\", \"num_speculative_tokens\": 3}'")
    assert eagle.engine == "vllm" and eagle.algorithm == "eagle" and eagle.num_steps == 3 and eagle.target == "/m/kimi"
    result = predict_wiring(draft, target=target, engine="vllm==0.33.0", launch=eagle)
    assert result.outcome == "fails-at-start"
    assert "EagleLlamaForCausalLMEagle3" in result.error


def test_engine_and_launch_disagree_is_a_usage_error(kimi):
    target, draft = kimi
    with pytest.raises(UsageError, match="the launch starts sglang"):
        predict_wiring(draft, target=target, engine="vllm==0.33.0", launch=parse_launch(sglang("EAGLE3")))


@pytest.mark.parametrize("text, problem", [
    ("echo hello", "no sglang or vllm server command"),
    ("python -m sglang.launch_server --model-path 'unterminated", "cannot split it into words"),
    ("vllm serve m --speculative-config '{not json'", "not a JSON object"),
])
def test_unreadable_launches_are_one_line_errors(text, problem):
    with pytest.raises(UsageError, match=problem):
        parse_launch(text)


def test_capture_table_covers_every_sglang_release_with_eagle3():
    releases = known_releases("sglang")
    assert releases[0] == "0.4.4.post2" and releases[-1] == "0.5.23" and len(releases) >= 69
    assert capture_support("sglang", "0.4.4.post2", "LlamaForCausalLM").captures
    assert not capture_support("sglang", "0.5.9", "KimiK25ForConditionalGeneration").captures
    assert capture_support("sglang", "0.5.10", "KimiK25ForConditionalGeneration").captures
    later = capture_support("sglang", "0.5.30", "LlamaForCausalLM")
    assert later.release == "0.5.23" and not later.exact


def _fake_wheel(path: Path, models: dict[str, str], runner: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in models.items():
            wheel.writestr(f"sglang/srt/models/{name}", text)
        wheel.writestr("sglang/srt/model_executor/model_runner.py", runner)
    return path


def test_capture_scan_reads_classes_bases_and_entry_classes(tmp_path):
    models = {
        "base.py": "class BaseLM:\n    def set_eagle3_layers_to_capture(self, ids=None):\n        pass\n"
                   "EntryClass = BaseLM\n",
        "child.py": "from x import base\nclass ChildLM(base.BaseLM):\n    pass\nclass Plain:\n    pass\n"
                    "EntryClass = [ChildLM, Plain]\n",
        "broken.py": "def (:\n",
    }
    old = scan_wheel(_fake_wheel(tmp_path / "sglang-0.5.1-py3-none-any.whl", models, "x = 1\n"))
    assert old.served == {"BaseLM", "ChildLM", "Plain"} and old.capture == {"BaseLM", "ChildLM"}
    assert old.missing == "AttributeError"
    runner = ('raise ValueError(f"Model {m} does not implement "\n'
              '    "set_eagle3_layers_to_capture, which EAGLE3 aux hidden-state capture requires.")\n')
    new = scan_wheel(_fake_wheel(tmp_path / "sglang-0.5.2-py3-none-any.whl",
                                 {**models, "plain.py": "class Plain:\n    def set_eagle3_layers_to_capture(self):\n"
                                                        "        pass\nEntryClass = Plain\n"}, runner))
    assert new.capture == {"BaseLM", "ChildLM", "Plain"} and new.missing == "ValueError"
    table = compress([new, old], "sglang", "test")
    assert table["releases"] == ["0.5.1", "0.5.2"]
    assert table["architectures"]["Plain"] == {"served": [[0, 1]], "capture": [[1, 1]]}
    assert table["missing_error"] == [["0.5.1", "0.5.1", "AttributeError"], ["0.5.2", "0.5.2", "ValueError"]]


def test_wiring_cli_on_the_demo_predicts_the_eagle_launch(demo_dir):
    base = [sys.executable, "-m", "eagle3lens", "wiring", "--target", str(demo_dir / "target"),
            "--draft", str(demo_dir / "eagle"), "--engine", "sglang==0.5.11", "--json"]
    bad = subprocess.run(base + ["--log", str(demo_dir / "sglang-eagle.log")], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert [f["code"] for f in report["findings"]] == ["trace/fc-bypassed"]
    assert report["results"]["prediction"]["received_width"] == 64
    assert report["results"]["prediction"]["fc_in_features"] == 192
    good = subprocess.run(base + ["--log", str(demo_dir / "sglang.log")], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["results"]["prediction"]["outcome"] == "wired"
    none = subprocess.run(base[:-1] + ["--log", str(demo_dir / "vllm.log")], capture_output=True, text=True)
    assert none.returncode == 2 and none.stderr.count("\n") == 1 and "no launch arguments" in none.stderr


def test_wiring_path_imports_no_torch(demo_dir):
    code = ("import sys; from eagle3lens.cli import main; "
            f"rc = main(['wiring', '--target', {str(demo_dir / 'target')!r}, '--draft', {str(demo_dir / 'eagle')!r}, "
            f"'--log', {str(demo_dir / 'sglang-eagle.log')!r}, '--json']); "
            "print('torch' in sys.modules, rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False 1", out.stderr


def test_doctor_ranks_the_predicted_bypass_beside_the_trace(demo_dir):
    from eagle3lens.doctor import diagnose

    report = diagnose(demo_dir / "eagle", engine="sglang==0.5.11", target=demo_dir / "target",
                      log=demo_dir / "sglang-eagle.log", weights=False)
    assert report.findings[0].code == "trace/fc-bypassed"
    prediction = report.results["prediction"]
    assert prediction.outcome == "fc-bypassed"
    assert prediction.observed is not None and prediction.observed["fc_ran"] is True  # the trace ran it as EAGLE3


def test_vllm_eagle3_capture_support_by_release(tmp_path):
    target = kimi_target_config(tmp_path / "t", architecture="KimiK25ForConditionalGeneration")
    draft = sparse_eagle3_draft(tmp_path / "d")
    launch = parse_launch("vllm serve /m/kimi --speculative-config "
                          "'{\"method\": \"eagle3\", \"model\": \"/d/kimi\", \"num_speculative_tokens\": 3}'")
    result = predict_wiring(draft, target=target, engine="vllm==0.33.0", launch=launch)
    assert result.outcome == "wired" and result.received_width == 21504
    old = capture_support("vllm", "0.10.0", "DeepseekV3ForCausalLM")
    assert not old.captures
    assert old.error == "AttributeError: 'DeepseekV3ForCausalLM' object has no attribute 'set_aux_hidden_state_layers'"
    assert capture_support("vllm", "0.11.0", "DeepseekV3ForCausalLM").error.startswith(
        "RuntimeError: Model does not support EAGLE3 interface")
    assert capture_support("vllm", "0.8.5", "LlamaForCausalLM").captures
    assert known_releases("vllm")[0] == "0.8.5" and known_releases("vllm")[-1] == "0.33.0"


def test_disable_cuda_graph_selects_sglangs_eager_aux_path(tmp_path):
    target = kimi_target_config(tmp_path / "t", architecture="DeepseekV3ForCausalLM")
    draft = sparse_eagle3_draft(tmp_path / "d", ids=(1, 29, 57))
    graphs = predict_wiring(draft, target=target, engine="sglang==0.5.5", launch=parse_launch(sglang("EAGLE3")))
    eager = predict_wiring(draft, target=target, engine="sglang==0.5.5",
                           launch=parse_launch(sglang("EAGLE3") + " --disable-cuda-graph"))
    assert graphs.resolution.captured == (2, 30, 58)  # CUDA-graph batches: the default [2, L//2, L-3]
    assert eager.resolution.captured == (2, 30, 58) and eager.resolution.source == "eagle_config"
    assert graphs.resolution.source == "default"
    assert any("eager" in n for n in eager.notes)


def test_audit_reports_where_a_wheels_capturing_classes_differ_from_the_table(tmp_path):
    from eagle3lens.engines.audit import CAPTURE_ROW, compare_capture
    from eagle3lens.engines.target_support import capture_table

    table = capture_table("sglang")
    i = table["releases"].index("0.5.9")
    capturing = sorted(a for a, row in table["architectures"].items() if any(x <= i <= y for x, y in row["capture"]))
    base = "class Base:\n    def set_eagle3_layers_to_capture(self, ids=None):\n        pass\n"
    same = base + "".join(f"class {a}(Base):\n    pass\n" for a in capturing)
    entries = "EntryClass = [" + ", ".join([*capturing, "KimiK25ForConditionalGeneration"]) + "]\n"
    wrapper = "class KimiK25ForConditionalGeneration:\n    pass\n"
    wheel = _fake_wheel(tmp_path / "sglang-0.5.9-py3-none-any.whl", {"m.py": same + wrapper + entries}, "x = 1\n")
    assert compare_capture("sglang", "0.5.9", wheel) == []
    patched = wrapper.replace("    pass\n", "    def set_eagle3_layers_to_capture(self, ids=None):\n        pass\n")
    wheel = _fake_wheel(tmp_path / "b" / "sglang-0.5.9-py3-none-any.whl", {"m.py": same + patched + entries}, "x = 1\n")
    [row] = compare_capture("sglang", "0.5.9", wheel)
    assert (row.path, row.status, row.recorded, row.found) == (CAPTURE_ROW, "changed", "-",
                                                              "KimiK25ForConditionalGeneration")
    new = _fake_wheel(tmp_path / "c" / "sglang-0.5.99-py3-none-any.whl", {"m.py": same + entries}, "x = 1\n")
    assert compare_capture("sglang", "0.5.99", new)[0].status == "added"


def test_a_fifo_log_or_config_is_one_line_and_never_blocks(tmp_path):
    import os

    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    draft = sparse_eagle3_draft(tmp_path / "d")
    target = kimi_target_config(tmp_path / "t")
    base = [sys.executable, "-m", "eagle3lens", "wiring", "--draft", str(draft)]
    out = subprocess.run(base + ["--target", str(target), "--log", str(fifo)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "FIFO" in out.stderr
    (tmp_path / "t2").mkdir()
    os.mkfifo(tmp_path / "t2" / "config.json")
    out = subprocess.run(base + ["--target", str(tmp_path / "t2"), "--launch", sglang("EAGLE3")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "config.json" in out.stderr

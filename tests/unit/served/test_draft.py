"""One served draft: every probe reads serve_draft, so their verdicts agree and the fixes they print fix.

Each test builds its inputs (the demo incident, dumps captured from its target, target configs of other
architectures) and checks the corrected outcome of one trial from issue 22.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3lens import cli
from eagle3lens.engines.target_shape import read_target_shape
from eagle3lens.launch import parse_launch
from eagle3lens.probes.acceptance import estimate_acceptance
from eagle3lens.probes.data import iter_samples, target_states, write_dump, write_speculators_sample
from eagle3lens.probes.prediction import predict_wiring
from eagle3lens.probes.provenance import trace_provenance
from eagle3lens.served import serve_draft

SGLANG = "python -m sglang.launch_server --model-path /m/target --speculative-draft-model-path /d/draft"


def _run(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def _codes(report: dict) -> set[str]:
    return {f["code"] for f in report["findings"]}


@pytest.fixture(scope="module")
def dump_at_engine_layers(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's held-out sequences with the aux states of hidden_states[3, 6, 8] (what sglang==0.5.11 captures for
    mismatched-ids), each sequence run alone through the target as the recapture runs it; last states copied."""
    from eagle3lens.probes.wiring import load_target

    model = load_target(demo_dir / "target")
    root = tmp_path_factory.mktemp("dump368") / "dump"
    root.mkdir()
    for i, sample in enumerate(iter_samples(demo_dir / "hidden-states")):
        feats, _, _ = target_states(model, sample.token_ids[None], (3, 6, 8))
        assert sample.last is not None
        write_speculators_sample(root / f"hs_{i}.safetensors", sample.token_ids, [f[0] for f in feats], sample.last)
    return root


@pytest.fixture(scope="module")
def head_only_target(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo target's config, final norm, embed and lm_head only: a teacher that cannot be run."""
    root = tmp_path_factory.mktemp("head-only") / "target"
    root.mkdir()
    shutil.copy(demo_dir / "target" / "config.json", root / "config.json")
    tensors = load_file(str(next((demo_dir / "target").glob("*.safetensors"))))
    keep = {k: v for k, v in tensors.items() if k in ("model.norm.weight", "lm_head.weight", "model.embed_tokens.weight")}
    save_file(keep, str(root / "model.safetensors"), metadata={"format": "pt"})
    return root


# -- 1. as served means as the engine captures -------------------------------------------------------------------
@pytest.mark.slow
def test_as_served_is_computed_from_the_layers_the_engine_captures(demo_dir, dump_at_engine_layers):
    served = estimate_acceptance(demo_dir / "mismatched-ids", demo_dir / "hidden-states", target=demo_dir / "target",
                                 engine="sglang==0.5.11", fixed=False)
    view = served.views["as_served"]
    assert view.setup["layers_hf"] == [3, 6, 8] and view.setup["feed"] == "layers"
    assert any("hidden_states [3, 6, 8]" in n for n in served.notes)
    reference = estimate_acceptance(demo_dir / "mismatched-ids", dump_at_engine_layers, target=demo_dir / "target")
    assert served.accept_len("as_served") == pytest.approx(reference.accept_len("as_trained"), abs=1e-6)
    # the dump's own [2, 5, 7] features give another figure: the engine's layers were really used
    assert served.accept_len("as_trained") != served.accept_len("as_served")


@pytest.mark.slow
def test_as_served_is_not_scored_without_a_runnable_target(demo_dir, head_only_target, tmp_path):
    result = estimate_acceptance(demo_dir / "mismatched-ids", demo_dir / "hidden-states", target=head_only_target,
                                 engine="sglang==0.5.11", fixed=False, limit=4)
    view = result.views["as_served"]
    assert view.accept_len is None
    assert "the engine captures hidden_states [3, 6, 8]" in view.unavailable
    assert "does not record" in view.unavailable
    assert result.accept_len("as_trained") is not None  # the dump itself is what the draft trained on
    # a dump that records its layers names them
    samples = list(iter_samples(demo_dir / "hidden-states", limit=3))
    recorded = write_dump(tmp_path / "recorded", [type(s)(s.token_ids, s.aux, s.last, s.loss_mask, s.last_normed,
                                                           s.source, (2, 5, 7)) for s in samples])
    again = estimate_acceptance(demo_dir / "mismatched-ids", recorded, target=head_only_target,
                                engine="sglang==0.5.11", fixed=False)
    assert "the dump holds [2, 5, 7]" in again.views["as_served"].unavailable


@pytest.mark.slow
def test_convert_with_data_writes_the_measured_layers_and_then_verifies(demo_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code, report = _run(capsys, "convert", str(demo_dir / "mismatched-ids"), "--to", "sglang==0.5.11", str(out),
                        "--data", str(demo_dir / "hidden-states"), "--target", str(demo_dir / "target"),
                        "--limit", "8")
    assert code == 0, report
    config = json.loads((out / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 6]  # SGLang ids for HF [2, 5, 7]
    assert any(n.startswith("acceptance verified") for n in report["notes"])
    provenance = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=out, engine="sglang==0.5.11")
    assert not [f for f in provenance.findings if f.code.startswith("data/")]


@pytest.mark.slow
def test_convert_against_the_wrong_target_is_not_verified(demo_dir, tmp_path, capsys):
    code, report = _run(capsys, "convert", str(demo_dir / "speculators"), "--to", "sglang==0.5.11",
                        str(tmp_path / "out"), "--data", str(demo_dir / "hidden-states"), "--target",
                        str(demo_dir / "kimi-target"), "--limit", "4")
    assert not any(n.startswith("acceptance verified") for n in report["notes"])
    assert "data/not-from-target" in _codes(report) and code == 1


def test_a_non_finite_dump_is_refused_naming_the_file(demo_dir, tmp_path, capsys):
    dump = tmp_path / "nan"
    shutil.copytree(demo_dir / "hidden-states", dump)
    bad = dump / "hs_0.safetensors"
    tensors = load_file(str(bad))
    tensors["hidden_states"] = torch.full_like(tensors["hidden_states"], float("nan"))
    save_file(tensors, str(bad), metadata={"format": "pt"})
    code = cli.main(["acceptance", str(demo_dir / "eagle"), "--data", str(dump), "--target", str(demo_dir / "target")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "hs_0.safetensors" in err[0] and "non-finite" in err[0]


# -- 2. the cost decides the doctor's words -------------------------------------------------------------------------
@pytest.mark.slow
def test_doctor_prices_an_aux_mismatch_that_costs_nothing_at_warning(demo_dir, capsys):
    code, report = _run(capsys, "doctor", str(demo_dir / "mismatched-ids"), "--engine", "sglang==0.5.11",
                        "--data", str(demo_dir / "hidden-states"), "--target", str(demo_dir / "target"),
                        "--no-weights")
    mismatch = [f for f in report["findings"] if f["code"] == "data/aux-layers-mismatch"]
    assert mismatch and mismatch[0]["severity"] == "warning"
    assert "as served" in mismatch[0]["title"] and "with the data's layers" in mismatch[0]["title"]
    causes = report["results"]["doctor"]["causes"]
    assert not [c for c in causes if c["explains"] == "zero acceptance"]
    assert mismatch[0]["fix"] == (f"eagle3lens convert {demo_dir / 'mismatched-ids'} --to sglang==0.5.11 "
                                  "--aux-layers 2,5,7 OUT")


# -- 3. every fix line fixes ---------------------------------------------------------------------------------------
def test_a_tensor_missing_from_the_checkpoint_says_re_export(demo_dir, tmp_path, capsys):
    draft = tmp_path / "no-o-proj"
    shutil.copytree(demo_dir / "eagle", draft)
    weights = next(draft.glob("*.safetensors"))
    tensors = load_file(str(weights))
    del tensors["midlayer.self_attn.o_proj.weight"]
    save_file(tensors, str(weights), metadata={"format": "pt"})
    _, report = _run(capsys, "doctor", str(draft), "--engine", "sglang==0.5.11", "--no-weights")
    left = [f for f in report["findings"] if f["code"] == "keys/left-at-init"]
    assert left and left[0]["fix"].startswith("the checkpoint has no tensor for model.midlayer.self_attn.o_proj.weight")
    assert "re-export it from training" in left[0]["fix"] and "convert" not in left[0]["fix"]


@pytest.mark.slow
def test_provenance_fix_aux_layers_is_a_command_that_removes_the_finding(demo_dir, tmp_path, capsys):
    result = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=demo_dir / "mismatched-ids",
                              engine="sglang==0.5.11", samples=64)
    [mismatch] = [f for f in result.findings if f.code == "data/aux-layers-mismatch"]
    words = mismatch.fix.split()
    assert words[:2] == ["eagle3lens", "convert"] and words[-1] == "OUT"
    assert cli.main([*words[1:-1], str(tmp_path / "fixed")]) == 0
    capsys.readouterr()
    again = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=tmp_path / "fixed",
                             engine="sglang==0.5.11", samples=64)
    assert "data/aux-layers-mismatch" not in {f.code for f in again.findings}


# -- 5. severity from the sweep ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_late_dump_is_critical_without_an_engine_when_every_engine_feeds_other_layers(demo_dir):
    result = trace_provenance(demo_dir / "hidden-states-sglang", demo_dir / "target", draft=demo_dir / "eagle",
                              samples=64)
    [mismatch] = [f for f in result.findings if f.code == "data/aux-layers-mismatch"]
    assert mismatch.severity.value == "critical"
    assert mismatch.evidence["engines_feeding_data_layers"] == []
    assert mismatch.fix.endswith("--aux-layers 3,6,8 OUT")


# -- 6. configs as transformers reads them -------------------------------------------------------------------------
def test_a_gpt2_style_target_config_is_read(tmp_path, demo_dir, capsys):
    target = tmp_path / "gpt2"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                                                    "n_embd": 64, "n_layer": 10, "n_head": 4, "vocab_size": 2048}))
    shape = read_target_shape(target)
    assert (shape.hidden_size, shape.num_hidden_layers, shape.model_type) == (64, 10, "gpt2")
    code = cli.main(["wiring", "--target", str(target), "--draft", str(demo_dir / "eagle"), "--launch",
                     SGLANG + " --speculative-algorithm EAGLE3"])
    assert code in (0, 1), capsys.readouterr().err


def test_the_served_derivation_imports_no_torch(demo_dir, tmp_path):
    import subprocess

    program = ("import sys\nfrom eagle3lens.served import serve_draft\n"
               f"s = serve_draft({str(demo_dir / 'mismatched-ids')!r}, engine='sglang==0.5.11', "
               f"target={str(demo_dir / 'target')!r})\n"
               "assert s.captured == (3, 6, 8), s.captured\nassert 'torch' not in sys.modules, 'torch imported'\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- 7. what the release really does at start ----------------------------------------------------------------------
def test_the_mla_draft_under_a_release_without_its_class_stops_the_server(demo_dir):
    for version in ("0.5.9", "0.5.10.post1", "0.5.11"):
        served = serve_draft(demo_dir / "kimi-mla", engine=f"sglang=={version}", target=demo_dir / "kimi-target")
        assert served.stops is not None and served.stops.stage == "class-absent", version
        assert "Cannot find model module" in served.stops.error
        assert served.stops.remedy.startswith("serve with sglang>=0.5.12")
        prediction = predict_wiring(demo_dir / "kimi-mla", target=demo_dir / "kimi-target",
                                    engine=f"sglang=={version}", launch=parse_launch(SGLANG + " --speculative-algorithm EAGLE3"))
        assert prediction.outcome == "fails-at-start" and "Cannot find model module" in prediction.error
    assert serve_draft(demo_dir / "kimi-mla", engine="sglang==0.5.12", target=demo_dir / "kimi-target").runs


def _target(root: Path, arch: str, model_type: str) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": model_type,
                                                  "hidden_size": 64, "num_hidden_layers": 10, "vocab_size": 2048}))
    return root


@pytest.mark.parametrize(("release", "arch", "model_type", "words"), [
    ("0.16.0", "MistralForCausalLM", "mistral", "Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss', "
                                                "'hunyuan_vl', 'hunyuan_v1_dense', 'afmoe'] models"),
    ("0.10.1", "Phi3ForCausalLM", "phi3", "Eagle3 is only supported for ['llama', 'qwen'] models"),
    ("0.8.5", "Qwen3ForCausalLM", "qwen3", "ValueError: Eagle3 is only supported for Llama models"),
    ("0.16.0", "DeepseekV3ForCausalLM", "deepseek_v3", "model_type='deepseek_v3'"),
])
def test_vllm_refuses_eagle3_for_targets_outside_its_list(demo_dir, tmp_path, release, arch, model_type, words):
    target = _target(tmp_path / "t", arch, model_type)
    launch = parse_launch("vllm serve /m/t --speculative-config '{\"method\": \"eagle3\", \"model\": \"/d/d\"}'")
    prediction = predict_wiring(demo_dir / "eagle", target=target, engine=f"vllm=={release}", launch=launch)
    assert prediction.outcome == "fails-at-start"
    assert words in prediction.error
    [stop] = [f for f in prediction.findings if f.code == "launch/server-fails"]
    assert stop.evidence["stage"] == "config-gate"


def test_vllm_0_18_admits_deepseek_and_llama_is_admitted_everywhere(demo_dir, tmp_path):
    deepseek = _target(tmp_path / "ds", "DeepseekV3ForCausalLM", "deepseek_v3")
    llama = _target(tmp_path / "llama", "LlamaForCausalLM", "llama")
    assert serve_draft(demo_dir / "eagle", engine="vllm==0.18.0", target=deepseek).stops is None
    for release in ("0.8.5", "0.10.1", "0.16.0", "0.18.0", "0.33.0"):
        assert serve_draft(demo_dir / "eagle", engine=f"vllm=={release}", target=llama).stops is None, release

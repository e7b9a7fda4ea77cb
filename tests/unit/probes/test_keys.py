"""simulate_load on tiny checkpoints in the layouts engines disagree about, and on the demo."""

from __future__ import annotations

import json
import re

import pytest
import torch
from _builders import DECODER, draft_tensors, sglang_config, speculators_config, write
from _builders import severities as codes

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.plots import figures, html_view, rich_view
from eagle3lens.probes.keys import simulate_load

SPEC_DECODER = {f"layers.0.{k}" for k in DECODER}


@pytest.fixture(scope="module")
def speculators_ckpt(tmp_path_factory):
    return Checkpoint.open(write(tmp_path_factory.mktemp("spec"), draft_tensors("layers.0."), speculators_config()))


def test_speculators_under_sglang_0_5_11_drops_exactly_the_decoder(speculators_ckpt):
    result = simulate_load(speculators_ckpt, "sglang==0.5.11")
    assert set(result.dropped) == SPEC_DECODER
    dropped = next(f for f in result.findings if f.code == "keys/dropped")
    assert dropped.severity.value == "critical" and set(dropped.evidence["tensors"]) == SPEC_DECODER
    fates = {f.key: f.fate for f in result.fates}
    assert fates["fc.weight"] == fates["norm.weight"] == fates["lm_head.weight"] == "loaded"
    assert fates["d2t"] == "converted" and fates["t2d"] == "skipped"
    assert len(result.left_at_init) == 7 and all("midlayer" in p for p in result.left_at_init)
    assert "eagle3lens convert" in dropped.fix and "sglang==0.5.11" in dropped.fix


@pytest.mark.parametrize("engine", ["sglang==0.5.12", "sglang==0.5.23", "vllm==0.33.0", "speculators"])
def test_speculators_layout_loads_fully_elsewhere(speculators_ckpt, engine):
    result = simulate_load(speculators_ckpt, engine)
    assert result.dropped == () and result.left_at_init == ()
    assert not {"keys/dropped", "keys/raises", "keys/left-at-init", "keys/shape-mismatch"} & set(codes(result))


def test_stacked_shards_are_named(speculators_ckpt):
    result = simulate_load(speculators_ckpt, "vllm==0.33.0")
    q = next(f for f in result.fates if f.key == "layers.0.self_attn.q_proj.weight")
    assert (q.fate, q.param, q.shard) == ("loaded-shard", "model.layers.0.self_attn.qkv_proj.weight", "q")
    d2t = next(f for f in result.fates if f.key == "d2t")
    assert d2t.param == "draft_id_to_target_id"
    assert result.mapping["fc.weight"] == "model.fc.weight"


def test_model_prefixed_layout_raises_under_vllm(tmp_path):
    tensors = {("model." + k if k.startswith("layers.") else k): v for k, v in draft_tensors("layers.0.").items()}
    ckpt = Checkpoint.open(write(tmp_path, tensors, sglang_config()))
    result = simulate_load(ckpt, "vllm==0.33.0")
    raises = next(f for f in result.findings if f.code == "keys/raises")
    assert raises.severity.value == "critical"
    assert "There is no module or parameter named 'model' in LlamaModel" in raises.evidence["message"]
    decoder = sorted(f"model.layers.0.{k}" for k in DECODER)
    # the load stops at the first decoder key in the loader's (sorted) order; the keys after it are never read
    assert raises.evidence["tensors"] == decoder[:1]
    fates = {f.key: f.fate for f in result.fates}
    assert all(fates[k] == "not-reached" for k in decoder[1:]) and fates["norm.weight"] == "not-reached"
    # SGLang >= 0.5.12 loads the same keys, 0.5.11 drops them
    assert simulate_load(ckpt, "sglang==0.5.12").dropped == ()
    assert len(simulate_load(ckpt, "sglang==0.5.11").dropped) == 10


def test_hand_renamed_keys_with_speculators_config(tmp_path):
    """The incident's quick fix: keys renamed to midlayer.*, config left as speculators wrote it."""
    tensors = {k.replace("layers.0.", "midlayer."): v for k, v in draft_tensors("layers.0.").items()}
    ckpt = Checkpoint.open(write(tmp_path, tensors, speculators_config(ids=(3, 6, 8))))
    result = simulate_load(ckpt, "sglang==0.5.11", num_target_layers=10)
    assert result.dropped == () and result.left_at_init == ()
    found = codes(result)
    assert found["config/unrecognized"] == "critical"
    assert found["config/aux-ids-ignored"] == "critical"  # default 2,5,7 differs from the trained 3,6,8


def test_unknown_bias_silent_in_vllm_and_flag_ignored(tmp_path):
    extra = {"fc.bias": torch.zeros(16, dtype=torch.bfloat16), "input_norm.weight": torch.ones(48, dtype=torch.bfloat16)}
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("midlayer.", extra=extra), sglang_config()))
    vllm = simulate_load(ckpt, "vllm==0.33.0")
    fates = {f.key: f for f in vllm.fates}
    assert fates["fc.bias"].fate == "dropped" and "bias" in fates["fc.bias"].reason
    assert fates["input_norm.weight"].fate == "dropped" and "norm_before_fc" in fates["input_norm.weight"].reason
    sglang = simulate_load(ckpt, "sglang==0.5.11")
    flag = next(f for f in sglang.findings if f.code == "config/flag-ignored")
    assert flag.evidence["flag"] == "norm_before_fc" and flag.severity.value == "critical"


def test_norm_before_residual_ignored_by_sglang(tmp_path):
    cfg = {**sglang_config(), "norm_before_residual": True}
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("midlayer."), cfg))
    assert any(f.code == "config/flag-ignored" and f.evidence["flag"] == "norm_before_residual"
               for f in simulate_load(ckpt, "sglang==0.5.23").findings)
    assert not any(f.code == "config/flag-ignored" for f in simulate_load(ckpt, "vllm==0.33.0").findings)


def test_shape_mismatch_fc_width(tmp_path):
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("midlayer.", n_aux=4), sglang_config()))
    result = simulate_load(ckpt, "sglang==0.5.11")
    mismatch = next(f for f in result.findings if f.code == "keys/shape-mismatch")
    assert mismatch.evidence["tensors"]["fc.weight"] == {"checkpoint": [16, 64], "engine": [16, 48],
                                                         "param": "model.fc.weight", "shard": None}


def test_missing_d2t_and_shifted_ids(tmp_path):
    tensors = {k: v for k, v in draft_tensors("midlayer.").items() if k not in ("d2t", "t2d")}
    ckpt = Checkpoint.open(write(tmp_path, tensors, sglang_config(ids=(1, 4, 6))))
    sglang = simulate_load(ckpt, "sglang==0.5.11", num_target_layers=10)
    # the vocab probe owns vocab/d2t-missing; the load simulation reports what the engine does instead
    assert "raw" in sglang.missing_d2t and "vocab/d2t-missing" not in codes(sglang)
    assert sglang.to_dict()["missing_d2t"] == sglang.missing_d2t
    assert "config/aux-ids-shifted" not in codes(sglang)
    # 0.1.0 asserted the nested ids are read raw by vllm==0.33.0; the 0.33.0 wheel shows that holds only for the
    # V1 model runner (gpu_model_runner.py); the default V2 runner never reads them (eagle3_utils.py:113-150)
    v1 = simulate_load(ckpt, "vllm==0.33.0:v1", num_target_layers=10)
    assert codes(v1)["config/aux-ids-shifted"] == "critical"  # nested SGLang ids read raw
    v2 = simulate_load(ckpt, "vllm==0.33.0", num_target_layers=10)
    assert "config/aux-ids-shifted" not in codes(v2) and "config/aux-ids-ignored" in codes(v2)


def test_sglang_refuses_two_layers(tmp_path):
    cfg = sglang_config()
    cfg["num_hidden_layers"] = 2
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("midlayer."), cfg))
    result = simulate_load(ckpt, "sglang==0.5.11")
    assert any(f.code == "keys/raises" and "only supports 1 layer" in f.detail for f in result.findings)
    # the constructor raises before it builds a module (llama_eagle3.py, 0.4.4.post2-0.5.11): no key is read
    assert result.refused_at == "construct" and {f.fate for f in result.fates} == {"not-reached"}
    # no class, no parameter: nothing is "left at init" (the executed side sees no parameter either)
    assert result.params == () and result.left_at_init == () and "keys/left-at-init" not in codes(result)
    assert result.to_dict()["parameters"] == []
    assert "--to" not in (result.findings[0].fix or "") and "no conversion" in (result.findings[0].fix or "")
    later = simulate_load(ckpt, "sglang==0.5.12")  # builds config.num_hidden_layers layers
    assert later.refused is None and not [f for f in later.fates if f.fate in ("not-reached", "raises")]


def test_result_renders_and_serialises(speculators_ckpt):
    from rich.console import Console

    result = simulate_load(speculators_ckpt, "sglang==0.5.11")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["counts"]["dropped"] == 10
    console = Console(record=True, width=160)
    console.print(rich_view(result))
    text = console.export_text()
    assert text.index("dropped") < text.index("loaded")
    assert figures(result) and "<table>" in html_view(result)
    state = result.loaded_state(speculators_ckpt)
    assert "fc.weight" in state and "layers.0.mlp.down_proj.weight" not in state


def test_cli_keys(speculators_ckpt, capsys):
    assert main(["keys", str(speculators_ckpt.path), "--engine", "sglang==0.5.11", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "sglang==0.5.11" and data["results"]["keys"]["counts"]["dropped"] == 10
    assert main(["keys", str(speculators_ckpt.path), "--engine", "vllm==0.33.0"]) == 0
    # 0.1.0 refused sglang==9.9; a release newer than the newest read is now simulated (engine/unverified-version)
    assert main(["keys", str(speculators_ckpt.path), "--engine", "sglang==0.4.0"]) == 2
    assert main(["engines", "--json"]) == 0
    assert "sglang==0.5.11" in capsys.readouterr().out


def test_demo(demo_dir):
    spec = Checkpoint.open(demo_dir / "speculators")
    result = simulate_load(spec, "sglang==0.5.11", num_target_layers=10)
    assert {k.split(".", 2)[-1] for k in result.dropped} == set(DECODER)
    for engine in ("sglang==0.5.12", "sglang==0.5.23", "vllm==0.33.0"):
        assert simulate_load(spec, engine).dropped == ()
    eagle = Checkpoint.open(demo_dir / "eagle")
    assert simulate_load(eagle, "sglang==0.5.11").dropped == ()
    assert "identity" in simulate_load(Checkpoint.open(demo_dir / "broken-d2t-missing"), "vllm").missing_d2t
    assert simulate_load(spec, "vllm").missing_d2t is None


def test_incomplete_config_error_names_the_checkpoint(tmp_path, capsys):
    from eagle3lens.errors import CheckpointError

    cfg = {k: v for k, v in sglang_config().items() if k != "num_attention_heads"}
    src = write(tmp_path / "nohead", draft_tensors("midlayer."), cfg)
    with pytest.raises(CheckpointError, match=r"nohead.*does not give num_attention_heads"):
        simulate_load(Checkpoint.open(src), "sglang==0.5.11")
    assert main(["keys", str(src), "--engine", "vllm==0.33.0"]) == 2
    assert str(src) in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["-3", "0"])
def test_target_layers_must_be_positive(tmp_path, capsys, bad):
    src = write(tmp_path / "sg", draft_tensors("midlayer."), sglang_config())
    assert main(["keys", str(src), "--engine", "sglang==0.5.11", "--target-layers", bad]) == 2
    assert "--target-layers" in capsys.readouterr().err
    assert main(["keys", str(src), "--engine", "sglang==0.5.11", "--target-layers", "10"]) == 0


def test_vllm_needs_a_verifier_and_token_count_in_a_speculators_config(tmp_path):
    cfg = speculators_config()
    cfg["speculators_config"]["verifier"]["name_or_path"] = None
    src = write(tmp_path / "nover", draft_tensors("layers.0."), cfg)
    result = simulate_load(Checkpoint.open(src), "vllm==0.33.0", num_target_layers=10)
    (finding,) = [f for f in result.findings if f.code == "config/unrecognized"]
    assert not result.recognised and finding.evidence["missing"] == ["speculators_config.verifier.name_or_path"]
    assert result.dropped == ()  # the weights themselves would load
    # the training loader does not need a verifier name
    assert simulate_load(Checkpoint.open(src), "speculators").recognised


def test_fix_commands_quote_hostile_checkpoint_paths(tmp_path):
    """A path with spaces and shell syntax comes back from shlex.split exactly, never as shell code."""
    import shlex

    from eagle3lens.probes.aux_layers import resolve_aux_layers

    hostile = tmp_path / "my draft;$(touch x)"
    ckpt = Checkpoint.open(write(hostile, draft_tensors("layers.0."), speculators_config(ids=(3, 6, 8))))
    result = simulate_load(ckpt, "sglang==0.5.11")
    dropped = next(f for f in result.findings if f.code == "keys/dropped")
    argv = shlex.split(dropped.fix)
    assert argv == ["eagle3lens", "convert", str(hostile), "--to", "sglang==0.5.11", "OUT"]
    shifted = resolve_aux_layers(ckpt.spec, 10, "sglang==0.5.11", checkpoint=ckpt.path)
    fixes = [f.fix for f in shifted.findings if f.fix]
    assert fixes and all(shlex.split(f)[2] == str(hostile) for f in fixes)


def test_engine_behaviour_comes_from_profile_data(speculators_ckpt):
    """Flag defaults and target sharing are profile fields: a profile that sets them changes the findings."""
    from dataclasses import replace

    from eagle3lens.engines import resolve

    base = resolve("sglang==0.5.23")
    assert not any(f.code == "config/flag-ignored" for f in simulate_load(speculators_ckpt, base).findings)
    reads_on = replace(base, flag_defaults={"norm_output": True})
    finding = next(f for f in simulate_load(speculators_ckpt, reads_on).findings if f.code == "config/flag-ignored")
    assert finding.evidence == {"flag": "norm_output", "config_value": None, "engine_default": True}
    spec = speculators_ckpt.spec  # draft_vocab_size given: SGLang does not install the target head
    assert base.shared("lm_head", spec) is None and replace(base, shared_unless={}).shared("lm_head", spec)
    assert resolve("vllm").shared("lm_head", spec)


def test_keys_refuses_the_target_given_as_the_draft(demo_dir, capsys):
    from eagle3lens.cli import main

    assert main(["keys", str(demo_dir / "target"), "--engine", "sglang==0.5.11"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an EAGLE-3 draft" in err and len(err.splitlines()) == 1


def test_the_terminal_table_is_bounded_and_json_lists_every_tensor(tmp_path, capsys):
    """A draft with many extra zero-size tensors: the terminal shows MAX_ROWS fates (the dropped first) and counts
    the rest by fate; --json has every one."""
    from eagle3lens.plots.style import MAX_ROWS

    extra = {f"extra.{i}.weight": torch.zeros(0) for i in range(MAX_ROWS + 50)}
    ckpt = write(tmp_path / "d", draft_tensors("midlayer.", extra=extra), sglang_config())
    main(["keys", str(ckpt), "--engine", "sglang==0.5.11"])
    out = capsys.readouterr().out
    rows = re.findall(r"^│ (raises|dropped|loaded-shard|loaded|converted|skipped|not-reached) ", out, re.M)
    assert rows == ["dropped"] * MAX_ROWS
    total = len(Checkpoint.open(ckpt).tensors)
    assert f"... and {total - MAX_ROWS} more tensors (50 dropped, " in out and "--json lists every one" in out
    main(["keys", str(ckpt), "--engine", "sglang==0.5.11", "--json"])
    assert len(json.loads(capsys.readouterr().out)["results"]["keys"]["tensors"]) == total

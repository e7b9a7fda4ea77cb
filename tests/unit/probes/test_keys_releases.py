"""simulate_load by release: each case builds its checkpoint and checks what that release does.

From the review round "engine releases" (issue 14; was tests/test_engine_releases.py), and the keys residue of issue 23
(was tests/test_keys_residue.py), each from its release's source: the vLLM MLA constructor's rope factor, a t2d
without d2t, a target head under a reduced draft vocabulary, which parameters the proposer takes from the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _builders import (
    DECODER,
    MLA_DECODER,
    H,
    N,
    V,
    draft_tensors,
    llama_fields,
    mla_config,
    mla_draft_tensors,
    sglang_config,
    speculators_config,
    write,
)
from _builders import severities as codes

from eagle3lens import cli
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.probes.keys import simulate_load
from eagle3lens.served import serve_draft


def fates(result):
    return {f.key: f.fate for f in result.fates}


@pytest.fixture(scope="module")
def speculators(tmp_path_factory):
    return Checkpoint.open(write(tmp_path_factory.mktemp("spec"), draft_tensors("layers.0."), speculators_config()))


@pytest.mark.parametrize("spec, first", [("sglang==0.4.0", "0.4.4.post2"), ("sglang==0.4.4.post1", "0.4.4.post2"),
                                         ("vllm==0.8.4", "0.8.5"), ("vllm==0.8.5rc1", "0.8.5")])
def test_release_before_eagle3_is_refused_in_one_line(speculators, capsys, spec, first):
    assert main(["keys", str(speculators.path), "--engine", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert f"no EAGLE-3 before {first}" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("version", ["0." + "9" * 5000, "1" * 4400, "0.5.11" + ".post" + "7" * 80])
def test_huge_version_is_one_line_not_a_traceback(speculators, capsys, version):
    assert main(["keys", str(speculators.path), "--engine", f"sglang=={version}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and len(err) < 400


@pytest.mark.parametrize("spec, nearest", [("sglang==0.5.1.1", "0.5.1.post3 and 0.5.2"),
                                           ("sglang==0.5.11.post7", "0.5.11 and 0.5.12"),
                                           ("vllm==0.9.5", "0.9.2 and 0.10.0")])
def test_a_release_the_index_never_had_is_refused_naming_the_nearest(speculators, capsys, spec, nearest):
    """These were accepted without a word (while 0.5.99, newer than the newest read, is flagged unverified)."""
    assert main(["keys", str(speculators.path), "--engine", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"eagle3lens: error: {spec}: no such release; nearest: {nearest}"


def test_newer_release_is_simulated_with_the_newest_profile_and_flagged(speculators):
    result = simulate_load(speculators, "vllm==0.34.0")
    unverified = next(f for f in result.findings if f.code == "engine/unverified-version")
    assert unverified.evidence["newest_verified"] == "0.33.0" and "0.33.0" in unverified.title
    assert "engine/unverified-version" not in codes(simulate_load(speculators, "vllm==0.33.0"))


def test_bare_name_says_which_release_it_assumed(speculators, capsys):
    result = simulate_load(speculators, "vllm")
    assert result.release == "0.33.0" and any("assumed vllm==0.33.0" in n for n in result.notes)
    assert main(["keys", str(speculators.path), "--engine", "vllm", "--json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "vllm==0.33.0" and data["results"]["keys"]["release"] == "0.33.0"


# -- SGLang key rules by release ------------------------------------------------------------------
def test_speculators_layout_under_sglang_0_4_5_raises_keyerror(speculators):
    result = simulate_load(speculators, "sglang==0.4.5")
    raises = [f for f in result.findings if f.code == "keys/raises" and "KeyError" in f.detail]
    assert raises and "KeyError: 'model.layers.0." in raises[0].evidence["message"]
    # non-stacked unknown keys are logged by LlamaForCausalLM.load_weights, not silent
    logged = next(f for f in result.fates if f.key == "layers.0.mlp.down_proj.weight")
    assert logged.fate == "dropped" and "not found in params_dict" in logged.log
    # the loader walks the keys in sorted order and stops at the first stacked one (the record of sglang 0.4.5's own
    # load_weights, tests/e2e/test_execute_releases.py): only the keys before it were processed
    fates = {f.key: f.fate for f in result.fates}
    assert fates["layers.0.mlp.gate_proj.weight"] == "raises"
    assert [k for k in fates if fates[k] not in ("not-reached", "raises")] == [
        "d2t", "embed_tokens.weight", "fc.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
        "layers.0.mlp.down_proj.weight"]
    assert fates["lm_head.weight"] == fates["norm.weight"] == fates["layers.0.self_attn.o_proj.weight"] == "not-reached"
    assert "keys/left-at-init" not in codes(result)  # a load that stops serves nothing


@pytest.mark.parametrize("engine", ["sglang==0.4.9", "sglang==0.5.11"])
def test_speculators_layout_dropped_between_0_4_9_and_0_5_11(speculators, engine):
    result = simulate_load(speculators, engine)
    assert set(result.dropped) == {f"layers.0.{k}" for k in DECODER}
    assert codes(result)["keys/dropped"] == "critical"


@pytest.mark.parametrize("engine", ["sglang==0.5.12", "sglang==0.5.16", "sglang==0.5.23"])
def test_speculators_layout_loaded_from_0_5_12(speculators, engine):
    assert simulate_load(speculators, engine).dropped == ()


def test_sglang_0_4_5_adds_a_random_fc_bias_and_needs_d2t(tmp_path):
    tensors = {k: v for k, v in draft_tensors("midlayer.").items() if k not in ("d2t", "t2d")}
    result = simulate_load(Checkpoint.open(write(tmp_path, tensors, sglang_config())), "sglang==0.4.5")
    bias = next(p for p in result.params if p.param.name == "model.fc.bias")
    assert bias.status == "left-at-init" and bias.param.init.startswith("uniform")
    assert any(f.code == "keys/raises" and "hot_token_id" in f.detail for f in result.findings)


@pytest.mark.parametrize("where", ["top-level", "eagle_config"])
def test_norm_before_fc_by_release(tmp_path, where):
    cfg = sglang_config()
    if where == "top-level":
        cfg["norm_before_fc"] = True
    else:
        cfg["eagle_config"]["norm_before_fc"] = True
    tensors = draft_tensors("layers.0.", extra={"input_norm.weight": torch.ones(3 * H, dtype=torch.bfloat16)})
    ckpt = Checkpoint.open(write(tmp_path, tensors, cfg))
    for engine in ("sglang==0.5.19", "sglang==0.5.23", "vllm==0.22.0", "vllm==0.33.0"):
        result = simulate_load(ckpt, engine)
        assert fates(result)["input_norm.weight"] == "loaded", engine
        assert "config/flag-ignored" not in codes(result), engine
    old = simulate_load(ckpt, "sglang==0.5.15")
    assert codes(old)["config/flag-ignored"] == "critical" and fates(old)["input_norm.weight"] == "dropped"
    for engine in ("vllm==0.18.0", "vllm==0.21.0"):  # only the top-level flag counts
        result = simulate_load(ckpt, engine)
        if where == "top-level":
            assert fates(result)["input_norm.weight"] == "loaded"
        else:
            assert fates(result)["input_norm.weight"] == "dropped"
            flag = next(f for f in result.findings if f.code == "config/flag-ignored")
            assert flag.evidence["set_in"] == ["eagle_config"] and flag.evidence["engine_reads"] == ["top-level"]


def test_sglang_cuda_graph_and_eager_paths_differ(tmp_path):
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("midlayer."), sglang_config(ids=(1, 4, 6))))
    graph = simulate_load(ckpt, "sglang==0.5.5", num_target_layers=16)
    assert graph.path == "cuda-graph" and codes(graph)["config/aux-ids-ignored"] == "critical"
    assert all(f.evidence.get("runtime_path") == "cuda-graph (default)" for f in graph.findings)
    assert any("runtime paths differ" in n and "eager" in n for n in graph.notes)
    eager = simulate_load(ckpt, "sglang==0.5.5:eager", num_target_layers=16)
    assert "config/aux-ids-ignored" not in codes(eager) and "config/aux-ids-shifted" not in codes(eager)
    assert simulate_load(ckpt, "sglang==0.5.11", num_target_layers=16).path is None


# -- vLLM by release ------------------------------------------------------------------------------------
def test_sglang_ids_under_vllm_0_33_default_v2_are_ignored_but_v1_reads_them_shifted(tmp_path):
    tensors = draft_tensors("layers.0.", n_aux=4)
    ckpt = Checkpoint.open(write(tmp_path, tensors, sglang_config(ids=(1, 4, 6, 9))))
    v2 = simulate_load(ckpt, "vllm==0.33.0", num_target_layers=16)
    assert v2.path == "v2" and codes(v2)["config/aux-ids-ignored"] == "critical"
    ignored = next(f for f in v2.findings if f.code == "config/aux-ids-ignored")
    assert ignored.evidence["captured_hf"] == [2, 8, 13] and ignored.evidence["runtime_path"] == "v2 (default)"
    assert "keys/shape-mismatch" not in codes(v2)  # fc width follows the id count (4 x H) ...
    assert next(p for p in v2.params if p.param.name == "model.fc.weight").param.shape == (H, 4 * H)
    assert any("runtime paths differ" in n for n in v2.notes)
    v1 = simulate_load(ckpt, "vllm==0.33.0:v1", num_target_layers=16)
    assert codes(v1)["config/aux-ids-shifted"] == "critical" and "config/aux-ids-ignored" not in codes(v1)


def test_reduced_vocab_d2t_discarded_by_vllm_0_9_0(tmp_path):
    # named as vLLM before 0.10.2 maps it (Eagle3 + LlamaForCausalLM): under another name the server stops first
    ckpt = Checkpoint.open(write(tmp_path, {k: v for k, v in draft_tensors("layers.0.").items()
                                            if k != "embed_tokens.weight"},
                                 {**sglang_config(), "architectures": ["LlamaForCausalLM"]}))
    result = simulate_load(ckpt, "vllm==0.9.0")
    assert codes(result)["keys/d2t-discarded"] == "critical"
    finding = next(f for f in result.findings if f.code == "keys/d2t-discarded")
    assert finding.evidence["draft_vocab_size"] == N and finding.evidence["vocab_size"] == V
    assert "keys/d2t-discarded" not in codes(simulate_load(ckpt, "vllm==0.9.1"))


def test_unknown_key_keyerror_until_0_24_then_valueerror(tmp_path):
    tensors = draft_tensors("layers.0.", extra={"extra_head.weight": torch.zeros(2, 2)})
    ckpt = Checkpoint.open(write(tmp_path, tensors, sglang_config()))
    old = next(f for f in simulate_load(ckpt, "vllm==0.24.0").findings if f.code == "keys/raises")
    assert old.evidence["message"] == "KeyError: 'extra_head.weight'"
    for engine in ("vllm==0.25.0", "vllm==0.33.0"):
        new = next(f for f in simulate_load(ckpt, engine).findings if f.code == "keys/raises")
        assert new.evidence["message"].startswith("ValueError: There is no module or parameter named 'extra_head'")


def test_qwen3_speculators_config_selects_the_qwen3_class(tmp_path):
    cfg = speculators_config()
    cfg["transformer_layer_config"]["model_type"] = "qwen3"
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("layers.0."), cfg))
    result = simulate_load(ckpt, "vllm==0.24.0")
    assert result.draft_class == "Eagle3Qwen3ForCausalLM"
    assert {"model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_norm.weight"} <= set(result.left_at_init)
    assert simulate_load(ckpt, "vllm==0.23.0").draft_class == "Eagle3LlamaForCausalLM"


# -- the MLA (DeepSeek / Kimi-K2.5) draft class ---------------------------------------------------------
@pytest.fixture(scope="module")
def mla(tmp_path_factory):
    tensors = mla_draft_tensors("layers.0.", extra={"layers.0.self_attn.extra_scale": torch.ones(2)})
    return Checkpoint.open(write(tmp_path_factory.mktemp("mla"), tensors, mla_config()))


def test_mla_draft_loads_under_sglang_0_5_23_with_a_logged_warning(mla):
    result = simulate_load(mla, "sglang==0.5.23")
    assert result.recognised and result.draft_class == "Eagle3DeepseekV2ForCausalLM"
    f = fates(result)
    assert all(f[f"layers.0.{k}"] in ("loaded", "loaded-shard") for k in MLA_DECODER)
    assert f["layers.0.self_attn.q_a_proj.weight"] == f["layers.0.self_attn.kv_a_proj_with_mqa.weight"] == "loaded-shard"
    assert result.left_at_init == ()
    dropped = next(x for x in result.findings if x.code == "keys/dropped")
    assert dropped.evidence["logged"] == {"layers.0.self_attn.extra_scale":
                                          "Eagle3 MLA: skipping unexpected weight layers.0.self_attn.extra_scale"}
    assert "silently" not in dropped.title


def test_mla_draft_unrecognised_before_0_5_12(mla):
    assert codes(simulate_load(mla, "sglang==0.5.11"))["config/unrecognized"] == "critical"


def test_mla_draft_under_vllm(mla):
    new = simulate_load(mla, "vllm==0.33.0")
    assert new.draft_class == "Eagle3DeepseekV2ForCausalLM" and new.recognised
    assert any(x.code == "keys/raises" and "extra_scale" in x.detail for x in new.findings)
    # extra_scale sorts before q_a_proj: the load stops there and never reaches it
    assert fates(new)["layers.0.self_attn.q_a_proj.weight"] == "not-reached"
    old = simulate_load(mla, "vllm==0.18.0")
    assert "keys/raises" not in codes(old) and fates(old)["layers.0.self_attn.extra_scale"] == "dropped"
    assert fates(old)["layers.0.self_attn.q_a_proj.weight"] == "loaded-shard"
    assert codes(simulate_load(mla, "vllm==0.17.0"))["config/unrecognized"] == "critical"


def test_vllm_speculators_adapter_forwards_fields_by_release(tmp_path):
    cfg = speculators_config(norm_before_fc=True)
    tensors = draft_tensors("layers.0.", extra={"input_norm.weight": torch.ones(3 * H, dtype=torch.bfloat16)})
    ckpt = Checkpoint.open(write(tmp_path, tensors, cfg))
    assert fates(simulate_load(ckpt, "vllm==0.19.0"))["input_norm.weight"] == "loaded"
    old = simulate_load(ckpt, "vllm==0.18.0")  # norm_before_fc honoured, but not forwarded by the adapter
    assert fates(old)["input_norm.weight"] == "dropped"
    assert "adapter does not forward" in next(f for f in old.findings if f.code == "config/flag-ignored").detail
    ids = simulate_load(ckpt, "vllm==0.11.0", num_target_layers=10)  # ids never read before 0.11.1
    assert "config/aux-ids-ignored" in codes(ids)
    assert codes(simulate_load(ckpt, "vllm==0.10.0"))["config/unrecognized"] == "critical"  # no adapter yet


def test_sglang_tied_head_ignores_the_checkpoint_lm_head(tmp_path):
    cfg = {**sglang_config(), "tie_word_embeddings": True}
    result = simulate_load(Checkpoint.open(write(tmp_path, draft_tensors("midlayer."), cfg)), "sglang==0.5.11")
    assert fates(result)["lm_head.weight"] == "dropped"
    assert "lm_head.weight" not in {p.param.name for p in result.params}


@pytest.mark.parametrize("engine, decoder", [("sglang==0.5.23", "midlayer."), ("vllm==0.33.0", "layers.0.")])
def test_convert_keeps_the_mla_class_and_loads_everything(mla, tmp_path, engine, decoder):
    from eagle3lens.convert import convert

    clean = {k: mla.read(k) for k in mla.tensors if "extra_scale" not in k}
    src = Checkpoint.open(write(tmp_path / "src", clean, mla_config()))
    convert(src.path, engine, tmp_path / "out")
    out = Checkpoint.open(tmp_path / "out")
    assert out.config["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert all(k.startswith(decoder) for k in out.tensors if "_proj" in k or "layernorm" in k)
    result = simulate_load(out, engine)
    assert result.draft_class == "Eagle3DeepseekV2ForCausalLM" and result.dropped == () and result.left_at_init == ()


def test_use_aux_hidden_state_false_drops_fc_from_vllm_0_12(tmp_path):
    cfg = sglang_config()
    cfg["eagle_config"]["use_aux_hidden_state"] = False
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("layers.0."), cfg))
    assert fates(simulate_load(ckpt, "vllm==0.12.0"))["fc.weight"] == "dropped"
    assert fates(simulate_load(ckpt, "vllm==0.11.2"))["fc.weight"] == "loaded"  # not read before 0.12.0
    assert fates(simulate_load(ckpt, "sglang==0.5.23"))["fc.weight"] == "loaded"  # SGLang always builds fc


def test_num_aux_hidden_states_and_use_aux_norm(tmp_path):
    cfg = {**sglang_config(), "num_aux_hidden_states": 4, "use_aux_norm": True}
    norms = {f"fc_norm.{j}.weight": torch.ones(H, dtype=torch.bfloat16) for j in range(4)}
    ckpt = Checkpoint.open(write(tmp_path, draft_tensors("layers.0.", n_aux=4, extra=norms), cfg))
    new = simulate_load(ckpt, "sglang==0.5.12")  # num_aux_hidden_states over len(eagle_config ids); use_aux_norm
    assert "keys/shape-mismatch" not in codes(new) and all(fates(new)[k] == "loaded" for k in norms)
    old = simulate_load(ckpt, "sglang==0.5.11")  # fixed at 3 aux states, no fc_norm
    assert codes(old)["keys/shape-mismatch"] == "critical" and codes(old)["config/flag-ignored"] == "critical"
    vllm = simulate_load(ckpt, "vllm==0.33.0")  # counts num_aux_hidden_states, but reads fc_norm only
    assert "keys/shape-mismatch" not in codes(vllm)
    assert next(f for f in vllm.findings if f.code == "config/flag-ignored").evidence["flag"] == "fc_norm"


@pytest.mark.parametrize("top, layer, loaded", [
    (None, True, {"0.18.0": True, "0.20.0": False, "0.25.0": False}),   # only the layer says it
    (True, True, {"0.18.0": True, "0.20.0": True, "0.25.0": True}),     # both
    (True, None, {"0.18.0": False, "0.20.0": True, "0.25.0": True}),    # only the top level
])
def test_vllm_speculators_adapter_builds_on_the_layer_config(tmp_path, top, layer, loaded):
    """vLLM's speculators adapter builds the draft config from transformer_layer_config and writes the forwarded
    fields over it (speculators/base.py, algos.py): 0.18.0 does not forward norm_before_fc, so the layer's own flag
    creates input_norm and loads the tensor; from 0.19.0 the top-level value (default False) replaces it."""
    cfg = speculators_config(**({} if top is None else {"norm_before_fc": top}))
    if layer is not None:
        cfg["transformer_layer_config"]["norm_before_fc"] = layer
    tensors = draft_tensors("layers.0.", extra={"input_norm.weight": torch.ones(3 * H, dtype=torch.bfloat16)})
    ckpt = Checkpoint.open(write(tmp_path, tensors, cfg))
    for release, expected in loaded.items():
        result = simulate_load(ckpt, f"vllm=={release}")
        assert (fates(result)["input_norm.weight"] == "loaded") is expected, release
        assert ("config/flag-ignored" in codes(result)) is not expected, release


# -- keys residue (issue 23), each from its release's source ---------------------------------------
LLAMA = {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": N}


def fixed(ckpt: Path, fix: str, out: Path) -> Path:
    words = fix.split()
    assert words[0] == "eagle3lens"
    assert cli.main([str(out) if w == "OUT" else w for w in words[1:]]) in (0, 1)
    return out


@pytest.mark.parametrize("engine", ["vllm==0.20.0", "vllm==0.24.0", "vllm==0.27.0"])
def test_mla_rope_without_factor_stops_the_vllm_constructor(tmp_path, engine):
    """deepseek_eagle3.py 0.18-0.27: a truthy rope_scaling becomes deepseek_yarn and get_rope reads ['factor'];
    transformers 5 (0.20+) makes rope_scaling an alias of rope_parameters, never empty."""
    ckpt = write(tmp_path / "d", mla_draft_tensors(), mla_config())
    result = simulate_load(ckpt, engine)
    assert result.refused_at == "construct" and "KeyError: 'factor'" in (result.refused or "")
    assert {f.fate for f in result.fates} == {"not-reached"}
    assert set(codes(result)) == {"keys/raises"}
    served = serve_draft(ckpt, engine=engine)
    assert served.stops is not None and served.stops.stage == "construct" and served.outcome == "fails-at-start"
    fix = result.findings[0].fix
    out = fixed(ckpt, fix, tmp_path / "out")
    again = simulate_load(out, engine)
    assert again.refused is None and "keys/raises" not in codes(again)


def test_mla_rope_boundaries(tmp_path):
    """0.18.x (and 0.19.0, taken as 0.18) require transformers < 5: config.json's rope_scaling counts (absent:
    default rope, builds); 0.19.1 accepts transformers 5, whose rope_scaling alias is truthy for an unscaled draft
    (deepseek_yarn without a factor); 0.28.0 no longer copies rope_scaling."""
    plain = write(tmp_path / "plain", mla_draft_tensors(), mla_config())
    assert simulate_load(plain, "vllm==0.19.0").refused is None
    assert "KeyError: 'factor'" in (simulate_load(plain, "vllm==0.19.1").refused or "")
    assert simulate_load(plain, "vllm==0.28.0").refused is None
    scaled = write(tmp_path / "scaled", mla_draft_tensors(), {**mla_config(), "rope_scaling": {"rope_type": "default"}})
    assert "KeyError: 'factor'" in (simulate_load(scaled, "vllm==0.19.0").refused or "")
    yarn = write(tmp_path / "yarn", mla_draft_tensors(), {**mla_config(), "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}})
    assert simulate_load(yarn, "vllm==0.19.0").refused is None and simulate_load(yarn, "vllm==0.24.0").refused is None


@pytest.mark.parametrize("engine", ["vllm==0.8.5", "vllm==0.11.1", "vllm==0.14.0", "vllm==0.33.0"])
def test_t2d_without_d2t_serves_the_zero_mapping(tmp_path, engine):
    tensors = draft_tensors()
    del tensors["d2t"]
    ckpt = write(tmp_path / "d", tensors, LLAMA)
    result = simulate_load(ckpt, engine)
    finding = next(f for f in result.findings if f.code == "keys/d2t-unwritten")
    assert finding.severity.value == "critical" and "target id i" in finding.detail
    out = fixed(ckpt, finding.fix, tmp_path / "out")
    assert "keys/d2t-unwritten" not in codes(simulate_load(out, engine))


def test_t2d_without_d2t_is_refused_by_the_vllm_0_9_0_strict_check(tmp_path):
    """0.9.0 returns the loaded names from load_weights: DefaultModelLoader raises on draft_id_to_target_id."""
    tensors = draft_tensors()
    del tensors["d2t"], tensors["embed_tokens.weight"]  # 0.9.0 has no embed_tokens at pipeline parallel size 1
    ckpt = write(tmp_path / "d", tensors, {**LLAMA, "architectures": ["LlamaForCausalLM"]})
    result = simulate_load(ckpt, "vllm==0.9.0")
    assert result.refused_at == "strict-check" and "draft_id_to_target_id" in (result.refused or "")
    assert "keys/d2t-unwritten" not in codes(result)
    raises = next(f for f in result.findings if f.code == "keys/raises")
    out = fixed(ckpt, raises.fix, tmp_path / "out")
    assert simulate_load(out, "vllm==0.9.0").refused is None
    assert serve_draft(ckpt, engine="vllm==0.9.0").stops.stage == "load"


def test_no_lm_head_under_a_reduced_vocabulary_by_release(tmp_path):
    """0.11.0 shares lm_head only when its shape is the target's (N < V: never, the head stays torch.empty);
    0.11.1+ share it whenever the checkpoint has none (has_own_lm_head), with no shape check."""
    tensors = draft_tensors()
    del tensors["lm_head.weight"]
    ckpt = write(tmp_path / "d", tensors, LLAMA)
    old = simulate_load(ckpt, "vllm==0.11.0")
    assert "keys/left-at-init" in codes(old) and "keys/head-vocab-mismatch" not in codes(old)
    for engine in ("vllm==0.11.1", "vllm==0.14.0", "vllm==0.33.0"):
        new = simulate_load(ckpt, engine)
        head = next(f for f in new.findings if f.code == "keys/head-vocab-mismatch")
        assert head.severity.value == "critical" and f"{V}-row" in head.title
        assert not head.fix.startswith("eagle3lens")
        served = {p.name: p for p in serve_draft(ckpt, engine=engine).params}
        assert served["lm_head.weight"].source == "target"
    assert "keys/head-vocab-mismatch" not in codes(simulate_load(write(tmp_path / "full", draft_tensors(), LLAMA),
                                                                 "vllm==0.14.0"))


def test_which_parameters_come_from_the_target_per_release(tmp_path):
    """vLLM 0.9.1-0.11.0 replace the draft's embed (and, 0.11.0, lm_head) by the target's whenever the shapes
    match, trained tensors included; 0.11.1+ only when the checkpoint has none; norm and fc never."""
    full = {**LLAMA, "draft_vocab_size": V}
    tensors = draft_tensors()
    tensors["lm_head.weight"] = tensors["embed_tokens.weight"].clone()
    del tensors["d2t"], tensors["t2d"]
    ckpt = write(tmp_path / "full", tensors, full)

    def sources(engine: str) -> dict[str, str]:
        return {p.role: p.source for p in serve_draft(ckpt, engine=engine).params if p.role in ("embed", "lm_head",
                                                                                                "norm", "fc")}

    assert sources("vllm==0.10.2") == {"embed": "target", "lm_head": "checkpoint", "norm": "checkpoint",
                                       "fc": "checkpoint"}
    assert sources("vllm==0.11.0") == {"embed": "target", "lm_head": "target", "norm": "checkpoint", "fc": "checkpoint"}
    assert sources("vllm==0.11.1") == {"embed": "checkpoint", "lm_head": "checkpoint", "norm": "checkpoint",
                                       "fc": "checkpoint"}
    del tensors["embed_tokens.weight"], tensors["norm.weight"]
    bare = write(tmp_path / "bare", tensors, full)
    params = {p.param.role: p for p in simulate_load(bare, "vllm==0.11.1").params if p.param.role in ("embed", "norm")}
    assert params["embed"].source == "target" and params["norm"].source == "init"


def test_the_v1_runner_keeps_a_narrower_draft_embed_from_0_25(tmp_path):
    """llm_base_proposer.py 0.25.0+: the target's embed only when its width is the draft's (V1 runner); the V2
    runner's maybe_share_target_embed has no width check; 0.24.0 shares it regardless."""
    tensors = draft_tensors()
    del tensors["embed_tokens.weight"]
    tensors["fc.weight"] = tensors["fc.weight"].new_zeros(H, 3 * 2 * H)
    ckpt = write(tmp_path / "d", tensors, {**LLAMA, "target_hidden_size": 2 * H})

    def embed(engine: str) -> str:
        return next(p.source for p in serve_draft(ckpt, engine=engine).params if p.role == "embed")

    assert embed("vllm==0.24.0:v1") == embed("vllm==0.25.0:v2") == embed("vllm==0.33.0") == "target"
    assert embed("vllm==0.25.0:v1") == embed("vllm==0.33.0:v1") == "init"


@pytest.mark.parametrize("engine", ["sglang==0.4.5", "sglang==0.5.11", "sglang==0.5.23", "vllm==0.10.2", "vllm==0.20.0",
                                    "vllm==0.33.0"])
def test_a_scaled_rope_without_factor_stops_every_release_at_its_config(tmp_path, engine):
    """Every release reads the draft's config.json with transformers first (executed: the KeyError comes from
    AutoConfig.from_pretrained in the engines' config parsing), before it resolves the class: even an MLA draft the
    release does not ship stops there, and no conversion or release serves it until the factor is set."""
    yarn = {"rope_type": "yarn", "original_max_position_embeddings": 64}
    for name, tensors, config in (
            ("llama", draft_tensors(), {**LLAMA, "model_type": "llama", "rope_scaling": yarn}),
            ("mla", mla_draft_tensors(), {**mla_config(), "model_type": "deepseek_v3", "rope_scaling": yarn})):
        ckpt = write(tmp_path / name, tensors, config)
        result = simulate_load(ckpt, engine)
        assert result.refused_at == "config" and "Missing required keys" in (result.refused or "")
        assert set(codes(result)) == {"keys/raises"} and {f.fate for f in result.fates} == {"not-reached"}
        fix = result.findings[0].fix or ""
        assert fix.startswith("no release loads this draft") and "config.json" in fix
        served = serve_draft(ckpt, engine=engine)
        assert served.stops is not None and served.stops.stage == "config" and served.outcome == "fails-at-start"
        assert cli.main(["convert", str(ckpt), "--to", engine, str(tmp_path / f"{name}-out")]) != 0
        fixed_config = {**config, "rope_scaling": {**yarn, "factor": 4.0}}
        assert simulate_load(write(tmp_path / f"{name}-set", tensors, fixed_config), engine).refused_at != "config"

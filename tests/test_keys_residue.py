"""Issue 23 keys residue, each from its release's source: the vLLM MLA constructor's rope factor, a t2d without d2t,
a target head under a reduced draft vocabulary, and which parameters the proposer takes from the target."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _builders import H, N, V, draft_tensors, llama_fields, mla_config, mla_draft_tensors, write
from eagle3lens import cli
from eagle3lens.probes.keys import simulate_load
from eagle3lens.served import serve_draft

LLAMA = {**llama_fields(), "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": N}


def codes(result) -> set[str]:
    return {f.code for f in result.findings}


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
    assert codes(result) == {"keys/raises"}
    served = serve_draft(ckpt, engine=engine)
    assert served.stops is not None and served.stops.stage == "construct" and served.outcome == "fails-at-start"
    fix = result.findings[0].fix
    out = fixed(ckpt, fix, tmp_path / "out")
    again = simulate_load(out, engine)
    assert again.refused is None and "keys/raises" not in codes(again)


def test_mla_rope_boundaries(tmp_path):
    """0.18-0.19 require transformers < 5: config.json's rope_scaling counts (absent: default rope, builds);
    0.28.0 no longer copies rope_scaling."""
    plain = write(tmp_path / "plain", mla_draft_tensors(), mla_config())
    assert simulate_load(plain, "vllm==0.19.0").refused is None
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


ROPES = [{"rope_type": "yarn", "original_max_position_embeddings": 64}, {"type": "yarn"}, {"rope_type": "linear"},
         {"rope_type": "llama3", "factor": 8.0}, {"rope_type": "yarn", "factor": 4.0}, {"rope_type": "default"},
         {"rope_type": "linear", "factor": 2.0}, None]


@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3"])
@pytest.mark.parametrize("rope", ROPES, ids=str)
def test_config_rope_rule_matches_the_installed_transformers(tmp_path, model_type, rope):
    """The rule is transformers' own: AutoConfig raises KeyError for this config.json exactly when it says so."""
    import transformers

    from eagle3lens.engines.construct import config_rope_error

    config = {**llama_fields(), "model_type": model_type, **({"rope_scaling": rope} if rope else {})}
    write(tmp_path / "d", draft_tensors(), config)
    try:
        transformers.AutoConfig.from_pretrained(str(tmp_path / "d"))
        raised = None
    except KeyError as e:
        raised = str(e)
    predicted = config_rope_error(config)
    assert (predicted is None) == (raised is None), (predicted, raised)
    if raised:  # the same message; transformers prints the missing keys as a set (in hash order), we sort them
        head, keys = raised.strip('"').rsplit(": ", 1)
        assert head in predicted and ast.literal_eval(keys) == ast.literal_eval(
            predicted.split(head + ": ", 1)[1].split('"', 1)[0])


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
        assert codes(result) == {"keys/raises"} and {f.fate for f in result.fates} == {"not-reached"}
        fix = result.findings[0].fix or ""
        assert fix.startswith("no release loads this draft") and "config.json" in fix
        served = serve_draft(ckpt, engine=engine)
        assert served.stops is not None and served.stops.stage == "config" and served.outcome == "fails-at-start"
        assert cli.main(["convert", str(ckpt), "--to", engine, str(tmp_path / f"{name}-out")]) != 0
        fixed_config = {**config, "rope_scaling": {**yarn, "factor": 4.0}}
        assert simulate_load(write(tmp_path / f"{name}-set", tensors, fixed_config), engine).refused_at != "config"

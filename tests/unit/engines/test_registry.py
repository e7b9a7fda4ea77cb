"""Engine profiles: registry resolution and the parameter tables for the Llama-3.1-8B example (FACTS.md §2, §4).

The release-resolution tests (builds between releases, PEP 440 forms, path suffixes) are from the review round
"engine releases" (issue 14; was tests/test_engine_releases.py)."""

from __future__ import annotations

import pytest

from _paths import ROOT
from eagle3lens.checkpoint import DraftSpec
from eagle3lens.engines import all_profiles, resolve
from eagle3lens.errors import UsageError

# Llama-3.1-8B draft: H = H_t = 4096, 32 heads / 8 KV, head_dim 128, intermediate 14336, V 128256, N 32000
LLAMA_8B = DraftSpec(flavour="sglang", hidden_size=4096, target_hidden_size=4096, vocab_size=128256,
                     draft_vocab_size=32000, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     intermediate_size=14336, num_hidden_layers=1, num_decoder_layers=1,
                     flags={"norm_before_fc": True})

SERVING_COMMON = {"model.embed_tokens.weight": (128256, 4096), "model.fc.weight": (4096, 12288),
                  "model.norm.weight": (4096,), "lm_head.weight": (32000, 4096)}
FUSED = {"self_attn.qkv_proj.weight": (6144, 8192), "self_attn.o_proj.weight": (4096, 4096),
         "mlp.gate_up_proj.weight": (28672, 4096), "mlp.down_proj.weight": (4096, 14336),
         "input_layernorm.weight": (4096,), "hidden_norm.weight": (4096,), "post_attention_layernorm.weight": (4096,)}
UNFUSED = {"self_attn.q_proj.weight": (4096, 8192), "self_attn.k_proj.weight": (1024, 8192),
           "self_attn.v_proj.weight": (1024, 8192), "self_attn.o_proj.weight": (4096, 4096),
           "mlp.gate_proj.weight": (14336, 4096), "mlp.up_proj.weight": (14336, 4096),
           "mlp.down_proj.weight": (4096, 14336), "input_layernorm.weight": (4096,), "hidden_norm.weight": (4096,),
           "post_attention_layernorm.weight": (4096,)}


def _with(prefix: str, table: dict) -> dict:
    return {prefix + k: v for k, v in table.items()}


EXPECTED = {
    "sglang==0.5.11": {**SERVING_COMMON, **_with("model.midlayer.", FUSED)},
    "sglang==0.5.15": {**SERVING_COMMON, **_with("model.layers.0.", FUSED)},
    "sglang==0.5.23": {**SERVING_COMMON, **_with("model.layers.0.", FUSED), "model.input_norm.weight": (12288,)},
    "vllm==0.33.0": {**SERVING_COMMON, **_with("model.layers.0.", FUSED), "model.input_norm.weight": (12288,),
                     "draft_id_to_target_id": (32000,)},
    "speculators": {"embed_tokens.weight": (128256, 4096), "fc.weight": (4096, 12288), "norm.weight": (4096,),
                    "lm_head.weight": (32000, 4096), **_with("layers.0.", UNFUSED), "input_norm.weight": (12288,),
                    "d2t": (32000,), "t2d": (128256,), "verifier_norm.weight": (4096,),
                    "verifier_lm_head.weight": (32000, 4096)},
    "eagle": {"embed_tokens.weight": (128256, 4096), "fc.weight": (4096, 12288), "norm.weight": (4096,),
              "lm_head.weight": (32000, 4096), **_with("midlayer.", UNFUSED), "d2t": (32000,), "t2d": (128256,)},
}


@pytest.mark.parametrize("engine", sorted(EXPECTED))
def test_llama_8b_parameter_table_matches_facts(engine):
    params = resolve(engine).parameters(LLAMA_8B)
    assert {n: p.shape for n, p in params.items()} == EXPECTED[engine]


def test_every_profile_has_a_table_and_a_source():
    assert {p.name for p in all_profiles()} == {"sglang", "vllm", "speculators", "eagle"}
    for profile in all_profiles():
        assert profile.source and profile.label
        assert profile.parameters(LLAMA_8B)


def test_fused_shards_and_inits():
    params = resolve("vllm==0.33.0").parameters(LLAMA_8B)
    qkv = params["model.layers.0.self_attn.qkv_proj.weight"]
    assert qkv.shards == {"q": (4096, 8192), "k": (1024, 8192), "v": (1024, 8192)}
    assert params["draft_id_to_target_id"].init == "zeros"
    assert params["model.norm.weight"].init == "ones"
    sglang = resolve("sglang==0.5.11").parameters(LLAMA_8B)
    assert sglang["model.fc.weight"].init == "kaiming-uniform"
    assert sglang["model.midlayer.mlp.gate_up_proj.weight"].init == "empty"


# 0.1.0's groups (sglang 0.4.0-0.5.11, 0.5.12-0.5.22, 0.5.23; vllm 0.33.0 only) were proven wrong by the wheels
# (ENGINE_VERSIONS.md section 4): every release with EAGLE-3 now resolves to the group that behaves like it
@pytest.mark.parametrize("spec, label", [("sglang==0.5.11", "sglang 0.5.11"), ("sglang==0.4.10", "sglang 0.4.9–0.5.1.post3"),
                                         ("sglang==0.5.12", "sglang 0.5.12–0.5.12.post1"),
                                         ("sglang==0.5.22", "sglang 0.5.17–0.5.23"),
                                         ("sglang==0.5.23", "sglang 0.5.17–0.5.23"), ("sglang", "sglang 0.5.17–0.5.23"),
                                         ("sglang==0.4.5", "sglang 0.4.4.post2–0.4.8.post1"),
                                         ("sglang==0.5.0rc2", "sglang 0.4.9–0.5.1.post3"),
                                         ("vllm==0.33.0", "vllm 0.30.0–0.33.0"), ("vllm", "vllm 0.30.0–0.33.0"),
                                         ("vllm==0.32.0", "vllm 0.30.0–0.33.0"), ("vllm==0.9.0.1", "vllm 0.9.0–0.9.0.1"),
                                         ("vllm==0.8.5.post1", "vllm 0.8.5–0.8.5.post1"),
                                         ("speculators", "speculators 0.9.x"), ("eagle", "EAGLE reference (SafeAILab/EAGLE)")])
def test_resolve_picks_the_range(spec, label):
    profile = resolve(spec)
    assert profile.label == label
    if "==" in spec:
        assert profile.spec.split(":")[0] == spec


@pytest.mark.parametrize("spec", ["sglang==0.4.0", "vllm==0.8.4", "trtllm", "eagle==1.0", "sglang==x.y", "==",
                                  "sglang==0.5.11:v9", "sglang==0.5.11:eager"])
def test_resolve_refuses_unknown_with_the_known_list(spec):
    with pytest.raises(UsageError) as err:
        resolve(spec)
    assert "sglang" in str(err.value) or "no EAGLE-3 before" in str(err.value)
    assert "\n" not in str(err.value)


def test_conventions_and_defaults():
    assert resolve("sglang==0.5.11").aux_id_convention == "output"
    assert resolve("sglang==0.5.11").aux_ids_sources == ("eagle_config",)
    assert resolve("vllm==0.33.0:v1").aux_ids_sources == ("top-level", "dflash", "eagle_config")
    assert resolve("vllm==0.33.0").aux_ids_sources == ("top-level", "dflash", "eagle_config.layer_ids")  # V2
    assert resolve("eagle").aux_ids_sources == ()
    assert resolve("vllm").default_aux_ids(32) == (2, 16, 29)
    assert resolve("sglang").default_aux_ids(61) == (2, 30, 58)
    assert resolve("sglang==0.5.11").fc_gate == "width-differs"
    assert resolve("sglang==0.5.11").missing_d2t == "raw-index" and resolve("vllm").missing_d2t == "identity"


def test_recognition():
    spec_cfg = {"speculators_model_type": "eagle3", "transformer_layer_config": {}, "architectures": ["Eagle3DraftModel"]}
    flat = {"architectures": ["LlamaForCausalLMEagle3"]}
    official = {"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 10}
    assert not resolve("sglang==0.5.11").recognises(spec_cfg)
    assert resolve("sglang==0.5.11").recognises(flat) and not resolve("sglang").recognises(official)
    assert resolve("vllm").recognises(flat) and resolve("vllm").recognises(official)
    assert resolve("speculators").recognises(spec_cfg) and not resolve("speculators").recognises(flat)
    # vLLM validates a speculators config: it needs the speculative token count and the verifier's name
    assert resolve("vllm").speculators_missing(spec_cfg) == (
        "speculators_config.proposal_methods[0].speculative_tokens", "speculators_config.verifier.name_or_path")
    full = {**spec_cfg, "speculators_config": {"proposal_methods": [{"speculative_tokens": 5}],
                                               "verifier": {"name_or_path": "org/target"}}}
    assert resolve("vllm").recognises(full) and resolve("speculators").recognises(full)
    no_verifier = {**full, "speculators_config": {**full["speculators_config"], "verifier": {"name_or_path": None}}}
    assert not resolve("vllm").recognises(no_verifier) and resolve("speculators").recognises(no_verifier)
    no_tokens = {**full, "speculators_config": {**full["speculators_config"], "proposal_methods": [{}]}}
    assert not resolve("vllm").recognises(no_tokens)


def test_engines_table_fits_80_columns():
    from rich.console import Console

    from eagle3lens.commands.engines import EnginesTable
    from eagle3lens.plots import rich_view

    console = Console(width=80, record=True, color_system=None)
    console.print(rich_view(EnginesTable()))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text  # nothing cut off
    flat = " ".join(text.split())
    for p in all_profiles():
        assert p.spec in text  # whole, on one line
        assert " ".join(p.source.split()) in flat  # every source file, wrapped but complete


def test_engine_imports_are_declared_core_dependencies():
    # the registry parses versions with `packaging`: it must be installed with eagle3lens itself, not by luck
    import ast
    import re
    import sys
    import tomllib

    declared = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower().replace("-", "_")
                for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    imported = set()
    for file in (ROOT / "eagle3lens" / "engines").glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "__future__"}
    # `--execute` imports the installed engine itself (and pydantic_core, which it brings): never a dependency
    engine_side = {"sglang", "vllm", "pydantic_core"}
    assert "packaging" in third_party and third_party - engine_side <= declared
    assert resolve("sglang==0.5.10.post1").spec == "sglang==0.5.10.post1"
    assert resolve("vllm==0.33.0rc1").label == "vllm 0.30.0–0.33.0"


# -- release resolution (issue 14) ---------------------------------------------------------------
def test_builds_between_releases_and_installed_versions_still_resolve():
    from eagle3lens.engines.registry import resolve_named

    assert resolve("vllm==0.9.1.dev3").label == "vllm 0.9.0–0.9.0.1"  # dev, rc and local builds are not listed
    assert resolve("sglang==0.5.11+cu128").release == "0.5.11"  # the local label is the build
    assert resolve("vllm==0.33.0rc1").label == "vllm 0.30.0–0.33.0"
    assert resolve_named("vllm==0.9.5", installed=True).label == "vllm 0.9.1–0.10.0"  # installed: it exists
    assert not resolve("sglang==0.5.99").verified


def test_pep440_forms_resolve():
    assert resolve("sglang==0.5.0rc2").label == "sglang 0.4.9–0.5.1.post3"
    assert resolve("sglang==0.5.3.post2").release == "0.5.3.post2"
    assert resolve("sglang==0.5.3.post1").release != resolve("sglang==0.5.3.post2").release
    assert resolve("vllm==0.9.0.1").label == "vllm 0.9.0–0.9.0.1"
    assert resolve("vllm==0.9.1.dev3").label == "vllm 0.9.0–0.9.0.1"  # a dev build of 0.9.1 precedes 0.9.1
    newer = resolve("sglang==0.5.24.dev1")
    assert not newer.verified and newer.label == "sglang 0.5.17–0.5.23"


def test_path_suffix_refused_where_the_release_has_one_path():
    with pytest.raises(UsageError, match="one runtime path"):
        resolve("sglang==0.5.11:eager")
    with pytest.raises(UsageError, match="runtime paths"):
        resolve("vllm==0.33.0:v3")

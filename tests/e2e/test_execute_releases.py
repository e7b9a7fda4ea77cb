"""keys --execute against real releases fetched from the package index (``pip download --no-deps``, cached under
~/.cache/eagle3lens/wheels): the engine's own load_weights, run on meta tensors, on the demo's drafts, held against
the simulation of the same release. Where they differ, the test names the difference."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eagle3lens.probes.executed import execute_load

pytestmark = pytest.mark.slow


def release_root(name: str, version: str) -> Path:
    from eagle3lens.engines.wheels import unpacked

    try:
        return unpacked(name, version)
    except subprocess.CalledProcessError:
        pytest.skip(f"the package index cannot be reached for {name}=={version}")
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip download {name}=={version} did not finish in time")


_RESULTS: dict[tuple[str, str, str], object] = {}


def executed(demo_dir: Path, name: str, version: str, draft: str):
    """The executed load of one demo draft under one release, run once per session (each run imports the engine
    in a fresh interpreter, seconds each)."""
    case = (name, version, draft)
    if case not in _RESULTS:
        _RESULTS[case] = execute_load(demo_dir / draft, root=release_root(name, version), isolate=True)
    return _RESULTS[case]


def disagreements(result) -> set[str]:
    return {f.evidence["what"] for f in result.findings if f.code == "engine/simulation-disagrees"}


def fates(result) -> dict[str, str]:
    return {f.key: f.fate for f in result.fates}


RELEASES = (("sglang", "0.4.5"), ("sglang", "0.5.11"), ("sglang", "0.5.23"), ("vllm", "0.10.2"), ("vllm", "0.33.0"))
DRAFTS = ("eagle", "speculators", "kimi-mla")
# (engine, release, demo draft) -> the differences from the simulation the engine's code shows (empty: none)
CASES: dict[tuple[str, str, str], set[str]] = {(n, v, d): set() for n, v in RELEASES for d in DRAFTS}


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}=={c[1]}-{c[2]}")
def test_executed_fates_equal_the_simulation(case: tuple[str, str, str], demo_dir: Path) -> None:
    name, version, draft = case
    result = executed(demo_dir, name, version, draft)
    assert result.origin == "executed" and result.release == version
    assert result.execution["error"] is None or result.execution["phase"] == "load", result.execution["error"]
    assert disagreements(result) == CASES[case], [f.detail for f in result.findings
                                                  if f.code == "engine/simulation-disagrees"]


def test_sglang_0_5_11_drops_the_speculators_decoder_by_its_own_code(demo_dir: Path) -> None:
    result = executed(demo_dir, "sglang", "0.5.11", "speculators")
    dropped = sorted(k for k, f in fates(result).items() if f == "dropped")
    assert len(dropped) == 10 and all(k.startswith("layers.0.") for k in dropped)
    assert fates(result)["d2t"] == "converted"  # hot_token_id = d2t + arange, seen through the add
    at_init = {p.param.name for p in result.params if p.status == "left-at-init"}
    assert "model.midlayer.self_attn.qkv_proj.weight" in at_init and len(at_init) == 7
    stood = {s["target"] for s in result.stand_ins}
    assert {"sgl_kernel", "triton"} <= stood
    assert "sglang.srt.models.llama_eagle3" not in stood


def test_sglang_0_4_5_raises_on_a_stacked_key_it_does_not_know(demo_dir: Path) -> None:
    """0.4.4.post2-0.4.8: the MLA draft's layers.0.mlp.gate_proj becomes a stacked name not in params_dict: KeyError
    (llama.py); the keys sorted before it were processed (d2t kept as hot_token_id, embed/fc loaded)."""
    result = executed(demo_dir, "sglang", "0.4.5", "kimi-mla")
    err = result.execution["error"]
    assert err["type"] == "KeyError" and err["key"] == "layers.0.mlp.gate_proj.weight"
    assert err["file"] == "srt/models/llama.py"
    f = fates(result)
    assert f["layers.0.mlp.gate_proj.weight"] == "raises"
    before = [k for k in sorted(f) if k < "layers.0.mlp.gate_proj.weight"]
    assert before and all(f[k] != "not-reached" for k in before)
    assert all(f[k] == "not-reached" for k in sorted(f) if k > "layers.0.mlp.gate_proj.weight")
    logged = [k for k in before if "not found in params_dict" in next(x.log for x in result.fates if x.key == k)]
    assert "layers.0.hidden_norm.weight" in logged  # 0.4.x warns for an unknown plain key (llama.py:534)


def test_sglang_0_4_5_builds_its_cuda_layers_not_the_vllm_fallback(demo_dir: Path) -> None:
    """SGLang 0.4.x picks RMSNorm from vllm when CUDA is absent (layernorm.py); a server runs on CUDA, where the
    norms are SGLang's own, so the execution answers is_cuda_available as a CUDA server does and the norms load.
    vllm is still imported (quantization) and stood in, and the result says so."""
    result = executed(demo_dir, "sglang", "0.4.5", "eagle")
    assert "sglang.srt.utils.is_cuda_available" in {s["target"] for s in result.stand_ins}
    assert fates(result)["norm.weight"] == fates(result)["midlayer.input_layernorm.weight"] == "loaded"
    assert any("imports vllm, stood in here" in n for n in result.notes)
    assert not disagreements(result)


def test_sglang_0_4_5_speculators_keys_processed_before_its_key_error(demo_dir: Path) -> None:
    """Issue 23 residue: SGLang 0.4.4.post2-0.4.8 on a speculators draft. Its loader walks the keys in safetensors
    order and stops at the first stacked key it cannot place (layers.0.mlp.gate_proj -> KeyError): d2t, embed,
    fc and three decoder keys were processed before (the decoder ones dropped with a warning each); every key after
    it, lm_head and norm included, is never reached. The simulation marks each stacked key "raises" and keeps
    judging the keys after the first raise as if loaded: the executed record is the one to read here."""
    result = executed(demo_dir, "sglang", "0.4.5", "speculators")
    f = fates(result)
    assert result.execution["error"]["type"] == "KeyError"
    assert f["layers.0.mlp.gate_proj.weight"] == "raises"
    assert [k for k in sorted(f) if f[k] not in ("not-reached", "raises")] == [
        "d2t", "embed_tokens.weight", "fc.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
        "layers.0.mlp.down_proj.weight"]
    assert f["lm_head.weight"] == f["norm.weight"] == "not-reached"
    assert f["layers.0.mlp.down_proj.weight"] == "dropped"


def test_sglang_0_5_23_runs_with_its_published_runtime_context_and_real_msgspec(demo_dir: Path) -> None:
    """0.5.23 reads ranks, groups and the device from runtime_context, which the launcher publishes: published by
    the engine's own publish() (device cuda, world rank 0), groups of world size 1. Its Structs need the real
    msgspec (installed beside the unpacked wheel), never a stand-in."""
    result = executed(demo_dir, "sglang", "0.5.23", "kimi-mla")
    assert result.execution["phase"] == "done" and result.draft_class == "Eagle3DeepseekV2ForCausalLM"
    stood = {s["target"] for s in result.stand_ins}
    assert "sglang.srt.runtime_context.publish(ServerArgs)" in stood and "msgspec" not in stood
    assert fates(result)["layers.0.self_attn.kv_a_proj_with_mqa.weight"] == "loaded"


def test_vllm_0_10_2_mla_draft_raises_at_its_first_mla_key_after_gathering(demo_dir: Path) -> None:
    """vLLM 0.10.2 runs an MLA draft through Eagle3LlamaForCausalLM, whose load_weights gathers every key into a dict
    before loading: the KeyError comes after the last key was pulled, and is placed on the key whose tensor the
    engine's frame held (the first MLA key, as simulated); the keys after it were pulled but never written."""
    result = executed(demo_dir, "vllm", "0.10.2", "kimi-mla")
    err = result.execution["error"]
    assert err["type"] == "KeyError" and err["key"] == "layers.0.self_attn.kv_a_layernorm.weight"
    f = fates(result)
    assert f["layers.0.self_attn.kv_a_layernorm.weight"] == "raises"
    assert f["lm_head.weight"] == f["norm.weight"] == f["t2d"] == "not-reached"
    assert f["fc.weight"] == "loaded" and f["d2t"] == "loaded"
    assert result.draft_class == "Eagle3LlamaForCausalLM"
    assert "vllm.platforms.cpu_platform_plugin" in {s["target"] for s in result.stand_ins}  # a CUDA wheel, no GPU


def test_audit_of_a_real_release_agrees_on_every_built_in_draft(capsys) -> None:
    """``python -m eagle3lens.release_audit --release sglang==0.5.23`` on the cached wheel: the ten built-in drafts
    through its own loader agree with the simulation, the MLA draft whose yarn rope lacks ``factor`` included (both
    refuse it when its config.json is read: transformers' rope validation, engines/construct.config_rope_error)."""
    from eagle3lens.release_audit import main

    release_root("sglang", "0.5.23")
    code = main(["--release", "sglang==0.5.23"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agrees with the simulation on all 10 built-in drafts" in out
    assert "the release requires transformers==5.19.0" in out

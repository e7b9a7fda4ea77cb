"""keys --execute against real releases fetched from the package index (``pip download --no-deps``, cached under
~/.cache/eagle3lens/wheels): the engine's own load_weights, run on meta tensors, on the demo's drafts, held against
the simulation of the same release. Where they differ, the test names the difference."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eagle3lens.engines.executed_result import execute_load

pytestmark = pytest.mark.slow


def release_root(name: str, version: str) -> Path:
    from eagle3lens.engines.wheels import unpacked

    try:
        return unpacked(name, version)
    except subprocess.CalledProcessError:
        pytest.skip(f"the package index cannot be reached for {name}=={version}")
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip download {name}=={version} did not finish in time")


def disagreements(result) -> set[str]:
    return {f.evidence["what"] for f in result.findings if f.code == "engine/simulation-disagrees"}


def fates(result) -> dict[str, str]:
    return {f.key: f.fate for f in result.fates}


# (engine, release, demo draft) -> the differences from the simulation the engine's code shows (empty: none)
CASES = {
    ("sglang", "0.5.11", "eagle"): set(),
    ("sglang", "0.5.11", "speculators"): set(),
    ("sglang", "0.5.11", "kimi-mla"): set(),
    ("vllm", "0.33.0", "eagle"): set(),
    ("vllm", "0.33.0", "speculators"): set(),
    ("vllm", "0.33.0", "kimi-mla"): set(),
}


@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: f"{c[0]}=={c[1]}-{c[2]}")
def test_executed_fates_equal_the_simulation(case: tuple[str, str, str], demo_dir: Path) -> None:
    name, version, draft = case
    root = release_root(name, version)
    result = execute_load(demo_dir / draft, root=root, isolate=True)
    assert result.origin == "executed" and result.release == version
    assert result.execution["error"] is None or result.execution["phase"] == "load", result.execution["error"]
    assert disagreements(result) == CASES[case], [f.detail for f in result.findings
                                                  if f.code == "engine/simulation-disagrees"]


def test_sglang_0_5_11_drops_the_speculators_decoder_by_its_own_code(demo_dir: Path) -> None:
    result = execute_load(demo_dir / "speculators", root=release_root("sglang", "0.5.11"), isolate=True)
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
    result = execute_load(demo_dir / "kimi-mla", root=release_root("sglang", "0.4.5"), isolate=True)
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


def test_sglang_0_4_5_says_when_it_needs_vllm_python(demo_dir: Path) -> None:
    """SGLang 0.4.x takes RMSNorm and other layers from vllm; with vllm stood in those classes have no weights, the
    norms look dropped, and the result says the execution is incomplete instead of passing that off as a finding."""
    result = execute_load(demo_dir / "eagle", root=release_root("sglang", "0.4.5"), isolate=True)
    assert any("imports vllm, stood in here" in n for n in result.notes)
    assert "parameter model.norm.weight" in disagreements(result)


def test_sglang_0_4_5_speculators_keys_processed_before_its_key_error(demo_dir: Path) -> None:
    """Issue 23 residue: SGLang 0.4.4.post2-0.4.8 on a speculators draft. Its loader walks the keys in safetensors
    order and stops at the first stacked key it cannot place (layers.0.mlp.gate_proj -> KeyError): d2t, embed,
    fc and three decoder keys were processed before (the decoder ones dropped with a warning each); every key after
    it, lm_head and norm included, is never reached. The simulation marks each stacked key "raises" and keeps
    judging the keys after the first raise as if loaded: the executed record is the one to read here."""
    result = execute_load(demo_dir / "speculators", root=release_root("sglang", "0.4.5"), isolate=True)
    f = fates(result)
    assert result.execution["error"]["type"] == "KeyError"
    assert f["layers.0.mlp.gate_proj.weight"] == "raises"
    assert [k for k in sorted(f) if f[k] not in ("not-reached", "raises")] == [
        "d2t", "embed_tokens.weight", "fc.weight", "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
        "layers.0.mlp.down_proj.weight"]
    assert f["lm_head.weight"] == f["norm.weight"] == "not-reached"
    assert f["layers.0.mlp.down_proj.weight"] == "dropped"

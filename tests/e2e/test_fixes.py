"""Every fix a finding prints removes that finding when run: each demo variant, one release of each engine group.

The doctor runs from headers (no target, no weights); every printed ``eagle3lens convert`` fix is run as printed
(OUT replaced by a temporary folder), the doctor runs again on its output under the same release, and the finding
it was printed for must be gone. Fixes that are not commands (a launch flag, another release, a re-export) are
checked not to pretend to be one.

From the review round "fixes fix" (was tests/test_fixes_fix.py).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from eagle3lens import cli
from eagle3lens.doctor import diagnose
from eagle3lens.engines import all_profiles

VARIANTS = ("speculators", "eagle", "mismatched-ids", "broken-d2t-double-subtracted", "broken-d2t-absolute",
            "broken-d2t-missing", "broken-untrained", "broken-lm-head-nan", "kimi-mla")
ENGINES = tuple(f"{p.name}=={p.releases[-1]}" for p in all_profiles() if p.kind == "serving" and p.releases)


def _command(fix: str, out: Path) -> list[str]:
    words = shlex.split(fix)
    assert words[0] == "eagle3lens"
    return [str(out) if w == "OUT" else w for w in words[1:]]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_every_printed_convert_fix_removes_its_finding(demo_dir, tmp_path, capsys, engine):
    for variant in VARIANTS:
        report = diagnose(demo_dir / variant, engine=engine, weights=False)
        for i, finding in enumerate(f for f in report.findings if f.fix):
            if not finding.fix.startswith("eagle3lens "):
                assert "eagle3lens" not in finding.fix.split(":")[0], finding.fix
                continue
            out = tmp_path / f"{variant}-{i}"
            code = cli.main(_command(finding.fix, out))
            err = capsys.readouterr().err
            assert code in (0, 1), f"{variant} {engine} {finding.code}: `{finding.fix}` failed: {err}"
            again = diagnose(out, engine=engine, weights=False)
            assert (finding.code, finding.title) not in {(f.code, f.title) for f in again.findings}, \
                f"{variant} {engine}: `{finding.fix}` left {finding.code}: {finding.title}"


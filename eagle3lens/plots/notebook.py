"""Terminal view of a headless walkthrough run: where its outputs are."""

from __future__ import annotations

from ..run_results import NotebookRun
from .registry import rich_view
from .style import markup


@rich_view.register
def notebook_run_rich(result: NotebookRun) -> str:
    return (f"executed notebook: {markup(result.executed)}\nHTML report:       {markup(result.html)}\n"
            f"findings JSON:     {markup(result.findings_json)}\n({result.seconds:.1f} s)")

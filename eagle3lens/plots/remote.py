"""Terminal view of a remote notebook run: one row per host."""

from __future__ import annotations

from typing import Any

from ..findings import Severity
from ..run_results import RemoteRun
from .registry import rich_view
from .style import markup


@rich_view.register
def remote_rich(result: RemoteRun) -> Any:
    from rich.table import Table

    table = Table(title=markup(f"{result.notebook} on {len(result.hosts)} host(s)"))
    for col in ("host", "status", "last cell", "findings", "GPU", "results"):
        table.add_column(col, overflow="fold")
    for h in result.hosts:
        counts = {s: sum(f.severity is s for f in h.findings) for s in Severity}
        found = " ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "-"
        gpu = ", ".join(h.preflight.gpus) if h.preflight and h.preflight.gpus else "-"
        status = markup(h.status) if h.ok else f"[red]{markup(h.status)}[/]"
        table.add_row(markup(h.host), status, markup(h.last_cell or "-"), found, markup(gpu),
                      markup(h.out_dir) if h.files else "-")
    notes = [f"{h.host}: note: {n}" for h in result.hosts for n in h.notes]
    if notes:
        table.caption = "\n".join(markup(n) for n in notes)
        table.caption_justify = "left"
    return table

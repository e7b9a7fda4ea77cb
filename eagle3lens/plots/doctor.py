"""Presentation of the doctor's triage: a rich table for the terminal, an HTML table for reports."""

from __future__ import annotations

from rich.markup import escape

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..doctor import Triage

_COLORS = {"critical": "#c62828", "warning": "#b26a00", "info": "#1565c0"}


def triage_table(triage: "Triage"):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not triage.causes:
        return Text("No likely cause found among the probes that ran.", style="green")
    table = Table(title="likely causes, in causal order", expand=False)
    for col in ("#", "cause", "explains", "fix"):
        table.add_column(col)
    for c in triage.causes:
        style = "bold red" if c.finding.severity.value == "critical" else "yellow"
        table.add_row(str(c.rank), f"[{style}]{c.finding.code}[/]\n{escape(c.finding.title)}", c.explains,
                      escape(c.finding.fix or ""))
    skipped = [Text(f"not run: {name}: {why}", style="dim") for name, why in triage.skipped.items()]
    return Group(table, *skipped)


def triage_html(triage: "Triage") -> str:
    if not triage.causes:
        return "<p>No likely cause found among the probes that ran.</p>"
    rows = "".join(
        f"<tr><td>{c.rank}</td><td style='color:{_COLORS[c.finding.severity.value]}'><code>{html.escape(c.finding.code)}</code><br>"
        f"{html.escape(c.finding.title)}</td><td>{html.escape(c.explains)}</td><td><code>{html.escape(c.finding.fix or '')}</code></td></tr>"
        for c in triage.causes
    )
    skipped = "".join(f"<li>{html.escape(name)}: {html.escape(why)}</li>" for name, why in triage.skipped.items())
    return (f"<h3>Likely causes, in causal order</h3><table><tr><th>#</th><th>cause</th><th>explains</th><th>fix</th></tr>{rows}</table>"
            + (f"<p>Not run:</p><ul>{skipped}</ul>" if skipped else ""))

"""Presentation of the doctor's triage: a rich table for the terminal, an HTML table for reports."""

from __future__ import annotations

from typing import Any

from ..doctor import Triage
from .registry import html_view, rich_view
from .style import SEVERITY_COLOR, fix_html, html_text, markup, plain, scroll_box


def _fixes(triage: Triage) -> list[tuple[list[int], str]]:
    """Each distinct fix once, with the ranks of the causes it fixes, in cause order."""
    fixes: dict[str, list[int]] = {}
    for c in triage.causes:
        if c.finding.fix:
            fixes.setdefault(c.finding.fix, []).append(c.rank)
    return [(ranks, fix) for fix, ranks in fixes.items()]


@rich_view.register
def triage_table(triage: Triage) -> Any:
    """Causes in a table; each fix once below it, on its own line so it copies cleanly."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not triage.causes:
        return Text("No likely cause found among the probes that ran.", style="green")
    table = Table(title="likely causes, in causal order", expand=False)
    for col in ("#", "cause", "explains"):
        table.add_column(col)
    for c in triage.causes:
        style = "bold red" if c.finding.severity.value == "critical" else "yellow"
        table.add_row(str(c.rank), f"[{style}]{markup(c.finding.code)}[/]\n{markup(c.finding.title)}",
                      markup(c.explains))
    fixes = [Text.from_markup(f"fix for #{', #'.join(map(str, ranks))}: [green]{markup(fix)}[/]")
             for ranks, fix in _fixes(triage)]
    skipped = [Text(plain(f"not run: {name}: {why}"), style="dim") for name, why in triage.skipped.items()]
    return Group(table, *fixes, *skipped)



@html_view.register
def triage_html(triage: Triage) -> str:
    if not triage.causes:
        return "<p>No likely cause found among the probes that ran.</p>"
    rows = "".join(
        f"<tr><td>{c.rank}</td><td style='color:{SEVERITY_COLOR[c.finding.severity]}'>"
        f"<code>{html_text(c.finding.code)}</code><br>{html_text(c.finding.title)}</td>"
        f"<td>{html_text(c.explains)}</td><td>{fix_html(c.finding.fix)}</td></tr>"
        for c in triage.causes
    )
    skipped = "".join(f"<li>{html_text(name)}: {html_text(why)}</li>" for name, why in triage.skipped.items())
    table = f"<table><tr><th>#</th><th>cause</th><th>explains</th><th>fix</th></tr>{rows}</table>"
    return ("<h3>Likely causes, in causal order</h3>" + scroll_box(table)
            + (f"<p>Not run:</p><ul>{skipped}</ul>" if skipped else ""))


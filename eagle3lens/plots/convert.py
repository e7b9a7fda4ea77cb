"""Terminal view of a conversion: what was renamed, replaced, added or omitted, and what was verified."""

from __future__ import annotations

from typing import Any

from ..convert import ConvertResult
from .registry import rich_view
from .style import markup


@rich_view.register
def convert_rich(result: ConvertResult) -> Any:
    from rich.table import Table

    title = f"{result.source} → {result.out}" + (f" (backup {result.backup})" if result.backup else "")
    table = Table(title=markup(title), expand=False)
    table.add_column("change")
    table.add_column("detail")
    for a, b in result.renamed.items():
        table.add_row("renamed", markup(f"{a} → {b}"))
    for name in result.overridden:
        table.add_row("[yellow]replaced[/]", markup(name))
    for name in result.added:
        table.add_row("[yellow]added[/]", markup(name))
    for name in result.omitted:
        table.add_row("omitted", markup(name))
    for change in result.config_changes:
        table.add_row("config", markup(change))
    for why in result.forced:
        table.add_row("[red]forced[/]", markup(why))
    if result.forced:
        table.add_row("[yellow]checked[/]", "every other byte identical to the source; NOT verified that the "
                                            "engine uses the forced items above faithfully")
    else:
        table.add_row("[green]verified[/]", "engine loads every tensor; every other byte identical to the source")
    return table

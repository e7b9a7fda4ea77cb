"""Terminal view of ``eagle3lens engines``: the known profiles in 80 columns."""

from __future__ import annotations

from typing import Any

from ..commands.engines import EnginesTable
from .registry import rich_view
from .style import markup, plain


def _versions(p: Any) -> str:
    """The label's version range ("0.4.0–0.5.11", "0.9.x"); "any" for the unversioned EAGLE reference."""
    prefix = f"{p.name} "
    return p.label[len(prefix):] if p.versions is not None and p.label.lower().startswith(prefix) else "any"


def _flags(p: Any) -> str:
    flags = sorted(p.honoured_flags)
    return "all four" if len(flags) == 4 else "\n".join(flags) or "none"


@rich_view.register
def engines_rich(result: EnginesTable) -> Any:
    """One row per profile, the (long) source files listed under the table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="engine profiles", expand=False)
    table.add_column("--engine", no_wrap=True)
    table.add_column("versions", no_wrap=True)
    table.add_column("unknown\nkeys")
    table.add_column("aux ids read from")
    table.add_column("flags honoured")
    for p in result.profiles:
        ids = " → ".join(p.aux_ids_sources) or "hard-coded"
        table.add_row(markup(p.spec), markup(_versions(p)), markup(p.unknown),
                      f"{markup(ids)}\n[dim]{markup(p.aux_id_convention)}-of-layer[/]", markup(_flags(p), newlines=True))
    sources = Text("read from:\n", style="bold")
    for p in result.profiles:
        sources.append(plain(p.spec), style="bold").append(f" ({plain(p.label)}): ", style="dim")
        sources.append(plain(p.source) + "\n")
    return Group(table, sources)

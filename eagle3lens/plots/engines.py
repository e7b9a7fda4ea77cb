"""Terminal view of ``engines --detect``: each installed engine, its files and the profile that simulates it."""

from __future__ import annotations

from typing import Any

from ..engines.detect import Detection
from .registry import rich_view


@rich_view.register
def detection_rich(result: Detection) -> Any:
    from rich.markup import escape
    from rich.table import Table

    where = f" on {escape(result.host)}" if result.host else ""
    if not result.engines:
        from rich.text import Text

        return Text(f"no sglang or vllm installed{where} (looked for their dist-info)")
    table = Table(title=f"installed engines{where}", expand=False)
    table.add_column("engine", no_wrap=True)
    table.add_column("file")
    table.add_column("sha256[:12]", no_wrap=True)
    table.add_column("matches", overflow="fold")
    for e in result.engines:
        label = f"{escape(e.name)} {escape(e.version)}\n[dim]--engine {escape(e.profile or 'none')}[/]"
        for i, f in enumerate(e.files):
            if f.sha12 is None:
                match = "[dim]absent[/]"
            elif f.patched:
                match = f"[bold red]no release[/] (nearest {escape(e.nearest or '?')})"
            else:
                match = _span(f.matches)
            table.add_row(label if i == 0 else "", escape(f.path.rsplit("/", 1)[-1]), f.sha12 or "-", match)
    return table


def _span(releases: tuple[str, ...]) -> str:
    return releases[0] if len(releases) == 1 else f"{releases[0]} … {releases[-1]} ({len(releases)} releases)"

"""Terminal views of ``eagle3lens engines``: the version groups in 80 columns, and ``--detect``'s installed engines."""

from __future__ import annotations

from typing import Any

from ..engines.listing import EnginesTable
from ..engines.detect import Detection
from .registry import rich_view
from .style import markup


def _versions(p: Any) -> str:
    """The group's release range ("0.4.9–0.5.1.post3", "0.9.x"); "any" for the unversioned EAGLE reference."""
    prefix = f"{p.name} "
    return p.label[len(prefix):] if p.versions is not None and p.label.lower().startswith(prefix) else "any"


def _flags(p: Any) -> str:
    flags = sorted(p.honoured_flags)
    return "all four" if len(flags) == 4 else "\n".join(flags) or "none"


def _ids(p: Any) -> str:
    paths = [p.with_path(name) for name in p.paths] or [p]
    rows = []
    for q in paths:
        ids = " → ".join(q.aux_ids_sources) or "defaults"
        rows.append((f"{q.path}: " if q.path else "") + ids)
    return "\n".join(rows) + f"\n[dim]{p.aux_id_convention} conv.[/]"


@rich_view.register
def engines_rich(result: EnginesTable) -> Any:
    """Engine profiles in 80 columns: one row per version group, the (long) source files listed under the table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="engine profiles (version groups)", expand=False)
    table.add_column("versions\n[dim]--engine[/]", no_wrap=True)
    table.add_column("unknown\nkeys", no_wrap=True)
    table.add_column("aux ids read from", overflow="fold")
    table.add_column("flags honoured", no_wrap=True)
    for p in result.profiles:
        table.add_row(f"{_versions(p)}\n[dim]{p.spec}[/]", p.unknown, _ids(p), _flags(p))
    sources = Text("read from:\n", style="bold")
    for p in result.profiles:
        sources.append(f"{p.spec}", style="bold").append(f" ({p.label}): ", style="dim").append(p.source + "\n")
    return Group(table, sources)



@rich_view.register
def detection_rich(result: Detection) -> Any:
    from rich.table import Table

    where = f" on {markup(result.host)}" if result.host else ""
    if not result.engines:
        from rich.text import Text

        return Text(f"no sglang or vllm installed{where} (looked for their dist-info)")
    table = Table(title=f"installed engines{where}", expand=False)
    table.add_column("engine", no_wrap=True)
    table.add_column("file")
    table.add_column("sha256[:12]", no_wrap=True)
    table.add_column("matches", overflow="fold")
    for e in result.engines:
        build = f" ({markup(e.distribution)}: {markup(e.build)} build)" if e.build else ""
        label = f"{markup(e.name)} {markup(e.version)}{build}\n[dim]--engine {markup(e.profile or 'none')}[/]"
        for i, f in enumerate(e.files):
            if f.sha12 is None:
                match = f"[yellow]not read[/] ({markup(f.problem)})" if f.problem else "[dim]absent[/]"
            elif f.patched:
                match = f"[bold red]no release[/] (nearest {markup(e.nearest or '?')})"
            else:
                match = _span(f.matches)
                if e.mixed_from and f.expected != f.sha12:
                    match = f"[bold yellow]another release[/]: {match}"
            table.add_row(label if i == 0 else "", markup(f.path.rsplit("/", 1)[-1]), f.sha12 or "-", match)
    return table


def _span(releases: tuple[str, ...]) -> str:
    return releases[0] if len(releases) == 1 else f"{releases[0]} … {releases[-1]} ({len(releases)} releases)"

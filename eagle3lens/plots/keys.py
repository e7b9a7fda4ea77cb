"""Presentation of load simulations and checkpoint diffs: rich tables, HTML fragments, plotly figures."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..probes.diff import DiffResult
from ..served.load import LoadResult
from .registry import figures, html_view, rich_view
from .style import MAX_ROWS, html_text, markup

FATE_STYLE = {"raises": "bold red", "dropped": "bold red", "loaded-shard": "green", "loaded": "green",
              "converted": "cyan", "skipped": "dim", "not-reached": "yellow"}
FATE_COLOR = {"raises": "#b71c1c", "dropped": "#c62828", "loaded-shard": "#2e7d32", "loaded": "#43a047",
              "converted": "#1565c0", "skipped": "#9e9e9e", "not-reached": "#f9a825"}
ORDER = ("raises", "dropped", "loaded-shard", "loaded", "converted", "skipped", "not-reached")


def _ordered(result: Any) -> list[Any]:
    return sorted(result.fates, key=lambda f: (ORDER.index(f.fate), f.key))


def _target(f: Any) -> str:
    if f.param:
        return f.param + (f"[{f.shard}]" if f.shard else "")
    return f.reason


@rich_view.register
def load_rich(result: LoadResult) -> Any:
    """Fates table (raising and dropped tensors first) plus the parameters nothing writes."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title=f"{result.label}: {len(result.fates)} tensors"
                        + ("" if result.recognised else "  [bold red](config not recognised)[/]"), expand=False)
    for col in ("fate", "tensor", "shape", "→ parameter / reason"):
        table.add_column(col)
    ordered = _ordered(result)
    for f in ordered[:MAX_ROWS]:
        shape = str(list(f.shape)) + (f" ≠ {list(f.expected_shape)}" if f.shape_mismatch else "")
        table.add_row(f"[{FATE_STYLE[f.fate]}]{f.fate}[/]", markup(f.key), shape, markup(_target(f)))
    parts: list[Any] = [table]
    if len(ordered) > MAX_ROWS:
        rest = Counter(f.fate for f in ordered[MAX_ROWS:])
        parts.append(f"[dim]... and {len(ordered) - MAX_ROWS} more tensors ("
                     + ", ".join(f"{n} {fate}" for fate, n in sorted(rest.items(), key=lambda i: ORDER.index(i[0])))
                     + "): --json lists every one[/]")
    if not result.params:
        parts.append("[dim]no engine parameter exists: the server stops before the draft class is built[/]")
    unwritten = [p for p in result.params if p.status != "loaded" or p.source == "target"]
    if unwritten:
        ptable = Table(title="engine parameters not fully written (or taken from the target)", expand=False)
        for col in ("parameter", "shape", "status", "served from", "holds"):
            ptable.add_column(col)
        for p in unwritten[:MAX_ROWS]:
            style = "bold red" if p.status in ("left-at-init", "partial") else "dim"
            holds = p.by_design if p.status == "by-design" or p.target else f"init: {p.param.init}" + (
                f" (shards {', '.join(p.missing_shards)})" if p.missing_shards else "")
            ptable.add_row(markup(p.param.name), str(list(p.param.shape)), f"[{style}]{p.status}[/]", p.source,
                           markup(holds or ""))
        parts.append(ptable)
        if len(unwritten) > MAX_ROWS:
            parts.append(f"[dim]... and {len(unwritten) - MAX_ROWS} more parameters: --json lists every one[/]")
    return Group(*parts)


@html_view.register
def load_html(result: LoadResult) -> str:
    rows = "".join(
        f"<tr><td style='color:{FATE_COLOR[f.fate]};font-weight:bold'>{f.fate}</td><td><code>{html_text(f.key)}</code></td>"
        f"<td>{list(f.shape)}</td><td>{html_text(_target(f))}</td></tr>" for f in _ordered(result))
    return (f"<p>{html_text(result.label)} — source: {html_text(result.source)}</p>"
            "<table><thead><tr><th>fate</th><th>tensor</th><th>shape</th><th>parameter / reason</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


@figures.register
def load_figures(result: LoadResult) -> list[Any]:
    """One bar per draft part, stacked by fate: dropped weights stand out in red."""
    import plotly.graph_objects as go

    roles = sorted({f.role for f in result.fates})
    fig = go.Figure()
    for fate in ORDER:
        counts = [sum(1 for f in result.fates if f.role == r and f.fate == fate) for r in roles]
        if any(counts):
            fig.add_bar(name=fate, x=roles, y=counts, marker_color=FATE_COLOR[fate])
    fig.update_layout(barmode="stack", title=f"Tensor fates under {result.label}", xaxis_title="draft part",
                      yaxis_title="tensors", height=360)
    return [fig]


@rich_view.register
def diff_rich(result: DiffResult) -> Any:
    from rich.table import Table

    table = Table(title=f"{markup(str(result.a))} ⇄ {markup(str(result.b))}" + ("  [green](renames only, bytes identical)[/]" if result.renames_only else ""),
                  expand=False)
    for col in ("change", "A", "B", "detail"):
        table.add_column(col)
    for name in result.only_in_a:
        table.add_row("[red]only in A[/]", markup(name), "", "")
    for name in result.only_in_b:
        table.add_row("[red]only in B[/]", "", markup(name), "")
    for lc in result.layout_changes:
        table.add_row("[yellow]dtype/shape[/]", markup(lc.name), markup(lc.name), markup(f"{lc.a} → {lc.b}"))
    for vc in result.changed:
        table.add_row("[yellow]values[/]", markup(vc.name), markup(vc.b_name),
                      f"max abs {vc.max_abs:.3g}, max rel {vc.max_rel:.3g}, {vc.n_diff} differ")
    for a, b in result.renamed:
        table.add_row("[cyan]renamed[/]", markup(a), markup(b), "same bytes")
    table.add_row("identical", f"{len(result.identical)} tensors", "", "")
    if result.unchecked:
        table.add_row("[dim]names only[/]", f"{len(result.unchecked)} tensors", "", "values not compared")
    return table

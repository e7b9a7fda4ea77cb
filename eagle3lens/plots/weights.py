"""Presentation of a WeightsResult: plotly figures, a rich terminal section and an HTML fragment."""

from __future__ import annotations

import itertools
from typing import Any

from ..probes.weights import WeightsResult
from .registry import figures, html_view, rich_view
from .style import html_text, markup, plain


def _fmt(value: float | int | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def std_figure(result: "WeightsResult"):
    """std and absmax per float tensor, grouped by module, with the predicted init std beside each."""
    import plotly.graph_objects as go

    rows = [t for t in result.tensors if t.stats.kind == "float" and t.stats.std is not None]
    rows.sort(key=lambda t: (t.module, t.name))
    x = [[plain(t.module) for t in rows], [plain(t.name.rsplit(".", 2)[-2] if t.name.count(".") else t.name) for t in rows]]
    fig = go.Figure()
    fig.add_bar(name="std", x=x, y=[t.stats.std for t in rows], customdata=[t.verdict for t in rows],
                hovertemplate="%{x}<br>std %{y:.4g}<br>%{customdata}<extra></extra>")
    fig.add_bar(name="absmax", x=x, y=[t.stats.absmax for t in rows], visible="legendonly")
    fig.add_scatter(name="predicted init std", x=x, y=[t.init.std if t.init else None for t in rows], mode="markers",
                    marker={"symbol": "line-ew-open", "size": 18, "color": "black"})
    fig.update_layout(title="std per tensor (marker: the initialiser's std; equal std + shape = untrained)",
                      yaxis={"type": "log", "title": "std (log scale)", "dtick": 1}, barmode="group",
                      height=520, margin={"b": 160}, xaxis_tickangle=-45)
    return fig


def histogram_figure(result: "WeightsResult"):
    """Histogram of one tensor at a time (dropdown), densities over each tensor's own [min, max]."""
    import plotly.graph_objects as go

    rows = [t for t in result.tensors if t.stats.hist_counts]
    fig = go.Figure()
    for i, t in enumerate(rows):
        edges, counts = t.stats.hist_edges, t.stats.hist_counts
        centres = [(a + b) / 2 for a, b in itertools.pairwise(edges)] if len(edges) > 1 else list(edges[:1])
        fig.add_bar(x=centres, y=counts, name=plain(t.name), visible=i == 0)
    fig.update_layout(
        title=f"value histogram: {plain(rows[0].name) if rows else ''}", height=380, bargap=0, showlegend=False,
        updatemenus=[{"buttons": [{"label": plain(t.name), "method": "update",
                                   "args": [{"visible": [j == i for j in range(len(rows))]},
                                            {"title": f"value histogram: {plain(t.name)} ({plain(t.verdict)})"}]}
                                  for i, t in enumerate(rows)], "x": 1.0, "y": 1.15}] if rows else [],
    )
    return fig


def change_figure(result: "WeightsResult"):
    """Relative change and cosine similarity against the reference checkpoint."""
    from plotly.subplots import make_subplots

    comp = result.comparison
    assert comp is not None  # weights_figures draws it only then
    names = [plain(c.name) for c in comp.changes]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("relative change ||a-b||/||b||", "cosine similarity"))
    fig.add_bar(x=names, y=[c.rel_change for c in comp.changes], row=1, col=1, showlegend=False)
    fig.add_bar(x=names, y=[c.cosine for c in comp.changes], row=1, col=2, showlegend=False)
    fig.update_layout(title=f"change against {plain(comp.against)}", height=420)
    return fig


@figures.register
def weights_figures(result: WeightsResult) -> list[Any]:
    figs = [std_figure(result), histogram_figure(result)]
    if result.comparison is not None and result.comparison.changes:
        figs.append(change_figure(result))
    return figs


def _tensor_rows(result: "WeightsResult") -> list[list[str]]:
    rows = []
    for t in result.tensors:
        s = t.stats
        if s.kind == "float":
            numbers = [_fmt(s.mean), _fmt(s.std), _fmt(s.absmax), _fmt(s.kurtosis, ".3g"), f"{s.zero_frac:.1%}",
                       f"{s.nan}/{s.inf}"]
        else:
            numbers = [f"min {_fmt(s.min)}", f"max {_fmt(s.max)}", f"{_fmt(s.distinct)} distinct", "", "", ""]
        rows.append([s.name, s.dtype, str(list(s.shape)), *numbers, t.verdict])
    return rows


_COLUMNS = ("name", "dtype", "shape", "mean", "std", "absmax", "kurtosis", "zeros", "nan/inf", "verdict")


@rich_view.register
def weights_rich(result: WeightsResult) -> Any:
    from rich.console import Group
    from rich.table import Table

    modules = Table(title="share of each module that looks trained", expand=False)
    for col in ("module", "tensors", "params", "trained", "verdicts"):
        modules.add_column(col)
    for m in result.modules:
        style = "green" if m.trained_share == 1 else "red" if m.trained_share == 0 else "yellow"
        modules.add_row(markup(m.module), str(m.tensors), f"{m.params:,}", f"[{style}]{m.trained_share:.0%}[/]",
                        ", ".join(f"{k} {v}" for k, v in m.verdicts.items()))
    tensors = Table(title="tensors", expand=False)
    for col in _COLUMNS:
        tensors.add_column(col)
    for row in _tensor_rows(result):
        tensors.add_row(*(markup(cell) for cell in row))
    parts: list[Any] = [modules, tensors]
    if result.copies:
        copies = Table(title="copies of the target", expand=False)
        for col in ("draft", "target", "rows", "result"):
            copies.add_column(col)
        for c in result.copies:
            verdict = ("[green]identical[/]" if c.matches else f"[red]{markup(c.problem)}[/]" if c.problem else
                       f"[red]{markup(c.difference)}[/]")
            copies.add_row(markup(c.draft), markup(c.target), markup(str(c.rows)), verdict)
        parts.append(copies)
    if result.comparison is not None:
        comp = Table(title=f"against {markup(result.comparison.against)}", expand=False)
        for col in ("name", "relative change", "cosine", "max |diff|"):
            comp.add_column(col)
        for change in result.comparison.changes:
            comp.add_row(markup(change.name), _fmt(change.rel_change, ".3g"), _fmt(change.cosine, ".6f"),
                         _fmt(change.max_abs_diff, ".3g"))
        parts.append(comp)
        parts.extend(f"{markup(line)}" for line in result.comparison.summary())
    parts.extend(f"[dim]note: {markup(n)}[/]" for n in result.notes)
    return Group(*parts)


@html_view.register
def weights_html(result: WeightsResult) -> str:
    def table(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
        head = "".join(f"<th>{html_text(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    modules = [[m.module, str(m.tensors), f"{m.params:,}", f"{m.trained_share:.0%}",
                ", ".join(f"{k} {v}" for k, v in m.verdicts.items())] for m in result.modules]
    parts = ["<h4>Share of each module that looks trained</h4>",
             table(["module", "tensors", "params", "trained", "verdicts"], modules),
             "<details><summary>tensors</summary>", table(_COLUMNS, _tensor_rows(result)), "</details>"]
    if result.copies:
        parts.append(table(["draft", "target", "rows", "result"],
                           [[c.draft, c.target, c.rows, "identical" if c.matches else c.problem or c.difference]
                            for c in result.copies]))
    if result.comparison is not None:
        parts.append(table(["name", "relative change", "cosine", "max |diff|"],
                           [[c.name, f"{c.rel_change:.3g}", f"{c.cosine:.6f}", f"{c.max_abs_diff:.3g}"]
                            for c in result.comparison.changes]))
        parts.extend(f"<p>{html_text(line)}</p>" for line in result.comparison.summary())
    return "<div class='eagle3lens-weights'>" + "".join(parts) + "</div>"

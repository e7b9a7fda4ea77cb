"""Views of the offline-acceptance result: a views table, per-position bars and the per-cause toggles."""

from __future__ import annotations

import html
from typing import Any

from rich.markup import escape

from ..probes.acceptance_result import CAUSE_LABELS, AcceptanceResult
from .registry import figures, html_view, rich_view
from .style import plotly_text

VIEW_TITLES = {"metrics": "training metrics (speculators, teacher-forced)", "as_trained": "as trained (greedy chain)",
               "as_served": "as served", "fixed": "after convert"}
COLORS = {"metrics": "#90a4ae", "as_trained": "#2e7d32", "as_served": "#c62828", "fixed": "#1565c0"}


PER_ROUND_CAPTION = ("per round: over the drafting rounds the engine runs (each starts where the last one stopped), "
                     "as its log counts; per start: every position a start (training's step accuracy)")


def _title(result: AcceptanceResult, name: str) -> str:
    title = VIEW_TITLES.get(name, name)
    return f"{title} by {result.engine}" if name in ("as_served", "fixed") and result.engine else title


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


# the views table's columns: serving views count per drafting round (the engine's count), the metrics view as
# speculators' validation does; per start is the same chain averaged over every position (training's step accuracy)
VIEW_COLUMNS = ("view", "accept len (per round)", "full_acc per step (per round)", "cond_acc per step (per round)",
                "accept len per start", "engine log would print (per round)")


def view_rows(result: AcceptanceResult) -> list[tuple[str, str, str, str, str, str]]:
    """One row per view, in :data:`VIEW_COLUMNS` order."""
    rows = []
    for name, view in result.views.items():
        line = view.error or ("not scored: " + view.unavailable if view.unavailable else "; ".join(view.log_lines.values()))
        per_start = _num(view.per_start.accept_len) if view.per_start is not None else "-"
        rows.append((_title(result, name), _num(view.accept_len),
                     " ".join(f"{a:.2f}" for a in view.full_acc), " ".join(f"{c:.2f}" for c in view.cond_acc),
                     per_start, line))
    return rows


def toggle_rows(result: AcceptanceResult) -> list[tuple[str, str]]:
    return [(CAUSE_LABELS.get(cause, cause), _num(value)) for cause, value in result.toggles.items()]


@rich_view.register
def acceptance_rich(result: AcceptanceResult) -> Any:
    from rich.console import Group
    from rich.table import Table

    table = Table(title=f"offline acceptance: K = {result.steps}, {result.samples} samples", expand=False,
                  caption=PER_ROUND_CAPTION)
    for col in VIEW_COLUMNS:
        table.add_column(col)
    for row in view_rows(result):
        table.add_row(*(escape(cell) for cell in row))
    parts: list[Any] = [table]
    if result.toggles:
        toggles = Table(title="each cause fixed alone (accept len)", show_header=False, expand=False)
        for cause, value in toggle_rows(result):
            toggles.add_row(escape(cause), value)
        parts.append(toggles)
    from .traffic import traffic_rich

    parts += traffic_rich(result)
    return Group(*parts)


@html_view.register
def acceptance_html(result: AcceptanceResult) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in VIEW_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                   for row in view_rows(result))
    out = (f"<h3>Offline acceptance (K = {result.steps}, {result.samples} samples)</h3>"
           f"<table><tr>{head}</tr>{body}</table><p>{html.escape(PER_ROUND_CAPTION)}</p>")
    if result.toggles:
        out += ("<p>Each cause fixed alone (accept len):</p><table>"
                + "".join(f"<tr><td>{html.escape(c)}</td><td>{v}</td></tr>" for c, v in toggle_rows(result))
                + "</table>")
    from .traffic import traffic_html

    return out + traffic_html(result)


def accept_len_figure(result: AcceptanceResult) -> Any:
    """Expected accept length per view (bonus included), 1.0 marked: as trained vs as served vs fixed."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    names = [n for n, v in result.views.items() if v.accept_len is not None]
    fig = go.Figure(go.Bar(x=[plotly_text(_title(result, n)) for n in names], y=[result.views[n].accept_len for n in names],
                           marker_color=[COLORS.get(n, "#616161") for n in names],
                           text=[f"{result.views[n].accept_len:.2f}" for n in names], textposition="outside"))
    fig.add_hline(y=1.0, line_dash="dash", line_color="#c62828", annotation_text="bonus token only (1.00)")
    fig.update_layout(title=f"Accept length per drafting round, as the engine counts (K = {result.steps})", height=360,
                      yaxis_title="accept length (bonus included)")
    return fig


def per_position_figure(result: AcceptanceResult) -> Any:
    """Per-position acceptance (full_acc_k) of every view, grouped by draft position."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    fig = go.Figure()
    for name, view in result.views.items():
        if view.full_acc:
            fig.add_trace(go.Bar(x=[f"position {k + 1}" for k in range(len(view.full_acc))], y=list(view.full_acc),
                                 name=plotly_text(_title(result, name)), marker_color=COLORS.get(name)))
    fig.update_layout(barmode="group", title="Per-position acceptance per round: step k and every earlier step right",
                      height=380, yaxis_title="rate", yaxis_range=[0, 1], legend={"orientation": "h", "y": -0.2})
    return fig


def toggles_figure(result: AcceptanceResult, selected: str | None = None) -> Any:
    """As served, each cause fixed alone, and as trained (the static twin of the toggles widget)."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    served, trained = result.accept_len("as_served"), result.accept_len("as_trained")
    labels = [f"as served by {result.engine}"] + [CAUSE_LABELS.get(c, c) for c in result.toggles] + ["as trained"]
    values = [served, *result.toggles.values(), trained]
    colors = ["#c62828"] + ["#ffb300" if c == selected or selected is None else "#ffe082" for c in result.toggles] \
        + ["#2e7d32"]
    fig = go.Figure(go.Bar(x=[plotly_text(x) for x in labels], y=[v if v is not None else 0 for v in values], marker_color=colors,
                           text=[_num(v) for v in values], textposition="outside"))
    fig.update_layout(title="Which cause explains the gap: each fixed alone (per round)", height=360,
                      yaxis_title="accept length (bonus included)")
    return fig


@figures.register
def acceptance_figures(result: AcceptanceResult) -> list[Any]:
    out = [accept_len_figure(result), per_position_figure(result)]
    if result.toggles:
        out.append(toggles_figure(result))
    from .traffic import traffic_figures

    return out + traffic_figures(result)

"""Views of the acceptance budget: one table (row, accept length, delta, finding, what removes it) and a waterfall."""

from __future__ import annotations

from typing import Any

from ..probes.budget import Budget, BudgetRow
from .registry import figures, html_view, rich_view
from .style import fix_html, html_text, markup, scroll_box

COLUMNS = ("row", "accept len", "delta", "finding", "what removes it", "from")
CAPTION = ("accept length per drafting round at the same K; each delta from the last measured row; the deltas add up "
           "to the last row minus the first")


def _delta(row: BudgetRow) -> str:
    return "" if row.delta is None else f"{row.delta:+.2f}"


def cells(row: BudgetRow) -> tuple[str, str, str, str, str, str]:
    """One row's cells as plain text."""
    value = f"{row.value:.2f}" if row.value is not None else "not measured"
    return row.label, value, _delta(row), row.code or "", row.fix or "", row.source


def _title(budget: Budget) -> str:
    total = budget.total
    return (f"acceptance budget: K = {budget.steps}"
            + (f", {budget.first.value:.2f} -> {budget.last.value:.2f} ({total:+.2f})"
               if total is not None and budget.first is not None and budget.last is not None else ""))


@rich_view.register
def budget_rich(budget: Budget) -> Any:
    from rich.table import Table

    table = Table(title=_title(budget), caption=CAPTION, expand=False)
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in budget.rows:
        style = "dim" if not row.measured else "yellow" if row.delta is not None and row.delta < 0 else None
        table.add_row(*(markup(c) for c in cells(row)), style=style)
    return table


@html_view.register
def budget_html(budget: Budget) -> str:
    head = "".join(f"<th>{html_text(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in cells(row)[:4])
                   + f"<td>{fix_html(row.fix) if row.fix else ''}</td><td>{html_text(row.source)}</td></tr>"
                   for row in budget.rows)
    return (f"<h3>{html_text(_title(budget))}</h3>" + scroll_box(f"<table><tr>{head}</tr>{body}</table>")
            + f"<p>{html_text(CAPTION)}</p>")


def budget_figure(budget: Budget) -> Any:
    """A waterfall: the first measured row, each measured delta, the last row as the total."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    measured = [r for r in budget.rows if r.measured]
    labels = [html_text(r.label) for r in measured]
    measures = ["absolute"] + ["relative"] * (len(measured) - 1)
    values = [measured[0].value] + [r.delta for r in measured[1:]] if measured else []
    fig = go.Figure(go.Waterfall(x=labels, y=values, measure=measures,
                                 text=[f"{v:+.2f}" if i else f"{v:.2f}" for i, v in enumerate(values)]))
    fig.update_layout(title=html_text(_title(budget)), yaxis_title="accept length per round", showlegend=False)
    return fig


@figures.register
def budget_figures(budget: Budget) -> list[Any]:
    return [budget_figure(budget)] if any(r.measured for r in budget.rows) else []

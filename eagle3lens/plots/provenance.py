"""Views of training-data provenance: the chunk-by-layer similarity heatmap and a match table."""

from __future__ import annotations

from typing import Any

from ..probes.provenance import ProvenanceResult, candidate_label
from .registry import figures, html_view, rich_view
from .style import html_text, markup, plain


def match_rows(r: ProvenanceResult) -> list[tuple[str, str, str, str, str]]:
    """(chunk, best match, relative error, runner-up and margin, meaning) per chunk."""
    rows = []
    L = r.num_target_layers
    for i, c in enumerate(r.chunks):
        best = candidate_label(c.best, L) if c.best is not None else "-"
        second = candidate_label(c.runner_up, L) if c.runner_up is not None else "-"
        if not c.matched:
            meaning = "no match: not this target's state"
        elif c.chunk == "last":
            meaning = r.last_hidden
        else:
            k = r.layers[i]
            meaning = f"vLLM id {k} / SGLang id {k - 1}" if k is not None else "-"
        rows.append((c.chunk, best, f"{c.rel_error:.4f}", f"{second} (+{c.margin:.3f})", meaning))
    return rows


@rich_view.register
def _(r: ProvenanceResult) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{r.positions} positions of {r.sequences} sequences ({r.stored_dtype}) against "
                        f"{r.num_target_layers + 2} target states", title_justify="left")
    for col in ("chunk", "best match", "rel. error", "runner-up (margin)", "meaning"):
        table.add_column(col, overflow="fold")
    for row in match_rows(r):
        table.add_row(*(markup(v) for v in row))
    lines = [Text(f"convention: {plain(r.convention)}")]
    if r.trained_layers is not None:
        lines.append(Text(f"the draft's config says: layers {list(r.trained_layers)}"))
    if r.engine_layers is not None:
        lines.append(Text(f"{plain(r.engine)} feeds: layers {list(r.engine_layers)}"))
    return Group(table, *lines)


@html_view.register
def _(r: ProvenanceResult) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("chunk", "best match", "rel. error", "runner-up (margin)", "meaning"))
    body = "".join("<tr>" + "".join(f"<td>{html_text(v)}</td>" for v in row) + "</tr>" for row in match_rows(r))
    extra = [f"convention: {r.convention}"]
    if r.trained_layers is not None:
        extra.append(f"the draft's config says: layers {list(r.trained_layers)}")
    if r.engine_layers is not None:
        extra.append(f"{r.engine} feeds: layers {list(r.engine_layers)}")
    notes = "".join(f"<li>{html_text(x)}</li>" for x in extra)
    return f"<table class='provenance'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><ul>{notes}</ul>"


@figures.register
def _(r: ProvenanceResult) -> list[Any]:
    import plotly.graph_objects as go

    labels = list(r.candidate_labels())
    fig = go.Figure(go.Heatmap(z=[list(row) for row in r.rel_error], x=labels, y=[c.chunk for c in r.chunks],
                               colorscale="Viridis_r", zmin=0, zmax=1, colorbar={"title": "relative error"},
                               hovertemplate="%{y} vs %{x}: %{z:.4f}<extra></extra>"))
    fig.update_layout(title="relative error of each dump chunk against each target state (bright = match: low error)",
                      xaxis={"tickangle": -45}, height=320 + 12 * len(r.chunks), margin={"b": 140})
    return [fig]

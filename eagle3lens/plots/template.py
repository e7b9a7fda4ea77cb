"""Views of the served-template check: the markers each side holds, and one sequence beside what the server sends.

Every token shown is text from a tensor or a tokenizer: escaped for the medium (``style``), for plotly too, which
reads ``<s>`` as a strikethrough.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..probes.chat import TemplateCheck
from ..probes.served_render import Segment, SideBySide
from .registry import figures, html_view, rich_view
from .style import html_text, markup, plain, plotly_text

PART_COLORS = {"system": "#6a1b9a", "user": "#1565c0", "assistant": "#00838f", "generation prompt": "#e65100",
               "reply": "#2e7d32", "prompt": "#455a64"}
MISSING, HELD = "#c62828", "#2e7d32"


def marker_rows(check: TemplateCheck) -> list[tuple[str, str, str, str]]:
    """(marker, dump sequences holding it, count in the shown sequence, count served) per marker."""
    counts = check.side.markers if check.side is not None else {}
    labels = list(dict.fromkeys([*check.carried, *counts]))
    rows = []
    for label in labels:
        held = f"{check.carried[label]} / {check.samples}" if label in check.carried else "-"
        dump, served = counts.get(label, (None, None))
        rows.append((label, held, "-" if dump is None else str(dump), "-" if served is None else str(served)))
    return rows


MARKER_COLUMNS = ("marker", "dump sequences holding it", "in the sequence shown", "served")


def _side_title(side: SideBySide) -> tuple[str, str]:
    return ("what the training data held (the dump's tokens)",
            f"what the server sends: {side.conversation}, chat template with the generation prompt, then the reply")


@rich_view.register
def template_rich(check: TemplateCheck) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"served chat template markers: {check.samples} dump sequences", expand=False)
    for col in MARKER_COLUMNS:
        table.add_column(col)
    for row in marker_rows(check):
        table.add_row(*(markup(c) for c in row))
    parts: list[Any] = [table]
    if check.side is not None:
        for title, segments in zip(_side_title(check.side), (check.side.dump, check.side.served), strict=True):
            parts.append(Text(plain(title), style="bold"))
            for seg in segments:
                line = Text(f"  {plain(seg.part)}: ", style="dim")
                for k, token in enumerate(seg.tokens):  # every other token underlined: where each one ends
                    line.append(plain(token), style=PART_COLORS.get(seg.part, "") + (" underline" if k % 2 else ""))
                parts.append(line)
    return Group(*parts)


def _segments_html(segments: tuple[Segment, ...]) -> str:
    out = []
    for seg in segments:
        color = PART_COLORS.get(seg.part, "#424242")
        tokens = "".join(f"<span style='border-right:1px dotted #bbb'>{html_text(t)}</span>" for t in seg.tokens)
        out.append(f"<div><b style='color:{color}'>{html_text(seg.part)}</b>: <code style='color:{color};"
                   f"white-space:pre-wrap'>{tokens}</code></div>")
    return "".join(out)


@html_view.register
def template_html(check: TemplateCheck) -> str:
    head = "".join(f"<th>{html_text(c)}</th>" for c in MARKER_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in marker_rows(check))
    out = (f"<h3>Served chat template ({check.samples} dump sequences)</h3><table><tr>{head}</tr>{rows}</table>")
    if check.side is not None:
        titles = _side_title(check.side)
        out += (f"<p><b>{html_text(titles[0])}</b></p>{_segments_html(check.side.dump)}"
                f"<p><b>{html_text(titles[1])}</b></p>{_segments_html(check.side.served)}"
                "<p><i>each token is bounded by a dotted line; control characters are shown escaped (\\n)</i></p>")
    return out


def markers_figure(check: TemplateCheck) -> Any:
    """Per marker: how often the shown sequence holds it in the dump and as served (plus the dump's share)."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    labels = list(check.carried)
    x = [plotly_text(m) for m in labels]
    fig = go.Figure(go.Bar(x=x, y=[check.carried[m] / check.samples for m in labels], name="share of dump sequences "
                           "holding it", marker_color=[MISSING if m in check.missing else HELD for m in labels],
                           text=[f"{check.carried[m] / check.samples:.2f}" for m in labels], textposition="outside", offsetgroup=0))
    if check.side is not None:
        side = check.side
        names = list(side.markers)
        fig.add_trace(go.Bar(x=[plotly_text(m) for m in names], y=[side.markers[m][0] for m in names],
                             name="count in the sequence shown: dump", marker_color="#90a4ae", yaxis="y2", offsetgroup=1))
        fig.add_trace(go.Bar(x=[plotly_text(m) for m in names], y=[side.markers[m][1] for m in names],
                             name="count in the sequence shown: served", marker_color="#1565c0", yaxis="y2", offsetgroup=2))
    fig.update_layout(barmode="group", height=380, legend={"orientation": "h", "y": -0.3},
                      title=plotly_text(f"Served-template markers: {Path(check.data).name} against what the server "
                                        "sends"),
                      yaxis={"range": [0, 1.1], "title": "share of dump sequences"},
                      yaxis2={"overlaying": "y", "side": "right", "title": "count in one sequence", "rangemode": "tozero",
                              "dtick": 1})
    return fig


@figures.register
def template_figures(check: TemplateCheck) -> list[Any]:
    return [markers_figure(check)]

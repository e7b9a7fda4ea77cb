"""Views of served traffic: sampled beside greedy acceptance, the served vocabulary, where the chain breaks."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape

from ..probes.acceptance_result import AcceptanceResult
from ..probes.chain_break import ChainComparison
from .registry import figures, html_view, rich_view


TRAFFIC_COLUMNS = ("view", "greedy accept len (per round)", "sampled accept len (per round)",
                   "sampled full_acc per position (per round)", "sampled accept len per start")


def traffic_rows(result: AcceptanceResult) -> list[tuple[str, str, str, str, str]]:
    """One row per sampled view, in :data:`TRAFFIC_COLUMNS` order (per round: expected over the engine's rounds)."""
    if result.traffic is None:
        return []

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return [(name, num(v.greedy_accept_len), num(v.accept_len), " ".join(f"{a:.2f}" for a in v.full_acc),
             num(v.per_start.accept_len if v.per_start is not None else None))
            for name, v in result.traffic.sampled.items()]


def vocab_rows(result: AcceptanceResult) -> list[tuple[str, str]]:
    vocab = result.traffic.vocab if result.traffic is not None else None
    if vocab is None:
        return []
    rows = [("target tokens outside the draft vocab", f"{vocab.oov_tokens} of {vocab.tokens}"),
            ("per position (share of verify starts)", " ".join(f"{s:.2f}" for s in vocab.oov_share)),
            ("chains cut there by the vocabulary", " ".join(str(c) for c in vocab.cut)),
            ("accept len ceiling with this vocab (greedy tokens)",
             f"{vocab.ceiling_accept_len:.2f} of {1 + vocab.steps} (cost {vocab.cost:.2f})")]
    if vocab.sampled_oov_share is not None:
        rows.append(("sampled mass outside, per position", " ".join(f"{s:.2f}" for s in vocab.sampled_oov_share)))
    return rows


def traffic_rich(result: AcceptanceResult) -> list[Any]:
    """Tables appended to the acceptance view when the result carries served traffic."""
    from rich.table import Table

    parts: list[Any] = []
    rows = traffic_rows(result)
    if rows and result.traffic is not None:
        label = next(iter(result.traffic.sampled.values())).sampling.label()
        table = Table(title=f"speculative sampling as served ({label})", expand=False)
        for col in TRAFFIC_COLUMNS:
            table.add_column(col)
        for row in rows:
            table.add_row(*(escape(c) for c in row))
        parts.append(table)
    vrows = vocab_rows(result)
    if vrows:
        table = Table(title="served vocabulary", show_header=False, expand=False)
        for label, value in vrows:
            table.add_row(escape(label), escape(value))
        parts.append(table)
    return parts


def traffic_html(result: AcceptanceResult) -> str:
    out = ""
    rows = traffic_rows(result)
    if rows:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in TRAFFIC_COLUMNS)
        out += ("<p>Speculative sampling as served:</p><table><tr>" + head + "</tr>"
                + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
                + "</table>")
    vrows = vocab_rows(result)
    if vrows:
        out += ("<p>Served vocabulary:</p><table>" + "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td>"
                                                             "</tr>" for a, b in vrows) + "</table>")
    return out


def sampled_figure(result: AcceptanceResult) -> Any:
    """Per-position acceptance, greedy beside sampled, for each serving view."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    fig = go.Figure()
    assert result.traffic is not None
    for name, sampled in result.traffic.sampled.items():
        greedy = result.views[name].full_acc
        x = [f"position {k + 1}" for k in range(len(greedy))]
        fig.add_trace(go.Bar(x=x, y=list(greedy), name=f"{name} greedy"))
        fig.add_trace(go.Bar(x=x, y=list(sampled.full_acc), name=f"{name} sampled ({sampled.sampling.label()})"))
    fig.update_layout(barmode="group", title="Greedy vs sampled: per-position acceptance per round", height=380,
                      yaxis_range=[0, 1], yaxis_title="rate", legend={"orientation": "h", "y": -0.2})
    return fig


def vocab_figure(result: AcceptanceResult) -> Any:
    """Per position: share of starts whose target token is outside the draft vocab, and the ceiling it leaves."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    assert result.traffic is not None and result.traffic.vocab is not None
    vocab = result.traffic.vocab
    x = [f"position {k + 1}" for k in range(vocab.steps)]
    fig = go.Figure([go.Bar(x=x, y=list(vocab.oov_share), name="greedy target token outside the draft vocab"),
                     go.Scatter(x=x, y=list(vocab.ceiling), name="ceiling: every greedy token so far inside",
                                mode="lines+markers")])
    if vocab.sampled_oov_share is not None:
        fig.add_bar(x=x, y=list(vocab.sampled_oov_share), name="sampled: the target's probability mass outside")
    fig.update_layout(title=f"Served vocabulary: accept len ceiling {vocab.ceiling_accept_len:.2f} of "
                            f"{1 + vocab.steps} (greedy tokens)",
                      height=360, yaxis_range=[0, 1], legend={"orientation": "h", "y": -0.2})
    return fig


def traffic_figures(result: AcceptanceResult) -> list[Any]:
    if result.traffic is None:
        return []
    out = [sampled_figure(result)] if result.traffic.sampled else []
    if result.traffic.vocab is not None:
        out.append(vocab_figure(result))
    return out


def _whole_rows(c: ChainComparison) -> list[tuple[str, str, str]]:
    """The whole-chain figures (a log without per-position rates): what the log printed beside the offline's."""
    w = c.whole
    assert w is not None
    rows = [("accept len", f"{w.logged_accept_len:.2f}", f"{w.offline_accept_len:.2f}")]
    if w.logged_rate is not None or w.offline_rate is not None:
        rows.append((f"accept rate ({w.rate_formula or 'formula unknown'})", _maybe(w.logged_rate),
                     _maybe(w.offline_rate)))
    if c.offline:
        rows.append(("position 1 rate", f"<= {max(0.0, w.logged_accept_len - 1):.2f}", f"{c.offline[0]:.2f}"))
    return rows


def _maybe(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


@rich_view.register
def chain_rich(c: ChainComparison) -> Any:
    from rich.table import Table

    curve = f"offline {c.view}" + (f" sampled ({c.sampled})" if c.sampled else "")
    if c.whole is not None:
        table = Table(title=f"the whole chain: the log beside {escape(curve)} over {len(c.offline)} positions",
                      expand=False)
        for col in ("", "logged", "offline"):
            table.add_column(col)
        for row in _whole_rows(c):
            table.add_row(*row)
        return table
    table = Table(title=f"per-position acceptance: the log beside {escape(curve)}", expand=False)
    for col in ("position", "logged", "offline", ""):
        table.add_column(col)
    for k, (logged, offline) in enumerate(zip(c.logged, c.offline, strict=True)):
        mark = "first parting" if c.first_parting == k + 1 else ""
        table.add_row(str(k + 1), f"{logged:.2f}", f"{offline:.2f}", mark)
    return table


@html_view.register
def chain_html(c: ChainComparison) -> str:
    if c.whole is not None:
        body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td>{html.escape(d)}</td></tr>"
                       for a, b, d in _whole_rows(c))
        return (f"<h3>The whole chain: the log beside offline {html.escape(c.view)} over {len(c.offline)} "
                f"positions</h3><table><tr><th></th><th>logged</th><th>offline</th></tr>{body}</table>")
    rows = "".join(f"<tr><td>{k + 1}</td><td>{a:.2f}</td><td>{b:.2f}</td><td>"
                   f"{'first parting' if c.first_parting == k + 1 else ''}</td></tr>"
                   for k, (a, b) in enumerate(zip(c.logged, c.offline, strict=True)))
    return (f"<h3>Per-position acceptance: the log beside offline {html.escape(c.view)}</h3><table><tr><th>position"
            f"</th><th>logged</th><th>offline</th><th></th></tr>{rows}</table>")


@figures.register
def chain_figures(c: ChainComparison) -> list[Any]:
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    x = list(range(1, len(c.offline) + 1))
    if c.whole is not None:  # no per-position rates: the offline curve and the bound the log puts on position 1
        bound = max(0.0, c.whole.logged_accept_len - 1)
        fig = go.Figure([go.Scatter(x=x, y=list(c.offline), name=f"offline {c.view}", mode="lines+markers"),
                         go.Scatter(x=[1], y=[bound], name="served position 1, at most (log)", mode="markers")])
    else:
        fig = go.Figure([go.Scatter(x=x, y=list(c.logged), name="served (log)", mode="lines+markers"),
                         go.Scatter(x=x, y=list(c.offline), name=f"offline {c.view}", mode="lines+markers")])
    if c.first_parting is not None:
        fig.add_vline(x=c.first_parting, line_dash="dash", annotation_text="first parting")
    fig.update_layout(title="Where the chain breaks: per-position acceptance", height=360, yaxis_range=[0, 1],
                      xaxis_title="draft position")
    return [fig]


def temperature_figure(temperatures: Sequence[float], accept_len: Sequence[float | None],
                       full_acc: Sequence[Sequence[float]], selected: float,
                       measured: Mapping[float, float | None] | None = None) -> Any:
    """Accept length against the server's temperature (0 = greedy), the selected one marked, and its per-position
    acceptance beside greedy's; the engine's measured accept length where there is one."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]
    from plotly.subplots import make_subplots  # type: ignore[import-untyped]

    k = temperatures.index(selected)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55], subplot_titles=(
        "accept length per round against the temperature", f"per position at T = {selected:g} beside greedy"))
    fig.add_trace(go.Scatter(x=list(temperatures), y=list(accept_len), mode="lines+markers", name="estimate",
                             line={"color": "#1565c0"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=[selected], y=[accept_len[k]], mode="markers+text", name=f"T = {selected:g}",
                             marker={"size": 14, "color": "#e65100"}, text=[_two(accept_len[k])],
                             textposition="top center", showlegend=False), row=1, col=1)
    points = {t: v for t, v in (measured or {}).items() if v is not None}
    if points:
        fig.add_trace(go.Scatter(x=list(points), y=list(points.values()), mode="markers", name="measured by the engine",
                                 marker={"symbol": "x", "size": 12, "color": "#2e7d32"}), row=1, col=1)
    x = [f"position {p + 1}" for p in range(len(full_acc[k]))]
    if selected != 0.0 and 0.0 in temperatures:
        fig.add_trace(go.Bar(x=x, y=list(full_acc[temperatures.index(0.0)]), name="greedy", marker_color="#90a4ae"),
                      row=1, col=2)
    fig.add_trace(go.Bar(x=x, y=list(full_acc[k]), name=f"T = {selected:g}", marker_color="#e65100",
                         text=[f"{a:.2f}" for a in full_acc[k]], textposition="outside"), row=1, col=2)
    said = f"accept len {_two(accept_len[k])}" + (f", measured {_two(points[selected])}" if selected in points else "")
    fig.update_layout(title=f"Sampling as served: T = {selected:g}, {said}", height=400, barmode="group",
                      legend={"orientation": "h", "y": -0.2})
    fig.update_yaxes(title_text="accept length (bonus included)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="rate", range=[0, 1.1], row=1, col=2)
    fig.update_xaxes(title_text="temperature", row=1, col=1)
    return fig


def template_cost_figure(dump: AcceptanceResult, served: AcceptanceResult, selected: str = "served",
                         cost: float | None = None) -> Any:
    """The same draft on its dump (the traffic it was trained on) and on the served-template traffic, per position,
    the selected one in front; the legend's accept lengths and the title's cost are the acceptance budget's (greedy,
    checked within the draft vocabulary, as training's metrics check it)."""
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    fig = go.Figure()
    for name, result, color in (("dump", dump, "#2e7d32"), ("served", served, "#c62828")):
        view = result.views["as_trained"]
        label = {"dump": "the dump (training data)", "served": "served-template traffic"}[name]
        fig.add_trace(go.Bar(x=[f"position {p + 1}" for p in range(len(view.full_acc))], y=list(view.full_acc),
                             name=f"{label}: accept len {_two(result.in_vocab_accept_len)} (budget: within the draft vocabulary)", marker_color=color,
                             opacity=1.0 if name == selected else 0.3,
                             text=[f"{a:.2f}" for a in view.full_acc] if name == selected else None,
                             textposition="outside"))
    title = ("The template's cost: " + ("-" if cost is None else f"{cost:.2f} accept length")
             + " (greedy, as the acceptance budget prices it)")
    fig.update_layout(barmode="group", title=title, height=360, yaxis_range=[0, 1.1], yaxis_title="rate",
                      legend={"orientation": "h", "y": -0.2})
    return fig


def _two(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"

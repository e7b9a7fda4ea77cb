"""Figures and tables for the acceptance-log probe (no parsing or judging here)."""

from __future__ import annotations

from typing import Any

from ..probes.logs import FORMAT_DESCRIPTIONS, ZERO_ACCEPT_LEN, LogResult, LogSample
from .registry import figures, html_view, rich_view
from .style import html_text, markup


def _x(samples: list["LogSample"]) -> tuple[list[float], str]:
    """Seconds since the first timestamp when every sample has one, else the log line number."""
    if samples and all(s.seconds is not None for s in samples):
        return [float(s.seconds) for s in samples], "seconds since the first timestamped line"  # type: ignore[arg-type]
    return [float(s.line) for s in samples], "log line"


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def acceptance_figure(result: "LogResult") -> Any:
    """Accept length (with 1.0, zero threshold, break-even, expected) and accept rate over time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    samples = [s for s in result.samples if s.accept_len is not None and s.format != "sglang-lifetime"]
    x, xlabel = _x(samples)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[s.accept_len for s in samples], mode="lines+markers", name="accept len"))
    rated = [(xi, s.accept_rate) for xi, s in zip(x, samples, strict=True) if s.accept_rate is not None]
    if rated:
        fig.add_trace(go.Scatter(x=[r[0] for r in rated], y=[r[1] for r in rated], mode="lines",
                                 name="accept rate (as logged)", line={"dash": "dot"}), secondary_y=True)
    summary = result.summary
    guides = [(1.0, "bonus only (1.00)", "#c62828"), (ZERO_ACCEPT_LEN, f"zero threshold {ZERO_ACCEPT_LEN}", "#ef6c00")]
    if summary.break_even_accept_len is not None:
        guides.append((summary.break_even_accept_len, f"est. break-even {summary.break_even_accept_len:.2f}", "#6a1b9a"))
    if summary.expected_accept_len is not None:
        guides.append((summary.expected_accept_len, f"expected {summary.expected_accept_len:.2f}", "#2e7d32"))
    for y, label, color in guides:
        fig.add_hline(y=y, line_dash="dash", line_color=color, annotation_text=label, annotation_position="top left")
    fig.update_layout(title=f"Acceptance over time ({result.engine or 'unknown engine'})", height=380,
                      legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(title_text=xlabel)
    fig.update_yaxes(title_text="accept length (bonus included)", secondary_y=False)
    fig.update_yaxes(title_text="accept rate", secondary_y=True, range=[0, 1])
    return fig


def per_position_figure(result: "LogResult") -> Any:
    """vLLM per-position acceptance rates over time (one line per draft position)."""
    import plotly.graph_objects as go

    samples = [s for s in result.samples if s.per_position]
    x, xlabel = _x(samples)
    fig = go.Figure()
    width = max(len(s.per_position) for s in samples)
    for i in range(width):
        points = [(xi, s.per_position[i]) for xi, s in zip(x, samples, strict=True) if len(s.per_position) > i]
        fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                 name=f"position {i}"))
    fig.update_layout(title="Per-position acceptance rate", height=340, xaxis_title=xlabel,
                      yaxis={"title": "acceptance rate", "range": [0, 1]})
    return fig


def throughput_figure(result: "LogResult") -> Any:
    """Generation throughput (with the baseline) and running requests over time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    samples = [s for s in result.samples if s.gen_tps is not None or s.accepted_tps is not None]
    x, xlabel = _x(samples)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for attr, label in (("gen_tps", "generation tok/s"), ("accepted_tps", "accepted draft tok/s"),
                        ("drafted_tps", "drafted tok/s")):
        points = [(xi, getattr(s, attr)) for xi, s in zip(x, samples, strict=True) if getattr(s, attr) is not None]
        if points:
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                     name=label))
    running = [(xi, s.running_reqs) for xi, s in zip(x, samples, strict=True) if s.running_reqs is not None]
    if running:
        fig.add_trace(go.Scatter(x=[r[0] for r in running], y=[r[1] for r in running], mode="lines",
                                 name="running requests", line={"dash": "dot"}), secondary_y=True)
    if result.summary.baseline_tps is not None:
        fig.add_hline(y=result.summary.baseline_tps, line_dash="dash", line_color="#2e7d32",
                      annotation_text=f"baseline {result.summary.baseline_tps:.1f} tok/s")
    fig.update_layout(title="Throughput", height=340, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(title_text=xlabel)
    fig.update_yaxes(title_text="tokens/s", secondary_y=False)
    fig.update_yaxes(title_text="running requests", secondary_y=True)
    return fig


@figures.register
def log_figures(result: LogResult) -> list[Any]:
    """Every figure the parsed series allow (none when nothing was parsed)."""
    figs = []
    if any(s.accept_len is not None and s.format != "sglang-lifetime" for s in result.samples):
        figs.append(acceptance_figure(result))
    if any(s.per_position for s in result.samples):
        figs.append(per_position_figure(result))
    if any(s.gen_tps is not None or s.accepted_tps is not None for s in result.samples):
        figs.append(throughput_figure(result))
    return figs


def summary_rows(result: "LogResult") -> list[tuple[str, str]]:
    """(label, value) rows shared by the terminal and HTML views."""
    s, inf = result.summary, result.inference
    counters = dict(result.formats).get("vllm-prometheus") is not None
    rows = [("source", result.source), ("engine / format", f"{result.engine or '-'} · {result.format_era}")]
    if not counters:
        rows += [("lines", f"{result.total_lines} total, {len(result.samples)} parsed, {result.unparsed_lines} "
                           f"unparsed, {result.ignored_lines} ignored"),
                 ("accept len", f"mean {_fmt(s.mean_accept_len)}, median {_fmt(s.median_accept_len)}, last "
                                f"{_fmt(s.last_accept_len)}, min {_fmt(s.min_accept_len)}, max "
                                f"{_fmt(s.max_accept_len)} over {s.acceptance_lines} lines")]
    for name, count in result.formats:
        rows.append((f"format {name}", FORMAT_DESCRIPTIONS[name] if counters else
                     f"{count} lines: {FORMAT_DESCRIPTIONS[name]}"))
    if s.lifetime_accept_len is not None:
        rows.append(("accept len (server's counters)" if counters else "lifetime avg_spec_accept_length",
                     _fmt(s.lifetime_accept_len, ".3f")))
    if s.mean_accept_rate is not None:
        rows.append(("mean accept rate (as logged)", _fmt(s.mean_accept_rate, ".3f")))
    if s.mean_per_position:
        rows.append(("mean per-position rate", ", ".join(f"{v:.3f}" for v in s.mean_per_position)))
    if s.accepted_tokens is not None:
        rows.append(("accepted / drafted tokens", f"{s.accepted_tokens} / {s.drafted_tokens}"))
    rows.append(("draft tokens", f"{inf.num_draft_tokens if inf.num_draft_tokens else '-'} ({inf.source})"
                                 + (f": {inf.explanation}" if inf.explanation else "")))
    if s.mean_gen_tps is not None:
        rows.append(("mean generation tok/s", _fmt(s.mean_gen_tps, ".1f")
                     + (f" vs baseline {s.baseline_tps:.1f} ({s.mean_gen_tps / s.baseline_tps:.2f}x)"
                        if s.baseline_tps else "")))
    if s.mean_running_reqs is not None:
        rows.append(("mean running requests", _fmt(s.mean_running_reqs, ".1f")))
    if s.break_even_accept_len is not None:
        rows.append(("est. break-even accept len", _fmt(s.break_even_accept_len)))
    if result.unknown_fields:
        rows.append(("unknown fields (tolerated)", ", ".join(result.unknown_fields)))
    for number, text in result.unparsed_examples:
        rows.append((f"unparsed line {number}", text[:160]))
    for note in result.notes:
        rows.append(("note", note))
    return rows


@rich_view.register
def summary_rich(result: LogResult) -> Any:
    """A two-column rich table of the summary."""
    from rich.table import Table

    table = Table(title="acceptance log", show_header=False, expand=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for label, value in summary_rows(result):
        table.add_row(markup(label), markup(value))
    return table


@html_view.register
def summary_html(result: LogResult) -> str:
    """The summary as an HTML table (figures are added by the report)."""
    body = "".join(f"<tr><th style='text-align:left'>{html_text(k)}</th><td>{html_text(v)}</td></tr>"
                   for k, v in summary_rows(result))
    return f"<table class='eagle3lens-logs'>{body}</table>"

"""Figures, terminal section and HTML fragment for the d2t / t2d probe."""

from __future__ import annotations

from typing import Any

from ..probes.vocab import CANDIDATES, VocabResult
from .registry import figures, html_view, rich_view
from .style import html_text, plain

OK, BAD, MUTED, FIX = "#2e7d32", "#c62828", "#757575", "#1565c0"


def offset_figure(result: "VocabResult"):
    """The offset curve i -> d2t[i]; draft ids that break the invariants in red; the proven repair dashed."""
    import plotly.graph_objects as go

    d2t = result.d2t
    assert d2t is not None  # vocab_figures draws it only then
    fig = go.Figure()
    idx = list(range(d2t.numel()))
    fig.add_trace(go.Scattergl(x=idx, y=d2t.tolist(), mode="lines", name="d2t as stored", line={"color": MUTED}))
    bad = result.invariants.get("bad")
    if bad is not None and bool(bad.any()):
        where = bad.nonzero().flatten()
        fig.add_trace(go.Scattergl(x=where.tolist(), y=d2t[where].tolist(), mode="markers", name="invariant break",
                                   marker={"color": BAD, "size": 5}))
    repaired = result.candidate(result.repair) if result.repair else None
    if repaired is not None and repaired.name != "stored":
        fig.add_trace(go.Scattergl(x=idx, y=repaired.d2t.tolist(), mode="lines", name=f"repair: {CANDIDATES[repaired.name]}",
                                   line={"color": FIX, "dash": "dash"}))
    if result.vocab_size and result.draft_vocab_size:
        fig.add_hline(y=result.vocab_size - result.draft_vocab_size, line={"color": MUTED, "dash": "dot"},
                      annotation_text="V - N (max offset)")
    fig.add_hline(y=0, line={"color": MUTED, "dash": "dot"})
    fig.update_layout(title=f"d2t offsets: draft id i -> target id i + d2t[i] ({result.status})",
                      xaxis_title="draft id i", yaxis_title="d2t[i]", legend={"orientation": "h"})
    return fig


def coverage_figure(result: "VocabResult"):
    """Cumulative share of target-token mass: the draft vocab's tokens vs the N most frequent ones."""
    import plotly.graph_objects as go
    import torch

    cov = result.coverage
    assert cov is not None  # vocab_figures draws it only then
    total = float(cov.counts.sum()) or 1.0
    ideal = cov.counts.sort(descending=True).values.cumsum(0) / total
    draft = cov.counts[cov.draft_ids].sort(descending=True).values.cumsum(0) / total
    n = cov.draft_ids.numel()
    step = max(1, ideal.numel() // 4000)  # keep the figure light for V = 160k
    xs = torch.arange(1, ideal.numel() + 1)
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=xs[::step].tolist(), y=ideal[::step].tolist(), mode="lines",
                               name="most frequent target tokens", line={"color": MUTED}))
    fig.add_trace(go.Scattergl(x=xs[:n:step].tolist(), y=draft[::step].tolist(), mode="lines",
                               name=f"draft vocab ({cov.covered:.1%})", line={"color": OK}))
    fig.add_vline(x=n, line={"color": MUTED, "dash": "dot"}, annotation_text=f"N = {n}")
    fig.update_layout(title=f"token coverage ({cov.source}): draft {cov.covered:.1%} of target-token mass, "
                            f"best possible with N = {n}: {cov.ideal:.1%}",
                      xaxis_title="tokens (by frequency)", yaxis_title="share of target-token mass",
                      xaxis_type="log", legend={"orientation": "h"})
    return fig


@figures.register
def vocab_figures(result: VocabResult) -> list[Any]:
    figs = []
    if result.d2t is not None:
        figs.append(offset_figure(result))
    if result.coverage is not None:
        figs.append(coverage_figure(result))
    return figs


def _lines(result: "VocabResult") -> list[str]:
    lines = [f"{result.d2t_key or 'no d2t'} / {result.t2d_key or 'no t2d'}: N = {result.draft_vocab_size}, "
             f"V = {result.vocab_size}, status {result.status}"]
    if result.t2d_count is not None:
        lines.append(f"sum(t2d) = {result.t2d_count}")
    for c in result.candidates:
        bits = [("valid" if c.valid else "invalid")]
        if c.matches_t2d is not None:
            bits.append("matches t2d" if c.matches_t2d else "differs from t2d")
        if c.head_rows_equal is not None:
            bits.append(f"lm_head rows equal {c.head_rows_equal:.0%}, cosine {c.head_cosine:.3f}")
        lines.append(f"{CANDIDATES[c.name]}: " + ", ".join(bits))
    if result.repair:
        lines.append(f"proven repair: {CANDIDATES[result.repair]}")
    if result.coverage is not None:
        cov = result.coverage
        lines.append(f"coverage: {cov.covered:.1%} of target-token mass (best with N: {cov.ideal:.1%})")
        missed = ", ".join(f"{m.get('token', m['id'])!r} ({m['share']:.2%})" for m in cov.missed[:8])
        if missed:
            lines.append(f"most frequent missed: {missed}")
    lines.extend(result.notes)
    return lines


@rich_view.register
def vocab_rich(result: VocabResult) -> Any:
    from rich.text import Text

    text = Text()
    for i, line in enumerate(_lines(result)):
        style = "green" if "is expected here" in line or line.startswith("proven") else None
        text.append(("\n" if i else "") + plain(line), style=style)
    return text


@html_view.register
def vocab_html(result: VocabResult) -> str:
    items = "".join(f"<li>{html_text(line)}</li>" for line in _lines(result))
    return f"<div class='eagle3lens-vocab'><ul>{items}</ul></div>"

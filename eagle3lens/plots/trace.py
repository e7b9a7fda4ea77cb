"""Figures and terminal sections for the tracer, the aux-layer resolver and the wiring check."""

from __future__ import annotations

from typing import Any

from ..served.aux_layers import AuxResolution
from ..probes.wiring import WiringResult
from .registry import figures, html_view, rich_view
from .style import html_text, markup, plain

OK, BAD, WARN, MUTED = "#2e7d32", "#c62828", "#ef6c00", "#757575"
# a stage's state -> (line colour, fill, rich style)
STYLE = {"ok": (OK, "#e8f5e9", "green"), "bad": (BAD, "#ffebee", "bold red"), "warn": (WARN, "#fff3e0", "dark_orange"),
         "unknown": (MUTED, "#f5f5f5", "dim")}
D2T_STAGE = {"valid": ("ok", "N -> V ids"), "not-needed": ("ok", "N = V: ids as they are"),
             "identity": ("warn", "all-zero d2t: ids kept as draft ids"), "missing": ("bad", "MISSING: N < V, no d2t"),
             "invalid": ("bad", "INVALID: ids not increasing / outside V"), "unknown": ("unknown", "not read (meta)")}


def records_figure(rows: list[dict[str, Any]], title: str | None = None) -> Any:
    """A plotly table of traced calls (path, call, type, first input, first output)."""
    import plotly.graph_objects as go

    cols = ["path", "call", "type", "input", "output"]
    fig = go.Figure(go.Table(header={"values": cols},
                             cells={"values": [[plain(r[c]) for r in rows] for c in cols], "align": "left"}))
    fig.update_layout(title=title or f"{len(rows)} traced calls", margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def flow_stages(result: "WiringResult") -> list[tuple[str, str, str]]:
    """(stage, annotation, state: ok | bad | warn | unknown) for each step of the hidden-state flow, left to right."""
    r = result
    width = r.feature.shape[-1] if r.feature else 0
    layers = [k for k in r.layers_used if k >= 0]
    layers_ok = bool(layers) and tuple(layers) == tuple(sorted(set(r.resolution.trained_with)))
    width_ok = width == r.fc_in_features
    fed_ok = r.fc_ran and r.engine_error is None
    widths = " + ".join(str(m.shape[-1]) for _, m in r.captured) or "-"
    each = {m.shape[-1] for _, m in r.captured}  # what the target handed over (a 405B target: 16384, whatever H_t says)
    per_layer = next(iter(each)) if len(each) == 1 else r.target_hidden_size
    used = ", ".join(str(k) for k in layers) if layers else "final (post-norm)"
    n = r.logits.shape[-1] if r.logits else "?"
    d2t_state, d2t_note = D2T_STAGE.get(r.d2t_state, ("unknown", r.d2t_state))
    stages = [
        ("target layers", f"{r.num_target_layers} layers<br>used: {used}<br>trained: "
                          f"{', '.join(map(str, r.resolution.trained_with))}", layers_ok),
        ("capture", f"{len(r.captured)} x [T, {per_layer}]<br>{widths}", layers_ok),
        ("concat", f"width {width}<br>fc wants {r.fc_in_features}", width_ok),
        ("fc", ("ran: " if r.fc_ran else "BYPASSED: ") + f"{r.fc_in_features} -> {r.hidden_size}"
               + (f"<br>{html_text(r.engine_error[:60])}" if r.engine_error else ""), fed_ok),
        ("decoder layer", f"in {r.decoder_input.shape[-1] if r.decoder_input else '-'} (2H = {2 * r.hidden_size})",
         fed_ok),
        ("lm_head", f"{r.hidden_size} -> N = {n}", r.logits is not None),
    ]
    return [(name, note, "ok" if ok else "bad") for name, note, ok in stages] + [("d2t", d2t_note, d2t_state)]


def wiring_figure(result: WiringResult) -> Any:
    """The hidden-state flow, target layers -> ... -> d2t, annotated with traced widths, red where it breaks."""
    import plotly.graph_objects as go

    stages = flow_stages(result)
    fig = go.Figure()
    for i, (name, note, state) in enumerate(stages):
        color, fill, _ = STYLE[state]
        fig.add_shape(type="rect", x0=i * 1.3, x1=i * 1.3 + 1, y0=0, y1=1, line={"color": color, "width": 3},
                      fillcolor=fill)
        fig.add_annotation(x=i * 1.3 + 0.5, y=0.78, text=f"<b>{name}</b>", showarrow=False, font={"color": color})
        fig.add_annotation(x=i * 1.3 + 0.5, y=0.4, text=note, showarrow=False, font={"size": 10})
        if i:
            fig.add_annotation(x=i * 1.3, y=0.5, ax=i * 1.3 - 0.3, ay=0.5, xref="x", yref="y", axref="x", ayref="y",
                               showarrow=True, arrowhead=2, text="")
    title = f"hidden-state flow under {result.engine}" + (f" (scenario {result.scenario})" if result.scenario else "")
    fig.update_xaxes(visible=False, range=[-0.1, len(stages) * 1.3])
    fig.update_yaxes(visible=False, range=[-0.1, 1.1])
    fig.update_layout(title=title, height=260, margin={"l": 10, "r": 10, "t": 40, "b": 10}, plot_bgcolor="white")
    return fig


@rich_view.register
def wiring_rich(result: WiringResult) -> Any:
    from rich.table import Table

    table = Table(title=f"wiring under {result.engine}" + (f", scenario {result.scenario}" if result.scenario else ""),
                  expand=False)
    table.add_column("stage")
    table.add_column("traced")
    for name, note, state in flow_stages(result):
        table.add_row(f"[{STYLE[state][2]}]{markup(name)}[/]", markup(note.replace("<br>", "; ")))
    return table


@html_view.register
def wiring_html(result: WiringResult) -> str:
    rows = "".join(f"<tr><td style='color:{STYLE[state][0]};font-weight:bold'>{html_text(name)}</td>"
                   f"<td>{note}</td></tr>" for name, note, state in flow_stages(result))
    return f"<table class='wiring'><tr><th>stage</th><th>traced</th></tr>{rows}</table>"


@rich_view.register
def aux_resolution_rich(res: AuxResolution) -> Any:
    from rich.table import Table
    from rich.text import Text

    if not res.captured:  # the engine's default depends on the target's layer count
        read = f"ids {list(res.ids_read)} from {res.source}" if res.ids_read else "no id list it reads, so its default"
        return Text(plain(f"aux layers under {res.engine}: {read}; which target layers that captures depends on the "
                          "target's layer count: pass --target to resolve them"), style="dim")
    table = Table(title=markup(f"aux layers under {res.engine} (source: {res.source}, ids {list(res.ids_read)})"),
                  expand=False)
    table.add_column("HF index")
    table.add_column("meaning")
    table.add_column("trained with")
    trained = set(res.trained_with)
    for k, what in zip(res.captured, res.captured_as_inputs(), strict=True):
        table.add_row(str(k), markup(what), "[green]yes[/]" if k in trained else "[bold red]no[/]")
    return table


@figures.register
def wiring_figures(result: WiringResult) -> list[Any]:
    return [wiring_figure(result)]

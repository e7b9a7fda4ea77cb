"""Views of the launch-based wiring prediction: a terminal table and an HTML table (predicted beside observed)."""

from __future__ import annotations

from typing import Any

from ..probes.prediction import WiringPrediction
from .registry import html_view, rich_view
from .style import html_text, markup

OUTCOME = {"wired": ("aux states reach fc", "green"), "fc-bypassed": ("fc BYPASSED (silent)", "bold red"),
           "fails-at-start": ("server fails at start", "bold red"),
           "fails-at-first-decode": ("server fails at the first decode", "bold red"),
           "no-speculation": ("no speculative decoding", "yellow")}


def prediction_rows(p: WiringPrediction) -> list[tuple[str, str, str]]:
    """(aspect, predicted, observed) in the order a draft token's features travel."""
    r = p.resolution
    obs = p.observed or {}
    support = p.support
    target_class = "-" if support is None else (
        f"{support.served_by or 'none'}: " + ("captures aux states" if support.captures else "cannot capture"))
    rows = [
        ("launch", f"{p.launch.source}: {p.launch.engine} {p.algorithm or 'no speculation'}", ""),
        ("aux capture", "on" if p.aux_capture else "off", ""),
        ("target class", target_class, ""),
        ("layers captured", ", ".join(map(str, r.captured)) if r else "-",
         ", ".join(map(str, obs.get("layers_used") or ())) if obs else ""),
        ("width into the draft", str(p.received_width or "-"), str(obs.get("feature_width") or "") if obs else ""),
        ("fc in-features", str(p.fc_in_features or "-"), ""),
        ("fc runs", {"wired": "yes", "fc-bypassed": "no"}.get(p.outcome, "-"),
         ("yes" if obs.get("fc_ran") else "no") if obs else ""),
        ("outcome", OUTCOME[p.outcome][0], ""),
    ]
    if p.error:
        rows.append(("engine error", p.error, ""))
    return rows


@rich_view.register
def _(p: WiringPrediction) -> Any:
    from rich.table import Table

    observed = p.observed is not None
    table = Table(title=f"predicted wiring under {markup(p.engine)}", title_justify="left")
    table.add_column("aspect")
    table.add_column("predicted", overflow="fold")
    if observed:
        table.add_column("observed (trace)", overflow="fold")
    for aspect, predicted, seen in prediction_rows(p):
        style = OUTCOME[p.outcome][1] if aspect == "outcome" else None
        cells = [aspect, markup(predicted)] + ([markup(seen)] if observed else [])
        table.add_row(*cells, style=style)
    return table


@html_view.register
def _(p: WiringPrediction) -> str:
    observed = p.observed is not None
    head = "<tr><th>aspect</th><th>predicted</th>" + ("<th>observed (trace)</th>" if observed else "") + "</tr>"
    body = "".join(
        f"<tr><td>{html_text(a)}</td><td>{html_text(v)}</td>"
        + (f"<td>{html_text(o)}</td>" if observed else "") + "</tr>"
        for a, v, o in prediction_rows(p))
    return f"<table class='prediction'><thead>{head}</thead><tbody>{body}</tbody></table>"

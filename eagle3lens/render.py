"""Report rendering: terminal (rich), self-contained offline HTML (plotly.js inlined once), notebook fragment.

A :class:`Report` is data; drawing it is this module's job. Probe results contribute through the view
registry (:mod:`eagle3lens.plots.registry`): ``rich_view`` for a terminal section, ``html_view`` for an HTML
fragment and ``figures`` for plotly figures. Every piece of text that came from data (paths, names, finding
titles quoting them) is passed through :func:`eagle3lens.io.textsafe.printable` before it is printed.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .findings import Report, Severity
from .plots.registry import figures, html_view, rich_view
from .plots.style import SEVERITY_COLOR, SEVERITY_STYLE, fix_html, html_text, markup, plain, scroll_box


def verdict(report: Report) -> str:
    """One line: how bad it is and the first thing to look at (and, without an engine, the loader assumed)."""
    judged = f"as {report.judged_as} loads it: " if report.judged_as and not report.engine else ""
    return judged + _verdict(report)


def _verdict(report: Report) -> str:
    worst = report.worst
    if worst is None:
        return "OK: no findings"
    first = next(f for f in report.findings if f.severity == worst)
    counts = {s: sum(f.severity == s for f in report.findings) for s in Severity}
    tally = ", ".join(f"{counts[s]} {s.value}" for s in (Severity.CRITICAL, Severity.WARNING, Severity.INFO) if counts[s])
    return f"{worst.value.upper()}: {first.title} · {tally}"


NOT_A_TERMINAL_WIDTH = 4096
"""Output width where stdout is not a terminal (a CI log, a pipe, a file) and ``COLUMNS`` is unset: rich's default
there is 80 columns, which cut tensor names and paths in tables (``laye…``). Nothing on the CLI's paths fills the
width (tables do not expand, padding does not pad, rules are drawn at :data:`RULE_WIDTH`), so lines are as long as
their content."""
RULE_WIDTH = 80


def terminal(**kwargs: Any) -> Any:
    """A rich Console whose closed pipe (``eagle3lens engines | head -1``) raises ``BrokenPipeError`` for the CLI
    to end quietly with 0, instead of rich's own ``SystemExit(1)`` (1 means findings); off a terminal, without
    ``COLUMNS``, :data:`NOT_A_TERMINAL_WIDTH` wide."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    console = PipeConsole(**kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console.width = NOT_A_TERMINAL_WIDTH
    return console


def _rule(console: Any, title: str) -> None:
    """A section rule: the console's width on a terminal, at most :data:`RULE_WIDTH` off one."""
    from rich.rule import Rule

    console.print(Rule(title), width=None if console.is_terminal else min(console.width, RULE_WIDTH))


def print_renderable(result: Any, console: Any = None) -> None:
    """Print one result's terminal view (nothing when it has none)."""
    view = rich_view(result)
    if view is not None:
        (console or terminal()).print(view)


def render_report_terminal(report: Report, console: Any = None) -> None:
    """Verdict line first, then each probe's section (the doctor's ranked causes lead), then the findings in detail."""
    from rich.padding import Padding
    from rich.text import Text

    console = console or terminal()
    style = SEVERITY_STYLE.get(report.worst, "bold green") if report.worst else "bold green"
    console.print(f"[{style}]{markup(verdict(report))}[/]")
    ck = report.checkpoint
    if ck:
        console.print(f"checkpoint: {markup(ck.get('path'))}  layout: {markup(ck.get('layout'))}"
                      + (f"  engine: {markup(report.engine)}" if report.engine else ""), highlight=False)
    for name, result in report.results.items():
        view = rich_view(result)
        if view is not None:
            _rule(console, markup(name))
            console.print(view)
    if report.findings:
        _rule(console, "findings")
        for i, f in enumerate(report.findings, 1):
            console.print(f"[{SEVERITY_STYLE[f.severity]}]{i}. {f.severity.value}[/] [bold]{markup(f.code)}[/]  "
                          f"{markup(f.title)}", highlight=False)
            if f.detail:
                console.print(Padding(Text(plain(f.detail, newlines=True), style="dim"), (0, 0, 0, 3), expand=False))
            if f.fix:
                console.print(Padding(Text.from_markup(f"fix: [green]{markup(f.fix)}[/]"), (0, 0, 0, 3), expand=False))
    for note in report.notes:
        console.print(f"[dim]note: {markup(note, newlines=True)}[/]")


# Inline, so the layout holds where page CSS does not reach or is overridden: JupyterLab's output CSS
# right-aligns every table cell (the fix command: plots.style.fix_html). A long tensor name or path in a
# cell breaks inside it (overflow-wrap:anywhere) rather than setting the table's least width past the panel; the
# severity word never breaks (it wrapped as cri/tic/al), a finding code (the catalogue's: short) only at a hyphen.
CELL_STYLE = "text-align:left;vertical-align:top;overflow-wrap:anywhere"
SEVERITY_CELL_STYLE = "text-align:left;vertical-align:top;white-space:nowrap"
CODE_CELL_STYLE = "text-align:left;vertical-align:top"


def findings_html(report: Report) -> str:
    if not report.findings:
        return "<p class='ok'>No findings.</p>"
    td = f"<td style='{CELL_STYLE}'>"
    rows = []
    for i, f in enumerate(report.findings, 1):
        color = SEVERITY_COLOR[f.severity]
        evidence = html_text(json.dumps(f.to_dict()["evidence"], indent=1)[:4000], newlines=True)
        rows.append(
            f"<tr>{td}{i}</td><td style='{SEVERITY_CELL_STYLE};color:{color};font-weight:bold'>{f.severity.value}</td>"
            f"<td style='{CODE_CELL_STYLE}'><code>{html_text(f.code)}</code></td>{td}<b>{html_text(f.title)}</b><br>"
            f"{html_text(f.detail, newlines=True)}"
            f"<details><summary>evidence</summary><pre style='text-align:left;white-space:pre-wrap'>{evidence}</pre></details></td>"
            f"{td}{fix_html(f.fix)}</td></tr>"
        )
    head = "".join(f"<th style='{CELL_STYLE}'>{name}</th>" for name in ("#", "severity", "code", "what", "fix"))
    return scroll_box(f"<table class='findings'><thead><tr>{head}</tr></thead><tbody>" + "".join(rows)
                      + "</tbody></table>")


def render_report_fragment(report: Report) -> str:
    """HTML for a notebook cell (figures are displayed by the notebook itself)."""
    return (f"<div class='eagle3lens-report'><h3>{html_text(verdict(report))}</h3>"
            f"{findings_html(report)}{_notes_html(report)}</div>")


def _notes_html(report: Report) -> str:
    if not report.notes:
        return ""
    return "<ul class='notes'>" + "".join(f"<li>{html_text(n, newlines=True)}</li>" for n in report.notes) + "</ul>"


def script_json(text: str) -> str:
    """JSON text safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` (only ever inside JSON
    strings) become ``\\u003c``-style escapes, so no ``</script>`` or ``<!--`` can end the element early and
    ``json.loads`` of the element's text gives back the report exactly (entity escapes would not be decoded)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_report_html(report: Report, title: str = "eagle3lens report") -> str:
    """A standalone page that opens offline: plotly.js is inlined once, every figure drawn from its JSON."""
    from plotly.offline import get_plotlyjs

    sections = []
    for name, result in report.results.items():
        parts = [f"<h2>{html_text(name)}</h2>"]
        fragment = html_view(result)
        if fragment is not None:
            parts.append(fragment)
        for fig in figures(result):
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
        sections.append("<section>" + "".join(parts) + "</section>")
    ck = report.checkpoint or {}
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html_text(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; }}
th {{ background: #f4f4f4; }} code, pre {{ font-size: 90%; }} .ok {{ color: #2e7d32; }}
</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>{html_text(title)}</h1>
<p><b>{html_text(verdict(report))}</b></p>
<p>checkpoint: <code>{html_text(ck.get('path', ''))}</code> · layout: {html_text(ck.get('layout', ''))}
{'· engine: ' + html_text(report.engine) if report.engine else ''}</p>
<h2>Findings</h2>
{findings_html(report)}
{_notes_html(report)}
{''.join(sections)}
<script type="application/json" id="eagle3lens-report">{script_json(report.to_json(indent=None))}</script>
</body></html>
"""

"""Shared look and the escaping every view applies to data (names, paths, values, log lines).

``markup(x)`` is for text inside rich markup (control characters made visible, then ``[`` escaped),
``plain(x)`` for a rich ``Text`` (no markup), ``html_text(x)`` for HTML (control characters made
visible, then HTML-escaped), ``plotly_text(x)`` for a plotly label, title, tick or hover text (plotly reads a
subset of HTML there: ``<s>`` strikes the rest through, ``<br>`` breaks the line; it decodes the escapes back).
"""

from __future__ import annotations

import html

from rich.markup import escape as _markup_escape

from ..findings import Severity
from ..io.textsafe import printable

MAX_ROWS = 200  # rows of a terminal table: one of a million tensors helps no one and takes minutes to lay out
SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
SEVERITY_COLOR = {Severity.CRITICAL: "#c62828", Severity.WARNING: "#b26a00", Severity.INFO: "#1565c0"}


def fix_html(fix: str | None) -> str:
    """A fix command for an HTML table cell, shown whole: it wraps after a space (``break-spaces``: every space kept
    and none hanging past the cell's edge as ``pre-wrap`` lets a line's last one) and, where a path is longer than
    the column, inside the path (a fixed box that scrolled sideways showed half a command, and copying what shows gave
    half a command). The wraps are soft: a copy is still one line. ``min-width`` keeps the column wide enough to
    read when the table is squeezed. Styles inline: a notebook's output CSS wins over a stylesheet."""
    return (f"<div class='fix' style='min-width:16em'><code class='cmd' style='white-space:break-spaces;"
            f"overflow-wrap:anywhere'>{html_text(fix or '')}</code></div>")


def scroll_box(table: str) -> str:
    """``table`` in a box that scrolls sideways when its panel is narrower than the table's least width."""
    return f"<div style='max-width:100%;overflow-x:auto'>{table}</div>"


def plain(text: object, *, newlines: bool = False) -> str:
    """Data for a rich ``Text`` or a plain print: control characters as visible escapes."""
    return printable(text, newlines=newlines)


def markup(text: object, *, newlines: bool = False) -> str:
    """Data inside rich markup: control characters as visible escapes, then markup escaped."""
    return _markup_escape(printable(text, newlines=newlines))


def html_text(text: object, *, newlines: bool = False) -> str:
    """Data inside HTML: control characters as visible escapes, then HTML-escaped (quotes too)."""
    return html.escape(printable(text, newlines=newlines))


def plotly_text(text: object) -> str:
    """Data inside a plotly string (trace name, category, title, hover text): control characters as visible
    escapes, then HTML-escaped, which plotly shows as the text itself (``<s>`` stays ``<s>``, not a strikethrough)."""
    return html.escape(printable(text), quote=False)

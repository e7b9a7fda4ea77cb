"""Shared look and the escaping every view applies to data (names, paths, values, log lines).

``markup(x)`` is for text inside rich markup (control characters made visible, then ``[`` escaped),
``plain(x)`` for a rich ``Text`` (no markup), ``html_text(x)`` for HTML (control characters made
visible, then HTML-escaped).
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
    """A fix command for an HTML table cell: on one line (it copies cleanly and ``--to`` never lands on a line of
    its own) in a box of fixed width that scrolls sideways (a box sized by its content would widen the column to
    the whole command), so a long path never pushes the table past its panel, where a notebook output cuts it off.
    Styles inline: a notebook's output CSS wins over a stylesheet."""
    return (f"<div class='fix' style='width:18em;overflow-x:auto'><code class='cmd' style='white-space:nowrap'>"
            f"{html_text(fix or '')}</code></div>")


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

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

SEVERITY_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
SEVERITY_COLOR = {Severity.CRITICAL: "#c62828", Severity.WARNING: "#b26a00", Severity.INFO: "#1565c0"}


def plain(text: object, *, newlines: bool = False) -> str:
    """Data for a rich ``Text`` or a plain print: control characters as visible escapes."""
    return printable(text, newlines=newlines)


def markup(text: object, *, newlines: bool = False) -> str:
    """Data inside rich markup: control characters as visible escapes, then markup escaped."""
    return _markup_escape(printable(text, newlines=newlines))


def html_text(text: object, *, newlines: bool = False) -> str:
    """Data inside HTML: control characters as visible escapes, then HTML-escaped (quotes too)."""
    return html.escape(printable(text, newlines=newlines))

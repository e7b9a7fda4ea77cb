"""Text from data made safe to print: control characters shown as escapes, never sent to a terminal or page.

Tensor names, config values, file names, log lines and a remote host's output are data an attacker (or a
broken tool) controls. Sent raw, an ESC starts a terminal control sequence (clear the screen, set the window
title, an OSC-8 hyperlink), a newline forges a second ``eagle3lens: error:`` line, and a bidi control reorders
what a reader sees. :func:`printable` turns each such character into a visible ``\\xNN`` / ``\\uNNNN`` escape;
everything else, including ordinary non-ASCII text, is left as it is.

rich's markup escape is a different job (it neutralises ``[``); views apply both.
"""

from __future__ import annotations

import re

BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
LINE_SEPARATORS = "\u2028\u2029"  # a terminal or browser may start a new line at these

_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{BIDI_CONTROLS}{LINE_SEPARATORS}]")
_UNSAFE_KEEP_NEWLINES = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}{LINE_SEPARATORS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, newlines: bool = False) -> str:
    """``str(text)`` with C0/C1 controls, DEL, bidi controls and line separators as visible escapes.

    ``\\n`` and ``\\t`` are escaped too (a single-line field stays one line); ``newlines=True`` keeps ``\\n``
    for text that is several lines by design (a multi-line note).
    """
    s = str(text)
    return (_UNSAFE_KEEP_NEWLINES if newlines else _UNSAFE).sub(_escape, s)


def is_printable(text: str) -> bool:
    """True when :func:`printable` would leave ``text`` unchanged."""
    return _UNSAFE.search(text) is None

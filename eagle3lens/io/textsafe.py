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


# ESC sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC (ESC P/X/^/_ ... ST), any other
# ESC + intermediates + final; and their 8-bit C1 forms. Every branch is a run of one disjoint class: linear.
ESC_BRANCHES = ("\x1b\\[[0-?]*[ -/]*[@-~]?", "\x1b\\][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?",
                "\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\\\|\x9c)?", "\x1b[ -/]*[0-~]?")  # each starts with ESC
C1_BRANCHES = ("\x9b[0-?]*[ -/]*[@-~]?", "[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?")
ESCAPE_PATTERN = "|".join(ESC_BRANCHES + C1_BRANCHES)
_ESCAPES = re.compile(ESCAPE_PATTERN)
_REPLACED = {c: "\ufffd" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0), 0x061c, 0x200e, 0x200f,
                                    *range(0x202a, 0x202f), *range(0x2066, 0x206a), 0x2028, 0x2029]}
_REPLACED[ord("\t")] = " "


def clean_text(text: str) -> str:
    """``text`` safe to print: terminal escape sequences removed, other C0/C1, DEL and bidi controls replaced."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        text = _ESCAPES.sub("", text)
    return text.translate(_REPLACED)


def escape_sequences(text: str) -> list[str]:
    """The terminal escape sequences in ``text``, in order (CSI, OSC, DCS... and their 8-bit forms)."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        return _ESCAPES.findall(text)
    return []


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (colour codes in a log line), other characters kept."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        return _ESCAPES.sub("", text)
    return text


def clip(text: object, limit: int = 300) -> str:
    """``text`` cut to about ``limit`` characters (head and tail kept), newlines shown as spaces: an error
    line stays one bounded line whatever a parameter or cell printed."""
    flat = " ".join(str(text).splitlines())
    if len(flat) <= limit:
        return flat
    return f"{flat[: limit * 2 // 3]}…[{len(flat) - limit} characters]…{flat[-(limit // 3):]}"

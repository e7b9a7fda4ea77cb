"""Text from files, logs or remote hosts made safe to print on a terminal or in a report."""

from __future__ import annotations

import re

# ESC sequences: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/SOS/PM/APC (ESC P/X/^/_ ... ST), any other
# ESC + intermediates + final; and their 8-bit C1 forms. Every branch is a run of one disjoint class: linear.
_ESCAPES = re.compile(
    "\x1b\\[[0-?]*[ -/]*[@-~]?"
    "|\x1b\\][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?"
    "|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\\\|\x9c)?"
    "|\x1b[ -/]*[0-~]?"
    "|\x9b[0-?]*[ -/]*[@-~]?"
    "|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?")
_CONTROLS = {c: "\ufffd" for c in [*range(0x20), 0x7f, *range(0x80, 0xa0), 0x061c, 0x200e, 0x200f,
                                    *range(0x202a, 0x202f), *range(0x2066, 0x206a), 0x2028, 0x2029]}
_CONTROLS[ord("\t")] = " "


def clean_text(text: str) -> str:
    """``text`` safe to print: terminal escape sequences removed, other C0/C1, DEL and bidi controls replaced."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        text = _ESCAPES.sub("", text)
    return text.translate(_CONTROLS)



def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences (colour codes in a log line), other characters kept."""
    if "\x1b" in text or "\x9b" in text or "\x9d" in text or "\x90" in text:
        return _ESCAPES.sub("", text)
    return text

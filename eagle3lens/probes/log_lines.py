"""A server log as blocks of lines: bounded reads of an untrusted file (or a log's text), escapes stripped per block.

The file must be a regular file of at most ``LogBounds.log_bytes``; it is read in blocks through an incremental
UTF-8 decoder, and a line over ``LogBounds.line_bytes`` is skipped to its end without being held, so memory stays
bounded by the block and the cap whatever the file holds.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..errors import CheckpointError, LogFileError
from ..io.inputs import GiB, open_regular
from ..io.textsafe import ESC_BRANCHES, clean_text, strip_escapes
from .log_formats import TREE_HINT, VLLM_VERSION_HINTS, anchored

MAX_LOG_BYTES = 2 * GiB  # a server log over this is refused (split it or pass its tail)
MAX_LINE_BYTES = 64 * 1024  # a longer line is no engine's metrics line: counted and skipped
MAX_SERIES = 4096  # samples kept for the series/figures; more are decimated evenly (the summary uses all)
BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class LogBounds:
    """The limits one parse runs under (``logs.parse_log`` reads them from its module's names at call time)."""

    log_bytes: int = MAX_LOG_BYTES
    line_bytes: int = MAX_LINE_BYTES
    series: int = MAX_SERIES
    block: int = BLOCK_BYTES


class Block(NamedTuple):
    """Lines of one read block, the same lines without terminal escapes, and whether any carries start-up facts."""

    lines: list[str | None]  # None: a line over the line cap (skipped, never parsed)
    clean: list[str | None] | list[str]  # line i without escape sequences (``lines`` itself when none has one)
    startup: bool
    crlf: bool


# textsafe's ESC-introduced sequences as one literal-prefixed pattern (found at memchr speed) whose classes stop at a
# newline: over a block's lines joined by "\n" it removes from each line what strip_escapes removes from it alone,
# when the block holds no 8-bit C1 introducer (those blocks are stripped line by line)
BLOCK_ESCAPES = re.compile("\x1b(?:" + "|".join(b.removeprefix("\x1b").replace("[^\x07\x1b\x9c]", "[^\x07\x1b\x9c\n]")
                                                 .replace("[^\x1b\x9c]", "[^\x1b\x9c\n]") for b in ESC_BRANCHES) + ")")
_C1 = ("\x9b", "\x9d", "\x90", "\x98", "\x9e", "\x9f")


def _block(lines: list[str | None], *texts: str) -> Block:
    escapes = any("\x1b" in t or "\x9b" in t or "\x9d" in t or "\x90" in t for t in texts)
    startup = any("speculative_num_" in t or "speculative_eagle_topk" in t or TREE_HINT in t
                  or any(h in t for h in VLLM_VERSION_HINTS) for t in texts)
    clean: list[str | None] | list[str] = lines
    if escapes and any(c in t for t in texts for c in _C1):
        clean = [None if line is None else strip_escapes(line) for line in lines]
    elif escapes:
        clean = BLOCK_ESCAPES.sub("", "\n".join("" if line is None else line for line in lines)).split("\n")
    return Block(lines, clean, startup, any("\r" in t for t in texts))


def _file_blocks(handle: BinaryIO, path: Path, bounds: LogBounds) -> Iterator[Block]:
    """The file's lines (without newline) in blocks of about ``bounds.block`` bytes, read through an incremental
    UTF-8 decoder.

    A line over ``bounds.line_bytes`` characters that spans blocks is skipped to its end without being held; memory
    stays bounded by the block and the cap, and at most ``bounds.log_bytes`` are read even if the file grows."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    budget, tail, skipping = bounds.log_bytes, "", False
    with handle:
        try:
            while budget > 0:
                data = handle.read(min(bounds.block, budget))
                budget -= len(data)
                text = decoder.decode(data, final=not data)
                parts = text.split("\n")
                rest = parts.pop()
                if parts:
                    head = tail
                    lines: list[str | None] = [None if skipping else tail + parts[0], *parts[1:]]
                    skipping, tail = False, rest
                    yield _block(lines, head, text)
                elif not skipping:
                    tail += rest
                if not skipping and len(tail) > bounds.line_bytes:
                    skipping, tail = True, ""
                if not data:
                    break
        except OSError as exc:
            raise LogFileError(clean_text(str(path)), f"cannot read log file ({exc.strerror or exc})") from None
    if skipping or tail:
        yield _block([None if skipping else tail], tail)


def _text_blocks(text: str) -> Iterator[Block]:
    parts = text.split("\n")
    if parts[-1] == "":  # the newline ending the last line opens no new one
        parts.pop()
    lines: list[str | None] = [*parts]
    yield _block(lines, text)


def open_lines(path_or_text: str | os.PathLike[str], bounds: LogBounds) -> tuple[str, Iterator[Block]]:
    """(source label, block iterator). Paths are files; a str with a newline or a metrics anchor is text."""
    if isinstance(path_or_text, os.PathLike) or (
            isinstance(path_or_text, str) and "\n" not in path_or_text and len(path_or_text) < 4096
            and (os.path.exists(path_or_text) or not anchored(path_or_text))):
        path = Path(path_or_text)
        try:
            handle = open_regular(path, bounds.log_bytes, "log file")
        except CheckpointError as exc:
            raise LogFileError(clean_text(exc.path), exc.problem) from None
        return clean_text(str(path)), _file_blocks(handle, path, bounds)
    return "<text>", _text_blocks(str(path_or_text))

"""Reading a JSON file a user points at: every way it can fail becomes one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, Eagle3LensError, UsageError
from .inputs import MiB, read_regular

MAX_JSON_BYTES = 64 * MiB
"""Largest JSON file read (a config, a shard index, a parameters file): megabytes at most in practice."""

MAX_INT_DIGITS = 100
"""Longest integer a JSON file may hold: far above any size or id, far below Python's 4,300-digit limit for
``int()`` (past which ``json.loads`` raises a bare ValueError)."""

MAX_JSON_DEPTH = 64
"""Deepest nesting a JSON file may hold: configs nest a handful of levels; past a few hundred, copying or writing
one back (``json.dumps`` recurses) exhausts Python's stack wherever the call already is."""


class _LongInteger(ValueError):
    pass


def bounded_int(text: str) -> int:
    """``json.loads(..., parse_int=bounded_int)``: an integer of more than :data:`MAX_INT_DIGITS` digits is refused
    before ``int()`` runs (it would be quadratic in the digits, and past 4,300 raise a traceback)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _LongInteger(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def read_json(path: str | Path, what: str, error: type[Eagle3LensError] = UsageError,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The parsed contents of ``path``; a path that is not a regular file of at most ``max_bytes``, an unreadable
    file, bad UTF-8, invalid JSON or nesting too deep for the parser raises ``error`` (CheckpointError for
    checkpoint files, UsageError otherwise) as ``"<path>: <problem with <what>>"``."""
    try:
        if not Path(path).exists():  # said as before: "cannot read <what> (No such file or directory)"
            raise FileNotFoundError(2, "No such file or directory", str(path))
        value = json.loads(read_regular(path, max_bytes, what).decode("utf-8"), parse_int=bounded_int)
        if too_deep(value):
            raise RecursionError
        return value
    except FileNotFoundError as exc:
        problem = f"cannot read {what} ({exc.strerror or exc})"
    except CheckpointError as exc:  # not a regular file, too large or unreadable
        problem = exc.problem
    except _LongInteger as exc:
        problem = f"invalid {what}: {exc}"
    except OSError as exc:
        problem = f"cannot read {what} ({exc.strerror or exc})"
    except UnicodeDecodeError:
        problem = f"invalid {what}: not UTF-8 text"
    except json.JSONDecodeError as exc:
        problem = f"invalid {what}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        problem = f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)"
    if issubclass(error, CheckpointError):
        raise error(path, problem)
    raise error(f"{path}: {problem}")


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether parsed JSON nests objects/arrays more than ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

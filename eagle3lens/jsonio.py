"""Reading a JSON file a user points at: every way it can fail becomes one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import CheckpointError, Eagle3LensError, UsageError
from .inputs import read_regular


def read_json(path: str | Path, what: str, error: type[Eagle3LensError] = UsageError,
              max_bytes: int | None = None) -> Any:
    """The parsed contents of ``path``; an unreadable file, bad UTF-8, invalid JSON or nesting too deep for the
    parser raises ``error`` (CheckpointError for checkpoint files, UsageError otherwise) as
    ``"<path>: <problem with <what>>"``. With ``max_bytes`` the file must also be a regular file of at most that
    size (``inputs.read_regular``: a FIFO or device is refused, never read)."""
    try:
        if max_bytes is not None:
            return json.loads(read_regular(path, max_bytes, what).decode("utf-8"))
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except CheckpointError as exc:
        problem = exc.problem
    except OSError as exc:
        problem = f"cannot read {what} ({exc.strerror or exc})"
    except UnicodeDecodeError:
        problem = f"invalid {what}: not UTF-8 text"
    except json.JSONDecodeError as exc:
        problem = f"invalid {what}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        problem = f"{what} is nested too deeply"
    if issubclass(error, CheckpointError):
        raise error(path, problem)
    raise error(f"{path}: {problem}")

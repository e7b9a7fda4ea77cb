"""Error types: every bad input becomes one of these, with a one-line message for people.

The CLI prints ``eagle3lens: error: <message>`` on one line (control characters escaped) and exits 2.
Every exception type of the package lives here::

    Eagle3LensError                      base; never a traceback for the user
    ├── FileError(path, problem)         an input file that is missing, unreadable or malformed
    │   ├── CheckpointError              a checkpoint file or directory (headers, index, config, tensors)
    │   │   ├── WriteVerifyError         bytes read back from a file being written differ from their source
    │   │   └── NoChatTemplate           a target with no tokenizer, or one without a chat template
    │   └── LogFileError                 a server log
    ├── UsageError                       arguments that do not make sense (unknown engine, bad value)
    ├── ConversionRefused                a rewrite that cannot be done faithfully (--force where allowed)
    ├── MetaTraceUnsupported             an architecture whose forward cannot run on meta tensors
    ├── NotebookCellError(path, problem) a walkthrough cell failed (names the cell and its error)
    └── RemoteError                      a GPU host that cannot be reached, trusted or used
        └── HostKeyError                 its host key is unknown (without opt-in) or has changed
"""

from __future__ import annotations

from pathlib import Path

from .io.textsafe import clip


class Eagle3LensError(Exception):
    """Base class: the CLI prints ``str(error)`` on one line and exits 2."""


class FileError(Eagle3LensError):
    """An input file that is missing, unreadable or malformed: ``path`` names it, ``problem`` says what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        shown = self.path if len(self.path) <= 400 else f"{self.path[:200]}…[{len(self.path) - 300} characters]…{self.path[-100:]}"
        super().__init__(f"{shown}: {problem}")


class CheckpointError(FileError):
    """A checkpoint file or directory is missing, malformed or unsafe."""


class WriteVerifyError(CheckpointError):
    """Bytes read back from a file being written (``convert``'s output) differ from their source."""


class NoChatTemplate(CheckpointError):
    """A target directory with no tokenizer, or a tokenizer without a chat template: nothing renders chat."""


class LogFileError(FileError):
    """A log file that is missing or unreadable."""


class UsageError(Eagle3LensError):
    """Arguments that do not make sense together (unknown engine, bad option value...)."""


class ConversionRefused(Eagle3LensError):
    """A conversion or repair that cannot be done faithfully (``--force`` overrides where allowed)."""


class StandInCalled(RuntimeError):
    """``--execute``: the engine asked a stand-in (a compiled extension absent here) a question only the real one
    answers; engines treat it as the hardware being absent."""


class MetaTraceUnsupported(Eagle3LensError):
    """An architecture whose forward cannot run on meta tensors."""


class NotebookCellError(Eagle3LensError):
    """A walkthrough cell failed; names the cell (``code cell n of N`` in the source notebook) and its error.

    ``path`` is the source notebook, ``problem`` the failed cell and its error, ``executed`` the partial
    executed notebook kept for reading.
    """

    def __init__(self, notebook: str | Path, cell: str, first_line: str, error: str, executed: Path) -> None:
        self.notebook = self.path = str(notebook)
        self.cell = cell
        self.first_line = first_line
        self.error = error
        self.executed = executed
        self.problem = f"{cell} `{clip(first_line, 120)}` failed: {clip(error, 400)}"
        super().__init__(f"{clip(self.notebook)}: {self.problem} (partial notebook: {executed})")


class MeasureFailed(Eagle3LensError):
    """``--measure`` could not be made for a reason of its own harness (no engine Python, a time-out, no record):
    it says nothing about the draft, and the report says "not measured"."""


class RemoteError(Eagle3LensError):
    """A remote host cannot be reached, trusted, authenticated or used for a run."""


class HostKeyError(RemoteError):
    """The host key is unknown (without opt-in) or has changed."""

"""The ``eagle3lens`` entry point: a thin layer over the probes (subcommands live in ``commands/``)."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import pkgutil
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__, commands
from .errors import Eagle3LensError
from .io.textsafe import printable

EXIT_BAD_INPUT = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (``eagle3lens: error: keys: ... (eagle3lens keys
    --help)``), not its usage block followed by the error; subcommand parsers are of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # the subcommands' parsers (build_parser fills it)

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("eagle3lens").strip()
        where = f"{command}: " if command else ""
        print(f"eagle3lens: error: {printable(where + message)} (see {printable(self.prog)} --help)", file=sys.stderr)
        self.exit(EXIT_BAD_INPUT)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]  # argparse types it by overloads
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse, but arguments a subcommand does not take are reported by that subcommand's parser, so the
        line points to its help (``eagle3lens doctor --help``), not the top-level one."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self.commands.get(getattr(parsed, "command", None) or "", self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="eagle3lens",
        description="Forensic debugging of EAGLE-3 draft models: why is accept len 1.00?",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=commands.example_epilog(
            "eagle3lens demo demo/                      # build the miniature incident",
            "eagle3lens doctor demo/speculators --engine sglang==0.5.11 --log demo/sglang.log",
            "eagle3lens info demo/speculators --json",
        ),
    )
    parser.add_argument("--version", action="version", version=f"eagle3lens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not module.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{module.name}").register(sub)
    parser.commands = dict(sub.choices)
    return parser


# top-level modules of the optional extras: a missing one is an install problem, named in one line
EXTRA_OF_MODULE = {
    **dict.fromkeys(("papermill", "nbformat", "nbconvert", "nbclient", "jupyter_client", "ipykernel",
                     "ipywidgets", "IPython", "jupyterlab", "jupyter_core"), "notebook"),
    "paramiko": "remote",
}
DEBUG_ENV = "EAGLE3LENS_DEBUG"


def missing_module_message(exc: ImportError) -> str:
    """One line naming what to install for a module that failed to import."""
    module = (exc.name or "").split(".")[0] or "?"
    extra = EXTRA_OF_MODULE.get(module)
    if extra:
        return f"this needs the [{extra}] extra ({module} is not installed): pip install 'eagle3lens[{extra}]'"
    return (f"Python module {module!r} is not installed or does not import ({type(exc).__name__}); "
            "reinstall eagle3lens with its dependencies: pip install --force-reinstall eagle3lens")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Exit codes: 0 ran clean, 1 findings at/above --fail-on, 2 any error, 130 interrupted
    (argparse itself exits 0 for --help and 2 for bad arguments)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_BAD_INPUT
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe is found here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except Eagle3LensError as exc:
        return _error(str(exc))
    except OSError as exc:  # a path the user gave that cannot be read or written
        if exc.errno == errno.EPIPE and exc.filename is None:
            return _closed_pipe()
        where = f"{exc.filename}: " if exc.filename else ""
        return _error(f"{where}{exc.strerror or exc}")
    except ImportError as exc:  # a missing optional extra or a broken install: never exit 1, never a traceback
        return _error(missing_module_message(exc))
    except KeyboardInterrupt:
        print("eagle3lens: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001  # a bug: one line, exit 2 (1 means findings), the traceback on request
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        problem = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return _error(f"internal error: {type(exc).__name__}: {problem} (please report it; "
                      f"{DEBUG_ENV}=1 shows the traceback)")


def _closed_pipe() -> int:
    """The reader of stdout went away (``eagle3lens engines | head -1``): stop quietly, as git does. What was
    written was read; 0, never 1 (which means findings) nor 2. Later writes (the interpreter's last flush) go
    to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0


def _error(message: str) -> int:
    print(f"eagle3lens: error: {printable(message)}", file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

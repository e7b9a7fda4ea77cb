"""The ``eagle3lens`` entry point: a thin layer over the probes (subcommands live in ``commands/``)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

from . import __version__, commands
from .errors import Eagle3LensError
from .textsafe import printable

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except Eagle3LensError as exc:
        print(f"eagle3lens: error: {printable(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a path the user gave that cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"eagle3lens: error: {printable(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("eagle3lens: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

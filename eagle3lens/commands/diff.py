"""``eagle3lens diff A B``: tensors only in A / B, renamed, dtype/shape and value changes."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import Checkpoint
from ..findings import Report
from ..progress import bars
from . import add_output_options, example_epilog, finish


def run(args: argparse.Namespace) -> int:
    from ..probes.diff import diff

    a = Checkpoint.open(args.a)
    report = Report(checkpoint=a.summary())
    report.add("diff", diff(a, args.b, names_only=args.names_only, progress=bars(sys.stderr.isatty())))
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare two checkpoints (renames by content, value changes)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens diff demo/speculators.orig demo/speculators",
                                             "eagle3lens diff a/ b/ --names-only     # headers only"))
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--names-only", action="store_true", help="compare names, dtypes and shapes only (no tensor bytes)")
    add_output_options(p)
    p.set_defaults(func=run)

"""``eagle3lens info CKPT``: layout, DraftSpec and the tensor table, from headers only."""

from __future__ import annotations

import argparse

from ..checkpoint import Checkpoint, InfoResult  # InfoResult moved to checkpoint; kept here for one release
from ..findings import Report
from . import add_output_options, example_epilog, finish


def run(args: argparse.Namespace) -> int:
    ckpt = Checkpoint.open(args.checkpoint)
    report = Report(checkpoint=ckpt.summary())
    report.add("info", InfoResult(ckpt))
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="layout, DraftSpec and tensor table (headers only)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens info demo/speculators", "eagle3lens info model.safetensors --json"))
    p.add_argument("checkpoint", metavar="CKPT", help="checkpoint directory, .safetensors, index.json or .bin/.pt file")
    add_output_options(p)
    p.set_defaults(func=run)


__all__ = ["InfoResult", "register", "run"]

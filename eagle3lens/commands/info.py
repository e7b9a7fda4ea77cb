"""``eagle3lens info CKPT``: layout, DraftSpec and the tensor table, from headers only."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ..checkpoint import Checkpoint
from ..findings import Report
from . import add_output_options, example_epilog, finish


@dataclass(frozen=True)
class InfoResult:
    """The tensor table of a checkpoint; no findings of its own (its view: :mod:`eagle3lens.plots.info`)."""

    ckpt: Checkpoint
    findings: tuple = ()

    def to_dict(self) -> dict:
        return {"tensors": [t.to_dict() for t in self.ckpt.tensors.values()]}


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

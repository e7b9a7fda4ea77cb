"""``eagle3lens weights CKPT``: streaming statistics and provenance (trained, init, NaN, copy of the target)."""

from __future__ import annotations

import argparse
import sys

from ..checkpoint import Checkpoint
from ..findings import Report
from ..progress import bars
from . import add_output_options, example_epilog, finish, positive_int


def run(args: argparse.Namespace) -> int:
    from ..probes.weights import check_device, weight_stats

    check_device(args.device)
    ckpt = Checkpoint.open(args.checkpoint)
    report = Report(checkpoint=ckpt.summary())
    report.add("weights", weight_stats(ckpt, target=args.target, against=args.against, names=args.names,
                                       device=args.device, threads=args.threads, progress=bars(sys.stderr.isatty())))
    if args.target is None:
        report.notes.append("no --target given: embed_tokens / lm_head copies not checked")
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "weights", help="streaming weight statistics: trained or init? NaN? copies of the target?",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=example_epilog(
            "eagle3lens weights demo/broken-untrained            # decoder at init -> weights/init-like",
            "eagle3lens weights demo/speculators --target demo/target",
            "eagle3lens weights final/ --against epoch0/ --names 'layers.0.*'",
            "eagle3lens weights big-draft/ --device cuda --json",
        ),
    )
    p.add_argument("checkpoint", metavar="CKPT", help="checkpoint directory, .safetensors, index.json or .bin/.pt file")
    p.add_argument("--target", metavar="T", help="target checkpoint: check embed_tokens and lm_head[t2d] copies")
    p.add_argument("--against", metavar="CKPT2", help="reference checkpoint: per-tensor relative change and cosine")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: where chunks are reduced")
    p.add_argument("--names", metavar="PATTERN", help="only tensors matching this glob, e.g. 'layers.0.*'")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="CPU threads streaming a large tensor side by side (default: usable cores, at most 4)")
    add_output_options(p)
    p.set_defaults(func=run)

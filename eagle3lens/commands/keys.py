"""``eagle3lens keys CKPT --engine E``: simulate the engine's weight loading from headers only."""

from __future__ import annotations

import argparse

from ..checkpoint import Checkpoint
from ..findings import Report
from . import add_output_options, example_epilog, finish
from ._execute import add_execute_options, engine_output_notes, executed_load, executing


def run(args: argparse.Namespace) -> int:
    from ..engines import engine_notes, resolve
    from ..probes.keys import simulate_load

    ckpt = Checkpoint.open(args.checkpoint).require_draft()
    if executing(args):
        from ..probes.executed import stand_ins_note  # imports torch: only when executing

        result = executed_load(ckpt, args, args.target_layers)
        report = Report(checkpoint=ckpt.summary(), engine=result.engine)
        report.notes.append(stand_ins_note(result))
        report.notes.extend(result.report_notes)
        report.notes.extend(engine_output_notes(result, args.verbose))
        report.add("keys", result)
        return finish(report, args)
    profile = resolve(args.engine)
    report = Report(checkpoint=ckpt.summary(), engine=profile.spec)
    report.notes.extend(engine_notes(profile))
    result = simulate_load(ckpt, profile, num_target_layers=args.target_layers)
    report.notes.extend(result.report_notes)
    report.add("keys", result)
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="which tensors an engine loads, drops or chokes on (headers only)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens keys demo/speculators --engine sglang==0.5.11",
                                             "eagle3lens keys demo/eagle --engine vllm==0.33.0 --json",
                                             "eagle3lens keys demo/eagle --engine installed --execute",
                                             "eagle3lens engines            # the known NAME==VERSION values"))
    p.add_argument("checkpoint", metavar="CKPT", help="draft checkpoint directory or file")
    p.add_argument("--engine", "-e", required=True, metavar="E", help="NAME[==VERSION][:PATH] or installed, e.g. sglang==0.5.11, vllm==0.33.0:v1 "
                        "(eagle3lens engines --help explains the forms)")
    p.add_argument("--target-layers", type=int, default=None, metavar="L",
                   help="number of target layers, to check aux layer defaults")
    add_execute_options(p, "the fates")
    add_output_options(p)
    p.set_defaults(func=run)

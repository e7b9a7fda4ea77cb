"""``eagle3lens keys CKPT --engine E``: simulate the engine's weight loading from headers only."""

from __future__ import annotations

import argparse

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..findings import Report
from . import add_output_options, example_epilog, finish


def run(args: argparse.Namespace) -> int:
    from ..engines import engine_notes, resolve
    from ..probes.keys import simulate_load

    if args.host and not args.execute:
        raise UsageError("--host runs the host's engine: add --execute (the simulation needs no host)")
    if (args.execute or args.engine_root) and args.engine.strip().lower() != "installed":
        raise UsageError(f"--execute runs the installed engine's own loader: write --engine installed, not "
                         f"--engine {args.engine}")
    ckpt = Checkpoint.open(args.checkpoint).require_draft()
    if args.execute or args.engine_root:
        from ..engines.executed_result import execute_load

        execution = None
        if args.host:
            from ..engines.execute_remote import execute_on_host

            execution = execute_on_host(ckpt, args.host, fallback_class=None, python=args.python,
                                        ssh_config=args.ssh_config, engine_root=args.engine_root)
        result = execute_load(ckpt, root=args.engine_root, num_target_layers=args.target_layers, execution=execution)
        report = Report(checkpoint=ckpt.summary(), engine=result.engine)
        report.notes.append("executed: the engine's own load_weights ran on meta tensors; stand-ins: "
                            + ", ".join(s["target"] for s in result.stand_ins))
        report.add("keys", result)
        return finish(report, args)
    profile = resolve(args.engine)
    report = Report(checkpoint=ckpt.summary(), engine=profile.spec)
    report.notes.extend(engine_notes(profile))
    result = simulate_load(ckpt, profile, num_target_layers=args.target_layers)
    report.notes.extend(n for n in result.notes if n.startswith("the runtime paths differ"))
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
    p.add_argument("--execute", action="store_true",
                   help="with --engine installed: run the engine's own load_weights on meta tensors (no GPU, no "
                        "weights read) instead of simulating it; differences are engine/simulation-disagrees")
    p.add_argument("--engine-root", metavar="DIR", default=None,
                   help="with --execute: the engine package in DIR (an unpacked wheel) instead of the installed one")
    p.add_argument("--host", metavar="H", help="with --execute: run the engine installed on GPU host H over SSH (only "
                                               "the headers travel; --engine-root is then a directory there)")
    p.add_argument("--python", default="python3", help="the Python on --host (with eagle3lens and the engine)")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh config file for --host (default ~/.ssh/config)")
    add_output_options(p)
    p.set_defaults(func=run)

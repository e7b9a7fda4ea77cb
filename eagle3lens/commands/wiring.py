"""``eagle3lens wiring``: predict from the launch whether the target's aux states will reach the draft's fc."""

from __future__ import annotations

import argparse

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..findings import Report
from ..launch import Launch, launch_from_log, parse_launch
from . import add_output_options, example_epilog, finish


def read_launch(command: str | None, log: str | None) -> Launch:
    """The launch from a pasted command line, else from a server log's start-up lines."""
    if command is not None and log is not None:
        raise UsageError("give the launch once: --launch CMD or --log FILE")
    if command is not None:
        return parse_launch(command)
    if log is not None:
        launch = launch_from_log(log)
        if launch is None:
            raise UsageError(f"{log}: no launch arguments in this log (SGLang's server_args=ServerArgs(...) line or "
                             "vLLM's non-default args); pass --launch with the server command line")
        return launch
    raise UsageError("wiring needs the launch: --launch 'python -m sglang.launch_server ...' or --log FILE")


def run(args: argparse.Namespace) -> int:
    from ..probes.prediction import predict_wiring

    launch = read_launch(args.launch, args.log)
    draft = Checkpoint.open(args.draft)
    result = predict_wiring(draft, target=args.target, engine=args.engine, launch=launch, headers_only=True)
    report = Report(checkpoint=draft.summary(), engine=result.engine)
    report.add("prediction", result)
    report.notes.extend(result.notes)
    if draft.spec.has_d2t:
        report.notes.append("headers only: the d2t's ids were not read, so a mapping past the target vocabulary "
                            "(vLLM fails its first decode) is not predicted here; `eagle3lens doctor` reads them")
    if args.engine is None:
        report.notes.append(f"no --engine given: predicted for {result.engine}, the newest release known")
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "wiring", help="predict from the launch whether aux states reach the draft's fc (config.json only)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Reads the target's config.json (no weights), the draft's config and headers, the engine release "
                    "and the server launch (a pasted command line, or the start-up lines of a server log), and "
                    "predicts whether the server captures aux hidden states, which layers, the width the draft "
                    "receives against fc's in-features, and the outcome: wired, fc bypassed, or a start-up failure "
                    "with the engine's own error. The command line is parsed, never run.",
        epilog=example_epilog(
            "eagle3lens wiring --target demo/target --draft demo/eagle --engine sglang==0.5.11 --log demo/sglang-eagle.log",
            "eagle3lens wiring --target kimi/config.json --draft kimi-eagle3 --engine sglang==0.5.9 \\",
            "    --launch 'python -m sglang.launch_server --model-path kimi --speculative-algorithm EAGLE3 ...'"))
    p.add_argument("--target", metavar="T", required=True,
                   help="the target's config.json, or its directory (weights are not read)")
    p.add_argument("--draft", metavar="D", required=True, help="draft checkpoint directory or file")
    p.add_argument("--engine", metavar="E", help="engine NAME[==VERSION] (default: the launch's engine, newest release)")
    p.add_argument("--launch", metavar="CMD", help="the server command line, quoted (parsed, never run)")
    p.add_argument("--log", metavar="FILE", help="a server log whose start-up lines record the launch arguments")
    add_output_options(p)
    p.set_defaults(func=run)

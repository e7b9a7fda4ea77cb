"""``eagle3lens logs FILE``: acceptance and throughput from an SGLang / vLLM server log.

A log with no decode lines is not an error: the command prints a result that says
nothing was parsed and exits 0 (the file may simply predate the first decode batch).
A missing or unreadable file, or one that is not a regular file of at most 2 GiB, exits 2.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from ..findings import Report
from ..probes.logs import parse_log
from . import add_output_options, example_epilog, finish, positive_float, positive_int


def run(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.metrics is None):
        raise UsageError("give a server log FILE or --metrics URL|FILE (the server's Prometheus /metrics), one of them")
    if args.metrics is not None:
        from ..probes.served_metrics import read_metrics

        if args.engine and args.engine.split("==")[0].strip().lower() != "vllm":
            raise UsageError("--metrics reads vLLM's spec_decode counters; SGLang's accept length is in its log")
        result = read_metrics(args.metrics, num_draft_tokens=args.num_draft_tokens, baseline_tps=args.baseline_tps,
                              expected_accept_len=args.expected_accept_len)
    else:
        result = parse_log(args.file, engine=args.engine, num_draft_tokens=args.num_draft_tokens,
                           baseline_tps=args.baseline_tps, expected_accept_len=args.expected_accept_len)
    report = Report(checkpoint={}, engine=args.engine or result.engine)
    report.add("logs", result)
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "logs", help="parse accept len / accept rate / tok/s from an SGLang or vLLM server log",
        description="Parse SGLang 'Decode batch' and vLLM 'SpecDecoding metrics' lines by label and say whether "
                    "the draft is accepted at all (logs/zero-acceptance), too little (logs/low-acceptance) or "
                    "costs throughput (logs/speculation-slower). Unparsed lines are counted, never fatal.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=example_epilog(
            "eagle3lens logs demo/sglang.log",
            "eagle3lens logs server.log --engine sglang==0.5.5 --num-draft-tokens 5 --baseline-tps 90",
            "eagle3lens logs vllm-0.8.5.log --engine vllm==0.8.5",
            "eagle3lens logs vllm.log --expected-accept-len 3.2 --json",
            "eagle3lens logs --metrics http://127.0.0.1:8000/metrics",
        ))
    p.add_argument("file", metavar="FILE", nargs="?", help="server log (SGLang or vLLM stdout/stderr)")
    p.add_argument("--metrics", metavar="URL|FILE",
                   help="instead of a log: a vLLM server's Prometheus metrics (http://HOST:PORT/metrics, or a saved "
                        "copy): the accept length and per-position rates its own counters give")
    p.add_argument("--engine", metavar="E",
                   help="sglang or vllm, optionally ==VERSION: read the log by that release's convention (vLLM "
                        "0.8.5's mean length without the bonus token, SGLang's accept-rate formula); default: detect, "
                        "and report release-dependent lines with every reading")
    p.add_argument("--num-draft-tokens", type=positive_int, metavar="K",
                   help="SGLang --speculative-num-draft-tokens, or vLLM num_speculative_tokens "
                        "(default: inferred from the log when it can be)")
    p.add_argument("--baseline-tps", type=positive_float, metavar="X",
                   help="tokens/s of the same server without speculative decoding")
    p.add_argument("--expected-accept-len", type=positive_float, metavar="X",
                   help="accept length the draft's training metrics promise (bonus token included)")
    add_output_options(p)
    p.set_defaults(func=run)

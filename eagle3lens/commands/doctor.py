"""``eagle3lens doctor CKPT``: every applicable probe, ranked causes, a shareable report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..doctor import diagnose
from ..errors import UsageError
from ..progress import bars
from ..render import render_report_html
from ..io.safewrite import write_text_atomic
from ..io.textsafe import printable
from ..checkpoint import Checkpoint
from . import add_output_options, example_epilog, finish, positive_float, positive_int
from ._execute import add_execute_options, engine_output_notes, executing, host_execution, local_root
from ._measure import add_measure_options, check_host_options, measured_engine, with_measurement
from ._served import add_served_options, check_sampling_options, sampling_notes, served_sampling, wants_budget
from .trace import DTYPE_NAMES, SCENARIO_NAMES


def write_html(out: Path, page: str) -> None:
    """Write beside the destination, then rename: a failed write never leaves half a report."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, page)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the HTML report ({exc.strerror or exc})") from None


def run(args: argparse.Namespace) -> int:
    measure = None
    check_host_options(args)
    if args.measure:
        if args.target is None or (args.data is None and args.prompts is None and args.chat is None):
            raise UsageError("--measure serves the samples the acceptance estimate scores: give --target T and "
                             "--data D, --prompts F or --chat FILE.jsonl")
        if args.execute:
            raise UsageError("--measure names the engine it serves with (--engine installed); run --execute apart")
        args.engine = measured_engine(args)

        def measure(result: Any, samples: Any, teacher: Any) -> Any:
            return with_measurement(args, result, samples, teacher, sampling)
    check_sampling_options(args)
    scored = args.target is not None and (args.data is not None or args.prompts is not None or args.chat is not None)
    if not scored and (args.temperature is not None or args.request is not None):
        raise UsageError("--temperature / --request score the acceptance estimate: give --target T and --data D, "
                         "--prompts F or --chat FILE.jsonl")
    sampling, served, remark = served_sampling(args) if scored else (None, None, None)
    execution = host_execution(Checkpoint.open(args.checkpoint).require_draft(), args) if executing(args) else None
    report = diagnose(args.checkpoint, engine=args.engine, target=args.target, log=args.log,
                      baseline_tps=args.baseline_tps, num_draft_tokens=args.num_draft_tokens,
                      scenario=args.scenario, weights=not args.no_weights, device_map=args.device_map,
                      dtype=args.dtype, progress=bars(not args.json), launch=args.launch,
                      data=args.data, prompts=args.prompts, execute=args.execute, chat=args.chat,
                      engine_root=local_root(args), execution=execution, execute_timeout=args.execute_timeout,
                      steps=args.steps, measure=measure, sampling=sampling,
                      expected_accept_len=args.expected_accept_len, budget=scored and wants_budget(args))
    if "acceptance" in report.results:
        report.notes.extend(sampling_notes(args, report.results["acceptance"], sampling, served, remark))
    if "keys" in report.results and report.results["keys"].execution is not None:
        report.notes.extend(engine_output_notes(report.results["keys"], args.verbose))
    if args.html:
        write_html(Path(args.html), render_report_html(report, title=f"eagle3lens doctor: {args.checkpoint}"))
    code = finish(report, args)
    if args.html and not args.json:
        print(f"HTML report: {printable(args.html)}")
    return code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="run every applicable probe and rank the likely causes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Why is accept len 1.00? Runs the load simulation (--engine), vocab and weights probes, the aux-layer "
                    "resolver and wiring check (--target), and the log probe (--log); ranks the causes in causal order.",
        epilog=example_epilog(
            "eagle3lens doctor demo/speculators --engine sglang==0.5.11 --log demo/sglang.log",
            "eagle3lens doctor demo/eagle --engine sglang==0.5.11 --target demo/target --scenario aux-off",
            "eagle3lens doctor out/draft --engine vllm==0.33.0 --fail-on warning   # gate in a training pipeline",
            "eagle3lens doctor demo/speculators --engine sglang==0.5.11 --html report.html",
            "eagle3lens doctor demo/speculators --engine sglang==0.5.11 --target demo/target --data demo/hidden-states "
            "--log demo/sglang.log",
            "eagle3lens doctor demo/speculators --engine vllm==0.33.0 --target demo/target --chat demo/chat.jsonl",
            "eagle3lens doctor demo/eagle --engine sglang==0.5.11 --target demo/target --data demo/hidden-states "
            "--chat demo/chat.jsonl --temperature 0.7 --log demo/sglang-eagle.log   # the acceptance budget"),
    )
    p.add_argument("checkpoint", metavar="CKPT", help="draft checkpoint (directory or file)")
    p.add_argument("--engine", metavar="E", help="serving engine, NAME[==VERSION][:PATH] or installed, e.g. sglang==0.5.11, "
                        "vllm==0.33.0:v1 (eagle3lens engines --help explains the forms)")
    add_execute_options(p, "the keys fate")
    p.add_argument("--target", metavar="T", help="target model checkpoint (HF layout): copies, wiring, aux layers")
    p.add_argument("--log", metavar="FILE", help="server log with acceptance lines (SGLang or vLLM)")
    p.add_argument("--baseline-tps", type=positive_float, metavar="X", help="decode tok/s without speculation, for break-even")
    p.add_argument("--num-draft-tokens", type=positive_int, metavar="K", help="draft tokens per step, when the log cannot say")
    p.add_argument("--scenario", choices=SCENARIO_NAMES,
                   help="reproduce an engine wiring fault in the wiring check")
    p.add_argument("--device-map", metavar="MAP", help="place the target with accelerate for the wiring check (e.g. auto)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="target dtype for the wiring check (auto: as stored; default float32)")
    p.add_argument("--data", metavar="D", help="hidden-state dump: adds the offline acceptance estimate and the "
                                               "data's provenance (which target layers it came from; needs --target)")
    p.add_argument("--prompts", metavar="F", help="prompts for a live acceptance estimate (needs --target)")
    p.add_argument("--chat", metavar="FILE.jsonl",
                   help="served conversations (needs --target): the live acceptance estimate over them as the server "
                        "renders them, or with --data the dump's chat template checked against them")
    add_served_options(p, launch_help="the server command line, quoted (parsed, never run): predicts the wiring "
                       "with --target, gives the K it drafts and, with --request, its sampling defaults; without it the "
                       "--log's start-up arguments are used")
    p.add_argument("--no-weights", action="store_true", help="skip weight statistics (reads every tensor byte)")
    p.add_argument("--html", metavar="OUT", help="also write a self-contained offline HTML report")
    add_measure_options(p, host_options=False)
    add_output_options(p)
    p.set_defaults(func=run, launch_sampling=False)

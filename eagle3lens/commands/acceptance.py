"""``eagle3lens acceptance DRAFT``: offline acceptance as trained, as an engine serves the draft, and after the fix."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UsageError
from ..findings import Report
from ..io.textsafe import printable
from ..probes.engine_init import EMPTY_MEMORY
from ..progress import TqdmBars
from ._measure import add_measure_options, check_host_options
from ._served import add_served_options, check_sampling_options, sampling_notes, wants_budget
from ._served import served_sampling as served_sampling_of
from ._target import require_target_weights
from . import add_output_options, example_epilog, finish, positive_int


def run(args: argparse.Namespace) -> int:
    from ..checkpoint import Checkpoint
    from ..convert import fixed_draft
    from ..probes.acceptance import estimate_acceptance

    if sum(x is not None for x in (args.data, args.prompts, args.chat)) != 1:
        raise UsageError("give --data D (a hidden-state dump), or --target T with --prompts F or --chat FILE.jsonl "
                         "(live capture), one of them")
    check_sampling_options(args)
    if args.target is None:
        raise UsageError("acceptance needs --target T: its final norm and lm_head give the teacher's tokens")
    require_target_weights(args.target, "acceptance", "06_acceptance")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible here; use --device cpu")
    check_host_options(args)
    if args.measure:
        from ._measure import measured_engine

        args.engine = measured_engine(args)
    sampling, served_sampling, remark = served_sampling_of(args)
    draft = Checkpoint.open(args.draft).require_draft()
    log, steps, steps_note, served_k = _served_k(args)
    target: Any = args.target
    data: Any = args.data
    if args.prompts is not None:
        from ..probes.acceptance import live_samples

        data, target = live_samples(draft, args.target, args.prompts, args.engine, new_tokens=args.new_tokens,
                                    device=args.device, device_map=args.device_map, limit=args.limit)
    bars = not args.json and sys.stderr.isatty()
    if args.chat is not None:
        from ..probes.chat import chat_samples

        data, target = chat_samples(draft, args.target, args.chat, args.engine, new_tokens=args.new_tokens,
                                    device=args.device, device_map=args.device_map, limit=args.limit,
                                    progress=TqdmBars(unit="conversation") if bars else None)
    progress = TqdmBars(unit="sample") if bars else None
    result = estimate_acceptance(draft, data, target=target, engine=args.engine, steps=steps,
                                 scenario=args.scenario, device=args.device, limit=args.limit,
                                 fixed=False if args.no_fixed else fixed_draft, empty_memory=args.empty_memory,
                                 progress=progress, sampling=sampling, served_vocab=args.data is None,
                                 traffic="chat" if args.chat else "prompts" if args.prompts else "dump")
    agreement = None
    if log is not None and log.summary.mean_accept_len is not None:  # the doctor's judgement, the same function
        from ..probes.acceptance import held_against_log

        result, agreement = held_against_log(result, log.summary.mean_accept_len, args.log, served_k)
    if args.measure:
        from ._measure import with_measurement

        result = with_measurement(args, result, data, target, sampling)
    report = Report(checkpoint=draft.summary(), engine=result.engine)
    report.add("acceptance", result)
    if wants_budget(args):
        from ..probes.budget import acceptance_budget

        budget = acceptance_budget(result, expected=args.expected_accept_len, log=args.log,
                                   logged=log.summary.mean_accept_len if log is not None else None)
        report.add("budget", budget)
        report.notes.extend(budget.notes)
    report.notes.extend(result.notes)
    report.notes.extend(sampling_notes(args, result, sampling, served_sampling, remark))
    if steps_note is not None:
        report.notes.append(steps_note)
    if agreement is not None:
        report.notes.append(agreement)
    if log is not None:
        from ..probes.chain_break import chain_note, compare_with_log

        comparison = compare_with_log(result, log, path=args.log)
        if comparison is None:
            report.notes.append(f"{printable(args.log)}: no acceptance lines: no served chain to compare")
        else:
            report.add("chain", comparison)
            report.notes.append(chain_note(comparison))
    return finish(report, args)


def _served_k(args: argparse.Namespace) -> tuple[Any, int | None, str | None, int | None]:
    """The parsed --log (or None), K to score, a note saying where K came from, and the K the launch or log
    states (None when neither does). K scored: --steps, else the server's (the rounds it counts depend on K),
    else the draft's config (None here)."""
    from ..launch import launch_from_log, parse_launch
    from ..probes.chain_break import served_steps
    from ..probes.limits import check_steps
    from ..probes.logs import parse_log

    log = None
    if args.log is not None:
        engine_name = args.engine.split("==")[0] if args.engine else None
        log = parse_log(args.log, engine=args.engine if engine_name in ("sglang", "vllm") else None,
                        expected_accept_len=args.expected_accept_len)
    launch = parse_launch(args.launch) if args.launch is not None else \
        launch_from_log(args.log) if args.log is not None else None
    served, source = served_steps(log, launch)
    if args.steps is not None or served is None:
        return log, args.steps, None, served
    note = f"K = {served} draft steps, from {source} (--steps to override)"
    return log, check_steps(served, f"K from {source}"), note, served


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "acceptance", help="offline acceptance: as trained, as an engine serves the draft, after convert",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs the draft over hidden-state data (a speculators / SpecForge / eagle3lens dump, or captured "
                    "live from the target over prompts) and reports speculators' training metrics (full_acc_k, "
                    "cond_acc_k), the greedy chain's per-position acceptance and accept length as trained, as the "
                    "engine loads and wires the draft, after `convert --to E`, and each cause fixed alone.",
        epilog=example_epilog(
            "eagle3lens acceptance demo/speculators --data demo/hidden-states --target demo/target --engine sglang==0.5.11",
            "eagle3lens acceptance demo/eagle --data demo/hidden-states --target demo/target --engine sglang==0.5.11 "
            "--scenario aux-off",
            "eagle3lens acceptance demo/speculators --target demo/target --prompts prompts.txt --engine vllm==0.33.0",
            "eagle3lens acceptance demo/speculators --target demo/target --chat demo/chat.jsonl --temperature 0.7 "
            "--top-p 0.9",
            "eagle3lens acceptance demo/speculators --target demo/target --chat demo/chat.jsonl --engine vllm==0.33.0 "
            "--request request.json",
            "eagle3lens acceptance demo/eagle --target demo/target --chat demo/chat.jsonl --engine sglang==0.5.11 "
            "--temperature 0.7 --expected-accept-len 1.5 --log demo/sglang-eagle.log   # the budget",
            "eagle3lens acceptance out/draft --data hs/ --target big/target --device cuda --steps 3 --json"))
    p.add_argument("draft", metavar="DRAFT", help="draft checkpoint (directory or file)")
    p.add_argument("--data", metavar="D", help="hidden-state dump: a folder or one sample file")
    p.add_argument("--target", metavar="T", help="HF target model directory (with --data only its final norm and "
                                                 "lm_head are read, and embed_tokens where the engine shares it)")
    p.add_argument("--prompts", metavar="F", help="prompts for live capture: text lines (target's tokenizer), lines "
                                                  "of token ids, or a JSON list of id lists")
    p.add_argument("--chat", metavar="FILE.jsonl",
                   help="live capture over served conversations: one JSON list of {role, content} messages a line, "
                        "rendered with the target tokenizer's chat_template (generation prompt on)")
    p.add_argument("--log", metavar="F", help="server log: vLLM's per-position acceptance rates beside the offline "
                                              "curve (where they part), or SGLang's accept length and rate beside "
                                              "the offline chain's")
    p.add_argument("--engine", metavar="E", help="serving engine NAME[==VERSION]: adds the as-served and fixed views")
    add_served_options(p)
    p.add_argument("--scenario", choices=("aux-off",),
                   help="the engine captures no aux states (final state fed; on SGLang its EAGLE algorithm, which also "
                        "installs the target's embed and head)")
    p.add_argument("--empty-memory", choices=EMPTY_MEMORY, default="noise",
                   help="what a parameter the engine allocates with torch.empty and never writes holds: noise "
                        "(default: uninitialised memory carries no trained signal) or zeros (the most favourable case)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where draft and teacher run")
    p.add_argument("--device-map", metavar="MAP", help="live capture: place the target with accelerate (e.g. auto)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="score at most N samples")
    p.add_argument("--new-tokens", type=positive_int, default=32, metavar="N",
                   help="live capture: greedy tokens generated after each prompt (default 32)")
    p.add_argument("--no-fixed", action="store_true", help="do not convert the draft to score the fixed view")
    add_measure_options(p)
    add_output_options(p)
    p.set_defaults(func=run)

"""``eagle3lens trace``: follow the target's aux hidden states into the draft, as an engine wires them."""

from __future__ import annotations

import argparse

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..findings import Report
from . import add_output_options, example_epilog, finish


def run(args: argparse.Namespace) -> int:
    from ..probes.meta_trace import PRESETS, trace_full_size
    from ..probes.wiring import check_wiring

    engine = args.engine or "vllm"
    if args.preset:
        if args.target or args.draft:
            raise UsageError("--preset builds its own target and draft: drop --target/--draft")
        if args.device != "meta":
            raise UsageError("--preset runs full-size shapes only: use --device meta")
        result = trace_full_size(args.preset, engine=engine, scenario=args.scenario, arch=args.arch)
        report = Report(checkpoint={"path": f"preset:{args.preset}", "layout": "speculators"}, engine=result.engine)
        report.add("wiring", result)
        report.notes.append(PRESETS[args.preset].note_for(args.arch) + " (meta device: shapes only, no weights)")
        return finish(report, args)
    if not (args.target and args.draft):
        raise UsageError("trace needs --target T and --draft D (or --preset NAME --device meta)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible here; use --device cpu or meta")
    if args.device_map and args.device == "meta":
        raise UsageError("--device meta traces shapes only: drop --device-map")
    draft = Checkpoint.open(args.draft)
    result = check_wiring(draft, target=args.target, engine=engine, scenario=args.scenario, device=args.device,
                          device_map=args.device_map, dtype=args.dtype)
    report = Report(checkpoint=draft.summary(), engine=result.engine)
    report.add("wiring", result)
    if args.device == "meta":
        report.notes.append("meta device: shapes only; agreement not measured")
    return finish(report, args)


# Names only, so that building the CLI does not import torch (tests keep them equal to the probes' own).
SCENARIO_NAMES = ("aux-off", "ids-shifted", "ids-ignored")
PRESET_NAMES = ("kimi-k2.5", "llama-3.1-405b")
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="trace the aux hidden states from target layers through fc into the draft",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs the target with forward hooks on the aux layers the engine captures, feeds the draft "
                    "the way the engine does (its fc gate, its loader) and reports the widths at every step: "
                    "fc bypassed, width mismatches, layers other than the draft was trained with.",
        epilog=example_epilog(
            "eagle3lens trace --target demo/target --draft demo/eagle --engine sglang==0.5.11",
            "eagle3lens trace --target demo/target --draft demo/eagle --engine sglang==0.5.11 --scenario aux-off",
            "eagle3lens trace --target demo/target --draft demo/speculators --engine vllm==0.33.0 --scenario ids-shifted",
            "eagle3lens trace --target demo/kimi-target --draft demo/kimi-mla --engine sglang==0.5.23   # MLA drafter",
            "eagle3lens trace --target big/target --draft big/eagle --device-map auto --dtype auto",
            "eagle3lens trace --preset kimi-k2.5 --device meta          # 3 x 7168 = 21504 into fc, no weights"))
    p.add_argument("--target", metavar="T", help="HF target model directory")
    p.add_argument("--draft", metavar="D", help="draft checkpoint directory or file")
    p.add_argument("--engine", metavar="E", help="engine NAME[==VERSION] whose wiring to reproduce (default vllm: its newest profile)")
    p.add_argument("--device", choices=("cpu", "cuda", "meta"), default="cpu",
                   help="where to run the target (meta: shapes only, no weights read)")
    p.add_argument("--device-map", metavar="MAP",
                   help="let accelerate place the target (e.g. auto: spread over GPUs, offload to cpu) instead of --device")
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32",
                   help="target weights' dtype (auto: as stored in the checkpoint; default float32)")
    p.add_argument("--scenario", choices=SCENARIO_NAMES,
                   help="reproduce an engine fault: aux capture off, ids shifted by one, ids ignored")
    p.add_argument("--preset", choices=PRESET_NAMES, help="full-size shape-only trace of a known target")
    p.add_argument("--arch", choices=("llama", "native"), default="llama",
                   help="with --preset: Llama-architecture stand-in (default) or the real architecture")
    add_output_options(p)
    p.set_defaults(func=run)

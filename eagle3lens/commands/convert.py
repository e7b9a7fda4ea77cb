"""``eagle3lens convert CKPT --to E OUT``: rewrite a draft so engine E loads every tensor (source untouched)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..findings import Report
from ..progress import TqdmBars, bars
from . import add_output_options, example_epilog, finish, positive_int
from ._measure import add_measure_options


def _repair_tensors(path: str, target: str | None) -> dict:
    from ..probes.vocab import plan_d2t_repair

    return dict(plan_d2t_repair(path, target=target or None).tensors)


def run(args: argparse.Namespace) -> int:
    from ..convert import convert, recover_source

    if len(args.paths) > 2:
        raise UsageError("convert takes CKPT and OUT only")
    args.checkpoint, args.out = args.paths[0], (args.paths[1] if len(args.paths) == 2 else None)
    if args.in_place == (args.out is not None):
        raise UsageError("give either OUT or --in-place (exactly one)")
    if args.measure and not (args.target and args.prompts):
        raise UsageError("--measure serves the source and the output: it needs --target T and --prompts F")
    if args.prompts and not args.measure:
        raise UsageError("--prompts serves --measure")
    if args.measure:
        from ._measure import measured_engine

        args.engine = measured_engine(args)
    if args.target and not (args.repair_d2t or args.data or args.measure):
        raise UsageError("--target serves --repair-d2t (its lm_head rows can prove the repair) and --data (its final "
                         "norm and lm_head are the teacher)")
    if args.data and not (args.to and args.target):
        raise UsageError("--data verifies acceptance as engine E serves the output: it needs --to E and --target T")
    recovered = recover_source(Path(args.checkpoint))  # a killed run's swap is undone before the source is read
    if args.data:  # a dump that does not fit stops here, before anything is written
        from ..probes.acceptance import check_data

        check_data(args.checkpoint, args.data, target=args.target, limit=args.limit)  # every sample scored
    overrides = _repair_tensors(args.checkpoint, args.target) if args.repair_d2t else None
    layers, layers_note = args.aux_layers, None
    if args.data and layers is None:  # the layers the dump holds, measured, decide what the engine must capture
        layers, layers_note = _data_layers(args)
    result = convert(args.checkpoint, args.to, None if args.in_place else args.out, in_place=args.in_place,
                     force=args.force, tensor_overrides=overrides,
                     progress=bars(not args.json and sys.stderr.isatty()), aux_layers=layers)
    report = Report(checkpoint=Checkpoint.open(result.out).summary(), engine=result.engine)
    report.add("convert", result)
    report.notes.extend(recovered)
    if result.load is not None:
        report.add("keys", result.load)
    if layers_note:
        report.notes.append(layers_note)
    if args.data:
        verified = _verify(args, result)
        report.add("acceptance", verified)
        report.notes.extend(verified.notes)
    if args.measure:
        from ._measure import measure_conversion

        measured = measure_conversion(args, result.backup if args.in_place else args.checkpoint, result.out)
        report.add("measured", measured)
        report.notes.extend(measured.notes)
    return finish(report, args)


def _data_layers(args: argparse.Namespace) -> tuple[list[int] | None, str | None]:
    """The HF layers provenance attributes the dump's aux chunks to (None when some chunk matches no layer)."""
    from ..probes.provenance import trace_provenance

    found = trace_provenance(args.data, args.target, draft=args.checkpoint).layers
    if any(k is None for k in found):
        return None, "provenance could not attribute every aux chunk of the data: ids written from the config"
    layers = [k for k in found if k is not None]
    return layers, f"aux layers from the data's provenance: hidden_states {layers}"


def _layers(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of HF hidden_states indices, not {text!r}") from None


def _verify(args: argparse.Namespace, result: Any) -> Any:
    """Acceptance of the output as the engine serves it, against the source as trained (``--data``)."""
    from ..probes.acceptance import verify_conversion

    source = result.backup if args.in_place else args.checkpoint  # in place: the original is kept as CKPT.orig
    progress = TqdmBars(unit="sample") if not args.json and sys.stderr.isatty() else None
    return verify_conversion(source, result.out, args.data, target=args.target, engine=result.engine,
                             limit=args.limit, progress=progress)


def _intermixed(parser: argparse.ArgumentParser) -> None:
    """Let OUT follow options (``convert CKPT --to E OUT``): argparse otherwise takes positionals in one run."""
    plain = parser.parse_known_args

    # the subparser is built by add_parser, so its method is swapped on the instance (mypy refuses method
    # assignment: method-assign)
    def parse_known_args(args=None, namespace=None):
        parser.parse_known_args = plain  # type: ignore[method-assign]
        try:
            return parser.parse_known_intermixed_args(args, namespace)
        finally:
            parser.parse_known_args = parse_known_args  # type: ignore[method-assign]

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", usage="eagle3lens convert CKPT (OUT | --in-place) [--to E] [--repair-d2t] [--target T] "
                                        "[--data D [--limit N]] [--aux-layers K,K,K] [--force] [--measure --target T --prompts F] "
                                        "[--json] [--fail-on SEVERITY]",
                       help="rename keys / rewrite config for an engine, safely (temp, verify, rename)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens convert demo/speculators --to sglang==0.5.11 fixed/",
                                             "eagle3lens convert demo/speculators --to sglang==0.5.11 --in-place   # keeps .orig",
                                             "eagle3lens convert demo/broken-d2t-double-subtracted --repair-d2t fixed/",
                                             "eagle3lens convert demo/broken-d2t-missing --repair-d2t --target demo/target fixed/",
                                             "eagle3lens convert demo/speculators --to sglang==0.5.11 fixed/ --data demo/hidden-states "
                                             "--target demo/target"))
    p.add_argument("paths", metavar="CKPT [OUT]", nargs="+", help="source checkpoint, then the new directory (must not exist)")
    p.add_argument("--to", metavar="E", help="target engine NAME[==VERSION]; omit with --repair-d2t to keep the layout")
    p.add_argument("--in-place", action="store_true", help="replace the CKPT directory, keeping the original as CKPT.orig (not for a single file)")
    p.add_argument("--force", action="store_true", help="write even what the engine will not use faithfully (a convert/forced warning per item)")
    p.add_argument("--repair-d2t", action="store_true", help="also write the d2t repair the vocab probe proves")
    p.add_argument("--target", metavar="T", help="target model: with --repair-d2t, whose lm_head rows the draft copies "
                                                 "(proves repairs that t2d alone cannot); with --data, the teacher")
    p.add_argument("--data", metavar="D", help="hidden-state dump: verify offline that the output, as engine E serves "
                                               "it, accepts what the draft accepts as trained (needs --to, --target)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="with --data: score at most N samples")
    p.add_argument("--aux-layers", type=_layers, metavar="K,K,K",
                   help="HF hidden_states indices the draft was trained on, written as ids in E's convention "
                        "(default: measured from --data by provenance, else the source config's ids as its trainer "
                        "meant them)")
    p.add_argument("--prompts", metavar="F", help="with --measure: prompts the engine serves the source and the output "
                                                  "on (text lines, lines of token ids, or a JSON list of id lists)")
    p.add_argument("--new-tokens", type=positive_int, default=32, metavar="N",
                   help="with --measure: tokens generated after each prompt (default 32)")
    p.add_argument("--steps", type=positive_int, metavar="K", help="with --measure: draft tokens per round (default 3)")
    add_measure_options(p, remote=False)
    add_output_options(p)
    p.set_defaults(func=run)
    _intermixed(p)

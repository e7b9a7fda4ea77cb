"""``eagle3lens provenance``: which target layer each aux hidden state of a training dump came from."""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from ..findings import Report
from ._target import require_target_weights
from . import add_output_options, example_epilog, finish, positive_int


def run(args: argparse.Namespace) -> int:
    from ..probes.provenance import trace_provenance
    from ..progress import TqdmBars

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible here; use --device cpu")
    require_target_weights(args.target, "provenance", "07_provenance")
    result = trace_provenance(args.data, args.target, draft=args.draft, engine=args.engine, samples=args.samples,
                              device=args.device, device_map=args.device_map, progress=TqdmBars(unit="position") if not args.json and sys.stderr.isatty() else None)
    checkpoint = {"path": str(args.draft), "layout": "unknown"} if args.draft else {}
    if args.draft:
        from ..checkpoint import Checkpoint

        checkpoint = Checkpoint.open(args.draft).summary()
    report = Report(checkpoint=checkpoint, engine=result.engine)
    report.add("provenance", result)
    report.notes.append(f"compared {result.positions} positions from {result.sequences} sequences")
    from ..probes.chat import served_template_check, template_note

    template = served_template_check(args.data, args.target, args.chat)
    if template is not None:
        report.add("template", template)
    if (note := template_note(template)) is not None:
        report.notes.append(note)
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "provenance", help="which target layer each aux hidden state of a training dump came from",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Runs the target on the dump's own token ids and matches every aux chunk (and the last hidden "
                    "state) against each decoder layer's input, the last layer's pre-norm output and the final "
                    "norm's output: cosine similarity and relative error per candidate, the best match and its "
                    "margin. Says which convention the data was extracted in (vLLM: input of layer k; SGLang: "
                    "output of layer k), whether the last state is pre- or post-norm, and, with --draft/--engine, "
                    "whether training and serving feed the draft the same layers.",
        epilog=example_epilog(
            "eagle3lens provenance --data demo/hidden-states --target demo/target --draft demo/mismatched-ids "
            "--engine sglang==0.5.11",
            "eagle3lens provenance --data demo/hidden-states-sglang --target demo/target",
            "eagle3lens provenance --data hs/ --target big/target --device-map auto --samples 512 --json"))
    p.add_argument("--data", metavar="D", required=True, help="hidden-state dump: a folder or one sample file")
    p.add_argument("--target", metavar="T", required=True, help="HF target model directory (weights are run)")
    p.add_argument("--draft", metavar="C", help="the draft trained on the data: its config's aux ids are compared")
    p.add_argument("--engine", metavar="E", help="serving engine NAME[==VERSION]: the layers it captures are compared")
    p.add_argument("--chat", metavar="FILE.jsonl", help="served conversations (one JSON list of {role, content} "
                                                       "messages a line): the template check reads its markers "
                                                       "from the first (default: a one-line user turn)")
    p.add_argument("--samples", type=positive_int, default=256, metavar="N",
                   help="positions to compare (default 256: a few hundred settle a layer's identity)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run the target")
    p.add_argument("--device-map", metavar="MAP", help="place the target with accelerate (e.g. auto)")
    add_output_options(p)
    p.set_defaults(func=run)

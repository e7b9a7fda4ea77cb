"""``eagle3lens info CKPT``: layout, DraftSpec and the tensor table, from headers only."""

from __future__ import annotations

from rich.markup import escape

import argparse

from ..checkpoint import Checkpoint
from ..findings import Report
from . import add_output_options, example_epilog, finish


class InfoResult:
    """The tensor table of a checkpoint; no findings of its own."""

    findings: tuple = ()

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt

    def to_dict(self) -> dict:
        return {"tensors": [t.to_dict() for t in self.ckpt.tensors.values()]}

    def __rich__(self):
        from rich.table import Table

        spec = self.ckpt.spec
        table = Table(title=f"{len(self.ckpt)} tensors, {self.ckpt.total_bytes / 1e6:.1f} MB", expand=False)
        for col in ("name", "dtype", "shape", "file", "bytes"):
            table.add_column(col, justify="right" if col == "bytes" else "left",
                             overflow="fold" if col == "name" else "ellipsis", no_wrap=col != "name")
        for t in self.ckpt.tensors.values():
            span = f"{t.begin}–{t.end}" if t.begin is not None else f"{t.nbytes} (pickled)"
            table.add_row(escape(t.name), t.dtype, str(list(t.shape)), escape(t.file.name), span)
        summary = Table.grid(padding=(0, 2))
        for key in ("flavour", "architectures", "hidden_size", "target_hidden_size", "num_aux", "aux_layer_ids",
                    "aux_ids_source", "draft_vocab_size", "vocab_size", "decoder_prefix", "num_decoder_layers",
                    "flags", "has_d2t", "has_t2d", "has_embed_tokens", "has_input_norm", "fc_in_features"):
            summary.add_row(key, escape(str(getattr(spec, key))))
        from rich.console import Group

        return Group(summary, table)


def run(args: argparse.Namespace) -> int:
    ckpt = Checkpoint.open(args.checkpoint)
    report = Report(checkpoint=ckpt.summary())
    report.add("info", InfoResult(ckpt))
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="layout, DraftSpec and tensor table (headers only)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens info demo/speculators", "eagle3lens info model.safetensors --json"))
    p.add_argument("checkpoint", metavar="CKPT", help="checkpoint directory, .safetensors, index.json or .bin/.pt file")
    add_output_options(p)
    p.set_defaults(func=run)

"""Terminal view of ``eagle3lens info``: the DraftSpec summary and the tensor table."""

from __future__ import annotations

import itertools
from typing import Any

from ..checkpoint import InfoResult
from .registry import rich_view
from .style import MAX_ROWS, markup

SPEC_FIELDS = ("flavour", "architectures", "hidden_size", "target_hidden_size", "num_aux", "aux_layer_ids",
               "aux_ids_source", "draft_vocab_size", "vocab_size", "decoder_prefix", "num_decoder_layers",
               "flags", "has_d2t", "has_t2d", "has_embed_tokens", "has_input_norm", "fc_in_features")


@rich_view.register
def info_rich(result: InfoResult) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    ckpt = result.ckpt
    table = Table(title=f"{len(ckpt)} tensors, {ckpt.total_bytes / 1e6:.1f} MB", expand=False)
    for col in ("name", "dtype", "shape", "file", "bytes"):
        table.add_column(col, justify="right" if col == "bytes" else "left",
                         overflow="fold" if col == "name" else "ellipsis", no_wrap=col != "name")
    for t in itertools.islice(ckpt.tensors.values(), MAX_ROWS):
        span = f"{t.begin}–{t.end}" if t.begin is not None else f"{t.nbytes} (pickled)"
        table.add_row(markup(t.name), markup(t.dtype), markup(list(t.shape)), markup(t.file.name), span)
    summary = Table.grid(padding=(0, 2))
    for key in SPEC_FIELDS:
        summary.add_row(key, markup(getattr(ckpt.spec, key)))
    if len(ckpt) <= MAX_ROWS:
        return Group(summary, table)
    rest = Text(f"... and {len(ckpt) - MAX_ROWS} more tensors (eagle3lens info --json lists every one)", style="dim")
    return Group(summary, table, rest)

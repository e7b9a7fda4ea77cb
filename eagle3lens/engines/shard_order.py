"""The order a release's model loader reads a draft's tensors in: its shard files in the release's order, then each
file's tensors in the order the release's reader lists them.

Which key the loader meets first decides, when a key raises, which keys were written before it and which were never
read. Shard files (read from the releases' wheels): ``listing`` (the ``glob`` of the folder, unsorted: the file
system's directory order; SGLang before 0.5.11, vLLM before 0.16.0), ``sorted`` (the paths as strings; SGLang 0.5.11
on) or ``natural`` (the file name as runs of text and numbers, numbers compared as numbers, ties kept in listing order;
vLLM 0.16.0 on). Within a file: ``names`` (``safe_open(...).keys()``, sorted) or ``storage`` (the order the tensors
are stored in: ``safetensors.torch.load_file`` from safetensors 0.6.1, which SGLang 0.4.3.post3-0.4.8.post1 read
with; before 0.6.1 it sorted too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..tensor_info import TensorInfo

ShardOrder = Literal["listing", "sorted", "natural"]
TensorOrder = Literal["names", "storage"]
_DIGITS = re.compile(r"(\d+)")


def natural_key(path: Path) -> list[int | str]:
    """The file name as alternating text and numbers: ``model-2`` before ``model-10``."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(path.name)]


def file_order(files: Sequence[Path], rule: ShardOrder) -> list[Path]:
    """``files`` in the order the loader opens them."""
    if rule == "sorted":
        return sorted(files, key=str)
    listed: dict[Path, int] = {}
    for folder in dict.fromkeys(f.parent for f in files):
        with os.scandir(folder) as entries:  # what glob walks: the directory's own order
            listed.update((Path(folder) / e.name, i) for i, e in enumerate(entries))
    listing = sorted(files, key=lambda f: listed.get(f, len(listed)))
    return sorted(listing, key=natural_key) if rule == "natural" else listing


def loader_order(ckpt: Checkpoint, rule: ShardOrder, within: TensorOrder = "names") -> list[TensorInfo]:
    """The checkpoint's tensors in the order the loader yields them to ``load_weights``."""
    by_file: dict[Path, list[TensorInfo]] = {}
    for info in ckpt.tensors.values():  # names sorted within each file
        by_file.setdefault(info.file, []).append(info)
    if within == "storage":
        by_file = {f: sorted(infos, key=lambda i: -1 if i.begin is None else i.begin) for f, infos in by_file.items()}
    files = file_order(ckpt.files, rule) if len(ckpt.files) > 1 else list(ckpt.files)
    return [info for f in files for info in by_file.get(f, [])]


def listing_note(ckpt: Checkpoint, rule: ShardOrder, label: str) -> str | None:
    """For a sharded draft under a release that globs without sorting: the order this folder gave, which another
    file system may not."""
    if rule != "listing" or len(ckpt.files) < 2:
        return None
    names = ", ".join(f.name for f in file_order(ckpt.files, rule))
    return (f"{label} reads the shard files in directory order (glob, unsorted): here {names}; on another file "
            "system the order, and so which keys are read before a raise, may differ")

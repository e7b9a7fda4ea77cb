"""The order a release's model loader reads a draft's tensors in: its shard files in the release's order, then each
file's tensors in the order the release's reader lists them.

Which key the loader meets first decides, when a key raises, which keys were written before it and which were never
read. Shard files (read from the releases' wheels): ``listing`` (the ``glob`` of the folder, unsorted: the file
system's directory order; SGLang before 0.5.11, vLLM before 0.16.0), ``sorted`` (the paths as strings; SGLang 0.5.11
on) or ``natural`` (the file name as runs of text and numbers, numbers compared as numbers, ties kept in listing order;
vLLM 0.16.0 on). Within a file: ``names`` (``safe_open(...).keys()``, sorted) or ``storage`` (the order the tensors
are stored in: ``safetensors.torch.load_file`` from safetensors 0.6.1, which SGLang's loader reads with until
0.4.9, so its EAGLE-3 releases 0.4.4.post2-0.4.8.post1; before 0.6.1 it sorted too). A pickled ``.bin`` file's
tensors come as saved, in every release.
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
SHARD_LISTING = "reads the shard files in directory order"  # how the note on a glob's order reads


def natural_key(path: Path) -> list[int | str]:
    """The file name as alternating text and numbers: ``model-2`` before ``model-10``."""
    return [int(part) if part.isdecimal() else part for part in _DIGITS.split(path.name)]


def _listing(files: Sequence[Path]) -> list[Path]:
    """``files`` in their folders' own order, what glob walks (as given when a folder cannot be listed)."""
    listed: dict[Path, int] = {}
    try:
        for folder in dict.fromkeys(f.parent for f in files):
            with os.scandir(folder) as entries:
                listed.update((Path(folder) / e.name, len(listed) + i) for i, e in enumerate(entries))
    except OSError:
        return list(files)
    return sorted(files, key=lambda f: listed.get(f, len(listed)))


def file_order(files: Sequence[Path], rule: ShardOrder) -> list[Path]:
    """``files`` in the order the loader opens them."""
    if rule == "sorted":
        return sorted(files, key=str)
    listing = _listing(files)
    return sorted(listing, key=natural_key) if rule == "natural" else listing  # natural ties: in listing order


def loader_order(ckpt: Checkpoint, rule: ShardOrder, within: TensorOrder = "names",
                 files: Sequence[str] | None = None) -> list[TensorInfo]:
    """The checkpoint's tensors in the order the loader yields them to ``load_weights``. ``files``: the shard files
    (paths relative to the checkpoint) in an order already taken elsewhere (the host that ran the engine listed its
    own copy); a pickled file's tensors come in the order they were saved (``torch.load``'s dict)."""
    by_file: dict[Path, list[TensorInfo]] = {}
    for info in ckpt.tensors.values():  # names sorted within each file
        by_file.setdefault(info.file, []).append(info)
    saved = {name: i for i, name in enumerate(ckpt.pickled_names)}
    for infos in by_file.values():
        if infos and infos[0].begin is None:
            infos.sort(key=lambda i: saved.get(i.name, len(saved)))
        elif within == "storage":
            infos.sort(key=lambda i: i.begin or 0)
    return [info for f in shard_files(ckpt, rule, files) for info in by_file.get(f, [])]


def shard_files(ckpt: Checkpoint, rule: ShardOrder, files: Sequence[str] | None = None) -> list[Path]:
    """The checkpoint's files in the order the loader opens them (``files``: as taken elsewhere)."""
    if files:
        place = {name: i for i, name in enumerate(files)}
        return sorted(ckpt.files, key=lambda f: place.get(relative(ckpt, f), len(place)))
    return file_order(ckpt.files, rule) if len(ckpt.files) > 1 else list(ckpt.files)


def relative(ckpt: Checkpoint, file: Path) -> str:
    """A shard file's path inside the checkpoint, as the index names it."""
    try:
        return file.relative_to(ckpt.root).as_posix()
    except ValueError:
        return file.name


def listing_note(ckpt: Checkpoint, rule: ShardOrder, label: str, files: Sequence[str] | None = None) -> str | None:
    """For a sharded draft under a release that globs without sorting: the order the folder gave (``files``: the
    host's, where the engine ran), which another copy may not."""
    if rule != "listing" or len(ckpt.files) < 2:
        return None
    names = ", ".join(relative(ckpt, f) for f in shard_files(ckpt, rule, files))
    return (f"{label} {SHARD_LISTING} (glob, unsorted): {names} here; another copy of the "
            "checkpoint may list them otherwise, and so read other keys before a raise")

"""Recognising a hidden-state dump folder from its file names alone (no file is opened).

The dump readers (``probes.data``) and ``Checkpoint.open`` (which refuses a dump passed as a draft) share it.
"""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST = "eagle3lens-dump.json"


def sample_order(path: Path) -> tuple[int, str]:
    """Sort key of a sample file: its last number (``hs_10`` after ``hs_9``), then its name."""
    digits = re.findall(r"\d+", path.name)
    return (int(digits[-1]) if digits else -1, path.name)


def named_dump(root: Path) -> tuple[str, tuple[Path, ...]] | None:
    """``("eagle3lens", sample files)`` for a folder with :data:`MANIFEST`, ``("speculators", hs files)`` for
    ``hs_*.safetensors`` in it or in its ``hidden_states/``; None for anything else (SpecForge's ``*.ckpt``
    are searched by the dump reader only: a ``.ckpt`` is also a training checkpoint's suffix)."""
    if (root / MANIFEST).is_file():
        return "eagle3lens", tuple(sorted(root.glob("sample_*.safetensors"), key=sample_order))
    base = root / "hidden_states" if (root / "hidden_states").is_dir() else root
    hs = sorted(base.glob("hs_*.safetensors"), key=sample_order)
    return ("speculators", tuple(hs)) if hs else None


def sample_format(tensor_names: set[str] | frozenset[str]) -> str | None:
    """The dump format one ``.safetensors`` sample file is in, from its tensor names (None: not a sample)."""
    if "hidden_states" in tensor_names:
        return "speculators"
    if "aux_hidden_states" in tensor_names:
        return "eagle3lens"
    return None

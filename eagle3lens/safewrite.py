"""Never destroy data: build into a temporary directory beside the target, verify, then rename.

``--in-place`` keeps the original as ``NAME.orig`` (refusing when a backup already exists) and swaps
the new directory in with two renames inside the same parent (rolled back if the second fails).
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterator

from .checkpoint import _inside
from .errors import CheckpointError, ConversionRefused


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".orig")


def replace_dir(target: Path, build: Callable[[Path], None], verify: Callable[[Path], None],
                in_place: bool = False) -> Path | None:
    """Build ``target`` via ``build(tmp)``, check it with ``verify(tmp)``, then move it into place.

    Returns the backup path when ``in_place``. On any failure the temporary directory is removed and
    nothing at ``target`` changes.
    """
    target = Path(target).expanduser().resolve()  # "." has no name to put ".orig" on
    backup = backup_path(target) if in_place else None
    if in_place:
        if not target.is_dir():
            raise CheckpointError(target, "--in-place needs a checkpoint directory")
        if backup.exists():
            raise ConversionRefused(f"{backup}: a backup already exists; move it away first (it is never overwritten)")
    elif target.exists():
        raise CheckpointError(target, "output already exists; choose a new OUT (nothing is overwritten)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        build(tmp)
        verify(tmp)
        if not in_place:
            os.rename(tmp, target)
            return None
        os.rename(target, backup)
        try:
            os.rename(tmp, target)
        except OSError:
            os.rename(backup, target)
            raise
        return backup
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; when the block succeeds it is renamed onto ``path``
    (readers never see half a file), when it fails it is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it (see :func:`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it (see :func:`replacing`)."""
    return write_bytes_atomic(path, text.encode(encoding))


def copy_side_files(src_root: Path, dst: Path, skip: set[str], only: frozenset[str] | None = None,
                    notes: list[str] | None = None) -> list[str]:
    """Copy the files and folders beside the weights (tokenizer, README...) that the rewrite does not produce;
    with ``only``, just those names (a single-file source shares its folder with unrelated files).

    A symlinked file is copied (as a file) when its target stays inside the checkpoint's containment root
    (a Hugging Face cache snapshot links into ``../../blobs``); other links are skipped with a line in ``notes``.
    """
    copied = []
    for entry in sorted(src_root.iterdir()):
        if only is not None and entry.name not in only:
            continue
        if entry.name in skip or entry.name.endswith(".orig") or entry.name.startswith("."):
            continue
        source = entry
        if entry.is_symlink():
            try:
                source = _inside(src_root, entry, what="linked side file").resolve()
            except CheckpointError as exc:
                if notes is not None:
                    notes.append(f"{entry.name} not copied: {exc.problem}")
                continue
        if source.is_dir():
            shutil.copytree(source, dst / entry.name, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, dst / entry.name)
        else:
            continue
        copied.append(entry.name)
    return copied

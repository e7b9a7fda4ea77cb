"""Maintainer tool: compare released wheels with the per-release source hash table (running a release's own loader
on the built-in drafts is ``python -m eagle3lens.release_audit``: it judges loads, a workflow above this layer).

    python -m eagle3lens.engines.audit --engine sglang --versions 0.5.20:0.5.24 [--cache DIR]

For each release in the range (``pip index versions``), ``pip download --no-deps`` its wheel into the
cache, hash the files the profiles cite, and print the releases and files that are new or changed.
Adding a release is: run this, read the changed files, add rows to ``sglang.py`` / ``vllm.py``. The same run
scans each wheel's model classes for EAGLE-3 aux-capture support (:mod:`.capture_scan`) and prints where they
differ from the shipped table; ``python -m eagle3lens.engines.capture_scan --engine E --wheels CACHE --out
eagle3lens/engines/data/E_capture.json`` then rewrites it.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.version import InvalidVersion, Version

from .groups import FileHashes
from .wheels import CACHE, fetch
from .versions import RELEASES

MAX_MEMBER_BYTES = 16 << 20


@dataclass(frozen=True)
class AuditRow:
    release: str
    path: str
    status: str  # changed | added | removed | new-release
    recorded: str | None  # what the table holds (or would assume) for this release
    found: str | None  # what the wheel holds

    def line(self) -> str:
        return f"{self.release:14} {self.status:11} {self.path}  table {self.recorded or '-'} -> wheel {self.found or '-'}"


def member_hash(wheel: Path, member: str) -> str | None:
    """sha256[:12] of one member of a wheel (None when absent), read only by its exact name and bounded."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(member)
        except KeyError:
            return None
        if info.file_size > MAX_MEMBER_BYTES:
            raise ValueError(f"{wheel}: {member} is {info.file_size} bytes")
        return hashlib.sha256(z.read(info)).hexdigest()[:12]


def compare_wheel(version: str, wheel: Path, files: Sequence[FileHashes]) -> list[AuditRow]:
    """The cited files whose hash in ``wheel`` differs from the table's entry for ``version``."""
    v = Version(version)
    rows = []
    for f in files:
        recorded, found = f.at(v), member_hash(wheel, f.path)
        if recorded == found:
            continue
        status = "added" if recorded is None else "removed" if found is None else "changed"
        rows.append(AuditRow(version, f.path, status, recorded, found))
    return rows


CAPTURE_ROW = "target classes that capture aux states"


def compare_capture(name: str, version: str, wheel: Path) -> list[AuditRow]:
    """Where ``wheel``'s target classes that capture EAGLE-3 aux states differ from the shipped table's row."""
    from .capture_scan import scan_wheel
    from .target_support import capture_table

    found = scan_wheel(wheel)
    table = capture_table(name)
    if version not in table["releases"]:
        return [AuditRow(version, CAPTURE_ROW, "added", None, f"{len(found.capture)} of {len(found.served)} classes")]
    i = table["releases"].index(version)
    recorded = {arch for arch, row in table["architectures"].items() if any(a <= i <= b for a, b in row["capture"])}
    if recorded == set(found.capture):
        return []
    only_table, only_wheel = sorted(recorded - found.capture), sorted(found.capture - recorded)
    return [AuditRow(version, CAPTURE_ROW, "changed", ", ".join(only_table) or "-", ", ".join(only_wheel) or "-")]


def versions_in(spec: str, available: Sequence[str]) -> list[str]:
    """``LOW:HIGH`` (inclusive, either side may be empty) or one version, over the ``available`` releases."""
    if ":" not in spec:
        return [v for v in available if Version(v) == Version(spec)]
    low, high = (Version(x) if x else None for x in spec.split(":", 1))
    return [v for v in available if (low is None or Version(v) >= low) and (high is None or Version(v) <= high)]


def pip_versions(name: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    m = re.search(r"Available versions:\s*(.*)", out)
    found = []
    for text in (m.group(1).split(",") if m else ()):
        try:
            found.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return [str(v) for v in sorted(found)]


def audit(name: str, spec: str, cache: Path, available: Sequence[str] | None = None) -> list[AuditRow]:
    from . import FILES

    known = {str(v) for v in RELEASES[name]}
    rows: list[AuditRow] = []
    for version in versions_in(spec, available if available is not None else pip_versions(name)):
        wheel = fetch(name, version, cache)
        if version not in known:
            rows.append(AuditRow(version, "-", "new-release", None, None))
        rows += compare_wheel(version, wheel, FILES[name])
        rows += compare_capture(name, version, wheel)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3lens.engines.audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=sorted(RELEASES))
    parser.add_argument("--versions", metavar="LOW:HIGH", help="inclusive range, or one version")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--release", "--root", "--draft", dest="moved", nargs="?", const=True, help=argparse.SUPPRESS)
    parser.add_argument("--execute", "--cached-only", dest="moved", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.moved:  # running the loaders judges their loads: a workflow above the engines layer
        parser.error("running releases' loaders moved: python -m eagle3lens.release_audit --release NAME==VERSION "
                     "| --root DIR | --execute")
    if not (args.engine and args.versions):
        parser.error("give --engine and --versions")
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = audit(args.engine, args.versions, args.cache)
    for row in rows:
        print(row.line())
    if not rows:
        print(f"{args.engine} {args.versions}: every cited file matches the table")
    return 1 if rows else 0


if __name__ == "__main__":
    raise SystemExit(main())

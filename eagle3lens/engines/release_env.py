"""The release's own transformers for ``--execute``: the version its wheel pins, not whatever is installed here.

An engine release pins transformers in its wheel's METADATA (a base requirement, or in the server extra:
``runtime-common`` / ``srt`` of SGLang 0.4.x); its config classes, its rope validation and the model code it
imports from transformers are that release's. Where what is installed here does not satisfy the pin,
:func:`release_env` fetches a transformers that does (``pip download --no-deps``, the newest matching wheel, kept in
the wheel cache; transformers is pure Python) and unpacks it into ``CACHE/site/NAME-VERSION``, which the worker puts
first on its ``sys.path``. Beside it go the packages that transformers imports and this environment holds at a
version the release or that transformers does not accept (:data:`SITE`: ``huggingface_hub``, ``tokenizers``,
``kernels`` ...; the release's own pin wins over transformers' optional range, as ``pip install`` of the release
resolves), each with ``pip install --no-deps --target``; one that cannot be is named in the notes and the
environment's copy stays. Offline, the installed transformers is used and the notes say so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..io.textsafe import clip
from .wheels import CACHE, PIP_TIMEOUT_S

SERVER_EXTRAS = ("", "runtime-common", "runtime_common", "srt")  # where a release's transformers pin may sit
DONE = ".eagle3lens-site"  # written last: the directory is whole; holds the notes of its making
# what transformers imports that a release's site may hold its own copy of (pure Python, or a small wheel per platform)
SITE = ("transformers", "huggingface-hub", "tokenizers", "safetensors", "kernels", "accelerate")


@dataclass(frozen=True)
class ReleaseEnv:
    """Which transformers the execution of one release imports."""

    pin: str  # the release's requirement ("transformers==4.52.3"), "" when it names none
    version: str  # the transformers version the worker imports
    path: str  # the directory put first on the worker's sys.path ("" : the one installed here)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"pin": self.pin, "version": self.version, "path": self.path, "notes": list(self.notes)}


def transformers_pin(root: Path, name: str) -> Requirement | None:
    """The transformers requirement of the release at ``root`` (its base requirements, else its server extra)."""
    dist = next(iter(metadata.distributions(name=name, path=[str(root)])), None)
    reqs = [Requirement(text) for text in (dist.requires or []) if "transformers" in text] if dist else []
    for extra in SERVER_EXTRAS:
        for req in reqs:
            if canonicalize_name(req.name) != "transformers":
                continue
            if req.marker is None and extra == "" or req.marker is not None and req.marker.evaluate({"extra": extra}):
                return req
    return None


# distributions whose import name is not their own name (the ones engines import under ``try``)
IMPORT_NAMES = {"pyzmq": "zmq", "pillow": "PIL", "pyyaml": "yaml", "opencv-python-headless": "cv2",
                "opencv-python": "cv2", "scikit-learn": "sklearn", "protobuf": "google", "python-multipart": "multipart",
                "nvidia-ml-py": "pynvml", "flashinfer-python": "flashinfer", "sgl-kernel": "sgl_kernel",
                "torch-memory-saver": "torch_memory_saver", "llguidance": "llguidance", "xgrammar": "xgrammar"}


def required_imports(root: Path, name: str) -> frozenset[str] | None:
    """The top-level import names of what the release at ``root`` requires (base and server extra), None when its
    metadata is not there."""
    dist = next(iter(metadata.distributions(name=name, path=[str(root)])), None)
    if dist is None:
        return None
    out = set()
    for req in _requires(dist):
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in SERVER_EXTRAS):
            key = canonicalize_name(req.name)
            out.add(IMPORT_NAMES.get(key, key.replace("-", "_")))
    return frozenset(out)


def installed_version(dist: str) -> Version | None:
    try:
        return Version(metadata.version(dist))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return None


def release_env(root: Path, name: str, cache: Path = CACHE) -> ReleaseEnv:
    """The transformers the release at ``root`` runs with: this environment's when it and what it imports satisfy
    the release, else the release's own site from the cache (made on first use)."""
    pin = transformers_pin(root, name)
    here = installed_version("transformers")
    if pin is None:
        return ReleaseEnv("", str(here or ""), "")
    shown = f"{pin.name}{pin.specifier}"
    dist = next(iter(metadata.distributions(name=name, path=[str(root)])))
    site = cache / "site" / f"{name}-{dist.version}"
    if not (site / DONE).is_file():
        if here is not None and pin.specifier.contains(here, prereleases=True) \
                and not _unsatisfied(_wanted(root, name, metadata.distribution("transformers"))):
            return ReleaseEnv(shown, str(here), "")
        try:
            _make_site(root, name, _wheel(pin, cache), site)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
            why = f"{type(exc).__name__}: {clip(str(exc), 160)}"
            return ReleaseEnv(shown, str(here or ""), "", (
                f"the release requires {shown}, transformers {here} is installed here, and the release's own could "
                f"not be fetched ({why}): configs were read with the installed one",))
    made = json.loads((site / DONE).read_text())
    return ReleaseEnv(shown, str(made["transformers"]), str(site), tuple(made.get("notes", ())))


def _wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def _wheel(pin: Requirement, cache: Path) -> Path:
    """The newest transformers wheel in ``cache`` that satisfies ``pin`` (``pip download`` the newest on the index
    when none does)."""

    def matching() -> list[Path]:
        found = []
        for wheel in cache.glob("transformers-*.whl"):
            try:
                if pin.specifier.contains(Version(_wheel_version(wheel)), prereleases=True):
                    found.append(wheel)
            except InvalidVersion:
                continue
        return sorted(found, key=lambda w: Version(_wheel_version(w)))

    if not matching():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                        f"transformers{pin.specifier}", "-d", str(cache)], check=True, timeout=PIP_TIMEOUT_S,
                       capture_output=True)
    hits = matching()
    if not hits:
        raise ValueError(f"pip download left no wheel for transformers{pin.specifier} in {cache}")
    return hits[-1]


def _requires(dist: metadata.Distribution) -> list[Requirement]:
    return [Requirement(text) for text in dist.requires or []]


def _wanted(root: Path, name: str, transformers: metadata.Distribution) -> dict[str, SpecifierSet]:
    """What the release and its transformers need of :data:`SITE`: transformers' base requirements and, for an
    optional package installed here, its optional range; the release's own pin (base or server extra) on the same
    package narrows (a base requirement) or replaces (an optional one) it; an unversioned one leaves the range."""
    wanted: dict[str, SpecifierSet] = {}
    optional: dict[str, SpecifierSet] = {}
    for req in _requires(transformers):
        key = canonicalize_name(req.name)
        if key not in SITE:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            wanted[key] = wanted.get(key, SpecifierSet()) & req.specifier
        elif installed_version(key) is not None:
            optional.setdefault(key, req.specifier)
    engine = next(iter(metadata.distributions(name=name, path=[str(root)])))
    for req in _requires(engine):
        key = canonicalize_name(req.name)
        if key not in SITE or key == "transformers":
            continue
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in SERVER_EXTRAS):
            if key in wanted:
                wanted[key] &= req.specifier
            elif key in optional and not req.specifier:  # unversioned: the range transformers knew to work
                continue
            elif key in optional or installed_version(key) is not None:
                optional[key] = req.specifier
    return {**optional, **wanted}


def _unsatisfied(wanted: dict[str, SpecifierSet]) -> dict[str, SpecifierSet]:
    out = {}
    for key, spec in wanted.items():
        here = installed_version(key)
        if here is None or not spec.contains(here, prereleases=True):
            out[key] = spec
    return out


def _make_site(root: Path, name: str, wheel: Path, site: Path) -> None:
    """``site``: the transformers wheel unpacked whole, with what :func:`_wanted` asks that this environment does
    not satisfy installed beside it (made once, renamed into place when whole)."""
    site.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=site.name + ".", dir=site.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                member = Path(info.filename)
                if member.is_absolute() or ".." in member.parts:
                    raise ValueError(f"{wheel}: member {info.filename!r} leaves the directory")
            z.extractall(tmp)
        transformers = next(iter(metadata.distributions(name="transformers", path=[str(tmp)])))
        needed = _unsatisfied(_wanted(root, name, transformers))
        notes = [_install(key, spec, tmp) for key, spec in sorted(needed.items())]
        (tmp / DONE).write_text(json.dumps({"transformers": _wheel_version(wheel), "wheel": wheel.name,
                                            "installed": {k: str(v) for k, v in needed.items()},
                                            "notes": [n for n in notes if n]}))
        if site.exists():
            shutil.rmtree(site)
        tmp.rename(site)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _install(key: str, spec: SpecifierSet, site: Path) -> str:
    """``pip install --no-deps --target`` one package into ``site``; a note when it cannot be."""
    try:
        with tempfile.TemporaryDirectory(dir=site.parent) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary", ":all:", "-q",
                            "--target", tmp, f"{key}{spec}"], check=True, timeout=PIP_TIMEOUT_S,
                           capture_output=True)
            for entry in Path(tmp).iterdir():
                if entry.name != "bin":
                    shutil.move(str(entry), str(site / entry.name))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return (f"the release's environment asks for {key}{spec}, which could not be installed: the environment's "
                f"{key} {installed_version(key) or '(absent)'} is used")
    return ""


__all__ = ["ReleaseEnv", "installed_version", "release_env", "required_imports", "transformers_pin"]

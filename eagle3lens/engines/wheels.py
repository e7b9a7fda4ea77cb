"""Released engine wheels, fetched once into a cache and unpacked (everything but compiled extensions) for ``--execute``.

``pip download --no-deps`` fetches the wheel (:func:`fetch`); :func:`unpacked` extracts it into
``CACHE/unpacked/NAME-VERSION`` without its compiled extensions (``.so``: ``--execute`` stands them in; kernel
sources and data files stay, engines look for them at import), member by member, refusing any name that would
leave the directory. The few light dependencies whose *behaviour* the draft's import and construction rely on
(:data:`REAL_DEPENDENCIES`) are installed real beside it, at the version the release requires.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CACHE = Path(os.environ.get("EAGLE3LENS_WHEEL_CACHE", Path.home() / ".cache" / "eagle3lens" / "wheels"))
COMPILED = (".so", ".pyd", ".dylib")
# a stand-in answers names, not behaviour: SGLang 0.5.23's runtime context reads msgspec.Struct's fields at import
# (``VerifyInputSources.__struct_fields__``) and builds its parallel state from Structs, so msgspec (a small CPU
# wheel, no GPU) is installed real
REAL_DEPENDENCIES = ("msgspec",)
PIP_TIMEOUT_S = 600


def unpacked(name: str, version: str, cache: Path = CACHE) -> Path:
    """The directory holding ``name==version``'s Python package (downloaded and unpacked on first use)."""
    out = cache / "unpacked" / f"{name}-{version}"
    done = out / ".eagle3lens-unpacked"
    if not done.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        wheel = fetch(name, version, cache)
        tmp = out.with_name(out.name + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        _extract(wheel, tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        done.write_text(wheel.name)
    install_real_dependencies(out, name)
    return out


def fetch(name: str, version: str, cache: Path) -> Path:
    """The wheel of ``name==version`` in ``cache`` (``pip download --no-deps --only-binary`` on first use)."""
    hits = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not hits:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                        f"{name}=={version}", "-d", str(cache)], check=True, timeout=3600)
        hits = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not hits:
        raise FileNotFoundError(f"pip download left no wheel for {name}=={version} in {cache}")
    return hits[0]


def _extract(wheel: Path, tmp: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            member = Path(info.filename)
            if info.is_dir() or info.filename.endswith(COMPILED) or ".so." in member.name:
                continue
            if member.is_absolute() or ".." in member.parts:
                raise ValueError(f"{wheel}: member {info.filename!r} leaves the directory")
            target = tmp / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))


def real_dependencies(root: Path, name: str) -> list[Requirement]:
    """The :data:`REAL_DEPENDENCIES` that the release at ``root`` requires on this platform (its own specifiers)."""
    dist = next(iter(metadata.distributions(name=name, path=[str(root)])), None)
    found = []
    for text in (dist.requires or []) if dist is not None else []:
        req = Requirement(text)
        if canonicalize_name(req.name) not in REAL_DEPENDENCIES:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.append(req)
    return found


def install_real_dependencies(root: Path, name: str) -> None:
    """``pip install --no-deps --target`` each of :func:`real_dependencies` beside the unpacked release (once)."""
    for req in real_dependencies(root, name):
        dist_name = canonicalize_name(req.name).replace("-", "_")
        if any(root.glob(f"{dist_name}-*.dist-info")):
            continue
        with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
            subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary", ":all:", "-q",
                            "--target", tmp, f"{req.name}{req.specifier}"], check=True, timeout=PIP_TIMEOUT_S)
            for entry in sorted(Path(tmp).iterdir(), key=lambda p: p.name.endswith(".dist-info")):
                if entry.name != "bin":  # dist-info last: present means installed whole
                    shutil.move(str(entry), str(root / entry.name))

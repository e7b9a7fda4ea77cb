"""Released engine wheels, fetched once into a cache and unpacked (everything but compiled extensions) for ``--execute``.

``pip download --no-deps`` fetches the wheel (:func:`.audit.fetch`); :func:`unpacked` extracts it into
``CACHE/unpacked/NAME-VERSION`` without its compiled extensions (``.so``: ``--execute`` stands them in; kernel
sources and data files stay, engines look for them at import), member by member, refusing any name that would
leave the directory.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("EAGLE3LENS_WHEEL_CACHE", Path.home() / ".cache" / "eagle3lens" / "wheels"))
COMPILED = (".so", ".pyd", ".dylib")


def unpacked(name: str, version: str, cache: Path = CACHE) -> Path:
    """The directory holding ``name==version``'s Python package (downloaded and unpacked on first use)."""
    from .audit import fetch

    out = cache / "unpacked" / f"{name}-{version}"
    done = out / ".eagle3lens-unpacked"
    if done.is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    wheel = fetch(name, version, cache)
    tmp = out.with_name(out.name + ".partial")
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
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    done.write_text(wheel.name)
    return out

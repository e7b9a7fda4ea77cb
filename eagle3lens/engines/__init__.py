"""Engine profiles as data and the registry that resolves ``NAME[==VERSION]`` to one of them.

>>> resolve("sglang==0.5.11").label
'sglang 0.4.0–0.5.11'
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..errors import UsageError
from . import sglang, training, vllm
from .profile import EngineProfile, ParamSpec, Route

_PROFILES: tuple[EngineProfile, ...] = sglang.PROFILES + vllm.PROFILES + training.PROFILES
_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z][\w-]*)\s*(?:==\s*(?P<version>[0-9][0-9A-Za-z.+-]*))?\s*$")


def all_profiles() -> tuple[EngineProfile, ...]:
    """Every known profile, grouped by engine, oldest version first."""
    return _PROFILES


def known() -> str:
    """The accepted engine names and versions, for error messages and help."""
    return ", ".join(f"{p.spec} ({p.label})" for p in _PROFILES)


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.11' / '0.5.11.post1' / '0.5.11rc2' -> (0, 5, 11)."""
    from packaging.version import Version

    shown = repr(text) if len(text) <= 40 else repr(text[:40]) + f"… ({len(text)} characters)"
    if len(text) > 100:  # packaging would run int() on each part: past 4,300 digits a bare ValueError
        raise UsageError(f"engine version {shown} is not a version number (e.g. sglang==0.5.11)")
    try:
        return Version(text).release
    except ValueError:  # InvalidVersion
        raise UsageError(f"engine version {shown} is not a version number (e.g. sglang==0.5.11)") from None


def resolve(spec: "str | EngineProfile") -> EngineProfile:
    """``sglang==0.5.11`` -> the profile whose range holds 0.5.11; a bare name -> its newest profile."""
    if isinstance(spec, EngineProfile):
        return spec
    m = _SPEC.match(spec or "")
    if not m:
        raise UsageError(f"engine {spec!r}: write NAME or NAME==VERSION; known: {known()}")
    name, version = m.group("name").lower(), m.group("version")
    family = [p for p in _PROFILES if p.name == name]
    if not family:
        raise UsageError(f"unknown engine {name!r}; known: {known()}")
    if version is None:
        return family[-1] if family[-1].versions is None else max(family, key=lambda p: p.versions[1])
    release = parse_version(version)
    for profile in family:
        if profile.contains(release):
            return replace(profile, spec=f"{name}=={version}")
    ranges = ", ".join(p.label for p in family)
    raise UsageError(f"no profile for {name}=={version}: known ranges are {ranges}; known: {known()}")


__all__ = ["EngineProfile", "ParamSpec", "Route", "all_profiles", "known", "resolve", "parse_version"]

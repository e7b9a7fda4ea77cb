"""The known engine profiles and resolution of a ``NAME[==VERSION][:PATH]`` spec to one of them.

Versions parse by PEP 440 (``.postN``, ``rcN``, ``devN``; a local label names the build: ``vllm==0.32.0+cpu`` is
vLLM's CPU build, held to the V1 runner); a release before the engine had EAGLE-3 is
refused in one line; a release newer than the newest one read is simulated with the newest group and
marked unverified; a bare name means the newest release read, and the profile says so. ``installed``
(the engine found on this machine) is resolved by the package, above ``detect``, which uses this module.
"""

from __future__ import annotations

from dataclasses import replace

from packaging.version import Version

from ..errors import UsageError
from .profile import EngineProfile
from .sglang import DETECT_FILES as SGLANG_DETECT
from .sglang import PROFILES as SGLANG_PROFILES
from .sglang import SGLANG_FILES
from .training import PROFILES as TRAINING_PROFILES
from .versions import BEFORE, check_release, first_release, newest_release, parse_version, spec_parts
from .vllm import DETECT_FILES as VLLM_DETECT
from .vllm import PROFILES as VLLM_PROFILES
from .vllm import VLLM_FILES

_PROFILES: tuple[EngineProfile, ...] = SGLANG_PROFILES + VLLM_PROFILES + TRAINING_PROFILES
FILES = {"sglang": SGLANG_FILES, "vllm": VLLM_FILES}
DETECT_FILES = {"sglang": SGLANG_DETECT, "vllm": VLLM_DETECT}


def all_profiles() -> tuple[EngineProfile, ...]:
    """Every known profile, grouped by engine, oldest version first."""
    return _PROFILES


def families() -> dict[str, tuple[EngineProfile, ...]]:
    out: dict[str, tuple[EngineProfile, ...]] = {}
    for p in _PROFILES:
        out[p.name] = out.get(p.name, ()) + (p,)
    return out


def known() -> str:
    """The accepted engine names and version ranges, for error messages and help."""
    return "; ".join(f"{name} {fam[0].range_label.split('–')[0]}–{fam[-1].range_label.split('–')[-1]}"
                     if fam[0].versions is not None and fam[0].releases else name
                     for name, fam in families().items())


def resolve_named(spec: str | EngineProfile, installed: bool = False) -> EngineProfile:
    """``sglang==0.5.11`` -> the profile whose group holds 0.5.11; ``vllm==0.33.0:v1`` -> on runtime path v1;
    ``vllm==0.32.0+cpu`` -> vLLM's CPU build of 0.32.0 (its runtime path the one that build runs); a bare name -> its
    newest release read (``assumed`` says so). A release the package index never had is refused unless ``installed``
    (the version of an installed distribution, which exists whatever the list says)."""
    if isinstance(spec, EngineProfile):
        return spec
    try:
        name, version, path = spec_parts(spec or "")
    except UsageError as exc:
        raise UsageError(f"{exc}; known: {known()}") from None
    family = families().get(name)
    if not family:
        raise UsageError(f"unknown engine {name!r}; known: {known()}")
    newest = newest_release(name)
    if version is None:
        profile = family[-1]
        if newest is not None:
            profile = replace(profile, release=str(newest), assumed=f"bare {name!r}: assumed {name}=={newest}, "
                                                                    "the newest release read")
        return _with_path(profile, path, name, str(newest) if newest else None)
    # a local label is the build (vLLM's CPU build is 0.32.0+cpu); the release is the public version
    parsed = parse_version(version)
    release, build = Version(parsed.public), parsed.local
    first = first_release(name)
    if first is not None and release < first:
        raise UsageError(f"{name}=={version}: no EAGLE-3 before {first} ({name} {version} has {BEFORE[name]})")
    if family[0].versions is None:
        raise UsageError(f"{name} has no versions; write --engine {name} (known: {known()})")
    if not installed:
        check_release(name, release)
    for profile in family:
        if profile.contains(release):
            verified = newest is None or release <= newest
            out = replace(profile, release=str(release), verified=verified).for_build(build)
            return _with_path(out, path, name, version)
    ranges = ", ".join(p.label for p in family)
    raise UsageError(f"no profile for {name}=={version}: known ranges are {ranges}; known: {known()}")


def _with_path(profile: EngineProfile, path: str | None, name: str, version: str | None) -> EngineProfile:
    if path and not profile.paths:
        raise UsageError(f"{name}=={version} has one runtime path for EAGLE-3 aux capture; drop ':{path}'")
    out = profile.with_path(path)
    spec = f"{name}=={version}" if version else name
    if path:  # as the user wrote it; the default path is in .path and each finding's evidence
        spec += f":{out.path}"
    return replace(out, spec=spec)


def engine_notes(profile: EngineProfile) -> list[str]:
    """Report notes: which release a bare name assumed, which runtime path, an unverified release."""
    out = [profile.assumed] if profile.assumed else []
    if profile.path:
        how = profile.path_notes.get(profile.path, "")
        out.append(f"{profile.name} runtime path assumed: {profile.path_label}" + (f" ({how})" if how else "")
                   + "; other paths: " + ", ".join(f":{p}" for p in profile.paths if p != profile.path))
    if not profile.verified:
        out.append(f"{profile.name}=={profile.release} is newer than the newest release read "
                   f"({newest_release(profile.name)}): simulated as {profile.label}")
    return out


# the loader each config flavour is written for: who judges a draft when no engine is named
_OWN_LOADER = {"speculators": "speculators", "sglang": "sglang", "eagle": "eagle"}


def own_loader(flavour: str) -> EngineProfile:
    """The profile of the loader a config ``flavour`` is written for (vLLM's newest for an unknown flavour)."""
    return resolve_named(_OWN_LOADER.get(flavour, "vllm"))


def newest_verified(name: str) -> Version | None:
    return newest_release(name)

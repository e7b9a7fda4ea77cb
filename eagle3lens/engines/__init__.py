"""Engine profiles as data and the registry that resolves ``NAME[==VERSION][:PATH]`` to one of them.

Versions parse by PEP 440 (``.postN``, ``rcN``, ``devN``); a release before the engine had EAGLE-3 is
refused in one line; a release newer than the newest one read is simulated with the newest group and
marked unverified; a bare name means the newest release read, and the profile says so.

>>> resolve("sglang==0.5.11").label
'sglang 0.5.11'
>>> resolve("vllm==0.33.0:v1").path
'v1'
"""

from __future__ import annotations

from .detect import installed_profile
from .profile import DraftClass, EngineProfile, ParamSpec, SourceFile
from .registry import (
    FILES,
    all_profiles,
    engine_notes,
    families,
    known,
    newest_verified,
    own_loader,
    resolve_named,
)
from .steps import Route
from .versions import RELEASES, parse_version, spec_parts


def resolve(spec: str | EngineProfile) -> EngineProfile:
    """``sglang==0.5.11`` -> the profile whose group holds 0.5.11; ``vllm==0.33.0:v1`` -> on runtime path v1;
    a bare name -> its newest release read (``assumed`` says so); ``installed`` -> the one engine installed here."""
    if isinstance(spec, str) and spec.strip().lower() == "installed":
        return installed_profile()
    return resolve_named(spec)


def as_profile(engine: str | EngineProfile | None) -> EngineProfile | None:
    """What every probe's ``engine=`` accepts: a ``NAME[==VERSION][:PATH]`` spec or a profile; None stays None."""
    return None if engine is None else resolve(engine)


__all__ = ["FILES", "RELEASES", "DraftClass", "EngineProfile", "ParamSpec", "Route", "SourceFile", "all_profiles",
           "as_profile", "engine_notes", "families", "known", "newest_verified", "own_loader", "parse_version",
           "resolve", "spec_parts"]

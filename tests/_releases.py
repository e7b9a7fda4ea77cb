"""Real engine releases for the --execute tests: fetched into the wheel cache at test time (skipped where the package
index cannot be reached), each execution and audit run once per test session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from eagle3lens.engines.release_env import release_env
from eagle3lens.probes.executed import execute_load
from eagle3lens.release_audit import audit_release


def release_root(name: str, version: str) -> Path:
    from eagle3lens.engines.wheels import unpacked

    try:
        root = unpacked(name, version)
        release_env(root, name)  # its transformers fetched now, not inside the worker's time limit
        return root
    except (subprocess.CalledProcessError, OSError):
        pytest.skip(f"the package index cannot be reached for {name}=={version}")
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip download {name}=={version} did not finish in time")


_RESULTS: dict[tuple[str, str, str], object] = {}


def executed(demo_dir: Path, name: str, version: str, draft: str):
    case = (name, version, draft)
    if case not in _RESULTS:
        _RESULTS[case] = execute_load(demo_dir / draft, root=release_root(name, version), isolate=True)
    return _RESULTS[case]


def codes(result) -> set[str]:
    return {f.code for f in result.findings}


def fates(result) -> dict[str, str]:
    return {f.key: f.fate for f in result.fates}


_AUDITS: dict[tuple[str, str], object] = {}


def audited(name: str, version: str):
    """The built-in drafts through the release (once per test session)."""
    if (name, version) not in _AUDITS:
        _AUDITS[name, version] = audit_release(release_root(name, version))
    return _AUDITS[name, version]

"""Engine releases and PEP 440 version parsing (``packaging.version``), guarded against hostile input.

The release lists are the PyPI releases (``pip index versions``; the sglang 0.5.0rc builds added, since
pip hides pre-releases) from the first one with EAGLE-3 to the newest one read. Other modules (the log
probe among them) import :func:`parse_version` and :func:`spec_parts` from here or from ``engines``.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

from ..errors import UsageError

MAX_VERSION_CHARS = 64  # PEP 440 strings engines publish are short; bounds int() on every component

SGLANG_RELEASES = tuple(Version(v) for v in """
0.4.4.post2 0.4.4.post3 0.4.4.post4 0.4.5 0.4.5.post1 0.4.5.post2 0.4.5.post3 0.4.6 0.4.6.post1 0.4.6.post2
0.4.6.post3 0.4.6.post4 0.4.6.post5 0.4.7 0.4.7.post1 0.4.8 0.4.8.post1 0.4.9 0.4.9.post1 0.4.9.post2 0.4.9.post3
0.4.9.post4 0.4.9.post5 0.4.9.post6 0.4.10 0.4.10.post1 0.4.10.post2 0.5.0rc0 0.5.0rc1 0.5.0rc2 0.5.1 0.5.1.post1
0.5.1.post2 0.5.1.post3 0.5.2 0.5.3 0.5.3.post1 0.5.3.post2 0.5.3.post3 0.5.4 0.5.4.post1 0.5.4.post2 0.5.4.post3
0.5.5 0.5.5.post1 0.5.5.post2 0.5.5.post3 0.5.6 0.5.6.post1 0.5.6.post2 0.5.7 0.5.8 0.5.8.post1 0.5.9 0.5.10
0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19
0.5.20 0.5.21 0.5.22 0.5.23
""".split())

VLLM_RELEASES = tuple(Version(v) for v in """
0.8.5 0.8.5.post1 0.9.0 0.9.0.1 0.9.1 0.9.2 0.10.0 0.10.1 0.10.1.1 0.10.2 0.11.0 0.11.1 0.11.2 0.12.0 0.13.0
0.14.0 0.14.1 0.15.0 0.15.1 0.16.0 0.17.0 0.17.1 0.18.0 0.18.1 0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0
0.22.1 0.23.0 0.24.0 0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0
""".split())

RELEASES: dict[str, tuple[Version, ...]] = {"sglang": SGLANG_RELEASES, "vllm": VLLM_RELEASES}
# what the engine had before its first EAGLE-3 release, for the refusal line
BEFORE = {"sglang": "only EAGLE-1/2 drafts (llama_eagle.py)", "vllm": "no EAGLE-3 draft class (llama_eagle3.py)"}

_SPEC = re.compile(r"^\s*(?P<name>[A-Za-z][\w-]{0,31})\s*(?:==\s*(?P<version>[^\s:]{1,200}))?\s*"
                   r"(?::\s*(?P<path>[A-Za-z][\w-]{0,31}))?\s*$")


def parse_version(text: str) -> Version:
    """``'0.5.11'`` / ``'0.5.11.post1'`` / ``'0.5.0rc2'`` / ``'0.25.0.dev3'`` -> a PEP 440 :class:`Version`.

    Bad or absurd input (not PEP 440, longer than a real release string, e.g. a 5000-digit
    component) is a UsageError, never a ValueError from ``int()``."""
    text = str(text).strip()
    if len(text) > MAX_VERSION_CHARS:
        raise UsageError(f"engine version {text[:20]!r}... is {len(text)} characters long: not a release number")
    try:
        return Version(text)
    except (InvalidVersion, ValueError):
        raise UsageError(f"engine version {text!r} is not a version number (e.g. sglang==0.5.11)") from None


def spec_parts(spec: str) -> tuple[str, str | None, str | None]:
    """``'vllm==0.33.0:v1'`` -> ('vllm', '0.33.0', 'v1'); a bare name -> (name, None, None)."""
    m = _SPEC.match(spec or "")
    if not m:
        shown = spec if len(spec or "") <= 60 else spec[:60] + "..."
        raise UsageError(f"engine {shown!r}: write NAME, NAME==VERSION or NAME==VERSION:PATH (e.g. vllm==0.33.0:v1)")
    return m.group("name").lower(), m.group("version"), m.group("path")


def first_release(name: str) -> Version | None:
    releases = RELEASES.get(name)
    return releases[0] if releases else None


def newest_release(name: str) -> Version | None:
    releases = RELEASES.get(name)
    return releases[-1] if releases else None


def releases_between(name: str, low: Version, high: Version | None) -> tuple[Version, ...]:
    """The known releases ``low <= v`` (``< high`` when given)."""
    return tuple(v for v in RELEASES.get(name, ()) if v >= low and (high is None or v < high))


def is_release(name: str, version: Version) -> bool:
    return version in RELEASES.get(name, ())


def nearest_releases(name: str, version: Version) -> tuple[Version, ...]:
    """The known releases on either side of ``version`` (one when it lies outside the range read)."""
    releases = RELEASES.get(name, ())
    below = [v for v in releases if v < version]
    above = [v for v in releases if v > version]
    return tuple(([below[-1]] if below else []) + ([above[0]] if above else []))


def check_release(name: str, version: Version) -> None:
    """A final or post release inside the range read that the package index never had (``sglang==0.5.11.post7``,
    ``vllm==0.9.5``) is a typo: a UsageError naming the nearest known releases. A pre-release, dev or local build
    (``0.9.1.dev3``, ``0.5.11+cu128``: built between releases, and pre-releases are not listed) and a version newer
    than the newest read (``engine/unverified-version``) pass."""
    releases = RELEASES.get(name)
    public = Version(version.public)
    if not releases or public.is_prerelease or public in releases or not releases[0] <= public <= releases[-1]:
        return
    nearest = " and ".join(str(v) for v in nearest_releases(name, public))
    raise UsageError(f"{name}=={version}: no such release; nearest: {nearest}")

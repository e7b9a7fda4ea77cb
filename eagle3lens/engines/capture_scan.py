"""Maintainer tool: read engine wheels and record which target model classes capture EAGLE-3 aux states.

    python -m eagle3lens.engines.capture_scan --engine sglang --wheels DIR [--out FILE]

Reads each ``sglang-*.whl`` in DIR (``pip download --no-deps sglang==X``) without importing or running it:
``sglang/srt/models/*.py`` are parsed with :mod:`ast` for their classes, their bases, whether a class
defines ``set_eagle3_layers_to_capture`` and the module's ``EntryClass`` (the architectures SGLang serves);
``sglang/srt/model_executor/**.py`` tell what the server does when a target class lacks the method (an explicit
``ValueError`` from 0.5.11 on, a plain ``AttributeError`` before). vLLM classes are read the same way: a class
that derives from ``SupportsEagle3`` captures aux states. The result is the data file
``eagle3lens/engines/data/<engine>_capture.json`` that :mod:`.target_support` reads; tests check it offline.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from packaging.version import InvalidVersion, Version

CAPTURE_METHOD = "set_eagle3_layers_to_capture"
VLLM_INTERFACE = "SupportsEagle3"  # vLLM 0.11.0+
VLLM_METHOD = "set_aux_hidden_state_layers"  # vLLM before the interface: the runner calls it directly
_WHEEL = re.compile(r"^(?P<name>sglang|vllm)-(?P<version>[^-]+)-")


@dataclass(frozen=True)
class ReleaseCapture:
    """What one release serves and which of those classes capture aux states."""

    version: str
    served: frozenset[str]  # architecture names the release registers
    capture: frozenset[str]  # those whose class captures EAGLE-3 aux hidden states
    missing: str  # "AttributeError" | "ValueError" | "RuntimeError": what start-up raises for a class without it


def _class_table(sources: Iterable[str], methods: frozenset[str]) -> tuple[dict[str, tuple[set[str], bool]], set[str]]:
    """class name -> (base names, defines one of ``methods`` or derives the interface); and EntryClass names."""
    classes: dict[str, tuple[set[str], bool]] = {}
    entries: set[str] = set()
    for text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                         if isinstance(b, (ast.Name, ast.Attribute))}
                defines = any(isinstance(n, ast.FunctionDef) and n.name in methods for n in node.body)
                old_bases, old_defines = classes.get(node.name, (set(), False))
                classes[node.name] = (old_bases | bases, old_defines or defines or VLLM_INTERFACE in bases)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                      for t in node.targets):
                value = node.value
                items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                entries |= {i.id for i in items if isinstance(i, ast.Name)}
    return classes, entries


def _captures(name: str, classes: dict[str, tuple[set[str], bool]], seen: frozenset[str] = frozenset()) -> bool:
    if name in seen or name not in classes:
        return False
    bases, defines = classes[name]
    return defines or any(_captures(b, classes, seen | {name}) for b in bases)


def _vllm_registry(text: str) -> dict[str, str]:
    """Architecture -> class name from vLLM's registry tables (``"Arch": ("module", "Class")`` entries)."""
    pairs = re.findall(r'^\s*"([A-Za-z0-9_]+)":\s*\(\s*"[A-Za-z0-9_.]+",\s*"([A-Za-z0-9_]+)"', text, flags=re.MULTILINE)
    return dict(pairs)


def scan_wheel(path: Path) -> ReleaseCapture:
    """Read one sglang or vllm wheel."""
    match = _WHEEL.match(path.name)
    if not match:
        raise ValueError(f"{path}: not an sglang or vllm wheel name")
    engine, version = match.group("name"), match.group("version")
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        models_dir = f"{engine}/srt/models/" if engine == "sglang" else "vllm/model_executor/models/"
        model_files = [n for n in names if n.startswith(models_dir) and n.endswith(".py")]
        sources = [wheel.read(n).decode("utf-8", "replace") for n in model_files]
        methods = frozenset({CAPTURE_METHOD} if engine == "sglang" else {VLLM_METHOD})
        classes, entries = _class_table(sources, methods)
        if engine == "sglang":
            runner = [wheel.read(n).decode("utf-8", "replace") for n in names
                      if n.startswith("sglang/srt/model_executor/") and n.endswith(".py")]
            explicit = any(f"{CAPTURE_METHOD}, which" in t for t in runner)  # the message names the method
            missing = "ValueError" if explicit else "AttributeError"
            served = entries
            capture = {name for name in served if _captures(name, classes)}
        else:
            registry = next((wheel.read(n).decode() for n in names if n == f"{models_dir}registry.py"), "")
            classes_of = _vllm_registry(registry)
            served = set(classes_of)
            capture = {arch for arch, cls in classes_of.items() if _captures(cls, classes)}
            interface = any(f"class {VLLM_INTERFACE}" in t for t in sources)
            missing = "RuntimeError" if interface else "AttributeError-vllm"
    return ReleaseCapture(version, frozenset(served), frozenset(capture), missing)


def compress(releases: list[ReleaseCapture], engine: str, source: str) -> dict[str, object]:
    """Releases in version order; per architecture the index ranges where it is served / captures."""
    releases = sorted(releases, key=lambda r: Version(r.version))
    versions = [r.version for r in releases]

    def ranges(member: list[bool]) -> list[list[int]]:
        out: list[list[int]] = []
        for i, on in enumerate(member):
            if on and out and out[-1][1] == i - 1:
                out[-1][1] = i
            elif on:
                out.append([i, i])
        return out

    archs = sorted(set().union(*(r.served for r in releases))) if releases else []
    missing = [r.missing for r in releases]
    return {
        "engine": engine, "source": source, "releases": versions,
        "missing_error": [[versions[a], versions[b], kind] for kind in sorted(set(missing))
                          for a, b in ranges([m == kind for m in missing])],
        "architectures": {a: {"served": ranges([a in r.served for r in releases]),
                              "capture": ranges([a in r.capture for r in releases])} for a in archs},
    }


SOURCES = {
    "sglang": ("sglang/srt/models/*.py (classes defining set_eagle3_layers_to_capture, bases, EntryClass); "
               "sglang/srt/model_executor/** (what start-up raises when the target class lacks it)"),
    "vllm": ("vllm/model_executor/models/*.py (classes deriving SupportsEagle3, or before 0.11.0 defining "
             "set_aux_hidden_state_layers), models/registry.py (architecture -> class)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3lens.engines.capture_scan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=sorted(SOURCES), required=True)
    parser.add_argument("--wheels", type=Path, required=True, help="folder of downloaded wheels")
    parser.add_argument("--out", type=Path, help="write the data file here (default: stdout)")
    args = parser.parse_args(argv)
    found = []
    for wheel in sorted(args.wheels.glob(f"{args.engine}-*.whl")):
        try:
            Version(_WHEEL.match(wheel.name).group("version"))  # type: ignore[union-attr]
        except (InvalidVersion, AttributeError):
            continue
        found.append(scan_wheel(wheel))
        print(f"read {wheel.name}: {len(found[-1].capture)} of {len(found[-1].served)} classes capture",
              file=sys.stderr)
    text = json.dumps(compress(found, args.engine, SOURCES[args.engine]), indent=0, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

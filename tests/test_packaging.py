"""The two dependency lists (pyproject.toml, environment.yml) stay in sync."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {r: _name(r) for r in project["dependencies"]}
    for extra in ("notebook", "remote", "dev"):
        declared.update({r: _name(r) for r in project["optional-dependencies"][extra]})
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = [p for p in pip_section if not p.startswith("-e")]
    assert {_name(p) for p in listed} == set(declared.values())
    # same version constraints, except torch which the set-up path pins to the CPU build
    by_name = {_name(p): p for p in listed}
    for requirement, name in declared.items():
        if name == "torch":
            assert by_name[name] == "torch==2.13.0"
        else:
            assert by_name[name].replace(" ", "") == requirement.replace(" ", "")


def test_setup_path_pins_cpu_torch() -> None:
    assert "TORCH_PIN ?= torch==2.13.0" in (ROOT / "Makefile").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()

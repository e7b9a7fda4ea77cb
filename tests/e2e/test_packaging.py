"""Packaging: environment.yml against pyproject.toml, and the built wheel installed outside the repo."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from _paths import ROOT

TORCH_PIN = "torch==2.13.0"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_environment_yml_installs_cpu_torch_and_the_user_extras() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    # the CPU wheel index for torch (PyPI's Linux torch is the CUDA build), the CI pin, then the package itself
    assert pip_section == ["--extra-index-url https://download.pytorch.org/whl/cpu", TORCH_PIN,
                           "-e .[notebook,remote]"]
    extras = _project()["optional-dependencies"]
    assert {"notebook", "remote", "dev"} <= set(extras)  # dev tools exist but are not forced on users


def test_runtime_imports_are_core_dependencies() -> None:
    core = {_name(r) for r in _project()["dependencies"]}
    # imported by doctor --target / trace / the walkthroughs outside any extra's command
    assert {"torch", "transformers", "safetensors", "accelerate", "rich", "plotly"} <= core


def test_setup_path_pins_cpu_torch() -> None:
    assert f"TORCH_PIN ?= {TORCH_PIN}" in (ROOT / "Makefile").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def _make_plan(target: str, tmp_path: Path) -> str:
    """What ``make TARGET`` would run from a fresh clone (a venv that does not exist yet), without running it."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}", f"DEMO_DIR={tmp_path / 'demo'}"],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def test_make_demo_installs_what_the_demo_needs_and_make_test_the_dev_tools(tmp_path: Path) -> None:
    """`make demo` installed the [dev] extra (ruff, mypy, playwright...) only to show the demo (4 min 37 s fresh)."""
    demo, test = _make_plan("demo", tmp_path), _make_plan("test", tmp_path)
    assert '-e ".[notebook,remote]"' in demo and "dev]" not in demo and "eagle3lens doctor" in demo
    assert '-e ".[notebook,remote,dev,real]"' in test and "pytest" in test and "ruff check" in test
    assert test.count(f"-m venv {tmp_path / 'venv'}") == 1  # one venv for both


def _torch_closure() -> list[md.Distribution]:
    """torch and the distributions it requires (recursively), as installed in this environment."""
    seen: dict[str, md.Distribution] = {}
    todo = ["torch"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional or platform-gated requirement not installed here
        seen[key] = dist
        todo += [_name(r) for r in dist.requires or [] if "extra ==" not in r]
    return list(seen.values())


def _has_build_backend() -> bool:
    """setuptools as pyproject.toml's build-system asks for it, importable here."""
    from packaging.version import Version

    try:
        return Version(md.version("setuptools")) >= Version("77")
    except md.PackageNotFoundError:
        return False


def _link_torch(into: Path) -> Path:
    """A directory of links to torch's installed closure (package dirs, modules and dist-info)."""
    into.mkdir()
    for dist in _torch_closure():
        site = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (site / top).exists() and not (into / top).exists():
                (into / top).symlink_to(site / top)
    return into


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_repo(tmp_path: Path) -> None:
    """The wheel, installed non-editable with [notebook,remote] into a fresh venv, runs demo, doctor --target
    --html and a walkthrough from a directory outside the checkout.

    Only torch (and its own requirements) is reused from this environment, through a .pth file: it is 40 s of
    the install and the set-up path pins it anyway. Everything else (transformers, accelerate, jupyter,
    papermill, paramiko, ...) is resolved from the wheel's metadata, so a missing dependency fails here.
    """
    wheels = tmp_path / "wheels"
    isolation = ["--no-build-isolation"] if _has_build_backend() else []  # else pip fetches setuptools itself
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, str(ROOT), "-w", str(wheels)],
                   check=True, capture_output=True)
    wheel = next(wheels.glob("eagle3lens-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_eagle3lens_test_torch.pth").write_text(str(_link_torch(tmp_path / "torch-only")) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    install = subprocess.run([py, "-m", "pip", "install", "-q", f"{wheel}[notebook,remote]"],
                             env=env, capture_output=True, text=True, check=False)
    assert install.returncode == 0, install.stderr[-3000:]
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))  # a user with nothing set up

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cli = str(venv / "bin" / "eagle3lens")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], cwd=outside, env=env, capture_output=True, text=True, timeout=600,
                              check=False)

    where = subprocess.run([py, "-c", "import eagle3lens; print(eagle3lens.__file__)"], cwd=outside, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), where  # the installed copy, not the checkout

    built = run("demo", "demo")
    assert built.returncode == 0, built.stderr
    doctor = run("doctor", "demo/speculators", "--engine", "sglang==0.5.11", "--target", "demo/target",
                 "--html", "out/report.html")
    assert doctor.returncode == 1, doctor.stderr  # the demo's drafter is broken under sglang 0.5.11
    assert "Traceback" not in doctor.stderr
    assert "keys/dropped" in doctor.stdout and "trace/" not in doctor.stderr
    assert (outside / "out" / "report.html").stat().st_size > 10_000
    notebook = run("notebook", "00_triage", "--out", "nb", "--no-progress")
    assert notebook.returncode in (0, 1), notebook.stderr
    assert "Traceback" not in notebook.stderr
    assert (outside / "nb" / "00_triage.ipynb").is_file() and (outside / "nb" / "00_triage.html").is_file()

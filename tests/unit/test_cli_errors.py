"""Exit codes: a missing optional extra, a broken install or a bug exits 2 with one line, never 1 (findings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eagle3lens import cli

# Runs ``python -m eagle3lens ARGS`` with the named top-level modules made unimportable, as if not installed.
HIDING = """
import runpy, sys
hidden = set(sys.argv[1].split(","))
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
sys.argv = ["eagle3lens", *sys.argv[2:]]
runpy.run_module("eagle3lens", run_name="__main__")
"""


def run_hiding(modules: str, *args: str, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run([sys.executable, "-c", HIDING, modules, *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120, check=False)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("eagle3lens: error: ")
    return lines[0]


def test_notebook_without_notebook_extra() -> None:
    line = one_error_line(run_hiding("nbformat,papermill,nbconvert,nbclient,jupyter_client", "notebook", "--list"))
    assert "pip install 'eagle3lens[notebook]'" in line


def test_host_without_remote_extra() -> None:
    line = one_error_line(run_hiding("paramiko", "notebook", "00_triage", "--host", "gpu1"))
    assert "pip install 'eagle3lens[remote]'" in line and "paramiko" in line


@pytest.mark.slow
def test_missing_core_dependency_says_reinstall(demo_dir: Path) -> None:
    line = one_error_line(run_hiding("accelerate", "trace", "--target", str(demo_dir / "target"),
                                     "--draft", str(demo_dir / "eagle"), "--engine", "sglang==0.5.11"))
    assert "'accelerate'" in line and "reinstall" in line


def test_internal_error_is_one_line_exit_2(monkeypatch, capsys) -> None:
    from eagle3lens.commands import engines

    def broken(args):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(engines, "run", broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["engines"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        ("eagle3lens: error: internal error: ZeroDivisionError: division by zero (please report it; "
         "EAGLE3LENS_DEBUG=1 shows the traceback)")]
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(["engines"]) == 2
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["info"], 2), (["no-such-command"], 2)])
def test_usage_exit_codes(argv, code, capsys) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's own exit
        cli.main(argv)
    assert exited.value.code == code
    assert cli.main([]) == 2


@pytest.mark.parametrize("argv", [["doctor"], ["keys", "--engine", "sglang==0.5.11"], ["info"], ["weights"]])
def test_a_hidden_state_dump_given_as_the_draft_says_so(demo_dir: Path, argv, capsys) -> None:
    """`doctor demo/hidden-states` said "tensor 'token_ids' is also in hs_0.safetensors (present in two shards)"."""
    for dump, fmt in (("hidden-states", "speculators"), ("hidden-states-sglang", "eagle3lens")):
        assert cli.main([*argv, str(demo_dir / dump)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"eagle3lens: error: {demo_dir / dump}: is a hidden-state dump ({fmt}), not a draft checkpoint: "
            "pass it with --data"]
    sample = demo_dir / "hidden-states" / "hs_0.safetensors"
    assert cli.main([*argv, str(sample)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"eagle3lens: error: {sample}: is a hidden-state sample (speculators), not a draft checkpoint: "
        "pass it or its folder with --data"]

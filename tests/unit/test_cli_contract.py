"""The CLI's promises that hold for every subcommand: usage errors in one line, a closed pipe is a quiet 0,
and --json is honoured everywhere (issue 25.10, 25.14, 25.15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _paths import ROOT
from eagle3lens import cli



@pytest.mark.parametrize("argv, start", [
    (["keys"], "eagle3lens: error: keys: the following arguments are required: "),
    (["info", "x", "--fail-on", "loud"], "eagle3lens: error: info: argument --fail-on: invalid choice: 'loud'"),
    (["acceptance", "d", "--steps", "-3"], "eagle3lens: error: acceptance: argument --steps: "),
    (["no-such-command"], "eagle3lens: error: argument COMMAND: invalid choice: 'no-such-command'"),
    (["engines", "--no-such-flag"], "eagle3lens: error: engines: unrecognized arguments: --no-such-flag"),
    (["--no-such-flag"], "eagle3lens: error: unrecognized arguments: --no-such-flag"),
])
def test_a_usage_error_is_one_line_without_the_usage_block(argv, start, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(start) and line.endswith("--help)") and "usage:" not in line


@pytest.mark.parametrize("argv, helps", [(["doctor", "x", "--no-such-flag", "1"], "eagle3lens doctor --help"),
                                         (["keys", "x", "extra"], "eagle3lens keys --help"),
                                         (["--no-such-flag"], "eagle3lens --help")])
def test_unrecognized_arguments_point_to_the_subcommands_help(argv, helps, capsys):
    """`unrecognized arguments` pointed to `eagle3lens --help`, whose page does not list a subcommand's options."""
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert capsys.readouterr().err.strip().endswith(f"(see {helps})")


def test_json_notes_is_always_a_list(tmp_path, capsys):
    """`notes` was written only when non-empty: a consumer had to test for the key."""
    from _builders import draft_tensors, speculators_config, write

    ckpt = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    assert cli.main(["info", str(ckpt), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
    cli.main(["keys", str(ckpt), "--engine", "sglang", "--json"])
    assert any(n.startswith("bare 'sglang': assumed sglang==") for n in json.loads(capsys.readouterr().out)["notes"])


def run_into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with its stdout a pipe whose reader has already gone (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "eagle3lens", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["engines"], ["engines", "--json"], ["notebook", "--list"]])
def test_a_closed_pipe_ends_quietly_with_0(argv):
    done = run_into_closed_pipe(*argv)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_closed_pipe_is_0_even_with_findings(tmp_path):
    from _builders import draft_tensors, speculators_config, write

    ckpt = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    argv = ["keys", str(ckpt), "--engine", "sglang==0.5.11"]
    assert cli.main(argv) == 1  # findings: with a reader, 1
    done = run_into_closed_pipe(*argv)
    assert (done.returncode, done.stderr) == (0, "")


def test_notebook_list_json(capsys):
    assert cli.main(["notebook", "--list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [w["name"] for w in data["results"]["walkthroughs"]]
    assert data["tool"] == "eagle3lens" and "00_triage" in names
    assert all(Path(w["path"]).is_file() and w["title"] for w in data["results"]["walkthroughs"])


def test_every_subcommand_takes_json():
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    for name, command in sub.choices.items():
        assert any("--json" in a.option_strings for a in command._actions), name


def run_piped(*argv: str, **env: str) -> str:
    """The CLI's stdout when it is a pipe (a CI log, ``make demo | tee``), with ``COLUMNS`` only as given."""
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(ROOT), **env}
    done = subprocess.run([sys.executable, "-m", "eagle3lens", *argv], capture_output=True, text=True, timeout=120,
                          env=environ, check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_output_that_is_not_a_terminal_is_not_cut_at_80_columns(tmp_path):
    """Piped output wrapped at 80 columns and cut names (`laye…`, `tar…` in CI logs): off a terminal the lines are as
    long as their content; COLUMNS, when set, is honoured."""
    from _builders import draft_tensors, speculators_config, write

    ckpt = write(tmp_path / ("a-long-folder-name-" * 4), draft_tensors("layers.0."), speculators_config())
    out = run_piped("keys", str(ckpt), "--engine", "sglang==0.5.11")
    assert "…" not in out and "layers.0.post_attention_layernorm.weight" in out
    assert "no parameter model.layers.0.post_attention_layernorm.weight: skipped without a log" in out  # one line
    assert f"   fix: eagle3lens convert {ckpt} --to sglang==0.5.11 OUT" in out.splitlines()  # whole, unpadded
    assert max(len(line) for line in out.splitlines()) > 80
    assert all(len(line) <= 80 for line in out.splitlines() if line.startswith("─"))  # rules stay short
    info = run_piped("info", str(ckpt))
    assert "…" not in info and "layers.0.post_attention_layernorm.weight" in info
    narrow = run_piped("keys", str(ckpt), "--engine", "sglang==0.5.11", COLUMNS="60")
    assert max(len(line) for line in narrow.splitlines()) <= 60

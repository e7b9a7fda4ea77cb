"""Hostile user notebooks: malformed files and path-like parameters are one bounded line; only path parameters are
probed as paths.

From the review round of issue 16 (item 19; was tests/test_hostile.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hostile import make_fifo, one_line_error

from eagle3lens.cli import main
from eagle3lens.errors import UsageError


# -- 19: malformed user notebooks and path-like parameters -----------------------------------------------
def test_malformed_notebooks_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eagle3lens.notebook.runner import notebook_parameters, walkthroughs

    (tmp_path / "text.ipynb").write_text("not json at all")
    nb = json.loads(walkthroughs()["05_serving_logs"].read_text())
    for cell in nb["cells"]:
        if "parameters" in cell["metadata"].get("tags", []):
            cell["source"] = ["log = (\n"]
    (tmp_path / "syntax.ipynb").write_text(json.dumps(nb))
    (tmp_path / "list.ipynb").write_text("[1, 2]")
    make_fifo(tmp_path / "fifo.ipynb")
    for name, problem in (("text", "not a readable notebook"), ("syntax", "parameters cell is not valid Python"),
                          ("list", "not a readable notebook"), ("fifo", "not a regular file")):
        with pytest.raises(UsageError, match=problem):
            notebook_parameters(tmp_path / f"{name}.ipynb")
        assert main(["notebook", str(tmp_path / f"{name}.ipynb"), "--out", str(tmp_path / "out")]) == 2
        assert problem in one_line_error(capsys)


def test_only_path_parameters_are_probed_as_paths(tmp_path: Path) -> None:
    from eagle3lens.commands.notebook import absolute_paths

    (tmp_path / "sglang").write_text("a file named like an engine")
    (tmp_path / "ckpt").mkdir()
    params = {"engine": "sglang", "checkpoint": "ckpt", "log": "x" * 300, "target": "y" * 1_000_000,
              "scenario": "ckpt", "my_dir": "ckpt", "path": "ckpt", "preset": "ckpt", "chat": "demo/chat.jsonl",
              "templated": "/abs/dump"}
    out = absolute_paths(params, tmp_path)
    assert out["engine"] == "sglang" and out["scenario"] == "ckpt"  # not paths: never looked up
    assert out["preset"] == "ckpt"
    assert out["checkpoint"] == out["my_dir"] == out["path"] == str(tmp_path / "ckpt")
    assert out["log"] == "x" * 300 and out["target"] == "y" * 1_000_000  # too long for a name: left alone
    assert out["chat"] == str(tmp_path / "demo" / "chat.jsonl")  # absent, still made absolute: errors name it
    assert out["templated"] == "/abs/dump"


def test_notebook_errors_are_bounded(tmp_path: Path) -> None:
    from eagle3lens.errors import NotebookCellError

    error = NotebookCellError("nb.ipynb", "code cell 2 of 5", "x = 1", "OSError: " + "y" * 1_000_000 + "\nz",
                              tmp_path / "nb.ipynb")
    assert len(str(error)) < 1000 and "\n" not in str(error)

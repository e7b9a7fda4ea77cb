"""read_json: every failure of a JSON file the user names is one line of the caller's error class, and the
CLI options that read JSON (--params-file, --counts, checkpoint configs) exit 2 with that line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError, UsageError
from eagle3lens.io.jsonio import read_json

from _builders import build_mapping, write_draft

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content,problem", [
    (b'{"a": [1, 2]}', None),
    (b"{nope", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (b"\xff\xfe{}", "not UTF-8 text"),
    (DEEP.encode(), "nested too deeply"),
])
@pytest.mark.parametrize("error", [UsageError, CheckpointError])
def test_read_json_failures_are_one_line(tmp_path: Path, content: bytes, problem: str | None, error) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    if problem is None:
        assert read_json(path, "thing", error) == {"a": [1, 2]}
        return
    with pytest.raises(error) as info:
        read_json(path, "thing", error)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message
    assert "thing" in message


def test_missing_file_names_what_could_not_be_read(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"missing\.json: cannot read parameters file \(No such file"):
        read_json(tmp_path / "missing.json", "parameters file")


def test_deeply_nested_params_file_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    params = tmp_path / "params.json"
    params.write_text('{"a": ' + DEEP + "}")
    assert main(["notebook", "00_triage", "--params-file", str(params), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "params.json" in err and "nested too deeply" in err and len(err.splitlines()) == 1


def test_deeply_nested_counts_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    counts = torch.arange(1, 201, dtype=torch.float64)
    d2t, t2d = build_mapping(counts, 50)
    draft = write_draft(tmp_path / "d", 200, 50, d2t, t2d)
    deep = tmp_path / "counts.json"
    deep.write_text(DEEP)
    assert main(["vocab", str(draft), "--counts", str(deep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "counts.json" in err and "nested too deeply" in err and len(err.splitlines()) == 1


def _nested_keys(depth: int) -> str:
    """``depth`` objects nested by key, as JSON text (written out: json.dumps itself recurses)."""
    return '{"k": ' * (depth - 1) + "{}" + "}" * (depth - 1)


@pytest.mark.parametrize("depth, refused", [(64, False), (65, True), (985, True)])
def test_nesting_is_bounded_after_parsing(tmp_path: Path, depth: int, refused: bool) -> None:
    """985 levels parse at the top of the stack, then a copy or write deeper in the call chain overflows it."""
    from eagle3lens.io.jsonio import MAX_JSON_DEPTH

    path = tmp_path / "f.json"
    path.write_text(_nested_keys(depth))
    if not refused:
        assert json.dumps(read_json(path, "thing")) == _nested_keys(depth)
        return
    with pytest.raises(UsageError, match=rf"f\.json: thing is nested too deeply \(more than {MAX_JSON_DEPTH} levels\)"):
        read_json(path, "thing")


@pytest.mark.parametrize("junk", ["[" * 100_000 + "]" * 100_000, _nested_keys(985)], ids=["100k", "985"])
@pytest.mark.parametrize("which", ["draft", "target"])
def test_doctor_on_a_deeply_nested_config_is_one_line(tmp_path: Path, capsys, junk: str, which: str) -> None:
    from _builders import draft_tensors, speculators_config, write, write_target

    draft = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    target = tmp_path / "target"
    write_target(target, 200)
    config = (draft if which == "draft" else target) / "config.json"
    config.write_text(config.read_text().rstrip().removesuffix("}") + ', "junk": ' + junk + "}")
    code = main(["doctor", str(draft), "--engine", "sglang==0.5.11", "--target", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and err == f"eagle3lens: error: {config}: config JSON is nested too deeply (more than 64 levels)\n"

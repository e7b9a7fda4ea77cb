"""``vocab --text FILE``: the text sample is an input like any other: a regular file of bounded size, read once,
and a bad one is one line naming the file (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eagle3lens import cli
from eagle3lens.commands.vocab import MAX_TEXT_BYTES


def _error(capsys: pytest.CaptureFixture[str], demo_dir: Path, text: Path) -> str:
    assert cli.main(["vocab", str(demo_dir / "speculators"), "--tokenizer", str(demo_dir / "target"),
                     "--text", str(text)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_huge_text_sample_is_refused_by_its_size(demo_dir: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "sample.txt"
    with open(text, "wb") as fh:
        fh.truncate(MAX_TEXT_BYTES + 1)  # sparse: nothing written
    err = _error(capsys, demo_dir, text)
    assert err.endswith(f"{text}: text sample is 64.0 MiB, over the 64 MiB limit for this input"), err


def test_a_fifo_is_refused_without_blocking(demo_dir: Path, tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "sample.txt"
    os.mkfifo(fifo)
    err = _error(capsys, demo_dir, fifo)
    assert f"{fifo}: is a FIFO" in err and "expected a text sample (a regular file)" in err, err


def test_a_text_sample_that_is_not_utf8_names_the_byte(demo_dir: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "sample.txt"
    text.write_bytes(b"hello \xff world")
    err = _error(capsys, demo_dir, text)
    assert err.endswith(f"{text}: the text sample is not UTF-8 (invalid start byte at byte 6)"), err


def test_a_good_text_sample_is_counted(demo_dir: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "sample.txt"
    text.write_text("w5 w6 w7 w5\n", encoding="utf-8")
    assert cli.main(["vocab", str(demo_dir / "speculators"), "--tokenizer", str(demo_dir / "target"),
                     "--text", str(text), "--json"]) in (0, 1)
    assert '"vocab"' in capsys.readouterr().out

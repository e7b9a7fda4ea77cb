"""Control characters from data never reach a terminal or a page raw (issue 16, item 9).

Tensor names carrying a clear-screen CSI, an OSC-8 hyperlink, an OSC-0 window title, a C1 CSI, a newline that
forges a second ``eagle3lens: error:`` line and a right-to-left override go through every command that prints
them, as a user runs it (a subprocess).
"""

from __future__ import annotations

import html
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _builders import draft_tensors, speculators_config, write

from eagle3lens.io.textsafe import printable

HOSTILE = ("evil\x1b[2J.weight", "link\x1b]8;;http://x\x1b\\.weight", "title\x1b]0;pwned\x07.weight",
           "c1\x9b31m.weight", "x\neagle3lens: error: forged.weight", "abc\u202edcba.weight")
RAW = ("\x1b", "\x9b", "\x07", "\u202e")


def test_printable_escapes_controls_and_bidi_and_keeps_text() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("x\ny\tz\x7f\x9b") == "x\\x0ay\\x09z\\x7f\\x9b"
    assert printable("r\u202el \u2066i\u2069 \u200e\u200f\u061c") == "r\\u202el \\u2066i\\u2069 \\u200e\\u200f\\u061c"
    assert printable("line\u2028next") == "line\\u2028next"
    assert printable("two\nlines\x1b", newlines=True) == "two\nlines\\x1b"
    assert printable("ünïcode · → 模型 C:\\path") == "ünïcode · → 模型 C:\\path"  # ordinary text untouched
    assert printable(3) == "3"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"}
    return subprocess.run([sys.executable, "-m", "eagle3lens", *args], capture_output=True, text=True,
                          encoding="utf-8", errors="replace", env=env, timeout=120)


def _assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        found = [repr(c) for c in RAW if c in text]
        assert not found, f"{stream} carries raw {found}: {text[:400]!r}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("eagle3lens: error:")]
    assert len(errors) <= 1, proc.stderr
    assert not any(line.startswith("eagle3lens: error: forged") for line in proc.stdout.splitlines())


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    extra = {name: torch.zeros(4, dtype=torch.bfloat16) for name in HOSTILE}
    write(root / "a", draft_tensors(extra=extra), speculators_config())
    write(root / "b", draft_tensors(prefix="midlayer.", extra={n + "2": t for n, t in extra.items()}), speculators_config())
    return root


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    ["info", "{a}"],
    ["keys", "{a}", "--engine", "sglang==0.5.11"],
    ["diff", "{a}", "{b}"],
    ["weights", "{a}"],
    ["doctor", "{a}", "--engine", "sglang==0.5.11", "--html", "{root}/report.html"],
    ["convert", "{a}", "--to", "sglang==0.5.11", "{root}/converted"],
])
def test_hostile_tensor_names_are_printed_escaped(hostile: Path, command: list[str]) -> None:
    args = [c.format(a=hostile / "a", b=hostile / "b", root=hostile) for c in command]
    proc = _run(*args)
    assert proc.returncode in (0, 1, 2), proc.stderr
    _assert_clean(proc)
    assert "\\x1b[2J" in proc.stdout + proc.stderr  # shown, as a visible escape
    if command[0] == "convert":  # refused: the dropped names are listed in one error line
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "\\x0aeagle3lens: error: forged" in proc.stderr
    if command[0] == "doctor":
        page = (hostile / "report.html").read_text(encoding="utf-8")
        assert not [c for c in RAW if c in page]
        embedded = page.split('id="eagle3lens-report">', 1)[1].split("</script>", 1)[0]
        report = json.loads(html.unescape(embedded))  # the data is kept exactly, inside escaped JSON
        assert set(HOSTILE) <= {t["key"] for t in report["results"]["keys"]["tensors"]}


def test_json_output_escapes_controls(hostile: Path) -> None:
    proc = _run("keys", str(hostile / "a"), "--engine", "sglang==0.5.11", "--json")
    _assert_clean(proc)
    names = {t["key"] for t in json.loads(proc.stdout)["results"]["keys"]["tensors"]}
    assert set(HOSTILE) <= names  # the data itself is kept exactly, only its printing is escaped


def test_an_error_naming_a_hostile_tensor_stays_one_line(tmp_path: Path) -> None:
    name = "w\neagle3lens: error: forged\x1b[2J\u202e"
    header = json.dumps({name: {"dtype": "ZZ", "shape": [2], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    proc = _run("info", str(path))
    assert proc.returncode == 2
    _assert_clean(proc)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("eagle3lens: error:") and "forged" in proc.stderr


def test_hostile_log_lines_are_printed_escaped(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("Decode batch. #running-req: 1, accept len: 1.00, \x1b]0;pwned\x07 \u202egen throughput\n"
                   "\x1b]8;;http://x\x1b\\click\x1b]8;;\x1b\\ not a decode line \x9b2J\n"
                   "x\neagle3lens: error: forged\n", encoding="utf-8")
    proc = _run("logs", str(log))
    assert proc.returncode in (0, 1), proc.stderr
    _assert_clean(proc)

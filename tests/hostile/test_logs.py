"""Hostile input to the log probe (issue 16 items 9, 13, 16, 17, 22): files that are not logs, lines built to be slow,
numbers too big for ``int``, absurd values and terminal control sequences. Each must give exit 2 and one line, or a
correct result; never a traceback, a hang or unbounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _builders import speculators_draft

from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError, UsageError
from eagle3lens.io.inputs import open_regular, read_regular
from eagle3lens.probes import logs as logs_probe
from eagle3lens.probes.logs import LogFileError, clean_text, parse_log

DECODE = ("[2026-03-10 08:01:{s:02d} TP0] Decode batch, #running-req: 8, #token: 5120, token usage: 0.02, "
          "accept len: {length}, accept rate: {rate}, cuda graph: True, gen throughput (token/s): 24.80, #queue-req: 0")


def decode(length: str = "1.00", rate: str = "0.00", s: int = 0) -> str:
    return DECODE.format(length=length, rate=rate, s=s % 60)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, so a hang fails the test instead of the session."""
    return subprocess.run([sys.executable, "-m", "eagle3lens", *args], capture_output=True, text=True,
                          check=False, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(n in result.stderr for n in needles), result.stderr


# ---------------------------------------------------------------- files that are not regular files (item 16)

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    os.mkfifo(path)
    return path


def test_open_regular_refuses_devices_fifos_directories_and_oversize(tmp_path: Path, fifo: Path) -> None:
    for path, problem in ((Path("/dev/zero"), "is a character device"), (fifo, "is a FIFO"),
                          (tmp_path, "is a directory"), (tmp_path / "missing", "no such log file")):
        with pytest.raises(CheckpointError, match=problem) as err:
            open_regular(path, 1024, "log file")
        assert err.value.path == str(path)
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(CheckpointError, match=r"log file is 2 KiB, over the 1 KiB limit"):
        open_regular(big, 1024, "log file")
    assert read_regular(big, 4096, "log file") == b"x" * 2048
    with open_regular(big, 4096, "log file") as handle:
        assert handle.read(3) == b"xxx"


def test_logs_of_dev_zero_and_a_fifo_exit_2_at_once(fifo: Path) -> None:
    for path, kind in (("/dev/zero", "character device"), (str(fifo), "FIFO")):
        t0 = time.perf_counter()
        one_error_line(cli("logs", path, timeout=30), path, kind, "expected a log file")
        assert time.perf_counter() - t0 < 30
    with pytest.raises(LogFileError, match="FIFO"):
        parse_log(fifo)


def test_doctor_log_and_notebook_params_file_refuse_non_regular_files(tmp_path: Path, fifo: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """In-process (the type is checked before any read, so a regression fails here rather than hanging: the
    subprocess test above guards the hang itself)."""
    draft = speculators_draft(tmp_path / "draft")
    cases = [(["doctor", str(draft), "--log", "/dev/zero", "--no-weights"], "character device"),
             (["doctor", str(draft), "--log", str(fifo), "--no-weights"], "FIFO"),
             (["notebook", "00_triage", "--params-file", "/dev/zero"], "expected a parameters file"),
             (["notebook", "00_triage", "--params-file", str(fifo)], "expected a parameters file")]
    for argv, problem in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and problem in err and argv[-2 if argv[0] == "doctor" else -1] in err, err


def test_a_log_over_the_size_cap_is_refused_naming_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "huge.log"
    log.write_text(decode() + "\n" * 3000)
    monkeypatch.setattr(logs_probe, "MAX_LOG_BYTES", 1024)
    with pytest.raises(LogFileError, match=r"huge.log: log file is .* over the 1 KiB limit"):
        parse_log(log)


# ---------------------------------------------------------------- line length and linear time (item 17)

def test_overlong_lines_are_counted_and_skipped_without_being_held(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    long_line = "Decode batch, accept len: 9.00, " + "x" * (logs_probe.MAX_LINE_BYTES + 10)
    log.write_text("\n".join([decode("1.00"), long_line, decode("1.02", "0.01", 5)]) + "\n")
    r = parse_log(log)
    assert r.total_lines == 3 and r.overlong_lines == 1
    assert [s.accept_len for s in r.samples] == [1.0, 1.02]  # the 9.00 inside the long line is never read
    assert any("1 lines over 64 KiB skipped" in n and "line 2" in n for n in r.notes)
    assert r.to_dict()["limits"]["overlong_lines"] == 1


def test_lines_spanning_read_blocks_and_split_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small blocks and a small cap exercise every path of the block reader: a line cut by a block boundary, a
    multi-byte character cut in two, an overlong line spanning several blocks, a last line without newline."""
    monkeypatch.setattr(logs_probe, "_BLOCK", 64)
    monkeypatch.setattr(logs_probe, "MAX_LINE_BYTES", 400)
    lines = [decode("1.00") + " ünïcödé ✓", "y" * 1000, decode("2.50", "0.38", 1), "z" * 401, decode("3.00", "0.50", 2)]
    log = tmp_path / "blocks.log"
    log.write_bytes("\n".join(lines).encode())  # no newline at the end
    r = parse_log(log)
    assert r.total_lines == 5 and r.overlong_lines == 2
    assert [s.line for s in r.samples] == [1, 3, 5]
    assert [s.accept_len for s in r.samples] == [1.0, 2.5, 3.0]


def test_a_huge_decode_line_under_the_cap_parses_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1.0: a 2 MB Decode line took 48 s (a label search re-sliced the line per occurrence) and a 200 KB line with
    a run of spaces never finished (the label regex backtracked). Raise the cap so the probe really parses them."""
    monkeypatch.setattr(logs_probe, "MAX_LINE_BYTES", 8 << 20)
    many_labels = "Decode batch, #running-req: 8, " + "block accept len x " * 150_000 + ", accept len: 1.00, accept rate: 0.00"
    spaces = "Decode batch, a" + " " * 200_000 + "b: 1, accept len: 1.00" + " " * 200_000 + ": x"
    digits = "Decode batch, accept len: " + "1" * 100_000 + ", accept rate: " + "9" * 100_000 + "x%"
    for text in (many_labels, spaces, digits):
        t0 = time.process_time()
        r = parse_log(text + "\n")
        assert time.process_time() - t0 < 2.0, len(text)
    assert parse_log(many_labels + "\n").summary.mean_accept_len == 1.0
    assert parse_log(spaces + "\n").summary.mean_accept_len == 1.0
    assert r.rejected_values == 2 and r.summary.acceptance_lines == 0  # 100,000-digit numbers are not believable


def test_a_long_log_keeps_a_bounded_series_and_an_exact_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_probe, "MAX_SERIES", 64)
    text = "\n".join(decode(f"{1 + (i % 3):.2f}", f"{(i % 3) / 4:.2f}", i) for i in range(3000)) + "\n"
    r = parse_log(text)
    assert r.parsed_lines == 3000 and r.summary.acceptance_lines == 3000
    assert len(r.samples) <= 65 and r.series_stride == 64
    assert [s.line for s in r.samples[:3]] == [1, 65, 129]  # evenly decimated, in order
    assert r.summary.mean_accept_len == pytest.approx(2.0)  # over all 3000 lines, not the kept ones
    assert r.summary.median_accept_len == 2.0 and r.summary.last_accept_len == 1.0 + (2999 % 3)
    assert r.to_dict()["lines"]["parsed"] == 3000
    assert any("every 64th" in n for n in r.notes)


# ---------------------------------------------------------------- numbers (items 13, 22)

def test_integers_over_python_digit_limit_never_raise() -> None:
    args = "[2026-05-04 09:12:01] server_args=ServerArgs(speculative_num_steps=4, speculative_num_draft_tokens=" + "7" * 5000 + ")"
    r = parse_log(args + "\n" + decode("1.00", "0.00") + "\n")
    assert r.inference.source != "server_args"  # the believable steps=4 is kept: (len-1)/steps when ndt is unset
    assert (r.inference.num_draft_tokens, r.inference.draft_steps) == (5, 4)
    assert any("speculative_num_draft_tokens=<5000 digits>" in n and "ignored" in n for n in r.notes)
    assert [f.code for f in r.findings] == ["logs/zero-acceptance"]
    vllm = ("INFO 05-02 11:21:10 [metrics.py:82] SpecDecoding metrics: Mean acceptance length: 2.00, "
            f"Accepted: {'9' * 5000} tokens, Drafted: {'9' * 5000} tokens, Per-position acceptance rate: 0.5")
    r = parse_log(vllm + "\n", engine="vllm==0.9.0")
    assert r.summary.mean_accept_len == 2.0 and r.summary.accepted_tokens is None and r.rejected_values == 2
    with pytest.raises(UsageError, match="engine spec for logs is 5010 characters long"):
        parse_log(decode() + "\n", engine="sglang==0." + "9" * 5000)
    with pytest.raises(UsageError, match="invalid sglang version"):
        parse_log(decode() + "\n", engine="sglang==banana")
    one_error_line(cli("logs", os.devnull, "--engine", "sglang==0." + "9" * 5000), "engine spec")
    one_error_line(cli("logs", os.devnull, "--engine", "sglang==0.5.x"), "invalid sglang version '0.5.x'")


@pytest.mark.parametrize("value", ["-1.00", "1e308", "-1e308", "nan", "inf", "-inf", "0.50"])
def test_absurd_accept_lengths_are_skipped_never_judged(value: str) -> None:
    r = parse_log(decode(value, "0.00") + "\n" + decode(value, "0.00", 1) + "\n")
    assert r.summary.mean_accept_len is None and r.summary.acceptance_lines <= 2
    assert r.rejected_values >= 2  # counted, with a note
    assert any("skipped" in n for n in r.notes)
    assert "logs/zero-acceptance" not in [f.code for f in r.findings]
    assert "logs/low-acceptance" not in [f.code for f in r.findings]
    json.dumps(r.to_dict())  # no NaN/Infinity sneaks into the JSON


def test_absurd_values_beside_good_ones_do_not_move_the_summary() -> None:
    text = "\n".join([decode("2.50", "0.38"), decode("-5.00", "0.38", 1), decode("1e308", "7.00", 2),
                      "[2026-03-10 08:02:00 TP0] avg_spec_accept_length=-3.5",
                      ("INFO 08-20 12:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1e308, "
                       "Per-position acceptance rate: 5.000, -1.000")]) + "\n"
    r = parse_log(text, engine="sglang")
    assert r.summary.mean_accept_len == 2.5 and r.summary.lifetime_accept_len is None
    assert r.summary.mean_accept_rate == 0.38  # 7.00 is no rate
    assert r.rejected_values >= 5 and len(r.rejected_examples) >= 3


# ---------------------------------------------------------------- terminal control sequences (item 9)

HOSTILE = ("\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07", "\x1b]0;owned title\x07", "\x1b[2J\x1b[H",
           "\x9b31m", "\u202eevil\u202c", "\x07\x08\x0b", "\x1bP+q544e\x1b\\", "\x1b_apc\x1b\\")
BAD_CHARS = ("\x1b", "\x07", "\x9b", "\x9d", "\u202e", "\u202c", "\x08", "\x0b")


def test_clean_text_strips_every_escape_sequence_and_control() -> None:
    for text in HOSTILE:
        out = clean_text("a" + text + "b")
        assert not any(c in out for c in BAD_CHARS), repr(out)
        assert out.startswith("a") and out.endswith("b")
    assert clean_text("\x1b[1mbold\x1b[0m and\ttab") == "bold and tab"
    assert clean_text("\x1b]8;;http://x/\x07link\x1b]8;;\x07") == "link"
    assert clean_text("ünïcödé ✓") == "ünïcödé ✓"


def test_control_sequences_in_log_lines_never_reach_the_output(tmp_path: Path) -> None:
    lines = [decode("1.00").replace("accept len", f"accept len{HOSTILE[0]}") + f", fork{HOSTILE[1]}field: 3"]
    lines += [f"Decode batch, garbled {t} accept len: ---" for t in HOSTILE]  # unparsed examples quote the line
    lines.append("INFO 07-01 09:00:10 [metrics.py:140] SpecDecoding metrics: Mean acceptance length: 2.61, "
                 f"Accepted: 1 tokens, Drafted: 3 tokens, Per-position acceptance rate: 0.720, evil{HOSTILE[4]}: 1")
    log = tmp_path / ("name" + HOSTILE[2] + ".log")
    log.write_text("\n".join(lines) + "\n")
    r = parse_log(log)
    stored = json.dumps(r.to_dict(), ensure_ascii=False)
    assert not any(c in stored for c in BAD_CHARS)
    assert r.unparsed_lines == len(HOSTILE) and "garbled" in r.unparsed_examples[0][1]
    for args in (["logs", str(log)], ["logs", str(log), "--json"], ["logs", str(log), "--engine", "vllm"]):
        out = cli(*args)
        assert out.returncode in (0, 1), out.stderr
        assert not any(c in out.stdout + out.stderr for c in BAD_CHARS if c != "\x1b")
        assert "\x1b]" not in out.stdout and "evil.example" not in out.stdout


def test_crlf_line_endings_parse_like_lf(tmp_path: Path) -> None:
    log = tmp_path / "windows.log"
    log.write_bytes(("\r\n".join([decode("1.00"), decode("2.00", "0.25", 1)]) + "\r\n").encode())
    r = parse_log(log)
    assert [s.accept_len for s in r.samples] == [1.0, 2.0] and r.total_lines == 2
    assert r.unknown_fields == ()  # '#queue-req: 0\r' is not read as a new field

"""Hostile destinations: a FIFO, socket, folder or link where a report, a notebook or a manifest is written is
refused in one line and left as it was; untrusted text embedded in a report's HTML round-trips unexecuted.

From the review round of issue 16 (items 10, 22; was tests/test_hostile.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from _hostile import make_fifo, make_socket, one_line_error

from eagle3lens.cli import main
from eagle3lens.errors import UsageError


# -- 10: never replace a device node, FIFO or socket by a file -------------------------------------
def test_atomic_writes_refuse_a_destination_that_is_not_a_regular_file(tmp_path: Path) -> None:
    from eagle3lens.io.safewrite import replacing, write_text_atomic

    fifo = make_fifo(tmp_path / "report.html")
    sock, listener = make_socket(tmp_path / "s.html")
    folder = tmp_path / "dir.html"
    folder.mkdir()
    link = tmp_path / "link.html"
    link.symlink_to(fifo)
    try:
        for dest in (fifo, sock, folder, link):
            with pytest.raises(UsageError, match="not a regular file"):
                write_text_atomic(dest, "<html>")
            with pytest.raises(UsageError), replacing(dest) as part:
                part.write_text("x")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISSOCK(os.lstat(sock).st_mode)
        assert folder.is_dir() and link.is_symlink()
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
        (tmp_path / "plain.html").write_text("old")
        write_text_atomic(tmp_path / "plain.html", "new")  # a regular file is still replaced whole
        assert (tmp_path / "plain.html").read_text() == "new"
    finally:
        listener.close()


def test_doctor_html_onto_a_fifo_is_one_line_and_keeps_the_fifo(draft: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    fifo = make_fifo(tmp_path / "out.html")
    assert main(["doctor", str(draft), "--no-weights", "--json", "--html", str(fifo)]) == 2
    assert "not a regular file" in one_line_error(capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_notebook_outputs_onto_a_fifo_are_refused_before_running(tmp_path: Path) -> None:
    from eagle3lens.notebook.runner import run_notebook, walkthroughs

    out = tmp_path / "out"
    out.mkdir()
    fifo = make_fifo(out / "05_serving_logs.ipynb")
    with pytest.raises(UsageError, match="not a regular file"):
        run_notebook(walkthroughs()["05_serving_logs"], {}, out)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_remote_manifest_goes_through_the_regular_file_check(tmp_path: Path) -> None:
    from eagle3lens.notebook import remote_run as remote

    assert remote.write_text_atomic.__module__ == "eagle3lens.io.safewrite"  # remote.json and fetched files
    assert remote.replacing.__module__ == "eagle3lens.io.safewrite"


def test_report_json_embedded_in_html_round_trips(tmp_path: Path) -> None:
    from eagle3lens.findings import Finding, Report, Severity
    from eagle3lens.render import render_report_html

    title = "tensor '</script><script>alert(1)</script>' & <b> \\u003c"
    report = Report(checkpoint={"path": "a<b>&c"}, findings=[Finding("keys/dropped", Severity.CRITICAL, title)])
    page = render_report_html(report)
    embedded = page.split('id="eagle3lens-report">', 1)[1].split("</script>", 1)[0]
    assert json.loads(embedded) == json.loads(report.to_json(indent=None))
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded

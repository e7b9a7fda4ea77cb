"""convert never deletes what it did not create, cleans up after any interrupted run whatever the rerun is, checks
every dump sample before writing, and verifies the bytes as it writes them (issues 25.3, 25.6, 25.7, 24.3)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import torch
from _builders import draft_tensors, speculators_config, write
from _hostile import killed_at

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.convert import convert
from eagle3lens.io.safewrite import MARKER, journal_path


def dead_pid() -> int:
    done = subprocess.run(["true"], check=True)
    assert done.returncode == 0
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture()
def draft(tmp_path: Path) -> Path:
    return write(tmp_path / "src" / "ckpt", draft_tensors("layers.0."), speculators_config())


def plant(parent: Path, target: str, tmp_name: str, **extra) -> Path:
    """A user's directory named like a temp dir, and a journal (dead owner, building) naming it."""
    theirs = parent / tmp_name
    theirs.mkdir(parents=True)
    (theirs / "thesis.tex").write_text("years of work")
    journal_path(parent / target).write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname(),
                                                         "start": "1", "tmp": tmp_name, "in_place": False,
                                                         "state": "building", **extra}))
    return theirs


@pytest.mark.parametrize("extra", [{}, {"token": "f" * 32}, {"token": "f" * 32, "inode": [1, 2]}])
def test_a_planted_journal_deletes_nothing_it_names(draft, tmp_path, extra):
    theirs = plant(tmp_path / "work", "out", ".out.tmp-0badc0de", **extra)
    result = convert(draft, "sglang==0.5.11", tmp_path / "work" / "out")
    assert (theirs / "thesis.tex").read_text() == "years of work"
    assert any("left .out.tmp-0badc0de alone" in n for n in result.notes)
    assert not journal_path(tmp_path / "work" / "out").exists()
    # the sweep of a folder (a convert into a sibling) leaves it too
    theirs2 = plant(tmp_path / "work", "other", ".other.tmp-0badc0de", **extra)
    convert(draft, "sglang==0.5.11", tmp_path / "work" / "sibling")
    assert (theirs2 / "thesis.tex").exists()


def test_a_planted_marker_with_the_wrong_token_is_not_ours(draft, tmp_path):
    theirs = plant(tmp_path / "work", "out", ".out.tmp-0badc0de", token="a" * 32)
    (theirs / MARKER).write_text("b" * 32 + "\n")
    convert(draft, "sglang==0.5.11", tmp_path / "work" / "out")
    assert (theirs / "thesis.tex").exists()


def test_a_killed_runs_own_temp_dir_is_still_removed(draft, tmp_path, monkeypatch):
    """Its marker (or its inode in the journal) proves it is convert's: the next run removes it."""
    import eagle3lens.io.safetensors_writer as writer_mod

    out = tmp_path / "work" / "out"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            writer_mod.copy_tensor = lambda *a: os._exit(9)  # type: ignore[assignment]
            convert(draft, "sglang==0.5.11", out)
        finally:
            os._exit(3)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9
    (left,) = [n for n in hidden(out.parent) if ".tmp-" in n]
    assert (out.parent / left / MARKER).is_file()
    data = json.loads(journal_path(out).read_text())
    assert data["inode"] == [os.lstat(out.parent / left).st_dev, os.lstat(out.parent / left).st_ino]
    result = convert(draft, "sglang==0.5.11", out)
    assert any("interrupted run" in n for n in result.notes) and hidden(out.parent) == []
    assert not (out / MARKER).exists()  # the marker never reaches the output


def test_any_later_convert_recovers_an_interrupted_in_place_run(tmp_path):
    """Killed at every step of an --in-place run, then a convert of the same source to a new OUT (not the same
    --in-place run): the source is back where it was, and no journal or temp dir is left beside it."""
    original = {k: v.clone() for k, v in draft_tensors("layers.0.").items()}
    step = 1
    while True:
        parent = tmp_path / f"step{step}"
        src = write(parent / "ckpt", original, speculators_config())
        code = killed_at(step, lambda src=src: convert(src, "sglang==0.5.11", None, in_place=True))
        if code == 0:
            break
        assert code == 9
        convert(src, "sglang==0.5.11", tmp_path / f"out{step}")
        restored = Checkpoint.open(src)
        assert restored.layout == "speculators" and all(torch.equal(restored.read(k), v) for k, v in original.items())
        assert hidden(parent) == [], step
        assert not (parent / "ckpt.orig").exists()
        step += 1
        assert step < 12
    assert step >= 4


def test_convert_data_checks_every_sample_before_writing(demo_dir, tmp_path, capsys):
    from eagle3lens.probes.data import write_speculators_sample

    dump = tmp_path / "dump"
    dump.mkdir()
    g = torch.Generator().manual_seed(0)
    write_speculators_sample(dump / "hs_0.safetensors", torch.arange(12),
                             [torch.randn(12, 64, generator=g)] * 3, torch.randn(12, 64, generator=g))
    write_speculators_sample(dump / "hs_1.safetensors", torch.arange(12),  # a later sample from another model
                             [torch.randn(12, 32, generator=g)] * 3, torch.randn(12, 32, generator=g))
    out = tmp_path / "out"
    code = main(["convert", str(demo_dir / "speculators"), "--to", "sglang==0.5.11", str(out),
                 "--data", str(dump), "--target", str(demo_dir / "target")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and str(dump / "hs_1.safetensors") in err
    assert not out.exists() and hidden(tmp_path) == []


def test_a_byte_that_differs_after_the_write_is_caught_while_writing(draft, tmp_path, monkeypatch):
    """The writer compares each slice with its source as it goes: a copy that lands wrong is refused, and nothing
    is written at OUT."""
    import eagle3lens.io.safetensors_writer as writer_mod

    real = writer_mod._copy_in_kernel

    def flips_a_byte(src: int, src_at: int, dst: int, dst_at: int, n: int) -> None:
        real(src, src_at, dst, dst_at, n)
        byte = os.pread(dst, 1, dst_at + n // 2)
        os.pwrite(dst, bytes([byte[0] ^ 1]), dst_at + n // 2)

    monkeypatch.setattr(writer_mod, "_copy_in_kernel", flips_a_byte)
    out = tmp_path / "out"
    with pytest.raises(Exception, match="verification failed: tensor .* differ from the source") as info:
        convert(draft, "sglang==0.5.11", out)
    assert ".tmp-" not in str(info.value)
    assert not out.exists() and hidden(tmp_path) == []


def test_a_kill_between_the_in_place_renames_is_recovered_before_repair_d2t_reads_the_source(demo_dir, tmp_path,
                                                                                             capsys):
    """Killed between its two renames, `convert CKPT --in-place --repair-d2t` left CKPT.orig, the journal and the
    converted temp dir; the rerun rolls that back first, then repairs (not "no such directory", nor "already
    valid" read from a half-swapped source)."""
    import shutil

    from eagle3lens.commands.convert import _repair_tensors
    from eagle3lens.io.safewrite import backup_path

    for step in range(1, 12):
        parent = tmp_path / f"step{step}"
        src = parent / "ck"
        shutil.copytree(demo_dir / "broken-d2t-double-subtracted", src)
        code = killed_at(step, lambda src=src: convert(src, None, None, in_place=True,
                                                        tensor_overrides=_repair_tensors(str(src), None)))
        assert code == 9, "the run ended before its second rename"
        if not src.exists():
            break
    assert backup_path(src).is_dir() and journal_path(src).is_file() and any(".ck.tmp-" in n for n in hidden(parent))
    assert main(["convert", str(src), "--in-place", "--repair-d2t", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert any("was rolled back" in n for n in report["notes"]), report["notes"]
    assert hidden(parent) == [] and backup_path(src).is_dir()
    assert "vocab/d2t-double-subtracted" not in main_codes(["vocab", str(src), "--json"], capsys)


def main_codes(args: list[str], capsys) -> list[str]:
    main(args)
    return [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]]


def test_out_below_a_regular_file_says_so(draft, tmp_path, capsys):
    (tmp_path / "somefile").write_text("not a folder")
    for out in (tmp_path / "somefile" / "out", tmp_path / "somefile" / "a" / "b"):
        assert main(["convert", str(draft), "--to", "sglang==0.5.11", str(out)]) == 2
        assert capsys.readouterr().err == (f"eagle3lens: error: {out}: OUT's parent {tmp_path / 'somefile'} is not "
                                           "a directory\n")


def test_a_config_with_a_985_deep_key_is_refused_up_front_naming_it(draft, tmp_path, capsys):
    config = draft / "config.json"
    config.write_text(config.read_text().rstrip().removesuffix("}") + ', "junk": '
                      + '{"k": ' * 984 + "{}" + "}" * 984 + "}")
    assert main(["convert", str(draft), "--to", "sglang==0.5.11", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"eagle3lens: error: {config}: config JSON is nested too deeply (more than "
                                       "64 levels)\n")
    assert not (tmp_path / "out").exists() and hidden(tmp_path) == []


def test_in_place_aux_layers_prints_nothing_on_stderr_on_a_terminal(draft):
    """stderr is a terminal, so a bar may show; a small checkpoint's write is over before one helps."""
    import pty
    import sys

    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "eagle3lens", "convert", str(draft), "--in-place",
                               "--aux-layers", "2,5,7"], stdout=subprocess.PIPE, stderr=follower, timeout=300)
        os.close(follower)
        follower = -1
        err = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the writing side is closed and drained
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0 and err == b"", err
    assert b"convert" in done.stdout  # the report went to stdout

"""convert under hostile conditions: killed at any step of an in-place run, leftovers of other runs, a full disk, an
OUT created meanwhile, shards that map to one output name. The error names the destination, never a temp path.

From the review round of issue 16 (items 20, 21; was tests/test_hostile.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _builders import draft_tensors, sharded, speculators_config, write
from _hostile import killed_at, one_line_error
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import (
    CheckpointError,
    ConversionRefused,
)


# -- 20: convert --in-place killed at any step, then rerun -----------------------------------------------
def _hidden_leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_in_place_killed_at_every_step_is_recovered_by_a_rerun(tmp_path: Path) -> None:
    from eagle3lens.convert import convert

    original = {k: v.clone() for k, v in draft_tensors("layers.0.").items()}
    step = 1
    while True:
        parent = tmp_path / f"step{step}"
        src = write(parent / "ckpt", original, speculators_config())
        code = killed_at(step, lambda src=src: convert(src, "sglang==0.5.11", None, in_place=True))
        assert code in (0, 9)
        # nothing lost whatever the step: the source is at CKPT or at CKPT.orig
        assert src.is_dir() or (parent / "ckpt.orig").is_dir()
        if code == 0:
            break
        if not src.exists():  # killed between the renames: other commands say how to get it back
            with pytest.raises(CheckpointError, match="interrupted convert"):
                Checkpoint.open(src)
        result = convert(src, "sglang==0.5.11", None, in_place=True)  # the rerun completes
        assert Checkpoint.open(src).layout == "eagle" and result.backup == str(parent / "ckpt.orig")
        backup = Checkpoint.open(parent / "ckpt.orig")
        assert all(torch.equal(backup.read(k), v) for k, v in original.items())
        assert _hidden_leftovers(parent) == [], step  # no temp dir, no journal
        step += 1
        assert step < 12
    assert step >= 4  # claimed the journal, marked the swap, and both renames were each interrupted once


def test_killed_convert_temp_dirs_are_removed_by_the_next_run_and_live_ones_refuse(draft: Path, tmp_path: Path,
                                                                                 capsys) -> None:
    import eagle3lens.convert as convert_mod
    import eagle3lens.io.safetensors_writer as writer_mod

    out = tmp_path / "out"

    def dies_while_writing() -> None:
        writer_mod.copy_tensor = lambda *a: os._exit(9)  # type: ignore[assignment]
        convert_mod.convert(draft, "sglang==0.5.11", out)

    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            dies_while_writing()
        finally:
            os._exit(3)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9
    assert any(".out.tmp-" in n for n in _hidden_leftovers(tmp_path))  # a dead run's temp dir and journal
    result = convert_mod.convert(draft, "sglang==0.5.11", tmp_path / "elsewhere")  # same folder
    assert any("interrupted run" in n for n in result.notes) and _hidden_leftovers(tmp_path) == []
    # a journal whose owner is alive: another convert is writing OUT
    from eagle3lens.io.safewrite import _owner, journal_path

    journal_path(tmp_path / "busy").write_text(json.dumps({**_owner(), "tmp": ".busy.tmp-1234", "state": "building"}))
    assert main(["convert", str(draft), "--to", "sglang==0.5.11", str(tmp_path / "busy")]) == 2
    assert "is being written by another convert" in one_line_error(capsys)
    assert not (tmp_path / "busy").exists()


# -- 21: errors name the destination, never a deleted temp path -----------------------------------------
def test_disk_full_names_the_destination(draft: Path, tmp_path: Path, monkeypatch) -> None:
    import errno

    import eagle3lens.convert as convert_mod
    import eagle3lens.io.safetensors_writer as writer_mod

    def full(*args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "copy_tensor", full)
    with pytest.raises(CheckpointError) as info:
        convert_mod.convert(draft, "sglang==0.5.11", tmp_path / "out")
    assert str(info.value).startswith(str(tmp_path / "out")) and "No space left on device" in str(info.value)
    assert _hidden_leftovers(tmp_path) == [] and not (tmp_path / "out").exists()


def test_out_created_meanwhile_is_said_plainly(draft: Path, tmp_path: Path, monkeypatch) -> None:
    import eagle3lens.convert as convert_mod

    out = tmp_path / "out"
    real = convert_mod._verify

    def verify_then_someone_writes(*args, **kwargs):
        state = real(*args, **kwargs)
        out.mkdir()
        (out / "theirs").write_text("x")
        return state

    monkeypatch.setattr(convert_mod, "_verify", verify_then_someone_writes)
    with pytest.raises(CheckpointError, match="created by someone else while converting"):
        convert_mod.convert(draft, "sglang==0.5.11", out)
    assert (out / "theirs").read_text() == "x" and _hidden_leftovers(tmp_path) == []


def test_forced_convert_reports_name_out_not_the_temp_dir(tmp_path: Path, capsys) -> None:
    cfg = {**speculators_config(), "norm_before_residual": True}
    src = write(tmp_path / "nbr", draft_tensors("layers.0."), cfg)
    assert main(["convert", str(src), "--to", "sglang==0.5.11", str(tmp_path / "o"), "--force", "--json"]) == 0
    report = capsys.readouterr().out
    assert ".tmp-" not in report and str(tmp_path / "o") in report


def test_shards_that_map_to_one_output_name_are_refused_up_front(tmp_path: Path, capsys) -> None:
    root = sharded(tmp_path / "sh", {"fc.weight": "a/model.safetensors", "norm.weight": "b/model.safetensors"},
                   {"a/model.safetensors": {"fc.weight": 12}, "b/model.safetensors": {"norm.weight": 4}})
    from eagle3lens.convert import _output_names

    with pytest.raises(ConversionRefused, match="a/model.safetensors and b/model.safetensors would both be written"):
        _output_names(Checkpoint.open(root))
    tensors = draft_tensors("layers.0.")
    d = tmp_path / "two"
    d.mkdir()
    for sub, names in (("a", list(tensors)[::2]), ("b", list(tensors)[1::2])):
        (d / sub).mkdir()
        save_file({n: tensors[n] for n in names}, str(d / sub / "model.safetensors"))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        n: f"{'a' if i % 2 == 0 else 'b'}/model.safetensors" for i, n in enumerate(tensors)}}))
    (d / "config.json").write_text(json.dumps(speculators_config()))
    assert main(["convert", str(d), "--to", "sglang==0.5.11", str(tmp_path / "out2")]) == 2
    assert "would both be written as model.safetensors" in one_line_error(capsys)
    assert not (tmp_path / "out2").exists()

"""Hostile checkpoint folders: links out of a snapshot that is not a real Hugging Face cache, and side folders
holding FIFOs, device nodes and links: never followed nor copied, each said in a note.

From the review round of issue 16 (items 11, 12; was tests/test_hostile.py)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from _hostile import make_fifo

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.errors import CheckpointError


# -- 11: containment widened only for a real Hugging Face cache --------------------------------------
def _fake_snapshot(tmp_path: Path, src: Path, cache_name: str) -> Path:
    snap = tmp_path / cache_name / "snapshots" / "rev1"
    snap.mkdir(parents=True)
    for f in src.iterdir():
        shutil.copy(f, snap / f.name)
    return snap


def test_a_snapshots_folder_outside_an_hf_cache_does_not_widen_containment(draft: Path, tmp_path: Path) -> None:
    from eagle3lens.convert import convert

    snap = _fake_snapshot(tmp_path, draft, "not-a-cache")
    secret = tmp_path / "not-a-cache" / ".ssh" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY")
    (snap / "tokenizer.model").symlink_to("../../.ssh/id_rsa")
    result = convert(snap, "sglang==0.5.11", tmp_path / "out")
    assert not (tmp_path / "out" / "tokenizer.model").exists()
    assert any(n.startswith("tokenizer.model not copied") and "outside" in n for n in result.notes)
    # info: a shard linked out of the snapshot is refused
    shard = snap / "model.safetensors"
    shutil.move(shard, tmp_path / "not-a-cache" / "weights.safetensors")
    shard.symlink_to("../../weights.safetensors")
    with pytest.raises(CheckpointError, match="outside the checkpoint"):
        Checkpoint.open(snap)
    # the same links inside a real cache layout reach only its blobs folder
    real = _fake_snapshot(tmp_path, draft, "models--org--draft")
    (tmp_path / "models--org--draft" / "blobs").mkdir()
    (tmp_path / "models--org--draft" / "elsewhere").write_text("not a blob")
    (real / "tokenizer.model").symlink_to("../../elsewhere")
    result = convert(real, "sglang==0.5.11", tmp_path / "out2")
    assert not (tmp_path / "out2" / "tokenizer.model").exists()
    assert any(n.startswith("tokenizer.model not copied") for n in result.notes)


# -- 12: side sub-directories: regular files and directories only -------------------------------------
def test_convert_copies_only_regular_files_and_notes_what_it_skipped(draft: Path, tmp_path: Path) -> None:
    from eagle3lens.convert import convert

    sub = draft / "extras"
    (sub / "deeper").mkdir(parents=True)
    (sub / "deeper" / "notes.txt").write_text("kept")
    make_fifo(sub / "pipe")
    (sub / "zero").symlink_to("/dev/zero")
    make_fifo(draft / "top-pipe")
    if os.geteuid() == 0:
        os.mknod(sub / "zero-node", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    result = convert(draft, "sglang==0.5.11", tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "extras" / "deeper" / "notes.txt").read_text() == "kept"
    assert not (out / "extras" / "pipe").exists() and not (out / "top-pipe").exists()
    assert not (out / "extras" / "zero").exists() and not (out / "extras" / "zero-node").exists()
    notes = " | ".join(result.notes)
    assert "extras/pipe not copied: a FIFO" in notes and "top-pipe not copied: a FIFO" in notes
    assert "extras/zero not copied" in notes
    if os.geteuid() == 0:
        assert "extras/zero-node not copied: a character device" in notes

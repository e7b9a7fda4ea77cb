"""Hostile inputs (issue 16, items 10-15 and 18-22): each is refused with exit 2 and one clean line, or handled
correctly; never a traceback, a hang, or lost data. Every test builds its own input."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
import warnings
from pathlib import Path

import pytest
import torch
from _builders import draft_tensors, raw_safetensors, sharded, speculators_config, write, write_bytes
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import (
    CheckpointError,
    ConversionRefused,
    Eagle3LensError,
    UsageError,
)


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's stderr: exactly one line, an eagle3lens error, no traceback."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagle3lens: error: "), err
    return lines[0]


@pytest.fixture()
def draft(tmp_path: Path) -> Path:
    return write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> tuple[Path, socket.socket]:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return path, sock


def _rewrite_tensor(file: Path, name: str, dtype: str, shape: list[int], data: bytes) -> None:
    """Replace one tensor of a safetensors file by raw ``dtype``/``shape``/``data`` (dtypes torch cannot write)."""
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", None)
    body = raw[8 + n:]
    items = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
    items[name] = (dtype, shape, data)
    out, blob = ({"__metadata__": metadata} if metadata else {}), b""
    for key, (dt, sh, chunk) in items.items():
        out[key] = {"dtype": dt, "shape": sh, "data_offsets": [len(blob), len(blob) + len(chunk)]}
        blob += chunk
    file.write_bytes(raw_safetensors(out, blob))


# -- 10: never replace a device node, FIFO or socket by a file -------------------------------------
def test_atomic_writes_refuse_a_destination_that_is_not_a_regular_file(tmp_path: Path) -> None:
    from eagle3lens.io.safewrite import replacing, write_text_atomic

    fifo = _fifo(tmp_path / "report.html")
    sock, listener = _socket(tmp_path / "s.html")
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
    fifo = _fifo(tmp_path / "out.html")
    assert main(["doctor", str(draft), "--no-weights", "--json", "--html", str(fifo)]) == 2
    assert "not a regular file" in one_line_error(capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_notebook_outputs_onto_a_fifo_are_refused_before_running(tmp_path: Path) -> None:
    from eagle3lens.notebook.runner import run_notebook, walkthroughs

    out = tmp_path / "out"
    out.mkdir()
    fifo = _fifo(out / "05_serving_logs.ipynb")
    with pytest.raises(UsageError, match="not a regular file"):
        run_notebook(walkthroughs()["05_serving_logs"], {}, out)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_remote_manifest_goes_through_the_regular_file_check(tmp_path: Path) -> None:
    from eagle3lens.notebook import remote_run as remote

    assert remote.write_text_atomic.__module__ == "eagle3lens.io.safewrite"  # remote.json and fetched files
    assert remote.replacing.__module__ == "eagle3lens.io.safewrite"


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
    _fifo(sub / "pipe")
    (sub / "zero").symlink_to("/dev/zero")
    _fifo(draft / "top-pipe")
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


# -- 13: integers past Python's 4,300-digit limit ---------------------------------------------------
def test_huge_integers_in_a_header_or_config_are_one_line(draft: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    body = b'{"a":{"dtype":"F32","shape":[1' + b"0" * 5000 + b'],"data_offsets":[0,4]}}'
    bad = write_bytes(tmp_path / "h" / "model.safetensors", raw_safetensors({}, bytes(4), header_bytes=body))
    with pytest.raises(CheckpointError, match="5001 digits"):
        Checkpoint.open(bad)
    cfg = (draft / "config.json").read_text().replace('"draft_vocab_size": 24', '"draft_vocab_size": 1' + "0" * 5000)
    (draft / "config.json").write_text(cfg)
    assert main(["info", str(draft)]) == 2
    line = one_line_error(capsys)
    assert "config.json" in line and "5001 digits" in line
    assert main(["keys", str(tmp_path), "--engine", "sglang==0." + "5" * 5000]) == 2
    assert len(one_line_error(capsys)) < 300


def test_header_shapes_out_of_range_are_refused(tmp_path: Path) -> None:
    for shape, problem in (([1 << 64], "64-bit"), ([2] * 10_000, r"needs more than 2\^64 bytes"), ([-1], "64-bit"),
                           ([1.5], "64-bit")):
        path = write_bytes(tmp_path / "m.safetensors",
                           raw_safetensors({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 4]}}, bytes(4)))
        with pytest.raises(CheckpointError, match=problem) as info:
            Checkpoint.open(path)
        assert len(str(info.value)) < 400


def test_paths_too_long_for_the_os_are_one_bounded_line(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("x" * 300, "y" * 1_000_000):
        assert main(["info", name]) == 2
        assert len(one_line_error(capsys)) < 1000


# -- 14: wrongly typed or absurd config values ----------------------------------------------------------
@pytest.mark.parametrize(("field", "value", "where"), [
    ("architectures", 5, "architectures"),
    ("initializer_range", "0.02", "transformer_layer_config.initializer_range"),
    ("rms_norm_eps", "tiny", "transformer_layer_config.rms_norm_eps"),
    ("num_attention_heads", 0, "transformer_layer_config.num_attention_heads"),
    ("hidden_size", 10**12, "transformer_layer_config.hidden_size"),
    ("num_key_value_heads", True, "transformer_layer_config.num_key_value_heads"),
    ("eagle_aux_hidden_state_layer_ids", "2,5,7", "eagle_aux_hidden_state_layer_ids"),
])
def test_config_values_are_checked_by_type_and_range(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     field: str, value: object, where: str) -> None:
    cfg = speculators_config()
    target = cfg if field in ("architectures", "eagle_aux_hidden_state_layer_ids") else cfg["transformer_layer_config"]
    target[field] = value
    src = write(tmp_path / "d", draft_tensors("layers.0."), cfg)
    for command in (["info", str(src)], ["doctor", str(src), "--no-weights"], ["weights", str(src)]):
        assert main(command) == 2
        line = one_line_error(capsys)
        assert "config.json" in line and f"{where} must be" in line


def test_config_sizes_are_checked_against_the_tensors_before_building(tmp_path: Path) -> None:
    from eagle3lens.draft import DraftConfig, Eagle3Draft, check_config_fits
    from eagle3lens.probes.wiring import load_draft_as

    cfg = speculators_config()
    cfg["transformer_layer_config"]["hidden_size"] = 4096  # the tensors are 16 wide
    ckpt = Checkpoint.open(write(tmp_path / "wide", draft_tensors("layers.0."), cfg))
    for build in (load_draft_as, Eagle3Draft.from_checkpoint):
        with pytest.raises(CheckpointError, match="does not describe the weights"):
            build(ckpt)
    tensors = draft_tensors("layers.0.")
    del tensors["embed_tokens.weight"]  # the config alone sizes it: vocab x hidden
    ckpt = Checkpoint.open(write(tmp_path / "noembed", tensors, speculators_config()))
    with pytest.raises(CheckpointError, match="GiB of draft parameters the checkpoint does not hold"):
        check_config_fits(DraftConfig.from_spec(ckpt.spec, ckpt.path), ckpt, budget_bytes=1000)


# -- 15: malformed index metadata and tensors no engine can read -----------------------------------------
def test_index_metadata_that_is_not_an_object_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path / "sh", draft_tensors("layers.0."), speculators_config(), shards=2)
    index = json.loads((root / "model.safetensors.index.json").read_text())
    index["metadata"] = [1, 2]
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    assert main(["convert", str(root), "--to", "sglang==0.5.11", str(tmp_path / "out")]) == 2
    assert "metadata must be a JSON object" in one_line_error(capsys)


def test_empty_d2t_and_packed_t2d_are_findings_not_crashes(draft: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from eagle3lens.probes.vocab import inspect_vocab

    empty = write(tmp_path / "e", draft_tensors("layers.0."), speculators_config())
    _rewrite_tensor(empty / "model.safetensors", "d2t", "I64", [0], b"")
    packed = write(tmp_path / "p", draft_tensors("layers.0."), speculators_config())
    _rewrite_tensor(packed / "model.safetensors", "t2d", "F6_E2M3", [64], bytes(48))
    for src, tensor in ((empty, "d2t"), (packed, "t2d")):
        result = inspect_vocab(Checkpoint.open(src))
        assert any(f.code == "vocab/bad-shape" and tensor in f.title for f in result.findings)
        assert main(["doctor", str(src), "--no-weights", "--json"]) in (0, 1)
        capsys.readouterr()
        assert main(["convert", str(src), "--repair-d2t", str(tmp_path / f"fixed-{tensor}")]) == 2
        assert "no repair is proven" in one_line_error(capsys)


def test_packed_fc_weight_and_sparse_pickles_are_one_line(draft: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from eagle3lens.probes.wiring import load_draft_as

    _rewrite_tensor(draft / "model.safetensors", "fc.weight", "F4", [16, 48], bytes(16 * 48 // 2))
    ckpt = Checkpoint.open(draft)
    with pytest.raises(CheckpointError, match="F4"):
        ckpt.read("fc.weight")
    with pytest.raises(CheckpointError, match="F4"):
        load_draft_as(ckpt)
    assert main(["weights", str(draft), "--json"]) in (0, 1)  # summarised as unsupported, no crash
    capsys.readouterr()
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    tensors = {**draft_tensors("layers.0."), "extra": torch.eye(4).to_sparse()}
    torch.save(tensors, pickled / "pytorch_model.bin")
    (pickled / "config.json").write_text(json.dumps(speculators_config()))
    for command in ("info", "weights", "vocab"):
        assert main([command, str(pickled)]) == 2
        assert "sparse_coo tensor" in one_line_error(capsys)


# -- 18: large headers, handled linearly (bench/header.py times it) --------------------------------------
def test_a_100k_tensor_header_is_read_correctly(tmp_path: Path) -> None:
    n = 100_000
    header = {f"model.layers.{i}.mlp.weight": {"dtype": "BF16", "shape": [0, 8], "data_offsets": [0, 0]}
              for i in range(n)}
    header["fc.weight"] = {"dtype": "F32", "shape": [2, 6], "data_offsets": [0, 48]}
    header["d2t"] = {"dtype": "I64", "shape": [2], "data_offsets": [48, 64]}
    path = write_bytes(tmp_path / "big" / "model.safetensors", raw_safetensors(header, bytes(64)))
    ckpt = Checkpoint.open(path)
    assert len(ckpt) == n + 2 and ckpt.info("model.layers.99999.mlp.weight").shape == (0, 8)
    assert ckpt.info("d2t").begin == ckpt.info("fc.weight").end
    spec = ckpt.spec
    assert spec.num_decoder_layers == n and spec.decoder_prefix == "model.layers.0." and spec.has_d2t
    assert spec.dtypes == ("BF16", "F32", "I64") and spec.fc_in_features == 6
    dup = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    with pytest.raises(CheckpointError, match="named twice"):
        Checkpoint.open(write_bytes(tmp_path / "dup.safetensors", raw_safetensors({}, bytes(4), header_bytes=dup)))
    newline = {"x\nd2t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    assert not Checkpoint.open(write_bytes(tmp_path / "nl.safetensors", raw_safetensors(newline, bytes(4)))).spec.has_d2t


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
    _fifo(tmp_path / "fifo.ipynb")
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


# -- 20: convert --in-place killed at any step, then rerun -----------------------------------------------
def _killed_at(step: int, run) -> int:
    """Run ``run()`` in a forked child that dies (os._exit) at its ``step``-th rename/replace/link; its exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        calls = [0]

        def dying(real):
            def call(*args, **kwargs):
                calls[0] += 1
                if calls[0] == step:
                    os._exit(9)
                return real(*args, **kwargs)
            return call

        os.rename, os.replace, os.link = dying(os.rename), dying(os.replace), dying(os.link)
        try:
            run()
            os._exit(0)
        finally:
            os._exit(3)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _hidden_leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_in_place_killed_at_every_step_is_recovered_by_a_rerun(tmp_path: Path) -> None:
    from eagle3lens.convert import convert

    original = {k: v.clone() for k, v in draft_tensors("layers.0.").items()}
    step = 1
    while True:
        parent = tmp_path / f"step{step}"
        src = write(parent / "ckpt", original, speculators_config())
        code = _killed_at(step, lambda src=src: convert(src, "sglang==0.5.11", None, in_place=True))
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


# -- 22: smaller ones ----------------------------------------------------------------------------------
@pytest.mark.parametrize("metadata", [0, [], "x", {"a": 1}])
def test_metadata_must_map_strings_to_strings(tmp_path: Path, metadata: object) -> None:
    header = {"__metadata__": metadata, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    with pytest.raises(CheckpointError, match="__metadata__ must be an object"):
        Checkpoint.open(write_bytes(tmp_path / "m.safetensors", raw_safetensors(header, bytes(4))))


def test_report_json_embedded_in_html_round_trips(tmp_path: Path) -> None:
    from eagle3lens.findings import Finding, Report, Severity
    from eagle3lens.render import render_report_html

    title = "tensor '</script><script>alert(1)</script>' & <b> \\u003c"
    report = Report(checkpoint={"path": "a<b>&c"}, findings=[Finding("keys/dropped", Severity.CRITICAL, title)])
    page = render_report_html(report)
    embedded = page.split('id="eagle3lens-report">', 1)[1].split("</script>", 1)[0]
    assert json.loads(embedded) == json.loads(report.to_json(indent=None))
    assert "<" not in embedded and ">" not in embedded and "&" not in embedded


def test_complex_and_float8_tensors_print_no_warnings(tmp_path: Path) -> None:
    from eagle3lens.probes.diff import diff
    from eagle3lens.probes.weights import weight_stats

    nan = torch.full((40, 40), float("nan"))
    extra = {"c64": torch.complex(torch.randn(40, 40), nan), "f8": torch.randn(40, 40).to(torch.float8_e4m3fn),
             "f8b": torch.full((40, 40), float("inf")).to(torch.float8_e5m2)}
    a = write(tmp_path / "a", draft_tensors("layers.0.", extra=extra), speculators_config())
    extra_b = {**extra, "c64": extra["c64"] * 2}
    b = write(tmp_path / "b", draft_tensors("layers.0.", extra=extra_b), speculators_config())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        weight_stats(Checkpoint.open(a), against=Checkpoint.open(b))
        result = diff(Checkpoint.open(a), Checkpoint.open(b))
    changed = {c.name: c for c in result.changed}
    assert changed["c64"].n_diff == 40 * 40  # counted per complex element


def test_repair_and_vocab_share_the_verdict(tmp_path: Path, capsys) -> None:
    from eagle3lens.probes.vocab import inspect_vocab, plan_d2t_repair

    cfg = speculators_config()
    cfg["draft_vocab_size"] = 20  # the (valid) d2t has 24 entries: a stale mapping, critical in vocab
    src = write(tmp_path / "stale", draft_tensors("layers.0."), cfg)
    ckpt = Checkpoint.open(src)
    critical = [f for f in inspect_vocab(ckpt).findings if f.severity.value == "critical"]
    assert critical and inspect_vocab(ckpt).status == "valid"  # what `vocab` prints for this file
    with pytest.raises(ConversionRefused) as info:
        plan_d2t_repair(ckpt)
    assert "already valid" not in str(info.value) and critical[0].title in str(info.value)
    assert isinstance(info.value, Eagle3LensError)

"""Checkpoint reader: headers-only listing, layout detection, and the bad-input corpus.

Every malformed input must raise CheckpointError with a one-line message naming the file, and
the CLI must print that line and exit 2 without a traceback.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError

from _builders import good_header, layer_config, raw_safetensors, sharded, speculators_config, write, write_bytes


# -- the corpus: name -> (builder(tmp) -> path to open, fragment expected in the message) ------------
def _st(tmp: Path, content: bytes) -> Path:
    return write_bytes(tmp / "model.safetensors", content)


def _header_with(**entry_b) -> tuple[dict, bytes]:
    header, data = good_header()
    header["b"] = {**header["b"], **entry_b}
    return header, data


def _symlink_out(tmp: Path) -> Path:
    outside = tmp / "outside"
    header, data = good_header()
    write_bytes(outside / "real.safetensors", raw_safetensors(header, data))
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    os.symlink(outside / "real.safetensors", ckpt / "model-00001.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001.safetensors", "b": "model-00001.safetensors"}}))
    return ckpt


def _plain_symlink_out(tmp: Path) -> Path:
    outside = tmp / "outside"
    header, data = good_header()
    write_bytes(outside / "real.safetensors", raw_safetensors(header, data))
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    os.symlink(outside / "real.safetensors", ckpt / "model.safetensors")
    return ckpt


def _good_dir(tmp: Path) -> Path:
    header, data = good_header()
    _st(tmp, raw_safetensors(header, data))
    return tmp


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _config_symlink_out(tmp: Path) -> Path:
    write_bytes(tmp / "outside" / "secret.json", b'{"architectures": ["LlamaForCausalLM"]}')
    ckpt = _good_dir(tmp / "ckpt")
    os.symlink(tmp / "outside" / "secret.json", ckpt / "config.json")
    return ckpt


def _index_symlink_out(tmp: Path) -> Path:
    outside = sharded(tmp / "outside", {"a": "s1.safetensors"}, {"s1.safetensors": {"a": 2}})
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    os.symlink(outside / "model.safetensors.index.json", ckpt / "model.safetensors.index.json")
    return ckpt


DEEP = b"[" * 100_000 + b"]" * 100_000

CORPUS = {
    "missing path": (lambda t: t / "nope", "no such file"),
    "empty directory": (lambda t: t, "empty directory"),
    "not a checkpoint dir": (lambda t: write_bytes(t / "notes.txt", b"hello").parent, "not a checkpoint"),
    "not a checkpoint file": (lambda t: write_bytes(t / "notes.txt", b"hello"), "not a checkpoint"),
    "shorter than the length prefix": (lambda t: _st(t, b"\x01\x02"), "truncated"),
    "header length past end of file": (lambda t: _st(t, raw_safetensors({}, b"", length=4096)), "past the end"),
    "header length above cap": (lambda t: _st(t, raw_safetensors({}, b"", length=200_000_000)), "exceeds"),
    "non-UTF-8 header": (lambda t: _st(t, raw_safetensors({}, b"", header_bytes=b"{\xff\xfe}")), "UTF-8"),
    "non-JSON header": (lambda t: _st(t, raw_safetensors({}, b"", header_bytes=b"{not json")), "not valid JSON"),
    "header not an object": (lambda t: _st(t, raw_safetensors({}, b"", header_bytes=b"[1, 2]   ")), "not a JSON object"),
    "unknown dtype": (lambda t: _st(t, raw_safetensors(*_header_with(dtype="F128"))), "unknown dtype"),
    "size != byte range": (lambda t: _st(t, raw_safetensors(*_header_with(shape=[4]))), "needs 16 bytes"),
    "negative shape": (lambda t: _st(t, raw_safetensors(*_header_with(shape=[-3]))), "shape must be"),
    "overlapping offsets": (lambda t: _st(t, raw_safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}}, bytes(16))), "overlaps"),
    "gap between tensors": (lambda t: _st(t, raw_safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}}, bytes(24))), "gap"),
    "reversed offsets": (lambda t: _st(t, raw_safetensors(*_header_with(data_offsets=[20, 8]))), "data_offsets"),
    "first tensor not at 0": (lambda t: _st(t, raw_safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))), "gap"),
    "truncated data": (lambda t: _st(t, raw_safetensors(*good_header())[:-5]), "truncated"),
    "duplicate tensor name": (lambda t: _st(t, raw_safetensors({}, bytes(8), header_bytes=(
        b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
        b'"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'))), "named twice"),
    "trailing bytes": (lambda t: _st(t, raw_safetensors(*good_header()) + b"junk"), "trailing bytes"),
    "bad __metadata__": (lambda t: _st(t, raw_safetensors({"__metadata__": {"k": 1}}, b"")), "__metadata__"),
    "index names a missing shard": (lambda t: sharded(t, {"a": "s1.safetensors", "b": "s2.safetensors"},
                                                      {"s1.safetensors": {"a": 2}}), "missing"),
    "index shard path with ../": (lambda t: sharded(t / "ckpt", {"a": "../s1.safetensors"}, {}), "outside"),
    "index shard absolute path": (lambda t: sharded(t / "ckpt", {"a": str(t / "abs.safetensors")}, {}), "outside"),
    "index shard symlink leading out": (_symlink_out, "outside"),
    "checkpoint file symlink leading out": (_plain_symlink_out, "outside"),
    "tensor missing from its shard": (lambda t: sharded(t, {"a": "s1.safetensors", "z": "s1.safetensors"},
                                                        {"s1.safetensors": {"a": 2}}), "not in its shard"),
    "tensor in two shards": (lambda t: sharded(t, {"a": "s1.safetensors", "b": "s2.safetensors"},
                                               {"s1.safetensors": {"a": 2}, "s2.safetensors": {"a": 2, "b": 1}}), "two shards"),
    "index without weight_map": (lambda t: write_bytes(t / "model.safetensors.index.json", b'{"metadata": {}}').parent, "weight_map"),
    "invalid config.json": (lambda t: write_bytes(_good_dir(t) / "config.json", b"{oops").parent, "invalid config JSON"),
    "config.json not an object": (lambda t: write_bytes(_good_dir(t) / "config.json", b"[]").parent, "JSON object"),
    "FIFO named model.safetensors": (lambda t: _fifo(t / "model.safetensors").parent, "not a regular file"),
    "FIFO named config.json": (lambda t: _fifo(_good_dir(t) / "config.json").parent, "not a regular file"),
    "config.json symlink leading out": (_config_symlink_out, "outside"),
    "index.json symlink leading out": (_index_symlink_out, "outside"),
    "deeply nested header JSON": (lambda t: _st(t, raw_safetensors({}, b"", header_bytes=b"{\"a\": " + DEEP + b"}")),
                                  "nested too deeply"),
    "deeply nested config.json": (lambda t: write_bytes(_good_dir(t) / "config.json", b'{"a": ' + DEEP + b"}").parent,
                                  "nested too deeply"),
    "deeply nested index.json": (lambda t: write_bytes(t / "model.safetensors.index.json", DEEP).parent, "nested too deeply"),
    "index with an empty weight_map": (lambda t: write_bytes(t / "model.safetensors.index.json", b'{"weight_map": {}}').parent,
                                       "lists no tensors"),
    "garbage .bin": (lambda t: write_bytes(t / "pytorch_model.bin", b"definitely not a pickle"), "cannot read"),
}


@pytest.mark.timeout(30)  # a FIFO must be refused, never read (reading one would hang)
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_input_raises_one_line_error(case: str, tmp_path: Path) -> None:
    build, fragment = CORPUS[case]
    path = build(tmp_path)
    with pytest.raises(CheckpointError) as info:
        Checkpoint.open(path)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert str(tmp_path) in message  # names the file


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_cli_exits_2_with_message(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build, fragment = CORPUS[case]
    path = build(tmp_path)
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eagle3lens: error: ") and fragment in err
    assert len(err.splitlines()) == 1


class _RunsCode:
    """A pickle payload whose unpickling would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
@pytest.mark.parametrize("zip_format", [True, False])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, zip_format: bool) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.zeros(2), "evil": _RunsCode(marker)}, path, _use_new_zipfile_serialization=zip_format,
               pickle_module=pickle)
    with pytest.raises(CheckpointError, match="refused"):
        Checkpoint.open(path)
    assert not marker.exists()
    # and through the CLI, in a fresh process, with no traceback
    proc = subprocess.run([sys.executable, "-m", "eagle3lens", "info", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "refused" in proc.stderr
    assert not marker.exists()


def test_plain_state_dict_bin_is_read(tmp_path: Path) -> None:
    torch.save({"fc.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, tmp_path / "pytorch_model.bin")
    ckpt = Checkpoint.open(tmp_path)
    assert ckpt.info("fc.weight").shape == (2, 3) and ckpt.info("fc.weight").dtype == "F32"
    assert torch.equal(ckpt.read("fc.weight"), torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert bytes(ckpt.read_bytes("fc.weight", 4, 8)) == torch.tensor([1.0]).numpy().tobytes()


def test_headers_only_listing_and_lazy_chunks(tmp_path: Path) -> None:
    tensors = {"fc.weight": torch.randn(16, 48), "d2t": torch.arange(10, dtype=torch.int64), "t2d": torch.ones(20, dtype=torch.bool)}
    save_file(tensors, tmp_path / "model.safetensors")
    ckpt = Checkpoint.open(tmp_path / "model.safetensors")
    assert list(ckpt.tensors) == sorted(tensors)
    info = ckpt.info("fc.weight")
    assert (info.dtype, info.shape, info.nbytes) == ("F32", (16, 48), 16 * 48 * 4)
    assert info.end - info.begin == info.nbytes
    joined = b"".join(bytes(c) for c in ckpt.iter_chunks("fc.weight", chunk_bytes=100))
    assert joined == tensors["fc.weight"].numpy().tobytes()
    assert torch.equal(ckpt.read("t2d"), tensors["t2d"])
    with pytest.raises(CheckpointError, match="no tensor named"):
        ckpt.info("nope")


def test_sharded_checkpoint_lists_every_shard(tmp_path: Path) -> None:
    save_file({"a": torch.zeros(3)}, tmp_path / "m-1.safetensors")
    save_file({"b": torch.ones(2)}, tmp_path / "m-2.safetensors")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 20}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}))
    ckpt = Checkpoint.open(tmp_path)
    assert {n: t.file.name for n, t in ckpt.tensors.items()} == {"a": "m-1.safetensors", "b": "m-2.safetensors"}
    assert torch.equal(ckpt.read("b"), torch.ones(2))


# A speculators export as an older trainer wrote it: another class name, norm_before_residual on, 2 heads.
SPECULATORS_CONFIG = speculators_config(draft_vocab=32, arch="Eagle3Speculator", verifier="tiny-target",
                                        layer=layer_config(16, 64, heads=2, intermediate_size=32),
                                        norm_before_residual=True)


def test_speculators_spec(tmp_path: Path) -> None:
    write(tmp_path, {"fc.weight": torch.zeros(16, 48), "layers.0.mlp.up_proj.weight": torch.zeros(32, 16),
                                "d2t": torch.zeros(32, dtype=torch.int64), "t2d": torch.zeros(64, dtype=torch.bool),
                                "embed_tokens.weight": torch.zeros(64, 16), "lm_head.weight": torch.zeros(32, 16)},
                     SPECULATORS_CONFIG)
    ckpt = Checkpoint.open(tmp_path)
    spec = ckpt.spec
    assert ckpt.layout == "speculators"
    assert (spec.hidden_size, spec.target_hidden_size, spec.num_aux) == (16, 16, 3)
    assert spec.aux_layer_ids == (2, 5, 7) and spec.aux_ids_source == "top-level"
    assert (spec.draft_vocab_size, spec.vocab_size, spec.lm_head_rows) == (32, 64, 32)
    assert spec.decoder_prefix == "layers.0." and spec.num_decoder_layers == 1
    assert spec.flags["norm_before_residual"] is True and spec.flags["fc_norm"] is None
    assert spec.has_d2t and spec.has_t2d and spec.has_embed_tokens and not spec.has_input_norm
    assert spec.verifier == "tiny-target"


def test_sglang_spec_with_prefixed_keys(tmp_path: Path) -> None:
    write(tmp_path, {"model.fc.weight": torch.zeros(16, 48), "model.midlayer.mlp.up_proj.weight": torch.zeros(32, 16)}, {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 16, "vocab_size": 64, "draft_vocab_size": 32,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 6], "use_aux_hidden_state": True}})
    spec = Checkpoint.open(tmp_path).spec
    assert spec.flavour == "sglang" and spec.decoder_prefix == "model.midlayer."
    assert spec.aux_layer_ids == (1, 4, 6) and spec.aux_ids_source == "eagle_config" and spec.use_aux_hidden_state


def test_hf_target_and_unknown(tmp_path: Path) -> None:
    write(tmp_path, {"model.layers.0.mlp.up_proj.weight": torch.zeros(4, 2)},
                     {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2})
    assert Checkpoint.open(tmp_path).layout == "hf"
    (tmp_path / "config.json").unlink()
    save_file({"x": torch.zeros(1)}, tmp_path / "model.safetensors")
    assert Checkpoint.open(tmp_path).layout == "unknown"


def test_info_json_follows_design_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"fc.weight": torch.zeros(16, 48)}, SPECULATORS_CONFIG)
    assert main(["info", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"tool", "version", "checkpoint", "engine", "findings", "results"}
    assert data["tool"] == "eagle3lens" and data["checkpoint"]["layout"] == "speculators"
    assert data["results"]["info"]["tensors"][0]["shape"] == [16, 48]


def test_hugging_face_cache_snapshot_symlinks_are_followed_within_the_cache(tmp_path: Path) -> None:
    """HF cache snapshots link their files to ../../blobs: inside the model's cache folder, so allowed."""
    repo = tmp_path / "models--org--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    save_file({"fc.weight": torch.ones(2, 6)}, blobs / "1111")
    (blobs / "2222").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}))
    os.symlink("../../blobs/1111", snap / "model.safetensors")
    os.symlink("../../blobs/2222", snap / "config.json")
    ckpt = Checkpoint.open(snap)
    assert ckpt.layout == "hf" and torch.equal(ckpt.read("fc.weight"), torch.ones(2, 6))


def test_unreadable_output_paths_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An OSError on a path the user gave (here: OUT inside a regular file) is exit 2 with one line, never a traceback."""
    save_file({"fc.weight": torch.zeros(2, 6)}, tmp_path / "model.safetensors")
    (tmp_path / "blocker").write_text("x")
    code = main(["convert", str(tmp_path), "--to", "vllm==0.33.0", str(tmp_path / "blocker" / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("eagle3lens: error:") and len(err.splitlines()) == 1


def test_one_dtype_table_covers_every_format_dtype(tmp_path: Path) -> None:
    """Every safetensors dtype torch has round-trips, sizes agree, and a hand-written FNUZ tensor reads back."""
    from eagle3lens.io.safetensors_header import DTYPE_BITS, st_dtype, torch_dtype

    for name, bits in DTYPE_BITS.items():
        dtype = torch_dtype(name)
        if dtype is None:
            assert name in ("F4", "F6_E2M3", "F6_E3M2")
            continue
        assert st_dtype(dtype) == name and torch.empty(0, dtype=dtype).element_size() * 8 == bits
    with pytest.raises(ValueError):
        st_dtype(torch.quint8)
    t = torch.tensor([0.5, -2.0, 3.0]).to(torch.float8_e4m3fnuz)
    raw = t.view(torch.uint8).numpy().tobytes()
    header = json.dumps({"x": {"dtype": "F8_E4M3FNUZ", "shape": [3], "data_offsets": [0, 3]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + raw)
    got = Checkpoint.open(tmp_path).read("x")
    assert got.dtype == torch.float8_e4m3fnuz and got.float().tolist() == [0.5, -2.0, 3.0]

"""The order a release's model loader reads a sharded draft in, from the releases' wheels: SGLang globs the folder
(directory order) until 0.5.11 sorts the paths; vLLM globs until 0.16.0 sorts by the file name's natural order.
Which key comes first decides, when one raises, which keys were written and which never read; the simulation and the
executed loader (fed in the same order) both follow it."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest
import torch

from _builders import BIAS, draft_tensors, sglang_config, speculators_config, two_shards_with_bias
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines import resolve
from eagle3lens.engines.shard_order import file_order, loader_order, natural_key
from eagle3lens.probes.keys import simulate_load

def test_file_orders_follow_the_releases_rules(tmp_path: Path) -> None:
    files = [tmp_path / n for n in ("model-2.safetensors", "model-10.safetensors", "model-1.safetensors")]
    for f in files:
        f.write_bytes(b"")
    assert [f.name for f in file_order(files, "sorted")] == ["model-1.safetensors", "model-10.safetensors",
                                                              "model-2.safetensors"]
    assert [f.name for f in file_order(files, "natural")] == ["model-1.safetensors", "model-2.safetensors",
                                                               "model-10.safetensors"]
    globbed = [Path(f).name for f in glob.glob(os.path.join(tmp_path, "*.safetensors"))]  # the engines' own call
    assert [f.name for f in file_order(files, "listing")] == globbed
    # the standard zero-padded names sort alike both ways; only the file name counts, not the folder
    assert natural_key(Path("/a9/model-00002-of-00010.safetensors")) == ["model-", 2, "-of-", 10, ".safetensors"]


@pytest.mark.parametrize(("engine", "rule"), [("sglang==0.5.10", "listing"), ("sglang==0.5.11", "sorted"),
                                              ("sglang==0.5.23", "sorted"), ("vllm==0.15.1", "listing"),
                                              ("vllm==0.16.0", "natural"), ("vllm==0.33.0", "natural")])
def test_each_release_reads_the_shards_in_its_order(engine: str, rule: str, tmp_path: Path) -> None:
    assert resolve(engine).shard_order == rule
    ckpt = two_shards_with_bias(tmp_path / "draft", sglang_config())
    result = simulate_load(ckpt, engine)
    assert [f.key for f in result.fates] == [i.name for i in loader_order(ckpt, rule)]
    first = result.fates[0].key
    assert ckpt.tensors[first].file.name == file_order(list(ckpt.files), rule)[0].name
    listing = [n for n in result.notes if "directory order" in n]
    assert bool(listing) == (rule == "listing")


def test_which_keys_a_raise_leaves_unread_depends_on_the_order(tmp_path: Path) -> None:
    """vLLM raises at the bias: under its natural order (0.16.0 on) model-2 is read whole first; under the
    string order model-10 would come first and model-2 would never be read."""
    ckpt = two_shards_with_bias(tmp_path / "draft", speculators_config())
    result = simulate_load(ckpt, "vllm==0.16.0")
    fates = {f.key: f for f in result.fates}
    assert fates[BIAS].fate == "raises"
    in_2 = [n for n, i in ckpt.tensors.items() if i.file.name == "model-2.safetensors"]
    assert in_2 and all(fates[n].fate != "not-reached" for n in in_2)
    keys = [i.name for i in loader_order(ckpt, "sorted")]
    assert set(keys[keys.index(BIAS) + 1:]) >= set(in_2)  # read as sorted, model-2 would be left unread


def test_the_first_sglang_releases_read_a_file_in_stored_order(tmp_path: Path) -> None:
    """SGLang 0.4.4.post2-0.4.8.post1 read each file with safetensors' load_file, which lists the tensors as
    stored (safetensors 0.6.1 on: larger dtypes first); 0.4.9 on, safe_open(...).keys(), sorted."""
    ckpt = Checkpoint.open(_one_file(tmp_path))
    stored = [i.name for i in sorted(ckpt.tensors.values(), key=lambda i: i.begin)]
    assert stored != sorted(stored)
    assert [f.key for f in simulate_load(ckpt, "sglang==0.4.5").fates] == stored
    assert [f.key for f in simulate_load(ckpt, "sglang==0.4.9").fates] == sorted(stored)


def _one_file(root: Path) -> Path:
    from _builders import write

    tensors = draft_tensors("midlayer.")
    tensors["fc.weight"] = tensors["fc.weight"].float()  # stored before the bf16 tensors, though sorted after embed
    return write(root / "draft", tensors, sglang_config())


def test_a_pickled_file_is_read_in_the_order_it_was_saved(tmp_path: Path) -> None:
    """Both engines yield a .bin file's ``torch.load`` dict as it is (saved order), not sorted."""
    from _builders import sglang_config

    tensors = dict(reversed(list(draft_tensors("midlayer.").items())))
    root = tmp_path / "draft"
    root.mkdir()
    torch.save(tensors, root / "pytorch_model.bin")
    (root / "config.json").write_text(json.dumps(sglang_config()))
    for engine in ("sglang==0.4.5", "sglang==0.5.11", "vllm==0.33.0"):
        assert [f.key for f in simulate_load(Checkpoint.open(root), engine).fates] == list(tensors)


def test_a_shard_name_with_other_digits_is_ordered_not_fatal(tmp_path: Path) -> None:
    """A superscript digit passes str.isdigit but not int(): the name is text, and the load is simulated."""
    files = [tmp_path / n for n in ("model-1\u00b22.safetensors", "model-10.safetensors")]
    for f in files:
        f.write_bytes(b"")
    assert [f.name for f in file_order(files, "natural")] == ["model-1\u00b22.safetensors", "model-10.safetensors"]


def test_a_folder_that_cannot_be_listed_keeps_the_index_order(tmp_path: Path, monkeypatch) -> None:
    """Listing a folder can fail where its files still open (execute-only; root here, so os.scandir is made to
    refuse): the files keep the order the index gave."""
    from eagle3lens.engines import shard_order

    ckpt = two_shards_with_bias(tmp_path / "draft", sglang_config())

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shard_order.os, "scandir", refuse)
    result = simulate_load(ckpt, "vllm==0.15.1")
    assert [f.key for f in result.fates] == [i.name for f in ckpt.files for i in ckpt.tensors.values() if i.file == f]


def test_an_order_listed_elsewhere_is_the_one_simulated(tmp_path: Path) -> None:
    """--host: the host listed its own copy; the simulation it is held against walks the files in that order."""
    ckpt = two_shards_with_bias(tmp_path / "draft", sglang_config())
    host = ["model-10.safetensors", "model-2.safetensors"]
    for order in (host, host[::-1]):
        result = simulate_load(ckpt, "sglang==0.5.10", shard_files=order)
        assert ckpt.tensors[result.fates[0].key].file.name == order[0]
        assert any(", ".join(order) in n for n in result.notes)


def test_the_glob_order_is_said_in_the_terminal_escaped(tmp_path: Path, capsys, monkeypatch) -> None:
    """The order a glob gave is a note of the report (terminal and HTML), the file names in it escaped."""
    from eagle3lens.cli import main

    ckpt = two_shards_with_bias(tmp_path / "draft", sglang_config())
    hostile = "model-[bold]3[red].safetensors"  # rich markup, if it reached the console unescaped
    (ckpt.root / "model-2.safetensors").rename(ckpt.root / hostile)
    index = ckpt.root / "model.safetensors.index.json"
    index.write_text(index.read_text().replace("model-2.safetensors", hostile))
    monkeypatch.setenv("COLUMNS", "400")
    main(["keys", str(ckpt.root), "--engine", "vllm==0.15.1"])
    out = capsys.readouterr().out
    assert "reads the shard files in directory order" in out and hostile in out

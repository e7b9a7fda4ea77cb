"""Hostile training-data dumps: a gzip bomb as a SpecForge sample is refused before it is expanded, a corrupt
one is one line, and a pickle protocol torch warns about reaches the user as no warning.

From review round three of hostile inputs (issue 25; was tests/test_hostile_inputs3.py)."""

from __future__ import annotations

import gzip
import io
import json
import warnings
from pathlib import Path

import pytest
import torch

from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError
from eagle3lens.probes.data import iter_samples


def specforge_sample(t: int = 6, h: int = 8, n_aux: int = 3, **extra: torch.Tensor) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.arange(t), "loss_mask": torch.ones(t, dtype=torch.long),
            "aux_hidden_state": torch.randn(1, t, n_aux * h, generator=g),
            "hidden_state": torch.randn(1, t, h, generator=g), **extra}


def write_gz(path: Path, obj: dict, protocol: int = 2) -> Path:
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_protocol=protocol)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=1))
    return path


def test_a_gzip_bomb_sample_is_refused_before_it_is_expanded(tmp_path):
    """The four expected tensors plus 96 MB of zero padding: a few hundred KB compressed."""
    bomb = write_gz(tmp_path / "dump" / "rows_0" / "data_0.ckpt.gz",
                    specforge_sample(padding=torch.zeros(24 << 20, dtype=torch.float32)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(CheckpointError, match=r"data_0\.ckpt\.gz: expands past 67108864 bytes"):
        next(iter_samples(tmp_path / "dump"))


def test_a_plain_gzip_sample_still_reads(tmp_path):
    write_gz(tmp_path / "dump" / "rows_0" / "data_0.ckpt.gz", specforge_sample())
    (sample,) = iter_samples(tmp_path / "dump")
    assert sample.aux.shape == (6, 24) and sample.last is not None and sample.last.shape == (6, 8)


def test_a_corrupt_gzip_sample_is_one_line(tmp_path):
    bad = tmp_path / "dump" / "data_0.ckpt.gz"
    bad.parent.mkdir()
    bad.write_bytes(gzip.compress(b"x" * 1000)[:-12])
    with pytest.raises(CheckpointError, match="cannot decompress"):
        next(iter_samples(tmp_path / "dump"))


def test_pickle_protocol_warning_is_not_shown(tmp_path):
    """torch warns on a weights_only load of a pickle saved with protocol 3: the user did nothing wrong."""
    write_gz(tmp_path / "dump" / "data_0.ckpt.gz", specforge_sample(), protocol=3)
    ckpt = tmp_path / "draft"
    ckpt.mkdir()
    torch.save({"fc.weight": torch.randn(8, 24)}, ckpt / "pytorch_model.bin", pickle_protocol=3)
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (sample,) = iter_samples(tmp_path / "dump")
        assert sample.aux.shape == (6, 24)
        assert main(["info", str(ckpt), "--json"]) == 0

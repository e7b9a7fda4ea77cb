"""Hostile draft configs: wrongly typed or absurd values, and sizes that disagree with the tensors, are one line
before any module is built.

From the review round of issue 16 (item 14; was tests/test_hostile.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _builders import draft_tensors, speculators_config, write
from _hostile import one_line_error

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import CheckpointError


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

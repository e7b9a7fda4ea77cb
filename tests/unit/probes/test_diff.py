"""diff: renames found by content, value changes measured, names-only reads headers only."""

from __future__ import annotations

import pytest
import torch

from _builders import draft_tensors, speculators_config, write
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.probes.diff import diff


def test_renames_value_changes_and_layout(tmp_path):
    base = draft_tensors("layers.0.")
    other = {k.replace("layers.0.", "midlayer."): v.clone() for k, v in base.items()}
    other["norm.weight"] = base["norm.weight"] + 0.5
    other["fc.weight"] = base["fc.weight"].float()
    del other["t2d"]
    other["extra"] = torch.zeros(3)
    a = Checkpoint.open(write(tmp_path / "a", base, speculators_config()))
    b = Checkpoint.open(write(tmp_path / "b", other, speculators_config()))
    result = diff(a, b)
    assert len(result.renamed) == 10 and ("layers.0.mlp.up_proj.weight", "midlayer.mlp.up_proj.weight") in result.renamed
    assert result.only_in_a == ("t2d",) and result.only_in_b == ("extra",)
    assert [c.name for c in result.layout_changes] == ["fc.weight"]
    (change,) = result.changed
    assert change.name == "norm.weight" and abs(change.max_abs - 0.5) < 0.02 and change.n_diff == 16
    assert set(result.identical) == {"d2t", "embed_tokens.weight", "lm_head.weight"}
    assert not result.renames_only


def test_renames_only_and_names_only(tmp_path):
    base = draft_tensors("layers.0.")
    a = Checkpoint.open(write(tmp_path / "a", base, speculators_config()))
    b = Checkpoint.open(write(tmp_path / "b", {k.replace("layers.0.", "midlayer."): v for k, v in base.items()}, None, shards=2))
    assert diff(a, b).renames_only
    names = diff(a, b, names_only=True)
    assert len(names.only_in_a) == 10 and names.unchecked and not names.renames_only


def test_cli_diff(tmp_path, capsys):
    base = draft_tensors("layers.0.")
    a = write(tmp_path / "a", base, None)
    b = write(tmp_path / "b", {**base, "norm.weight": base["norm.weight"] * 2}, None)
    assert main(["diff", str(a), str(b), "--json"]) == 0
    assert '"changed"' in capsys.readouterr().out
    assert main(["diff", str(a), str(tmp_path / "missing")]) == 2


def test_byte_comparison_across_chunks(tmp_path, monkeypatch):
    # tensors spanning several compare chunks (and a partial last one): a single flipped byte late in the
    # tensor is found, identical bytes under a new name are a rename
    import eagle3lens.probes.diff as diff_mod

    monkeypatch.setattr(diff_mod, "COMPARE_CHUNK", 1000)
    torch.manual_seed(0)
    base = {"w": torch.randn(1234), "v": torch.randn(777)}  # 4936 and 3108 bytes
    other = {"w": base["w"].clone(), "renamed.v": base["v"].clone()}
    other["w"].view(torch.uint8)[4500] ^= 1
    a = Checkpoint.open(write(tmp_path / "a", base, None))
    b = Checkpoint.open(write(tmp_path / "b", other, None))
    result = diff(a, b, values=False, pairs={"w": "w", "v": "renamed.v"})
    assert [c.name for c in result.changed] == ["w"] and result.renamed == (("v", "renamed.v"),)
    assert diff(a, Checkpoint.open(write(tmp_path / "c", {"w": base["w"], "renamed.v": base["v"]}, None)),
                pairs={"w": "w", "v": "renamed.v"}).renames_only


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64, torch.bool])
def test_value_changes_are_streamed_and_match_a_whole_tensor_reference(tmp_path, monkeypatch, dtype):
    import eagle3lens.probes.diff as diff_mod

    monkeypatch.setattr(diff_mod, "COMPARE_CHUNK", 1024)  # several chunks and a partial last one
    torch.manual_seed(1)
    base = (torch.randn(3001) * 4).to(dtype) if dtype != torch.bool else torch.rand(3001) > 0.5
    other = base.clone()
    if dtype == torch.bool:
        other[[5, 2999]] = ~other[[5, 2999]]
    else:
        other[[5, 1500, 2999]] += torch.tensor([1, -3, 7]).to(dtype)
        if dtype.is_floating_point:
            base[10], other[10] = float("nan"), float("nan")  # NaN on both sides is no difference
    a = Checkpoint.open(write(tmp_path / "a", {"w": base}, None))
    b = Checkpoint.open(write(tmp_path / "b", {"w": other}, None))

    def whole_read(*_):
        raise AssertionError("diff loaded a tensor whole")

    monkeypatch.setattr(Checkpoint, "read", whole_read)
    (change,) = diff(a, b).changed
    fa, fb = base.to(torch.float64), other.to(torch.float64)
    delta = (fa - fb).abs()
    want_abs = float(delta[torch.isfinite(delta)].max())
    want_scale = float(fa.abs()[torch.isfinite(fa)].max())
    assert change.max_abs == want_abs and change.max_rel == pytest.approx(want_abs / want_scale)
    assert change.n_diff == (2 if dtype == torch.bool else 3)


def test_renames_read_only_tensors_with_a_candidate_and_hash_only_among_several(tmp_path, monkeypatch):
    """An unpaired tensor whose dtype and shape the other side lacks is not read; a lone candidate is compared byte
    for byte (no hash); several candidates of one shape are told apart by content, in any order."""
    import eagle3lens.probes.diff as diff_mod

    torch.manual_seed(2)
    x, y, q, k = torch.randn(8, 4), torch.randn(8, 4), torch.randn(6, 4), torch.randn(5, 4)
    a = Checkpoint.open(write(tmp_path / "a", {"a.gate": x, "a.up": y, "a.q": q, "a.k": k,
                                               "a.embed": torch.randn(9, 4), "a.twin": torch.zeros(3)}, None))
    b = Checkpoint.open(write(tmp_path / "b", {"b.up": y.clone(), "b.gate": x.clone(), "b.q": q.clone(),
                                               "b.k": k + 1, "b.extra": torch.randn(2, 2),
                                               "b.twin": torch.zeros(3)}, None, shards=2))
    hashed: list[str] = []
    real_digest = diff_mod.digest
    monkeypatch.setattr(diff_mod, "digest", lambda ckpt, name: hashed.append(name) or real_digest(ckpt, name))
    result = diff(a, b)
    assert result.renamed == (("a.gate", "b.gate"), ("a.q", "b.q"), ("a.twin", "b.twin"), ("a.up", "b.up"))
    assert sorted(result.only_in_a) == ["a.embed", "a.k"] and sorted(result.only_in_b) == ["b.extra", "b.k"]
    assert sorted(hashed) == ["a.gate", "a.up", "b.gate", "b.up"]  # only the one shape with two candidates

"""The d2t / t2d probe on tiny checkpoints whose mapping is built the way training libraries build it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from _builders import build_mapping, write_draft, write_target
from _builders import code_set as codes
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import ConversionRefused, UsageError
from eagle3lens.plots import figures
from eagle3lens.probes.vocab import inspect_vocab, invariant_breaks, plan_d2t_repair

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFUSABLE = {"vocab/d2t-double-subtracted", "vocab/d2t-absolute-ids"}


@st.composite
def mappings(draw, full: bool = False, min_n: int = 1):
    """(V, N, counts): random target-token frequencies; sometimes a hot head so d2t starts with zeros."""
    v = draw(st.integers(min_value=max(2, min_n + 1), max_value=200))
    n = v if full else draw(st.integers(min_value=min_n, max_value=v - 1))
    counts = torch.tensor(draw(st.lists(st.integers(0, 30), min_size=v, max_size=v)), dtype=torch.int64)
    head = draw(st.integers(0, n))
    counts[:head] += 1000  # the first ids are the most frequent: leading zeros in d2t
    return v, n, counts


def spread(v: int) -> torch.Tensor:
    """Deterministic counts whose most frequent ids are scattered over the vocab (plus a hot head)."""
    counts = (torch.arange(v) * 37) % 101
    counts[:5] += 500
    return counts


def probe(v, n, d2t, t2d, lm_head=None, target=None):
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Checkpoint.open(write_draft(Path(tmp) / "draft", v, n, d2t, t2d, lm_head=lm_head))
        result = inspect_vocab(ckpt, target=target)
        try:
            repair = plan_d2t_repair(ckpt, target)
        except ConversionRefused as exc:
            repair = exc
        return result, repair


# -- valid mappings ----------------------------------------------------------------------------
@FEW
@given(mappings())
def test_valid_mapping_passes_with_no_finding(case):
    v, n, counts = case
    d2t, t2d = build_mapping(counts, n)
    result, repair = probe(v, n, d2t, t2d)
    assert result.findings == () and result.status == "valid" and result.diagnosis is None
    assert result.invariants["valid"] and result.t2d_count == n
    assert isinstance(repair, ConversionRefused)  # nothing to repair
    k = int((d2t == 0).cumprod(0).sum())
    if k:
        assert result.leading_zeros == k
        assert f"d2t[0:{k}] = 0 is expected here because target ids 0..{k - 1} are in the draft vocab" in result.notes


@FEW
@given(mappings(full=True))
def test_full_vocab_without_mapping_passes(case):
    v, n, _ = case
    result, _ = probe(v, n, None, None)
    assert result.findings == () and result.status == "full-vocab"


def test_full_vocab_shipping_a_mapping_warns_about_vllm():
    result, _ = probe(50, 50, torch.zeros(50, dtype=torch.int64), torch.ones(50, dtype=torch.bool))
    assert codes(result) == {"vocab/unneeded-mapping"} and result.findings[0].severity.value == "warning"
    assert "vllm" in result.findings[0].fix


# -- corruptions -------------------------------------------------------------------------------
def corrupt(kind: str, d2t: torch.Tensor, t2d: torch.Tensor, v: int):
    n = d2t.numel()
    arange = torch.arange(n)
    if kind == "double":
        return d2t - arange, t2d
    if kind == "absolute":
        return d2t + arange, t2d
    if kind == "missing":
        return None, t2d
    if kind == "zero":
        return torch.zeros_like(d2t), t2d
    if kind == "t2d":  # one kept id swapped for one that is not kept
        moved = t2d.clone()
        moved[int(t2d.nonzero()[0])] = False
        moved[int((~t2d).nonzero()[-1])] = True
        return d2t, moved
    raise AssertionError(kind)


EXPECTED = {"double": "vocab/d2t-double-subtracted", "absolute": "vocab/d2t-absolute-ids",
            "missing": "vocab/d2t-missing", "zero": "vocab/identity-default", "t2d": "vocab/t2d-inconsistent"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mappings(min_n=3), st.sampled_from(sorted(EXPECTED)))
def test_each_corruption_is_classified_and_repaired(case, kind):
    v, n, counts = case
    d2t, t2d = build_mapping(counts, n)
    if kind in ("zero", "t2d"):
        # an all-zero d2t or d2t = arange is read as a default (they are the init/default signatures), and an
        # all-zero d2t *is* the double subtraction of d2t = arange: such originals are not the case under test
        assume(bool(d2t.any()) and not torch.equal(d2t, torch.arange(n)))
    bad_d2t, bad_t2d = corrupt(kind, d2t, t2d, v)
    result, repair = probe(v, n, bad_d2t, bad_t2d)
    assert result.diagnosis == EXPECTED[kind]
    assert EXPECTED[kind] in codes(result)
    assert not (codes(result) & CONFUSABLE - {EXPECTED[kind]})  # never a mix-up
    if kind == "t2d":  # d2t valid, t2d differs, nothing here says which is right
        assert isinstance(repair, ConversionRefused)
        assert result.findings[0].severity.value == "warning"
        return
    assert not isinstance(repair, ConversionRefused), repair
    assert torch.equal(repair.tensors["d2t"], d2t)  # the exact original
    assert "t2d" not in repair.tensors  # t2d was right all along
    assert invariant_breaks(repair.tensors["d2t"], v)["valid"]


@FEW
@given(mappings(min_n=2), st.sampled_from(["double", "absolute"]))
def test_without_t2d_the_only_valid_reading_is_chosen(case, kind):
    v, n, counts = case
    d2t, t2d = build_mapping(counts, n)
    bad, _ = corrupt(kind, d2t, t2d, v)
    assume(not invariant_breaks(bad, v)["valid"])  # otherwise d2t alone cannot show it
    assume(not torch.equal(bad, torch.arange(n)))  # d2t = arange is also the 'arange default' signature
    result, repair = probe(v, n, bad, None)
    assert result.diagnosis == EXPECTED[kind] and codes(result) & CONFUSABLE == {EXPECTED[kind]}
    assert torch.equal(repair.tensors["d2t"], d2t)


def test_arange_and_all_zero_defaults():
    v, n = 100, 20
    result, repair = probe(v, n, torch.arange(n), None)
    assert result.diagnosis == "vocab/identity-default" and result.findings[0].evidence["default"] == "arange"
    assert isinstance(repair, ConversionRefused)
    result, repair = probe(v, n, torch.zeros(n, dtype=torch.int64), torch.zeros(v, dtype=torch.bool))
    assert result.diagnosis == "vocab/identity-default" and result.findings[0].evidence["default"] == "all-zero"
    assert "rebuild" in str(repair)


def test_untouched_all_true_t2d_is_a_warning_only():
    counts = spread(100)
    d2t, _ = build_mapping(counts, 30)
    result, _ = probe(100, 30, d2t, torch.ones(100, dtype=torch.bool))
    assert [(f.code, f.severity.value) for f in result.findings] == [("vocab/identity-default", "warning")]
    assert result.status == "valid"


def test_bad_dtype_and_stale_length():
    result, _ = probe(100, 20, torch.zeros(20, dtype=torch.float32), None)
    assert result.diagnosis == "vocab/bad-shape" and result.status == "broken"
    counts = spread(100)
    d2t, t2d = build_mapping(counts, 30)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_draft(Path(tmp) / "d", 100, 20, d2t, t2d, lm_head=torch.zeros(20, 8))  # stale 30-entry mapping
        result = inspect_vocab(Checkpoint.open(path))
    assert "vocab/bad-shape" in codes(result)
    assert any("lm_head rows = 20" in f.title for f in result.findings)


def test_engine_consequences_are_spelled_out():
    counts = spread(200)
    d2t, t2d = build_mapping(counts, 50)
    result, _ = probe(200, 50, d2t - torch.arange(50), t2d)
    finding = result.findings[0]
    engines = finding.evidence["engines"]
    assert "hot_token_id = d2t + arange" in engines["sglang"] and "scattered" in engines["vllm"]
    assert "topk + d2t[topk]" in engines["eagle"]
    first = finding.evidence["first_offending"][0]
    assert first["engines_use_target_id"] == first["draft_id"] + first["stored_d2t"]
    assert first["training_meant_target_id"] == first["draft_id"] + first["repaired_d2t"]
    missing, _ = probe(200, 50, None, t2d)
    assert "raw" in missing.findings[0].evidence["engines"]["sglang"]
    assert "identity" in missing.findings[0].evidence["engines"]["vllm"]


# -- target lm_head cross-checks ---------------------------------------------------------------
@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("target")
    head = write_target(path, 300)
    return Checkpoint.open(path), head


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_head_copy_decides_t2d_disagreement_and_repair_restores_t2d(target, seed):
    tgt, head = target
    torch.manual_seed(seed)
    d2t, t2d = build_mapping(torch.randint(0, 40, (300,)), 60)
    ids = d2t + torch.arange(60)
    bad_d2t, bad_t2d = corrupt("t2d", d2t, t2d, 300)
    result, repair = probe(300, 60, bad_d2t, bad_t2d, lm_head=head[ids], target=tgt)
    assert result.diagnosis == "vocab/t2d-inconsistent"
    assert result.head["matches"] == ["stored"] and result.candidate("stored").head_rows_equal == 1.0
    assert torch.equal(repair.tensors["t2d"], t2d) and torch.equal(repair.tensors["d2t"], d2t)
    # no target: the same disagreement cannot be decided
    _, refused = probe(300, 60, bad_d2t, bad_t2d, lm_head=head[ids])
    assert isinstance(refused, ConversionRefused)


def test_head_copy_recovers_a_missing_mapping(target):
    tgt, head = target
    d2t, t2d = build_mapping(spread(300) % 17, 60)
    ids = d2t + torch.arange(60)
    result, repair = probe(300, 60, None, None, lm_head=head[ids], target=tgt)
    assert result.diagnosis == "vocab/d2t-missing" and result.repair == "from-head"
    assert torch.equal(repair.tensors["d2t"], d2t) and torch.equal(repair.tensors["t2d"], t2d)
    assert "--repair-d2t --target" in result.findings[0].fix and str(tgt.path) in result.findings[0].fix
    _, refused = probe(300, 60, None, None, lm_head=head[ids])  # no t2d, no target: nothing proves a mapping
    assert isinstance(refused, ConversionRefused)


def test_trained_head_is_not_taken_for_a_copy(target):
    tgt, _ = target
    d2t, t2d = build_mapping(spread(300), 60)
    result, _ = probe(300, 60, d2t, t2d, target=tgt)  # random lm_head
    assert result.findings == () and result.head["copy"] is False and result.head["matches"] == []


# -- coverage ----------------------------------------------------------------------------------
def test_coverage_from_counts_in_each_format(tmp_path):
    v, n = 120, 30
    torch.manual_seed(3)
    counts = torch.randint(0, 100, (v,))
    d2t, t2d = build_mapping(counts, n)
    ckpt = Checkpoint.open(write_draft(tmp_path / "d", v, n, d2t, t2d))
    expected = float(counts[t2d].sum()) / float(counts.sum())
    (tmp_path / "c.json").write_text(json.dumps(counts.tolist()))
    (tmp_path / "d.json").write_text(json.dumps({str(i): int(c) for i, c in enumerate(counts) if c}))
    (tmp_path / "m.json").write_text(json.dumps({"vocab_size": v, "counts": counts.tolist()}))
    np.save(tmp_path / "c.npy", counts.numpy())
    for name in ("c.json", "d.json", "m.json", "c.npy"):
        cov = inspect_vocab(ckpt, token_counts=tmp_path / name).coverage
        assert cov.covered == pytest.approx(expected) and cov.ideal == pytest.approx(expected)  # top-N built
    assert inspect_vocab(ckpt, token_counts=counts.tolist()).coverage.missed[0]["id"] not in (d2t + torch.arange(n)).tolist()
    with pytest.raises(UsageError, match="V = 120"):
        inspect_vocab(ckpt, token_counts=[1, 2, 3])


def test_coverage_with_tokenizer_and_text_decodes_missed_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>"] + [f"w{i}" for i in range(39)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(tmp_path / "tok")
    d2t, t2d = build_mapping(torch.tensor([0] * 20 + [1] * 20), 20)  # keeps ids 20..39
    ckpt = Checkpoint.open(write_draft(tmp_path / "d", 40, 20, d2t, t2d))
    text = "w3 w3 w3 w25 w30 w3 w7"
    cov = inspect_vocab(ckpt, tokenizer=str(tmp_path / "tok"), text=text).coverage
    assert cov.covered == pytest.approx(2 / 7)
    assert cov.missed[0]["token"] == "w3" and cov.missed[0]["count"] == 4 and cov.missed[1]["token"] == "w7"


# -- figures and CLI ---------------------------------------------------------------------------
def test_figures_highlight_breaks_and_show_coverage(tmp_path):
    counts = spread(200)
    d2t, t2d = build_mapping(counts, 50)
    ckpt = Checkpoint.open(write_draft(tmp_path / "d", 200, 50, d2t - torch.arange(50), t2d))
    figs = figures(inspect_vocab(ckpt, token_counts=counts.tolist()))
    names = [t.name for t in figs[0].data]
    assert "invariant break" in names and any(n.startswith("repair") for n in names)
    assert len(figs) == 2 and "coverage" in figs[1].layout.title.text
    good = figures(inspect_vocab(Checkpoint.open(write_draft(tmp_path / "g", 200, 50, d2t, t2d))))
    assert [t.name for t in good[0].data] == ["d2t as stored"]


def test_cli_exit_codes_and_json(tmp_path, capsys):
    counts = spread(200)
    d2t, t2d = build_mapping(counts, 50)
    good = write_draft(tmp_path / "g", 200, 50, d2t, t2d)
    bad = write_draft(tmp_path / "b", 200, 50, d2t + torch.arange(50), t2d)
    assert main(["vocab", str(good)]) == 0
    capsys.readouterr()
    assert main(["vocab", str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in data["findings"]] == ["vocab/d2t-absolute-ids"]
    assert data["results"]["vocab"]["repair"] == "absolute"
    (tmp_path / "junk.json").write_text("{not json")
    assert main(["vocab", str(good), "--counts", str(tmp_path / "junk.json")]) == 2
    assert "junk.json" in capsys.readouterr().err
    assert main(["vocab", str(good), "--tokenizer", str(tmp_path)]) == 2  # alone it would be silently ignored
    assert "--tokenizer needs --counts or --text" in capsys.readouterr().err


# -- the demo incident -------------------------------------------------------------------------
DEMO_EXPECTED = {"speculators": None, "eagle": None, "broken-d2t-double-subtracted": "vocab/d2t-double-subtracted",
                 "broken-d2t-absolute": "vocab/d2t-absolute-ids", "broken-d2t-missing": "vocab/d2t-missing"}


@pytest.mark.parametrize("variant", sorted(DEMO_EXPECTED))
def test_demo_variants(request, variant):
    demo_dir = request.getfixturevalue("demo_dir")
    target = Checkpoint.open(demo_dir / "target")
    result = inspect_vocab(Checkpoint.open(demo_dir / variant), target=target)
    expected = DEMO_EXPECTED[variant]
    assert result.diagnosis == expected and codes(result) == ({expected} if expected else set())
    if expected is None:
        assert result.head["copy"] and any("is expected here" in note for note in result.notes)
    else:  # the target's lm_head proves the repair, and it is the good drafter's mapping
        repair = plan_d2t_repair(Checkpoint.open(demo_dir / variant), target)
        assert torch.equal(repair.tensors["d2t"], Checkpoint.open(demo_dir / "speculators").read("d2t"))


# -- end to end: eagle3lens convert --repair-d2t -----------------------------------------------
def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.mark.parametrize("kind", ["double", "absolute", "missing"])
def test_cli_repair_restores_the_original_mapping(tmp_path, capsys, kind):
    d2t, t2d = build_mapping(spread(200), 50)
    bad_d2t, bad_t2d = corrupt(kind, d2t, t2d, 200)
    src = write_draft(tmp_path / "draft", 200, 50, bad_d2t, bad_t2d)
    before = _files(src)
    assert main(["convert", str(src), "--repair-d2t", str(tmp_path / "fixed"), "--json"]) == 0
    fixed = Checkpoint.open(tmp_path / "fixed")
    assert torch.equal(fixed.read("d2t"), d2t) and torch.equal(fixed.read("t2d"), t2d)
    assert torch.equal(fixed.read("lm_head.weight"), Checkpoint.open(src).read("lm_head.weight"))
    assert _files(src) == before  # source untouched
    assert inspect_vocab(fixed).findings == ()
    assert main(["convert", str(src), "--repair-d2t", "--in-place", "--json"]) == 0
    assert _files(tmp_path / "draft.orig") == before  # backup kept, byte for byte
    assert torch.equal(Checkpoint.open(src).read("d2t"), d2t)
    capsys.readouterr()


def test_cli_repair_refuses_ambiguous_evidence(tmp_path, capsys):
    d2t, t2d = build_mapping(spread(200), 50)
    bad_d2t, bad_t2d = corrupt("t2d", d2t, t2d, 200)  # d2t and t2d disagree, no target to decide
    src = write_draft(tmp_path / "draft", 200, 50, bad_d2t, bad_t2d)
    assert main(["convert", str(src), "--repair-d2t", str(tmp_path / "out")]) == 2
    assert "no repair is proven" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("variant", ["broken-d2t-double-subtracted", "broken-d2t-absolute"])
def test_cli_repair_of_demo_variants(demo_dir, tmp_path, capsys, variant):
    import shutil

    src = Path(shutil.copytree(demo_dir / variant, tmp_path / variant))
    assert main(["convert", str(src), "--repair-d2t", "--in-place", "--json"]) == 0
    good = Checkpoint.open(demo_dir / "speculators")
    assert torch.equal(Checkpoint.open(src).read("d2t"), good.read("d2t"))
    assert _files(tmp_path / f"{variant}.orig") == _files(demo_dir / variant)
    assert inspect_vocab(Checkpoint.open(src), target=Checkpoint.open(demo_dir / "target")).findings == ()
    capsys.readouterr()


def test_cli_repair_with_target_head_restores_missing_mapping(demo_dir, tmp_path, capsys):
    """broken-d2t-missing: only the target's lm_head rows prove the ids; the finding's fix command does it."""
    variant = demo_dir / "broken-d2t-missing"
    result = inspect_vocab(Checkpoint.open(variant), target=Checkpoint.open(demo_dir / "target"))
    fix = next(f.fix for f in result.findings if f.code == "vocab/d2t-missing")
    assert "--target" in fix and fix.endswith("OUT")
    # without the target there is no proof: refused with exit 2
    assert main(["convert", str(variant), "--repair-d2t", str(tmp_path / "nope")]) == 2
    assert "no repair is proven" in capsys.readouterr().err
    args = fix.split()[1:-1] + [str(tmp_path / "fixed"), "--json"]
    assert main(args) == 0
    fixed, good = Checkpoint.open(tmp_path / "fixed"), Checkpoint.open(demo_dir / "speculators")
    assert torch.equal(fixed.read("d2t"), good.read("d2t")) and torch.equal(fixed.read("t2d"), good.read("t2d"))

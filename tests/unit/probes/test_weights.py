"""Weights probe: streaming statistics against float64 references, provenance verdicts, copies, comparison, CLI."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from _builders import checkpoint, code_set, codes, heavy_tailed, kaiming_uniform, layer_config, speculators_config

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.errors import UsageError
from eagle3lens.plots import figures, html_view, rich_view
from eagle3lens.probes.stats import tensor_stats
from eagle3lens.probes.weights import weight_stats
from eagle3lens.progress import TqdmBars

CHUNK = 96  # bytes: every tensor below spans many chunks

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]
INT_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]


def weights_config(hidden: int = 32, vocab: int = 64, draft_vocab: int = 16) -> dict:
    """The draft config these tests read: aux ids [1, 2, 3] and a bare layer config with the init std."""
    return speculators_config((1, 2, 3), draft_vocab=draft_vocab, verifier=None,
                              layer=layer_config(hidden, vocab, heads=4, initializer_range=0.02))


@pytest.fixture
def rng():
    torch.manual_seed(1234)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_stats_equal_float64_reference(tmp_path, rng, dtype):
    x = (torch.randn(37, 29) * 0.7 + 0.25).to(dtype)
    flat = x.reshape(-1)
    flat[5] = float("nan")
    if dtype is not torch.float8_e4m3fn:  # e4m3fn has no infinity
        flat[11] = float("inf")
    flat[17] = 0.0
    ckpt = checkpoint(tmp_path, {"w": x})
    s = tensor_stats(ckpt, "w", chunk_bytes=CHUNK)

    ref = x.double().reshape(-1)
    fin = ref[torch.isfinite(ref)]
    centred = fin - fin.mean()
    assert s.numel == x.numel() and s.nan == 1 and s.inf == int(torch.isinf(ref).sum())
    assert s.zeros == int((fin == 0).sum()) >= 1
    assert s.min == float(fin.min()) and s.max == float(fin.max()) and s.absmax == float(fin.abs().max())
    std = float(centred.pow(2).mean().sqrt())
    assert s.mean == pytest.approx(float(fin.mean()), abs=1e-6 * std)
    assert s.std == pytest.approx(std, rel=1e-6)
    assert s.l2 == pytest.approx(float(fin.norm()), rel=1e-6)
    assert s.kurtosis == pytest.approx(float(centred.pow(4).mean() / centred.pow(2).mean() ** 2 - 3), abs=1e-5)
    assert sum(s.hist_counts) == s.hist_sample == fin.numel()  # small tensors: histogram over every value
    assert s.hist_edges[0] == s.min and s.hist_edges[-1] == pytest.approx(s.max)


def test_moments_merge_stays_exact_far_from_zero(tmp_path, rng):
    # a norm-like tensor around 1.0 with tiny spread: naive power sums would cancel, the pairwise merge must not
    x = 1.0 + torch.randn(4099, dtype=torch.float64) * 1e-4
    s = tensor_stats(checkpoint(tmp_path, {"n": x}), "n", chunk_bytes=64)
    c = x - x.mean()
    assert s.std == pytest.approx(float(c.pow(2).mean().sqrt()), rel=1e-9)
    assert s.kurtosis == pytest.approx(float(c.pow(4).mean() / c.pow(2).mean() ** 2 - 3), abs=1e-8)


def test_histogram_of_large_tensor_is_a_strided_sample(tmp_path, rng):
    x = torch.randn(300_000)
    s = tensor_stats(checkpoint(tmp_path, {"w": x}), "w", chunk_bytes=1 << 20)
    assert 0 < s.hist_sample < x.numel() and sum(s.hist_counts) == s.hist_sample
    centres = np.array([(a + b) / 2 for a, b in itertools.pairwise(s.hist_edges)])
    sample_mean = float((centres * np.array(s.hist_counts)).sum() / s.hist_sample)
    assert abs(sample_mean) < 0.05  # the sample is spread over the tensor, not its first values


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_int_stats_min_max_distinct(tmp_path, rng, dtype):
    x = torch.randint(0, 2, (1001,), dtype=torch.bool) if dtype is torch.bool else torch.randint(-7 if dtype is not torch.uint8 else 0, 40, (1001,)).to(dtype)
    s = tensor_stats(checkpoint(tmp_path, {"i": x}), "i", chunk_bytes=CHUNK)
    ref = x.to(torch.int64)
    assert (s.kind, s.min, s.max) == ("bool" if dtype is torch.bool else "int", int(ref.min()), int(ref.max()))
    assert s.distinct == int(torch.unique(ref).numel())
    assert s.zeros == int((ref == 0).sum()) and s.mean is None


def test_nan_inf_zero_and_norm_at_init_findings(tmp_path, rng):
    w = heavy_tailed(16, 32)
    nan, inf = w.clone(), w.clone()
    nan[3, 4] = float("nan")
    inf[0, 0] = float("-inf")
    ckpt = checkpoint(tmp_path, {"fc.weight": w, "layers.0.mlp.up_proj.weight": nan, "layers.0.mlp.down_proj.weight": inf,
                                "layers.0.self_attn.o_proj.weight": torch.zeros(16, 16),
                                "layers.0.input_layernorm.weight": torch.ones(32), "norm.weight": 1 + 0.1 * torch.randn(32)},
                     weights_config())
    r = weight_stats(ckpt, chunk_bytes=CHUNK)
    assert sorted(code_set(r)) == ["weights/all-zero", "weights/inf", "weights/nan", "weights/norm-at-init"]
    nan_finding = next(f for f in r.findings if f.code == "weights/nan")
    assert nan_finding.evidence["tensors"]["layers.0.mlp.up_proj.weight"]["nan"] == 1
    assert r["fc.weight"].verdict == "trained" and r["norm.weight"].verdict == "trained"
    assert r["layers.0.input_layernorm.weight"].verdict == "init:ones"
    assert r.decoder_module == "layers.0" and r.decoder_trained_share == 0.0


def test_init_like_separates_hf_normal_and_kaiming_uniform_from_trained(tmp_path, rng):
    tensors = {
        "layers.0.self_attn.q_proj.weight": torch.randn(64, 128) * 0.02,  # HF normal(0, initializer_range)
        "layers.0.self_attn.k_proj.weight": kaiming_uniform(64, 128),  # nn.Linear default / EAGLE
        "layers.0.self_attn.v_proj.weight": heavy_tailed(64, 128),  # trained-looking: same scale, heavy tails
        "layers.0.mlp.up_proj.weight": torch.randn(64, 128) * 0.05,  # normal but not the predicted std
        "fc.weight": (torch.rand(32, 96) * 2 - 1) * 0.02 * math.sqrt(3),  # uniform with the normal's std
    }
    r = weight_stats(checkpoint(tmp_path, tensors, weights_config()))
    assert r["layers.0.self_attn.q_proj.weight"].verdict == "init:normal(0, 0.02)"
    assert r["layers.0.self_attn.k_proj.weight"].verdict.startswith("init:kaiming-uniform")
    assert r["layers.0.self_attn.v_proj.weight"].verdict == "trained"
    assert r["layers.0.mlp.up_proj.weight"].verdict == "trained"
    assert r["fc.weight"].verdict == "trained"  # kurtosis tells a uniform from the predicted normal
    init = next(f for f in r.findings if f.code == "weights/init-like")
    assert set(init.evidence["tensors"]) == {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight"}
    assert r.decoder_trained_share == pytest.approx(2 / 4)


def test_a_few_training_steps_leave_init(tmp_path, rng):
    layer = torch.nn.Linear(64, 64, bias=False)
    torch.nn.init.normal_(layer.weight, std=0.02)
    opt = torch.optim.Adam(layer.parameters(), lr=3e-2)
    x, y = torch.randn(256, 64), torch.randn(256, 64) @ torch.randn(64, 64)
    init = layer.weight.detach().clone()
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.mse_loss(layer(x), y).backward()
        opt.step()
    r = weight_stats(checkpoint(tmp_path, {"fc.weight": layer.weight.detach(), "layers.0.mlp.up_proj.weight": init},
                               weights_config()))
    assert r["fc.weight"].verdict == "trained" and r["layers.0.mlp.up_proj.weight"].verdict.startswith("init:normal")


def _target_and_draft(tmp_path, perturb: str | None = None):
    vocab, hidden, n = 64, 32, 16
    embed, head = torch.randn(vocab, hidden), torch.randn(vocab, hidden)
    target = checkpoint(tmp_path / "target", {"model.embed_tokens.weight": embed, "lm_head.weight": head},
                       {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden})
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.randperm(vocab)[:n]] = True
    ids = torch.nonzero(t2d).flatten()
    draft = {"embed_tokens.weight": embed.to(torch.bfloat16), "lm_head.weight": head[t2d].to(torch.bfloat16),
             "t2d": t2d, "d2t": ids - torch.arange(n), "fc.weight": heavy_tailed(hidden, 3 * hidden)}
    if perturb:
        draft[perturb] = draft[perturb].clone()
        draft[perturb][2, :5] += 0.5
    return target, checkpoint(tmp_path / "draft", draft, weights_config(hidden, vocab, n))


def test_target_copies_confirmed_bitwise_after_cast(tmp_path, rng):
    target, draft = _target_and_draft(tmp_path)
    r = weight_stats(draft, target=target, chunk_bytes=CHUNK)
    assert [(c.draft, c.rows, c.matches) for c in r.copies] == [("embed_tokens.weight", "all", True),
                                                                 ("lm_head.weight", "t2d", True)]
    assert codes(r) == [] and r["lm_head.weight"].verdict == "target-copy"


@pytest.mark.parametrize("tensor,severity", [("lm_head.weight", "warning"), ("embed_tokens.weight", "critical")])
def test_perturbed_copy_flagged_with_how_far_off(tmp_path, rng, tensor, severity):
    target, draft = _target_and_draft(tmp_path, perturb=tensor)
    r = weight_stats(draft, target=target, chunk_bytes=CHUNK)
    (f,) = [f for f in r.findings if f.code == "weights/target-copy-mismatch"]
    assert f.severity.value == severity and f.evidence["draft"] == tensor
    assert f.evidence["mismatched_rows"] == 1 and f.evidence["mismatched_elements"] == 5
    assert f.evidence["max_abs_diff"] == pytest.approx(0.5, rel=0.02) and 0 < f.evidence["rel_l2"] < 0.2


def test_against_reports_relative_change_and_cosine(tmp_path, rng):
    a, b = torch.randn(40, 30), torch.randn(40, 30)
    final = checkpoint(tmp_path / "final", {"fc.weight": a, "norm.weight": torch.ones(30), "new.weight": torch.ones(3)})
    epoch0 = checkpoint(tmp_path / "epoch0", {"fc.weight": b, "norm.weight": torch.ones(30), "old.weight": torch.ones(3)})
    comp = weight_stats(final, against=epoch0, chunk_bytes=CHUNK).comparison
    fc = next(c for c in comp.changes if c.name == "fc.weight")
    a64, b64 = a.double().flatten(), b.double().flatten()
    assert fc.rel_change == pytest.approx(float((a64 - b64).norm() / b64.norm()), rel=1e-9)
    assert fc.cosine == pytest.approx(float(a64 @ b64 / (a64.norm() * b64.norm())), rel=1e-9)
    norm = next(c for c in comp.changes if c.name == "norm.weight")
    assert (norm.rel_change, norm.cosine) == (0.0, pytest.approx(1.0))
    assert comp.only_here == ("new.weight",) and comp.only_there == ("old.weight",)


def test_names_pattern_results_and_rendering(tmp_path, rng):
    ckpt = checkpoint(tmp_path, {"fc.weight": heavy_tailed(8, 24), "layers.0.mlp.up_proj.weight": torch.randn(8, 8) * 0.02,
                                "d2t": torch.zeros(4, dtype=torch.int64)}, weights_config(8, 16, 4))
    r = weight_stats(ckpt, names="layers.0.*")
    assert [t.name for t in r.tensors] == ["layers.0.mlp.up_proj.weight"]
    with pytest.raises(UsageError):
        weight_stats(ckpt, names="nothing.*")
    full = weight_stats(ckpt, against=ckpt)
    json.dumps(full.to_dict())
    assert full["d2t"].verdict == "buffer"
    assert len(figures(full)) == 3 and "<table>" in html_view(full)
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(rich_view(full))
    assert "layers.0" in console.export_text()


def test_pickled_checkpoint_is_streamed_too(tmp_path, rng):
    w = torch.randn(20, 20) * 0.02
    torch.save({"fc.weight": w}, tmp_path / "pytorch_model.bin")
    r = weight_stats(Checkpoint.open(tmp_path / "pytorch_model.bin"), chunk_bytes=CHUNK)
    assert r["fc.weight"].stats.std == pytest.approx(float(w.double().std(unbiased=False)), rel=1e-6)


def test_cli_weights_json_and_exit_codes(tmp_path, rng, capsys):
    target, draft = _target_and_draft(tmp_path, perturb="embed_tokens.weight")
    assert main(["weights", str(draft.path), "--target", str(target.path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in out["findings"]] == ["weights/target-copy-mismatch"]
    assert out["results"]["weights"]["copies"][0]["matches"] is False
    assert main(["weights", str(draft.path), "--names", "fc.*", "--fail-on", "critical"]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cli_rejects_cuda_without_gpu(tmp_path, capsys):
    ckpt = checkpoint(tmp_path, {"fc.weight": torch.ones(2, 2)})
    assert main(["weights", str(ckpt.path), "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


# -- the demo incident ---------------------------------------------------------------------
def test_demo_untrained_variant_flagged_on_its_decoder(demo_dir):
    r = weight_stats(Checkpoint.open(demo_dir / "broken-untrained"))
    titles = {(f.code, f.title.split(":")[0]) for f in r.findings}
    assert ("weights/init-like", "layers.0") in titles and ("weights/norm-at-init", "layers.0") in titles
    assert r.decoder_trained_share == 0.0


@pytest.mark.parametrize("variant", ["speculators", "eagle"])
def test_demo_trained_drafters_not_flagged(demo_dir, variant):
    r = weight_stats(Checkpoint.open(demo_dir / variant))
    assert codes(r) == [] and r.decoder_trained_share == 1.0


def test_demo_nan_lm_head(demo_dir):
    r = weight_stats(Checkpoint.open(demo_dir / "broken-lm-head-nan"))
    assert "weights/nan" in codes(r) and r["lm_head.weight"].verdict == "nan"


def test_demo_target_confirms_good_copies(demo_dir):
    r = weight_stats(Checkpoint.open(demo_dir / "speculators"), target=Checkpoint.open(demo_dir / "target"))
    assert [c.matches for c in r.copies] == [True, True] and codes(r) == []


def _write_raw_safetensors(path, tensors: dict[str, tuple[str, list[int], bytes]]):
    """A safetensors file written by hand, for dtypes safetensors.torch cannot save (F4, FNUZ...)."""
    import struct

    header, offset = {}, 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    blob = json.dumps(header).encode()
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(r for _, _, r in tensors.values()))
    return Checkpoint.open(path)


def test_fnuz_is_summarised_and_f4_skipped_with_notes(tmp_path, rng):
    fnuz = torch.tensor([[0.5, -1.0], [2.0, 4.0]]).to(torch.float8_e4m3fnuz)
    fnuz_raw = fnuz.view(torch.uint8).numpy().tobytes()
    tensors = {"fc.weight": ("F8_E4M3FNUZ", [2, 2], fnuz_raw), "embed_tokens.weight": ("F4", [4, 4], bytes(range(8)))}
    a = _write_raw_safetensors(tmp_path / "a", tensors)
    b = _write_raw_safetensors(tmp_path / "b", {**tensors, "fc.weight": ("F8_E4M3FNUZ", [2, 2], fnuz_raw[::-1])})
    r = weight_stats(a, against=b, chunk_bytes=CHUNK)
    fc = r["fc.weight"].stats
    assert (fc.kind, fc.min, fc.max, fc.mean) == ("float", -1.0, 4.0, 1.375)
    assert r["embed_tokens.weight"].verdict == "unsupported"
    assert [c.name for c in r.comparison.changes] == ["fc.weight"]
    assert any("embed_tokens.weight" in n and "F4" in n and "not compared" in n for n in r.notes)
    target = _write_raw_safetensors(tmp_path / "t", {"model.embed_tokens.weight": ("F4", [4, 4], bytes(8))})
    r = weight_stats(a, target=target, chunk_bytes=CHUNK)
    assert r.copies == () and any("embed_tokens copy not checked" in n for n in r.notes)


def test_converted_draft_keeps_its_head_confirmed_as_a_target_copy(demo_dir, tmp_path):
    """After `convert --to sglang` the layout is SGLang's, but the head is still the target's rows: say so."""
    from eagle3lens.convert import convert

    convert(demo_dir / "speculators", "sglang==0.5.11", tmp_path / "sg")
    result = weight_stats(Checkpoint.open(tmp_path / "sg"), target=Checkpoint.open(demo_dir / "target"))
    head = next(c for c in result.copies if c.draft == "lm_head.weight")
    assert head.matches and not head.required
    assert result["lm_head.weight"].verdict == "target-copy" and not result.findings


def eagle_config(hidden: int = 32) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
            "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 64, "draft_vocab_size": 16,
            "initializer_range": 0.02, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}


def test_untrained_head_is_flagged_where_trainers_train_it(tmp_path, rng):
    """SpecForge/EAGLE train lm_head from random init: a head at normal(0, 0.02) is untrained there; speculators
    copies it from the target, so the same head there is only a note (its look is the target's)."""
    head = torch.randn(16, 32) * 0.02
    eagle = checkpoint(tmp_path / "eagle", {"fc.weight": heavy_tailed(32, 96), "lm_head.weight": head}, eagle_config())
    f = next(f for f in weight_stats(eagle).findings if f.code == "weights/init-like")
    assert f.severity.value == "critical" and f.title.startswith("lm_head:") and "--target" in f.detail
    spec = checkpoint(tmp_path / "spec", {"fc.weight": heavy_tailed(32, 96), "lm_head.weight": head}, weights_config())
    r = weight_stats(spec)
    assert codes(r) == [] and any("lm_head.weight look like an initialiser" in n for n in r.notes)


def test_a_head_copied_from_an_untrained_target_is_not_flagged_once_the_target_confirms_it(tmp_path, rng):
    head = torch.randn(64, 32) * 0.02
    target = checkpoint(tmp_path / "t", {"model.embed_tokens.weight": torch.randn(64, 32),
                                        "language_model.lm_head.weight": head})  # prefixed head: found by suffix
    draft = checkpoint(tmp_path / "d", {"fc.weight": heavy_tailed(32, 96), "lm_head.weight": head.clone()},
                      {**eagle_config(), "draft_vocab_size": 64})
    r = weight_stats(draft, target=target)
    assert [(c.target, c.matches) for c in r.copies] == [("language_model.lm_head.weight", True)]
    assert r["lm_head.weight"].verdict == "target-copy" and codes(r) == []


def test_fc_norm_ones_and_uninitialised_memory_are_flagged(tmp_path, rng):
    garbage = torch.randn(32, 32) * 3e33
    ckpt = checkpoint(tmp_path, {"fc.weight": heavy_tailed(32, 96), "fc_norm.0.weight": torch.ones(32),
                                "fc_norm.1.weight": torch.ones(32), "layers.0.mlp.up_proj.weight": garbage,
                                "layers.0.mlp.down_proj.weight": heavy_tailed(32, 32),
                                "empty.weight": torch.empty(0, 32)}, weights_config())
    r = weight_stats(ckpt)
    ones = next(f for f in r.findings if f.code == "weights/norm-at-init")
    assert ones.title.startswith("fc_norm: 2 norm weight(s)")
    junk = next(f for f in r.findings if f.code == "weights/init-like")
    assert "uninitialised memory" in junk.title and list(junk.evidence["tensors"]) == ["layers.0.mlp.up_proj.weight"]
    assert r["empty.weight"].verdict == "empty" and all(m.module != "empty" for m in r.modules)


def test_nan_on_one_side_is_never_a_zero_difference(tmp_path, rng):
    a = torch.randn(8, 8)
    b = a.clone()
    b[2, 3] = float("nan")
    here, there = checkpoint(tmp_path / "a", {"w": b}), checkpoint(tmp_path / "b", {"w": a})
    change = weight_stats(here, against=there).comparison.changes[0]
    assert math.isnan(change.max_abs_diff) and math.isnan(change.rel_change)


def test_comparison_says_what_it_could_not_compare(tmp_path, rng, capsys):
    w = torch.randn(8, 8)
    checkpoint(tmp_path / "a", {"same": w, "moved": torch.randn(4), "only_a": w.clone(), "reshaped": torch.randn(2, 8)})
    checkpoint(tmp_path / "b", {"same": w, "moved": torch.randn(4), "only_b": w.clone(), "reshaped": torch.randn(8, 2)})
    comp = weight_stats(Checkpoint.open(tmp_path / "a"), against=Checkpoint.open(tmp_path / "b")).comparison
    assert comp.summary() == ["1 tensor(s) identical to the reference (not updated since it): same",
                              "1 tensor(s) only in this checkpoint: only_a", "1 tensor(s) only in the reference: only_b",
                              "1 tensor(s) with another shape in the reference (not compared): reshaped"]
    main(["weights", str(tmp_path / "a"), "--against", str(tmp_path / "b")])
    out = " ".join(capsys.readouterr().out.split())
    assert "only in the reference: only_b" in out and "identical to the reference" in out


def test_copy_checks_and_comparison_have_their_own_progress_bars(demo_dir, capsys):
    draft = Checkpoint.open(demo_dir / "speculators")
    weight_stats(draft, target=Checkpoint.open(demo_dir / "target"), against=draft, progress=TqdmBars())
    err = capsys.readouterr().err
    head_and_embed = sum(draft.info(n).nbytes for n in ("lm_head.weight", "embed_tokens.weight"))
    assert f"weights copies of {demo_dir / 'target'}" in err and f"weights against {demo_dir / 'speculators'}" in err
    assert f"{head_and_embed / 1024:.0f}k/{head_and_embed / 1024:.0f}k" in err  # the copy bar reaches its total

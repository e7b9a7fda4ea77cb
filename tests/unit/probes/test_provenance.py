"""Training-data provenance on dumps the tests extract from tiny HF targets (and on the demo's pairs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3lens.probes.data import Sample, target_states, write_dump, write_speculators_dump
from eagle3lens.probes.provenance import POST, PRE, trace_provenance

L, H, V = 10, 32, 256


def tiny_target(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=H, num_hidden_layers=L, vocab_size=V, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("target")
    tiny_target(0).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def sequences() -> torch.Tensor:
    return torch.randint(0, V, (6, 40), generator=torch.Generator().manual_seed(1))


def load(path: Path):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path).eval()


def own_dump(out: Path, model, seqs: torch.Tensor, layers: list[int], dtype=torch.float32, post=True) -> Path:
    """An eagle3lens dump of ``layers`` (HF indices) with the last state after (post) or before the final norm."""
    with torch.no_grad():
        aux, pre_norm, post_norm = target_states(model, seqs, layers)
    feats = torch.cat(aux, dim=-1).to(dtype)
    last = (post_norm if post else pre_norm).to(dtype)
    return write_dump(out, (Sample(seqs[i], feats[i].contiguous(), last[i].contiguous(),
                                   torch.ones(seqs.shape[1], dtype=torch.bool), post, "test", None)
                            for i in range(seqs.shape[0])))


@pytest.mark.slow
def test_layers_2_5_7_and_one_later_are_told_apart(target, sequences, tmp_path):
    model = load(target)
    with torch.no_grad():
        write_speculators_dump(tmp_path / "vllm", model, sequences, [2, 5, 7])
    early = trace_provenance(tmp_path / "vllm", target, samples=128)
    assert early.layers == (2, 5, 7)
    assert all(c.matched and c.margin > 0.05 for c in early.chunks)
    assert early.last_hidden == "pre-norm" and early.chunks[-1].best == PRE
    assert early.positions == 128 and early.sequences >= 3
    later = trace_provenance(own_dump(tmp_path / "sglang", model, sequences, [3, 6, 8]), target, samples=128)
    assert later.layers == (3, 6, 8)
    assert later.last_hidden == "post-norm" and later.chunks[-1].best == POST
    assert later.to_dict()["as_sglang_ids"] == [2, 5, 7]
    assert not later.findings


@pytest.mark.slow
def test_bf16_storage_still_matches(target, sequences, tmp_path):
    dump = own_dump(tmp_path / "bf16", load(target), sequences, [1, 4], dtype=torch.bfloat16)
    result = trace_provenance(dump, target, samples=64)
    assert result.layers == (1, 4) and result.stored_dtype == "bfloat16"
    assert max(c.rel_error for c in result.chunks) < 0.02


def test_a_dump_from_another_target_is_not_from_target(target, sequences, tmp_path):
    other = tiny_target(7)
    result = trace_provenance(own_dump(tmp_path / "other", other, sequences, [2, 5, 7]), target, samples=64)
    assert [f.code for f in result.findings] == ["data/not-from-target"]
    assert result.findings[0].severity.value == "critical" and result.layers == (None, None, None)


def test_specforge_dump_with_a_pre_norm_last_state_is_unnormed(target, sequences, tmp_path):
    model = load(target)
    with torch.no_grad():
        aux, pre_norm, _ = target_states(model, sequences[:2], [1, 3, 5])
    rows = tmp_path / "specforge" / "rows_0"
    rows.mkdir(parents=True)
    for i in range(2):
        torch.save({"input_ids": sequences[i], "loss_mask": torch.ones(40, dtype=torch.long),
                    "aux_hidden_state": torch.cat([a[i] for a in aux], -1)[None], "hidden_state": pre_norm[i][None]},
                   rows / f"data_{i}.ckpt")
    result = trace_provenance(tmp_path / "specforge", target, samples=64)
    assert result.format == "specforge" and result.layers == (1, 3, 5)
    assert [f.code for f in result.findings] == ["data/last-hidden-unnormed"]


def test_bad_sequences_are_counted_and_skipped(target, sequences, tmp_path):
    model = load(target)
    with torch.no_grad():
        aux, _, post_norm = target_states(model, sequences[:3], [2])
    bad_ids = sequences[1].clone()
    bad_ids[0] = V + 5
    nan_aux = aux[0][2].clone()
    nan_aux[3, 0] = float("nan")
    samples = [Sample(sequences[0], aux[0][0], post_norm[0], torch.zeros(40, dtype=torch.bool), True, "t", None),
               Sample(bad_ids, aux[0][1], post_norm[1], torch.ones(40, dtype=torch.bool), True, "t", None),
               Sample(sequences[2], nan_aux, post_norm[2], torch.ones(40, dtype=torch.bool), True, "t", None)]
    result = trace_provenance(write_dump(tmp_path / "bad", samples), target, samples=64)
    assert result.sequences == 1 and result.layers == (2,)
    assert {f.code for f in result.findings} == {"data/loss-mask-empty", "data/token-ids-out-of-vocab",
                                                 "data/non-finite"}


@pytest.mark.slow
def test_width_mismatch_is_one_line_naming_both_widths(target, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    wide = LlamaForCausalLM(LlamaConfig(hidden_size=48, num_hidden_layers=4, vocab_size=V, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64)).eval()
    dump = own_dump(tmp_path / "wide", wide, torch.randint(0, V, (2, 16)), [1, 2])
    out = subprocess.run([sys.executable, "-m", "eagle3lens", "provenance", "--data", str(dump), "--target",
                          str(target)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "48" in out.stderr and "32" in out.stderr and str(dump) in out.stderr


def test_demo_mismatched_pair_is_critical_and_matched_pair_clean(demo_dir):
    bad = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=demo_dir / "mismatched-ids",
                           engine="sglang==0.5.11", samples=128)
    [finding] = [f for f in bad.findings if f.code == "data/aux-layers-mismatch"]
    assert finding.severity.value == "critical"
    assert bad.layers == (2, 5, 7) and bad.engine_layers == (3, 6, 8)
    good = trace_provenance(demo_dir / "hidden-states", demo_dir / "target", draft=demo_dir / "eagle",
                            engine="sglang==0.5.11", samples=128)
    assert good.findings == () and good.engine_layers == (2, 5, 7)
    sglang_style = trace_provenance(demo_dir / "hidden-states-sglang", demo_dir / "target", samples=64)
    assert sglang_style.layers == (3, 6, 8) and sglang_style.last_hidden == "post-norm"


@pytest.mark.slow
def test_cli_json_carries_the_matrices(demo_dir):
    out = subprocess.run([sys.executable, "-m", "eagle3lens", "provenance", "--data", str(demo_dir / "hidden-states"),
                          "--target", str(demo_dir / "target"), "--samples", "32", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)["results"]["provenance"]
    assert data["layers"] == [2, 5, 7] and data["positions"] == 32
    assert len(data["rel_error"]) == 4 and len(data["rel_error"][0]) == len(data["candidates"]) == 12  # 10 + pre + post


@pytest.mark.slow
def test_doctor_with_data_and_target_runs_provenance(demo_dir):
    from eagle3lens.doctor import diagnose

    report = diagnose(demo_dir / "mismatched-ids", engine="sglang==0.5.11", target=demo_dir / "target",
                      data=demo_dir / "hidden-states", weights=False)
    assert "provenance" in report.results["doctor"].ran
    mismatch = [f for f in report.findings if f.code == "data/aux-layers-mismatch"]
    # priced by the acceptance the doctor computed: the one-layer shift costs nothing measurable on the demo
    assert mismatch and mismatch[0].severity.value == "warning"
    assert {"accept_len_served", "accept_len_with_data_layers"} <= set(mismatch[0].evidence)
    causes = report.results["doctor"].causes
    assert "data/aux-layers-mismatch" in [c.finding.code for c in causes]
    assert not [c for c in causes if c.explains == "zero acceptance"]


def _sparse_sample(dump: Path, tokens: int, hidden: int) -> Path:
    """A speculators sample whose header claims ``tokens`` tokens over a sparse file (no byte of it written)."""
    import struct

    ids, states = tokens * 8, tokens * 4 * hidden * 4
    header = {"token_ids": {"dtype": "I64", "shape": [tokens], "data_offsets": [0, ids]},
              "hidden_states": {"dtype": "F32", "shape": [tokens, 4, hidden], "data_offsets": [ids, ids + states]}}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    dump.mkdir()
    with open(dump / "hs_0.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + ids + states)
    return dump / "hs_0.safetensors"


def _run(args: list[str], capsys) -> tuple[int, str]:
    from eagle3lens.cli import main

    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", ["acceptance", "provenance"])
def test_a_dump_header_claiming_2_to_the_23_tokens_is_refused_before_reading(demo_dir, tmp_path, capsys, command):
    """8M tokens of 4 x 64 float32 states: an 8 GiB sparse file whose bytes are never read."""
    from eagle3lens.probes.data import MAX_SAMPLE_TOKENS

    sample = _sparse_sample(tmp_path / "dump", 1 << 23, 64)
    draft = ["acceptance", str(demo_dir / "speculators")] if command == "acceptance" else ["provenance"]
    code, err = _run([*draft, "--data", str(sample.parent), "--target", str(demo_dir / "target")], capsys)
    assert code == 2 and err == (f"eagle3lens: error: {sample}: tensor 'token_ids' claims {1 << 23} tokens, more "
                                 f"than the {MAX_SAMPLE_TOKENS} a hidden-state sample may hold\n")


@pytest.mark.parametrize("command", ["acceptance", "provenance"])
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_a_float8_dump_is_a_named_refusal(demo_dir, tmp_path, capsys, command, dtype):
    from safetensors.torch import load_file, save_file

    dump = tmp_path / "dump"
    dump.mkdir()
    for i in range(2):
        data = load_file(demo_dir / "hidden-states" / f"hs_{i}.safetensors")
        save_file({**data, "hidden_states": data["hidden_states"].to(dtype)}, dump / f"hs_{i}.safetensors")
    draft = ["acceptance", str(demo_dir / "speculators")] if command == "acceptance" else ["provenance"]
    code, err = _run([*draft, "--data", str(dump), "--target", str(demo_dir / "target")], capsys)
    name = str(dtype).removeprefix("torch.")
    assert code == 2 and err == (f"eagle3lens: error: {dump / 'hs_0.safetensors'}: hidden states in {name}: "
                                 "eagle3lens reads them in float16, bfloat16, float32 or float64 (convert the dump)\n")

"""The demo incident: layout and configs as FACTS.md describes, a genuinely trained draft, broken variants
that differ from the good one exactly where intended, byte-identical rebuilds, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eagle3lens import cli
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.demo import DemoPaths, build_demo
from eagle3lens.draft import Eagle3Draft, map_to_target
from eagle3lens.errors import UsageError

N, V = 512, 2048
DRAFT_KEYS = {"embed_tokens.weight", "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} | {
    f"layers.0.{name}.weight" for name in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")}
TRAINED = {k for k in DRAFT_KEYS if k.startswith(("fc.", "layers.0.", "norm."))}


def tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


@pytest.mark.slow
def test_layout_files(demo_dir: Path) -> None:
    paths = DemoPaths.under(demo_dir)
    for name in ("target", "speculators", "eagle", *paths.drafts):
        assert (demo_dir / name / "model.safetensors").is_file(), name
        assert (demo_dir / name / "config.json").is_file(), name
    for f in (paths.sglang_log, paths.vllm_log, paths.token_counts, paths.readme, paths.manifest):
        assert f.is_file()
    manifest = json.loads(paths.manifest.read_text())
    assert set(manifest["variants"]) == set(paths.drafts)
    readme = paths.readme.read_text()
    for name in paths.drafts:
        assert f"`{name}/`" in readme


def test_target_is_hf_llama(demo_dir: Path) -> None:
    cfg = config(demo_dir / "target")
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (64, 10, V)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]) == (4, 2, 128)
    assert cfg["head_dim"] >= 32  # vLLM's CPU attention serves head sizes 32, 64, 80, ...; 16 stops it at the first batch
    ckpt = Checkpoint.open(demo_dir / "target")
    assert ckpt.layout == "hf" and ckpt.spec.num_hidden_layers == 10


def test_speculators_config_as_facts_say(demo_dir: Path) -> None:
    cfg = config(demo_dir / "speculators")
    assert cfg["speculators_model_type"] == "eagle3"
    assert cfg["architectures"] == ["Eagle3Speculator"]
    assert cfg["draft_vocab_size"] == N and cfg["target_hidden_size"] == 64
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 5, 7]  # [2, L//2, L-3], input-of-layer
    for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        assert cfg[flag] is False
    sc = cfg["speculators_config"]
    assert sc["proposal_methods"][0]["proposal_type"] == "greedy"
    assert sc["verifier"]["name_or_path"] and sc["verifier"]["architectures"] == ["LlamaForCausalLM"]
    layer = cfg["transformer_layer_config"]
    assert layer["model_type"] == "llama" and layer["num_hidden_layers"] == 1 and layer["vocab_size"] == V
    assert set(tensors(demo_dir / "speculators")) == DRAFT_KEYS


def test_eagle_config_as_facts_say(demo_dir: Path) -> None:
    cfg = config(demo_dir / "eagle")
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 1 and cfg["vocab_size"] == V
    assert cfg["draft_vocab_size"] == N and cfg["tie_word_embeddings"] is False
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 4, 6], "use_aux_hidden_state": True}
    assert "eagle_aux_hidden_state_layer_ids" not in cfg
    names = set(tensors(demo_dir / "eagle"))
    expected = {k.replace("layers.0.", "midlayer.") for k in DRAFT_KEYS} - {"embed_tokens.weight"}
    assert names == expected  # SpecForge does not save embeddings


@pytest.mark.parametrize("variant, layout, prefix, source, ids, has_d2t", [
    ("speculators", "speculators", "layers.0.", "top-level", (2, 5, 7), True),
    ("eagle", "eagle", "midlayer.", "eagle_config", (1, 4, 6), True),
    ("broken-d2t-double-subtracted", "speculators", "layers.0.", "top-level", (2, 5, 7), True),
    ("broken-d2t-absolute", "speculators", "layers.0.", "top-level", (2, 5, 7), True),
    ("broken-d2t-missing", "speculators", "layers.0.", "top-level", (2, 5, 7), False),
    ("broken-untrained", "speculators", "layers.0.", "top-level", (2, 5, 7), True),
    ("broken-lm-head-nan", "speculators", "layers.0.", "top-level", (2, 5, 7), True),
])
def test_checkpoint_spec_of_each_variant(demo_dir: Path, variant, layout, prefix, source, ids, has_d2t) -> None:
    ckpt = Checkpoint.open(demo_dir / variant)
    spec = ckpt.spec
    assert ckpt.layout == layout
    assert spec.decoder_prefix == prefix and spec.num_decoder_layers == 1
    assert spec.aux_ids_source == source and spec.aux_layer_ids == ids
    assert (spec.draft_vocab_size, spec.vocab_size, spec.num_aux) == (N, V, 3)
    assert (spec.hidden_size, spec.target_hidden_size, spec.fc_in_features) == (64, 64, 192)
    assert spec.has_d2t is has_d2t and spec.has_t2d is has_d2t
    assert spec.has_embed_tokens is (variant != "eagle")
    assert not spec.has_input_norm and not spec.has_fc_norm
    assert spec.dtypes == (("BOOL", "F32", "I64") if has_d2t else ("F32",))


def test_draft_vocab_built_like_training_libraries(demo_dir: Path) -> None:
    t = tensors(demo_dir / "speculators")
    d2t, t2d = t["d2t"], t["t2d"]
    assert d2t.dtype == torch.int64 and d2t.shape == (N,) and t2d.dtype == torch.bool and t2d.shape == (V,)
    ids = torch.arange(N) + d2t
    assert torch.all(ids[1:] > ids[:-1])  # ascending target ids
    assert torch.equal(t2d.nonzero().flatten(), ids)
    counts = torch.tensor(json.loads((demo_dir / "token_counts.json").read_text())["counts"])
    assert counts.shape == (V,)
    assert counts[t2d].min() >= counts[~t2d].max()  # the N most frequent target tokens
    zero_head = int((d2t != 0).nonzero()[0])
    assert zero_head >= 16 and torch.all(d2t[:zero_head] == 0)  # the normal run of zeros at the head
    assert zero_head == json.loads((demo_dir / "manifest.json").read_text())["d2t_zero_head"]
    assert d2t.max() > 0


def test_embeddings_and_head_copied_from_target(demo_dir: Path) -> None:
    target, draft = tensors(demo_dir / "target"), tensors(demo_dir / "speculators")
    assert torch.equal(draft["embed_tokens.weight"], target["model.embed_tokens.weight"])
    assert torch.equal(draft["lm_head.weight"], target["lm_head.weight"][draft["t2d"]])
    assert torch.equal(tensors(demo_dir / "eagle")["lm_head.weight"], draft["lm_head.weight"])


def test_broken_variants_differ_exactly_where_intended(demo_dir: Path) -> None:
    good = tensors(demo_dir / "speculators")
    good_cfg = config(demo_dir / "speculators")
    arange = torch.arange(N)

    def changed(variant: str) -> set[str]:
        assert config(demo_dir / variant) == good_cfg
        other = tensors(demo_dir / variant)
        assert set(other) <= set(good)
        return {k for k in other if not torch.equal(other[k], good[k])} | (set(good) - set(other))

    assert changed("broken-d2t-double-subtracted") == {"d2t"}
    assert torch.equal(tensors(demo_dir / "broken-d2t-double-subtracted")["d2t"], good["d2t"] - arange)
    assert changed("broken-d2t-absolute") == {"d2t"}
    assert torch.equal(tensors(demo_dir / "broken-d2t-absolute")["d2t"], good["d2t"] + arange)
    assert changed("broken-d2t-missing") == {"d2t", "t2d"}
    assert set(tensors(demo_dir / "broken-d2t-missing")) == DRAFT_KEYS - {"d2t", "t2d"}
    assert changed("broken-lm-head-nan") == {"lm_head.weight"}
    assert torch.isnan(tensors(demo_dir / "broken-lm-head-nan")["lm_head.weight"]).all()

    assert changed("broken-untrained") == TRAINED
    init = tensors(demo_dir / "broken-untrained")
    for name in TRAINED:
        w = init[name]
        if w.dim() == 1:
            assert torch.all(w == 1.0), name  # RMSNorm init
        else:
            assert abs(w.mean().item()) < 0.005 and abs(w.std().item() - 0.02) < 0.003, name  # normal(0, 0.02)
    for name in TRAINED:  # and training genuinely moved every trained tensor
        assert (good[name] - init[name]).abs().max() > 1e-3, name


def _fresh_data(demo_dir: Path, n: int = 24):
    """New sequences sampled from the target (a seed the build never used), its aux states and greedy tokens."""
    from transformers import LlamaForCausalLM

    target = LlamaForCausalLM.from_pretrained(demo_dir / "target").eval()
    gen = torch.Generator().manual_seed(1234)
    prompts = torch.randint(0, 64, (n, 16), generator=gen)
    torch.manual_seed(1234)
    with torch.no_grad():
        seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=0.1,
                               top_k=0, max_new_tokens=32, min_new_tokens=32, pad_token_id=0)
        out = target(input_ids=seqs, output_hidden_states=True)
    aux = torch.cat([out.hidden_states[k] for k in (2, 5, 7)], dim=-1)
    return seqs[:, 1:], aux[:, :-1], out.logits[:, 1:].argmax(-1)


@pytest.mark.slow
def test_trained_draft_predicts_target_far_above_chance(demo_dir: Path) -> None:
    manifest = json.loads((demo_dir / "manifest.json").read_text())["training"]
    assert manifest["accuracy"] > 5 * manifest["majority_baseline"] and manifest["accuracy"] > 0.15

    ids, aux, target_next = _fresh_data(demo_dir)

    def accuracy(variant: str, feature: torch.Tensor) -> float:
        draft = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / variant))
        with torch.no_grad():
            proposed = map_to_target(draft(ids, feature).logits.argmax(-1), draft.d2t)
        return (proposed == target_next).float().mean().item()

    good = accuracy("speculators", aux)
    majority = (target_next == target_next.flatten().mode().values).float().mean().item()
    # the 4-heads-of-32 (vLLM-servable) demo on fresh data: 0.150 against a majority baseline of 0.090
    assert good > 0.14 and good > 1.5 * majority
    assert accuracy("broken-untrained", aux) < good / 3
    assert accuracy("speculators", torch.zeros_like(aux)) < good / 3  # the aux states carry the signal


def test_logs_show_zero_acceptance_in_engine_formats(demo_dir: Path) -> None:
    sglang = (demo_dir / "sglang.log").read_text().splitlines()
    decode = [line for line in sglang if "Decode batch, #running-req:" in line]
    assert decode and len(decode) < len(sglang)  # plus non-decode lines
    for line in decode:
        assert "accept len: 1.00, accept rate: 0.00" in line
        tput = float(line.split("gen throughput (token/s): ")[1].split(",")[0])
        assert 24.0 < tput < 25.5
    vllm = (demo_dir / "vllm.log").read_text().splitlines()
    spec = [line for line in vllm if "SpecDecoding metrics: " in line]
    assert spec and len(spec) < len(vllm)
    for line in spec:
        assert "Mean acceptance length: 1.00" in line and "Accepted: 0 tokens" in line
        assert "Per-position acceptance rate: 0.000, 0.000, 0.000, 0.000, 0.000" in line
        assert line.endswith("Avg Draft acceptance rate: 0.0%")


def _all_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_cli_rebuild_is_byte_identical(demo_dir: Path, tmp_path: Path, capsys) -> None:
    again = tmp_path / "again"
    assert cli.main(["demo", str(again)]) == 0
    out = capsys.readouterr().out
    assert "speculators/" in out and "eagle3lens doctor" in out
    first, second = _all_files(demo_dir), _all_files(again)
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_existing_demo_is_reused_and_foreign_dirs_refused(demo_dir: Path, tmp_path: Path, capsys) -> None:
    stamp = (demo_dir / "manifest.json").stat().st_mtime_ns
    assert build_demo(demo_dir).root == demo_dir
    assert (demo_dir / "manifest.json").stat().st_mtime_ns == stamp
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(UsageError):
        build_demo(foreign, force=True)
    assert cli.main(["demo", str(foreign)]) == 2
    assert "not an eagle3lens demo" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "keep me"
    # a folder that merely has a manifest.json of its own is not a demo either: never replaced, even with --force
    (foreign / "manifest.json").write_text('{"name": "my webapp"}')
    assert cli.main(["demo", str(foreign), "--force"]) == 2
    assert (foreign / "notes.txt").read_text() == "keep me"


# -- the Kimi-like pair ---------------------------------------------------------------------------
KIMI_MLA_KEYS = {"embed_tokens.weight", "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} | {
    f"layers.0.{name}.weight" for name in (
        "self_attn.q_a_proj", "self_attn.q_a_layernorm", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
        "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
        "mlp.down_proj", "input_layernorm", "hidden_norm", "post_attention_layernorm")}


def test_kimi_target_is_a_tiny_deepseek_v3_with_mla_and_moe(demo_dir: Path) -> None:
    cfg = config(demo_dir / "kimi-target")
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]) == (64, 8, V)
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
            cfg["v_head_dim"]) == (32, 16, 16, 8, 16)
    assert cfg["first_k_dense_replace"] == 1 and cfg["n_routed_experts"] == 4
    names = set(tensors(demo_dir / "kimi-target"))
    assert "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" in names and "model.layers.0.mlp.gate_proj.weight" in names
    assert any(n.startswith("model.layers.1.mlp.experts.") for n in names) and "model.layers.1.mlp.gate.weight" in names
    # vLLM's DeepSeek-V3 MoE has an e_score_correction_bias parameter only under topk_method "noaux_tc": the config
    # states it exactly where the checkpoint saves the bias (every MoE layer), or vLLM's loader stops on the key
    biases = {n for n in names if n.endswith(".mlp.gate.e_score_correction_bias")}
    moe = {f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in range(1, cfg["num_hidden_layers"])}
    assert biases == moe and cfg["topk_method"] == "noaux_tc" and cfg["scoring_func"] == "sigmoid"
    ckpt = Checkpoint.open(demo_dir / "kimi-target")
    assert ckpt.layout == "hf" and not ckpt.spec.is_draft


def test_kimi_mla_draft_is_sglang_loadable_and_copies_the_targets_tables(demo_dir: Path) -> None:
    cfg = config(demo_dir / "kimi-mla")
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert cfg["draft_vocab_size"] == N and cfg["vocab_size"] == V and cfg["tie_word_embeddings"] is False
    assert cfg["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}
    assert all(cfg[k] == config(demo_dir / "kimi-target")[k] for k in
               ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    draft, target = tensors(demo_dir / "kimi-mla"), tensors(demo_dir / "kimi-target")
    assert set(draft) == KIMI_MLA_KEYS
    assert draft["layers.0.self_attn.q_a_proj.weight"].shape == (32, 128)  # reads [embedding ; feature] = 2H
    assert draft["layers.0.self_attn.kv_a_proj_with_mqa.weight"].shape == (16 + 8, 128)
    assert draft["fc.weight"].shape == (64, 192)
    assert torch.equal(draft["embed_tokens.weight"], target["model.embed_tokens.weight"])
    assert torch.equal(draft["lm_head.weight"], target["lm_head.weight"][draft["t2d"]])
    assert not torch.equal(draft["embed_tokens.weight"], tensors(demo_dir / "target")["model.embed_tokens.weight"])
    spec = Checkpoint.open(demo_dir / "kimi-mla").spec
    assert (spec.flavour, spec.decoder_prefix, spec.aux_layer_ids, spec.num_aux) == ("sglang", "layers.0.", (1, 3, 4), 3)
    manifest = json.loads((demo_dir / "manifest.json").read_text())
    assert set(manifest["kimi"]["variants"]) == {"kimi-mla"} and manifest["kimi"]["aux_layer_ids"]["hf_hidden_states"] == [2, 4, 5]
    assert "`kimi-mla/`" in (demo_dir / "README.md").read_text()


def test_demo_readme_says_what_each_engine_finds_even_when_it_is_nothing(demo_dir: Path) -> None:
    """The kimi-mla row read "with `--engine sglang==0.5.23`: ;"."""
    readme = (demo_dir / "README.md").read_text()
    assert not re.search(r"with `--engine [^`]+`: *[;|]", readme), re.findall(r"with `--engine [^`]+`: *[;|]", readme)
    assert "with `--engine sglang==0.5.23`: nothing (it loads);" in readme


@pytest.mark.slow
def test_kimi_mla_draft_was_trained_on_the_targets_aux_states(demo_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    training = json.loads((demo_dir / "manifest.json").read_text())["kimi"]["training"]
    assert training["accuracy"] > 2.5 * training["majority_baseline"]
    target = AutoModelForCausalLM.from_pretrained(demo_dir / "kimi-target").eval()
    draft = Eagle3Draft.from_checkpoint(Checkpoint.open(demo_dir / "kimi-mla"))
    assert draft.cfg.mla is not None and draft.cfg.mla.kv_lora_rank == 16
    torch.manual_seed(0)
    at_init = Eagle3Draft(draft.cfg).eval()  # the same tables and d2t, fc + decoder + norm never trained
    at_init.load_state_dict({k: v for k, v in draft.state_dict().items()
                             if k in ("embed_tokens.weight", "lm_head.weight", "d2t", "t2d")}, strict=False)
    ids = torch.randint(0, 64, (24, 48), generator=torch.Generator().manual_seed(99))  # low ids, as the demo's prompts
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[k] for k in (2, 4, 5)], dim=-1)[:, :-1]
        want = out.logits[:, 1:].argmax(-1)

        def agreement(model: Eagle3Draft, feature: torch.Tensor) -> float:
            got = map_to_target(model(ids[:, 1:], feature).logits.argmax(-1), model.d2t)
            return (got == want).float().mean().item()

        trained = agreement(draft, aux)
        majority = (want == want.flatten().mode().values).float().mean().item()
        assert trained > 2.5 * majority and trained > 10 * agreement(at_init, aux)
        assert trained > agreement(draft, torch.zeros_like(aux))  # the aux states carry part of the signal


def test_kimi_manifest_tells_the_truth_without_an_engine(demo_dir: Path) -> None:
    """The MLA drafter's own expected findings (none) are what the doctor finds; the by-engine ones need the MLA
    engine profiles (issue 14) and are checked where those live."""
    from eagle3lens.doctor import diagnose

    for name, variant in json.loads((demo_dir / "manifest.json").read_text())["kimi"]["variants"].items():
        found = {f.code for f in diagnose(demo_dir / name).findings if f.severity.value != "info"}
        assert found == set(variant["expected_findings"]), (name, found)

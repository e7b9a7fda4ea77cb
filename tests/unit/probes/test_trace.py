"""The forward-hook tracer and the meta-device full-size traces."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from eagle3lens.probes.trace import TensorMeta, Tracer


def tiny_llama(layers: int = 3, hidden: int = 32) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=2 * hidden, vocab_size=97, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_records_shapes_of_selected_layers_without_keeping_tensors():
    model = tiny_llama()
    ids = torch.randint(0, 97, (2, 5))
    with Tracer(model, include=["model.layers.*", "lm_head"]) as tracer:
        model(input_ids=ids)
    paths = [r.path for r in tracer.records]
    assert paths == ["model.layers.0", "model.layers.1", "model.layers.2", "lm_head"]
    layer = tracer.records[0]
    assert layer.first_input == TensorMeta((2, 5, 32), "float32", "cpu")
    assert layer.first_output.shape == (2, 5, 32)
    assert "position_embeddings" in layer.kwargs  # (cos, sin) tuple recorded as nested metas
    assert isinstance(layer.kwargs["position_embeddings"], tuple)
    assert tracer.records[-1].first_output.shape == (2, 5, 97)
    assert all(not r.tensors and not r.stats_raw for r in tracer.records)
    assert hook_count(model) == 0
    assert tracer.table()[3]["output"] == "f32[2, 5, 97]@cpu"


def test_include_by_type_and_regex_and_call_index():
    model = tiny_llama(layers=2)
    with Tracer(model, include=[nn.Embedding, "re:model\\.layers\\.\\d+\\.mlp"]) as tracer:
        model(input_ids=torch.tensor([[1, 2, 3]]))
        model(input_ids=torch.tensor([[4, 5]]))
    embeds = tracer.find("model.embed_tokens")
    assert [r.call for r in embeds] == [0, 1]
    assert embeds[1].first_output.shape == (1, 2, 32)
    assert {r.path for r in tracer.records} == {"model.embed_tokens", "model.layers.0.mlp", "model.layers.1.mlp"}


def test_keep_and_stats_give_the_real_values():
    model = tiny_llama(layers=1)
    ids = torch.tensor([[3, 1, 4, 1]])
    with Tracer(model, include="model.norm", keep=True, stats=True) as tracer:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
    rec = tracer.records[0]
    assert torch.equal(rec.tensors["output"], out.hidden_states[-1])
    stats = rec.stats()
    assert stats["norm"] == pytest.approx(float(out.hidden_states[-1].norm()), rel=1e-5)
    assert stats["mean"] == pytest.approx(float(out.hidden_states[-1].mean()), rel=1e-4, abs=1e-6)


class Boom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inner(x)
        raise RuntimeError("boom")


def test_hooks_removed_when_the_forward_raises():
    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with pytest.raises(RuntimeError, match="boom"):
        with Tracer(model) as tracer:
            model(torch.zeros(1, 4))
    assert hook_count(model) == 0 and not tracer.active
    by_path = {r.path: r for r in tracer.records}
    assert by_path["1.inner"].raised is False and by_path["1.inner"].first_output.shape == (1, 4)
    assert by_path["1"].raised and by_path[""].raised  # the calls that never returned
    model[0](torch.zeros(1, 4))  # no hook left to record anything
    assert len(tracer.records) == len(by_path)


def test_accelerate_dispatch_over_cpu_and_disk_offload(tmp_path):
    from accelerate import dispatch_model, infer_auto_device_map

    model = tiny_llama(layers=4, hidden=64)
    ids = torch.randint(0, 97, (1, 6))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    layer_bytes = sum(p.numel() * 4 for p in model.model.layers[0].parameters())
    device_map = infer_auto_device_map(model, max_memory={"cpu": 3 * layer_bytes, "disk": 1 << 30},
                                       no_split_module_classes=["LlamaDecoderLayer"])
    assert "disk" in set(device_map.values()) and "cpu" in set(device_map.values())
    model = dispatch_model(model, device_map=device_map, offload_dir=str(tmp_path / "offload"))
    assert any(p.device.type == "meta" for p in model.parameters())  # offloaded weights are meta until used
    with Tracer(model, include="model.layers.*", stats=True) as tracer, torch.no_grad():
        logits = model(input_ids=ids).logits
    torch.testing.assert_close(logits, expected)
    assert [r.path for r in tracer.records] == [f"model.layers.{i}" for i in range(4)]
    assert all(r.first_output == TensorMeta((1, 6, 64), "float32", "cpu") for r in tracer.records)
    assert all(r.stats()["norm"] > 0 for r in tracer.records)
    assert hook_count(model) == 0


def test_meta_model_traces_shapes_only():
    config = LlamaConfig(hidden_size=1024, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                         intermediate_size=4096, vocab_size=50000)
    with torch.device("meta"):
        model = LlamaForCausalLM(config).eval()
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool, device="meta").tril()
    with Tracer(model, include=["model.layers.*", "lm_head"], stats=True) as tracer:
        model(input_ids=torch.zeros(1, 4, dtype=torch.long, device="meta"), attention_mask=mask, use_cache=False)
    assert tracer.records[-1].first_output == TensorMeta((1, 4, 50000), "float32", "meta")
    assert all(not r.stats_raw for r in tracer.records)  # no statistics of meta tensors


def _profile(name: str):
    from eagle3lens.engines import resolve

    return resolve(name)


def test_meta_full_size_kimi_widths_flow_into_fc():
    from eagle3lens.probes.meta_trace import trace_full_size

    result = trace_full_size("kimi-k2.5", engine=_profile("vllm==0.33.0"))
    assert result.layers_used == (2, 30, 58) and result.num_target_layers == 61
    assert result.feature.shape[-1] == 21504 == result.fc_in_features
    assert result.fc_ran and result.decoder_input.shape[-1] == 2 * 7168
    assert result.findings == ()
    broken = trace_full_size("kimi-k2.5", engine=_profile("sglang==0.5.11"), scenario="aux-off")
    assert broken.feature.shape[-1] == 7168 and not broken.fc_ran
    assert "trace/fc-bypassed" in {f.code for f in broken.findings}


def test_meta_unknown_preset_is_a_usage_error():
    from eagle3lens.errors import UsageError
    from eagle3lens.probes.meta_trace import trace_full_size

    with pytest.raises(UsageError, match="unknown preset"):
        trace_full_size("gpt-9")


def test_cli_choice_names_match_the_probes_and_cli_start_does_not_import_torch() -> None:
    import subprocess
    import sys

    from eagle3lens.commands import trace as trace_command
    from eagle3lens.probes.meta_trace import PRESETS
    from eagle3lens.probes.wiring import SCENARIOS

    assert set(trace_command.SCENARIO_NAMES) == set(SCENARIOS)
    assert set(trace_command.PRESET_NAMES) == set(PRESETS)
    code = "import sys; from eagle3lens.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_meta_reduced_layers_use_the_default_aux_ids_for_that_depth():
    from eagle3lens.probes.meta_trace import trace_full_size

    result = trace_full_size("kimi-k2.5", engine=_profile("vllm==0.33.0"), num_layers=8)
    assert result.num_target_layers == 8 and result.layers_used == (2, 4, 5) == result.resolution.trained_with
    assert result.findings == () and result.feature.shape[-1] == 21504 == result.fc_in_features


def test_cli_preset_note_names_the_architecture(capsys):
    from eagle3lens.cli import main

    notes = {}
    for arch in ("llama", "native"):
        assert main(["trace", "--preset", "kimi-k2.5", "--device", "meta", "--arch", arch, "--json"]) == 0
        notes[arch] = " ".join(json.loads(capsys.readouterr().out)["notes"])
    assert "Llama-architecture stand-in" in notes["llama"] and "DeepSeek-V3" in notes["llama"]
    assert "stand-in" not in notes["native"] and "native DeepSeek-V3" in notes["native"]


class ValueRoutedLayer(nn.Module):
    """A toy MoE layer that picks its expert from the values: impossible on meta tensors."""

    def __init__(self, hidden: int, how: str) -> None:
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(2))
        self.how = how

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.how == "item":
            return self.experts[int(h.mean() > 0)](h)
        rows = (h.sum(-1) > 0).nonzero()
        return h.index_put((rows[:, 0], rows[:, 1]), self.experts[0](h[rows[:, 0], rows[:, 1]]))


class ToyMoE(nn.Module):
    def __init__(self, hidden: int, layers: int, vocab: int, how: str) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, hidden)
        self.model.layers = nn.ModuleList(ValueRoutedLayer(hidden, how) for _ in range(layers))
        self.model.norm = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def forward(self, input_ids: torch.Tensor, **kwargs):
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            h = layer(h)
        return SimpleNamespace(logits=self.lm_head(self.model.norm(h)))


@pytest.mark.parametrize("how", ["item", "nonzero"])
def test_meta_trace_of_a_value_routed_model_names_the_fallback(how):
    from eagle3lens.draft import DraftConfig, Eagle3Draft
    from eagle3lens.errors import MetaTraceUnsupported
    from eagle3lens.probes.aux_layers import resolve_aux_layers
    from eagle3lens.probes.meta_trace import Preset, draft_spec, wire_on_meta

    assert ToyMoE(16, 8, 50, how)(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 50)  # fine with values
    toy = Preset("toy", hidden=16, layers=8, heads=2, kv_heads=1, intermediate=32, vocab=50, draft_vocab=20,
                 aux_ids=(2, 4, 5))
    profile = _profile("vllm==0.33.0")
    spec = draft_spec(toy)
    with torch.device("meta"):
        target = ToyMoE(16, 8, 50, how).eval()
        draft = Eagle3Draft(DraftConfig.from_spec(spec)).eval()
    with pytest.raises(MetaTraceUnsupported) as caught:
        wire_on_meta(target, draft, resolve_aux_layers(spec, 8, profile), profile, "toy (native)",
                     "trace the Llama stand-in instead")
    message = str(caught.value)
    assert message.startswith("toy (native): the forward cannot run on meta tensors")
    assert message.endswith("Fallback: trace the Llama stand-in instead") and len(message.splitlines()) == 1
    assert hook_count(target) == 0 and hook_count(draft) == 0


def test_findings_name_the_raising_module_and_outputs_that_change_dtype():
    model = nn.Sequential(nn.Linear(4, 4), Boom())
    with pytest.raises(RuntimeError, match="boom"):
        with Tracer(model) as tracer:
            model(torch.zeros(1, 4))
    [raised] = tracer.findings
    assert raised.code == "trace/module-raised" and "inside 1 (call 0)" in raised.title
    assert sorted(raised.evidence["raised"]) == ["1#0", "<root>#0"]  # 1.inner returned before the raise

    layer = nn.Linear(4, 4)
    with Tracer(layer) as clean:
        layer(torch.zeros(1, 4))
        layer(torch.zeros(2, 4))
    assert clean.findings == ()
    with Tracer(layer) as tracer:
        layer(torch.zeros(1, 4))
        layer.double()(torch.zeros(1, 4, dtype=torch.float64))
    [varies] = tracer.findings
    assert varies.code == "trace/output-varies" and varies.evidence == {"outputs": {"<root>": ["float32@cpu",
                                                                                               "float64@cpu"]}}


def test_trace_forward_runs_one_seeded_forward_under_the_tracer():
    from eagle3lens.probes.trace import trace_forward

    model = tiny_llama()
    tracer = trace_forward(model, include="model.layers.*", seq_len=6)
    assert [r.path for r in tracer.records] == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert tracer.records[0].first_input == TensorMeta((1, 6, 32), "float32", "cpu")
    assert hook_count(model) == 0 and not tracer.active


# -- config-only targets (a model not downloaded) on the meta device ------------------------------

def _config_only_llama(path: Path) -> Path:
    from _builders import llama_fields

    path.mkdir()
    (path / "config.json").write_text(json.dumps({**llama_fields(10), "architectures": ["LlamaForCausalLM"]}))
    return path


def _config_only_deepseek_v3(path: Path) -> Path:
    from _builders import HEADS, INTER, V, H
    from transformers import DeepseekV3Config

    DeepseekV3Config(vocab_size=V, hidden_size=H, intermediate_size=INTER, moe_intermediate_size=8,
                     num_hidden_layers=10, num_attention_heads=HEADS, num_key_value_heads=HEADS, n_routed_experts=4,
                     num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, kv_lora_rank=8,
                     q_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4, max_position_embeddings=64,
                     architectures=["DeepseekV3ForCausalLM"]).save_pretrained(path)
    assert sorted(p.name for p in path.iterdir()) == ["config.json"]
    return path


@pytest.mark.parametrize("build, decoder_class", [(_config_only_llama, "LlamaDecoderLayer"),
                                                   (_config_only_deepseek_v3, "DeepseekV3DecoderLayer")])
def test_config_only_target_traces_on_meta(build, decoder_class, tmp_path, capsys):
    from _builders import speculators_draft

    from eagle3lens.cli import main
    from eagle3lens.probes.wiring import load_target

    target = build(tmp_path / "target")
    draft = speculators_draft(tmp_path / "draft")
    assert type(load_target(target, device="meta").model.layers[1]).__name__ == decoder_class
    code = main(["trace", "--target", str(target), "--draft", str(draft), "--engine", "sglang==0.5.11",
                 "--device", "meta", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    wiring = json.loads(captured.out)["results"]["wiring"]
    assert wiring["num_target_layers"] == 10 and wiring["layers_used"] == [2, 5, 7]
    assert wiring["feature"]["shape"] == [1, 16, 48] and wiring["feature"]["device"] == "meta"
    assert wiring["fc_ran"] and captured.err == ""
    # the doctor's wiring pass takes the same target: traced on meta, with a note saying so
    from eagle3lens.doctor import diagnose

    report = diagnose(draft, engine="sglang==0.5.11", target=target, weights=False, scenario="aux-off")
    assert "wiring" in report.results["doctor"].ran
    assert "trace/fc-bypassed" in [c.finding.code for c in report.results["doctor"].causes]
    assert any("holds only config.json" in note for note in report.notes)


def test_config_only_target_needs_meta(tmp_path):
    from _builders import speculators_draft

    from eagle3lens.errors import CheckpointError
    from eagle3lens.probes.wiring import check_wiring

    target = _config_only_llama(tmp_path / "target")
    with pytest.raises(CheckpointError, match="holds only config.json, no weights: add --device meta"):
        check_wiring(speculators_draft(tmp_path / "draft"), target=target, engine="sglang==0.5.11", device="cpu")


def _trace_meta(target: Path, draft: Path, capsys) -> tuple[int, str]:
    from eagle3lens.cli import main

    code = main(["trace", "--target", str(target), "--draft", str(draft), "--engine", "sglang==0.5.11",
                 "--device", "meta", "--json"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("nesting", ["text_config in text_config", "text_config on llama", "kimi text_config twice"])
def test_meta_trace_of_a_text_config_transformers_cannot_build_is_one_line(nesting, tmp_path, capsys):
    """A text config nested where the model type has none (or twice) is raw JSON to transformers: one line
    naming the target, not an internal error."""
    from _builders import kimi_target_config, llama_fields, speculators_draft

    target = tmp_path / "target"
    llama = {**llama_fields(10), "architectures": ["LlamaForCausalLM"]}
    if nesting == "kimi text_config twice":
        kimi_target_config(target)
        config = json.loads((target / "config.json").read_text())
        config["text_config"]["text_config"] = dict(config["text_config"])
    else:
        target.mkdir()
        config = {**llama, "text_config": {"text_config": llama} if nesting.startswith("text_config in") else llama}
    (target / "config.json").write_text(json.dumps(config))
    code, err = _trace_meta(target, speculators_draft(tmp_path / "draft"), capsys)
    assert code == 2 and err.count("\n") == 1 and "internal error" not in err, err
    assert err.startswith(f"eagle3lens: error: {target}: not an HF target model") and "no text sub-config" in err


@pytest.mark.slow
@pytest.mark.parametrize("architectures", [["LlamaForCausalLM"], ["BertModel"], ["PreTrainedModel"],
                                           ["Qwen2VLForConditionalGeneration"], ["A" * 300] * 1000,
                                           [1, None, ["x"], {"a": 1}], [[["KimiK25ForConditionalGeneration"]]]])
def test_meta_trace_of_a_kimi_config_with_hostile_architectures(architectures, tmp_path, capsys):
    """Classes made for other model types fall back to the text config (as the remote-code wrapper does);
    entries that are no class names are one line naming the target's config.json."""
    from _builders import kimi_target_config, sparse_eagle3_draft

    target = kimi_target_config(tmp_path / "target")
    config = json.loads((target / "config.json").read_text())
    config["architectures"] = architectures
    (target / "config.json").write_text(json.dumps(config))
    code, err = _trace_meta(target, sparse_eagle3_draft(tmp_path / "draft"), capsys)
    assert "internal error" not in err, err
    if all(isinstance(a, str) for a in architectures):
        assert code in (0, 1), err
    else:
        assert code == 2 and err.count("\n") == 1
        assert err.startswith(f"eagle3lens: error: {target / 'config.json'}: architectures must be a list of class")


def test_a_bad_target_config_is_named_by_its_full_path(tmp_path, capsys):
    """Draft and target both have a config.json: the error says which one."""
    from _builders import speculators_draft

    target = _config_only_llama(tmp_path / "target")
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "num_hidden_layers": -1}))
    code, err = _trace_meta(target, speculators_draft(tmp_path / "draft"), capsys)
    assert code == 2 and err == (f"eagle3lens: error: {target / 'config.json'}: num_hidden_layers must be an integer "
                                 "from 1 to 4096, got -1\n")

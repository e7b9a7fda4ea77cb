"""Aux-layer resolver and the EAGLE-3 wiring check, on the demo incident."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
from _builders import code_set as codes
from torch import nn

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines import resolve
from eagle3lens.plots import figures
from eagle3lens.probes.aux_layers import resolve_aux_layers
from eagle3lens.probes.wiring import check_wiring, find_decoder_layers, load_draft_as


@pytest.fixture(scope="module")
def target(demo_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(demo_dir / "target", dtype=torch.float32).eval()


# -- resolver ---------------------------------------------------------------------------------
def test_resolver_reads_each_engines_source_and_convention(demo_dir):
    eagle = Checkpoint.open(demo_dir / "eagle").spec  # eagle_config [1, 4, 6], SGLang convention
    spec = Checkpoint.open(demo_dir / "speculators").spec  # top-level [2, 5, 7], input-of-layer
    sg = resolve_aux_layers(eagle, 10, resolve("sglang==0.5.11"))
    assert (sg.source, sg.ids_read, sg.captured, sg.trained_with) == ("eagle_config", (1, 4, 6), (2, 5, 7), (2, 5, 7))
    assert sg.findings == () and sg.captured_as_inputs()[0].startswith("input of decoder layer 2")
    vl = resolve_aux_layers(spec, 10, resolve("vllm==0.33.0"))
    assert (vl.source, vl.captured) == ("top-level", (2, 5, 7)) and vl.findings == ()
    ignored = resolve_aux_layers(spec, 10, resolve("sglang==0.5.11"))  # SGLang never reads top-level ids
    assert ignored.source == "default" and ignored.captured == (2, 5, 7)
    [finding] = ignored.findings
    assert finding.code == "config/aux-ids-ignored" and finding.severity.value == "info"  # default matches here
    deeper = resolve_aux_layers(spec, 32, resolve("sglang==0.5.11"))  # same ids, other target: default differs
    assert deeper.captured == (2, 16, 29)
    assert [f.severity.value for f in deeper.findings if f.code == "config/aux-ids-ignored"] == ["critical"]


def test_resolver_flags_shifted_out_of_range_duplicate_and_width(demo_dir):
    spec = Checkpoint.open(demo_dir / "eagle").spec
    # read raw by the V1 runner only (0.1.0 said by vllm==0.33.0; its default V2 runner never reads them)
    vllm = resolve_aux_layers(spec, 10, resolve("vllm==0.33.0:v1"))
    assert vllm.captured == (1, 4, 6) and "config/aux-ids-shifted" in codes(vllm)
    bad = dataclasses.replace(spec, aux_ids_by_source={"eagle_config": (9, 4, 4, 1)}, aux_layer_ids=(9, 4, 4, 1))
    res = resolve_aux_layers(bad, 10, resolve("sglang==0.5.11"))
    assert res.requested == (10, 5, 5, 2) and res.captured == (2, 5)
    assert {"config/aux-ids-out-of-range", "config/aux-ids-duplicate", "config/aux-ids-unsorted",
            "trace/aux-width-mismatch"} <= codes(res)
    width = next(f for f in res.findings if f.code == "trace/aux-width-mismatch")
    assert width.evidence["fc_in_features"] == 192 and width.evidence["captured_hf"] == [2, 5]


def test_resolver_without_target_layer_count(demo_dir):
    spec = Checkpoint.open(demo_dir / "speculators").spec
    res = resolve_aux_layers(spec, None, resolve("sglang==0.5.11"))
    assert res.captured == () and [f.severity.value for f in res.findings] == ["warning"]
    json.dumps(res.to_dict())


# -- wiring -----------------------------------------------------------------------------------
def test_correct_wiring_feeds_three_layers_into_fc(demo_dir, target):
    for layout, engine in (("eagle", "sglang==0.5.11"), ("speculators", "vllm==0.33.0")):
        result = check_wiring(Checkpoint.open(demo_dir / layout), target=target, engine=engine)
        assert result.layers_used == (2, 5, 7)
        assert [m.shape[-1] for _, m in result.captured] == [64, 64, 64]
        assert result.feature.shape[-1] == 192 == result.fc_in_features
        assert result.fc_ran and result.engine_error is None
        assert result.decoder_input.shape[-1] == 128 and result.logits.shape[-1] == 512
        assert not any(f.code.startswith("trace/") for f in result.findings)
        json.dumps(result.to_dict())


def test_captured_features_are_the_target_hidden_states(demo_dir, target):
    ids = torch.randint(0, 2048, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hs = target(input_ids=ids, output_hidden_states=True).hidden_states
    draft = load_draft_as(Checkpoint.open(demo_dir / "speculators"))
    with torch.no_grad():
        expected = draft(ids[:, 1:], torch.cat([hs[2], hs[5], hs[7]], -1)[:, :-1]).logits.argmax(-1)
    result = check_wiring(Checkpoint.open(demo_dir / "speculators"), target=target, engine="vllm==0.33.0", inputs=ids)
    mapped = expected + draft.d2t[expected]
    agreement = float((mapped == target(input_ids=ids).logits[:, 1:].argmax(-1)).float().mean())
    assert result.agreement == pytest.approx(agreement)


def test_aux_off_under_sglang_bypasses_fc_silently(demo_dir, target):
    result = check_wiring(Checkpoint.open(demo_dir / "eagle"), target=target, engine="sglang==0.5.11", scenario="aux-off")
    assert result.feature.shape[-1] == 64 and not result.fc_ran and result.engine_error is None
    assert all(row["path"] != "fc" for row in result.draft_table)
    assert result.decoder_input.shape[-1] == 128  # the decoder ran on the raw target state
    bypass = next(f for f in result.findings if f.code == "trace/fc-bypassed")
    assert bypass.severity.value == "critical" and bypass.evidence["feature_width"] == 64
    fig = figures(result)[0]
    assert "BYPASSED" in json.dumps(fig.to_plotly_json(), default=str)


def test_aux_off_under_vllm_reports_the_loud_failure(demo_dir, target):
    result = check_wiring(Checkpoint.open(demo_dir / "speculators"), target=target, engine="vllm==0.33.0", scenario="aux-off")
    assert result.engine_error and "192" in result.engine_error
    assert "trace/fc-bypassed" not in codes(result)
    finding = next(f for f in result.findings if f.code == "trace/aux-width-mismatch")
    assert "fails loudly" in finding.title and finding.evidence["engine_error"] == result.engine_error


def test_ids_shifted_by_one_is_a_layer_mismatch(demo_dir, target):
    result = check_wiring(Checkpoint.open(demo_dir / "speculators"), target=target, engine="vllm==0.33.0", scenario="ids-shifted")
    assert result.layers_used == (3, 6, 8) and result.fc_ran
    finding = next(f for f in result.findings if f.code == "trace/aux-layers-mismatch")
    assert finding.evidence["trained_with_hf"] == [2, 5, 7]


def test_unknown_scenario_is_a_usage_error(demo_dir, target):
    from eagle3lens.errors import UsageError

    with pytest.raises(UsageError, match="scenario"):
        check_wiring(Checkpoint.open(demo_dir / "eagle"), target=target, engine="sglang==0.5.11", scenario="aux-on")


class Wrapper(nn.Module):
    """A multimodal-style wrapper: the language model sits in a sub-module (as Kimi-K2.5's does)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.config = lm.config
        self.model = nn.Module()
        self.model.language_model = lm.model
        self.lm_head = lm.lm_head

    def get_input_embeddings(self) -> nn.Module:
        return self.model.language_model.embed_tokens

    def forward(self, input_ids: torch.Tensor, **kwargs):
        hidden = self.model.language_model(input_ids=input_ids, **kwargs).last_hidden_state
        return SimpleNamespace(logits=self.lm_head(hidden))


@pytest.mark.slow
def test_decoder_layers_found_inside_a_wrapper(demo_dir, target):
    wrapped = Wrapper(target)
    assert find_decoder_layers(wrapped)[0] == "model.language_model.layers"
    ids = torch.randint(0, 2048, (1, 10), generator=torch.Generator().manual_seed(2))
    plain = check_wiring(Checkpoint.open(demo_dir / "eagle"), target=target, engine="sglang==0.5.11", inputs=ids)
    inner = check_wiring(Checkpoint.open(demo_dir / "eagle"), target=wrapped, engine="sglang==0.5.11", inputs=ids)
    assert inner.decoder_path == "model.language_model.layers" and inner.layers_used == (2, 5, 7)
    assert inner.agreement == plain.agreement and inner.fc_ran


@pytest.mark.slow
def test_cli_trace_exit_codes_and_json(demo_dir, capsys):
    from eagle3lens.cli import main

    args = ["trace", "--target", str(demo_dir / "target"), "--draft", str(demo_dir / "eagle"),
            "--engine", "sglang==0.5.11", "--json"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--scenario", "aux-off"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "trace/fc-bypassed" in {f["code"] for f in data["findings"]}
    assert data["results"]["wiring"]["feature"]["shape"] == [1, 16, 64]
    assert main(["trace", "--draft", str(demo_dir / "eagle")]) == 2


def test_cli_trace_preset_on_meta(capsys):
    from eagle3lens.cli import main

    assert main(["trace", "--preset", "kimi-k2.5", "--device", "meta", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["results"]["wiring"]
    assert data["feature"]["shape"][-1] == 21504 and data["fc_ran"]


# -- offloaded, split and reduced-precision targets --------------------------------------------
@pytest.mark.slow
def test_wiring_on_a_target_offloaded_to_disk_matches_the_plain_target(demo_dir, target, tmp_path):
    from accelerate import dispatch_model
    from transformers import AutoModelForCausalLM

    ids = torch.randint(0, 2048, (1, 10), generator=torch.Generator().manual_seed(3))
    plain = check_wiring(Checkpoint.open(demo_dir / "eagle"), target=target, engine="sglang==0.5.11", inputs=ids)
    model = AutoModelForCausalLM.from_pretrained(demo_dir / "target", dtype=torch.float32).eval()
    # the input embedding (the first parameter) and the deep half on disk: their weights are meta until used
    device_map = {"model.embed_tokens": "disk", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "disk",
                  **{f"model.layers.{i}": "cpu" if i < 5 else "disk" for i in range(10)}}
    model = dispatch_model(model, device_map=device_map, offload_dir=str(tmp_path / "offload"))
    assert next(model.parameters()).device.type == "meta"
    for scenario in (None, "aux-off"):
        offloaded = check_wiring(Checkpoint.open(demo_dir / "eagle"), target=model, engine="sglang==0.5.11", inputs=ids,
                                 scenario=scenario)
        reference = plain if scenario is None else check_wiring(
            Checkpoint.open(demo_dir / "eagle"), target=target, engine="sglang==0.5.11", inputs=ids, scenario=scenario)
        assert [f.to_dict() for f in offloaded.findings] == [f.to_dict() for f in reference.findings]
        assert offloaded.captured == reference.captured and offloaded.feature == reference.feature
        assert offloaded.fc_ran == reference.fc_ran and offloaded.agreement == pytest.approx(reference.agreement)


def test_target_dtype_option_surfaces_a_dtype_mismatch(demo_dir):
    draft = Checkpoint.open(demo_dir / "speculators")
    kept = check_wiring(draft, target=demo_dir / "target", engine="vllm==0.33.0", dtype="auto", device_map="cpu")
    assert kept.feature.dtype == "float32" and "trace/dtype-mismatch" not in codes(kept)  # the demo stores f32
    half = check_wiring(draft, target=demo_dir / "target", engine="vllm==0.33.0", dtype="bfloat16")
    finding = next(f for f in half.findings if f.code == "trace/dtype-mismatch")
    assert finding.evidence == {"feature": "torch.bfloat16", "draft": "torch.float32"}
    assert half.fc_ran and half.feature.shape[-1] == 192


def test_features_on_several_devices_are_reported():
    from eagle3lens.probes.trace import TensorMeta
    from eagle3lens.probes.wiring import device_findings

    one = (("a", TensorMeta((1, 4, 8), "float32", "cuda:0")), ("b", TensorMeta((1, 4, 8), "float32", "cuda:0")))
    assert device_findings(one, torch.device("cuda:0")) == []
    split = one[:1] + (("b", TensorMeta((1, 4, 8), "float32", "cuda:1")),)
    [finding] = device_findings(split, torch.device("cuda:0"))
    assert finding.code == "trace/feature-devices"
    assert finding.evidence == {"feature_devices": {"a": "cuda:0", "b": "cuda:1"}, "draft_device": "cuda:0"}


def test_cli_trace_device_map_and_dtype(demo_dir, capsys):
    from eagle3lens.cli import main

    args = ["trace", "--target", str(demo_dir / "target"), "--draft", str(demo_dir / "eagle"),
            "--engine", "sglang==0.5.11", "--json"]
    assert main(args + ["--device-map", "auto", "--dtype", "bfloat16"]) == 0  # the dtype finding is a warning
    data = json.loads(capsys.readouterr().out)
    assert "trace/dtype-mismatch" in {f["code"] for f in data["findings"]}
    assert data["results"]["wiring"]["captured"][0]["dtype"] == "bfloat16"


# -- wrong directories: one line, exit 2 --------------------------------------------------------
def _cli_error(capsys, *args: str) -> str:
    from eagle3lens.cli import main

    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_cli_draft_or_unrecognized_dir_as_target_is_one_line(demo_dir, capsys, tmp_path):
    err = _cli_error(capsys, "trace", "--target", str(demo_dir / "speculators"), "--draft", str(demo_dir / "eagle"))
    assert f"{demo_dir / 'speculators'}: not an HF target model" in err
    err = _cli_error(capsys, "doctor", str(demo_dir / "speculators"), "--target", str(demo_dir / "eagle"))
    assert f"{demo_dir / 'eagle'}: not an HF target model" in err
    unknown = tmp_path / "unknown"  # weights but a config transformers cannot map to a model class
    unknown.mkdir()
    (unknown / "config.json").write_text("{}")
    (unknown / "model.safetensors").write_bytes((demo_dir / "target" / "model.safetensors").read_bytes())
    err = _cli_error(capsys, "trace", "--target", str(unknown), "--draft", str(demo_dir / "eagle"))
    assert f"{unknown}: not an HF target model: ValueError: Unrecognized model" in err


def test_cli_target_given_as_draft_is_refused(demo_dir, capsys):
    err = _cli_error(capsys, "trace", "--target", str(demo_dir / "target"), "--draft", str(demo_dir / "target"))
    assert err.endswith(f"{demo_dir / 'target'}: not an EAGLE-3 draft (no fc.weight / decoder layer)")


# -- the d2t stage of the flow figure ----------------------------------------------------------
def test_d2t_stage_is_coloured_by_the_drafts_mapping(demo_dir, target):
    from eagle3lens.plots.trace import BAD, OK, WARN, flow_stages
    from eagle3lens.probes.wiring import d2t_state

    ids = torch.randint(0, 2048, (1, 8), generator=torch.Generator().manual_seed(4))
    for variant, state, colour in (("speculators", "valid", OK), ("broken-d2t-missing", "missing", BAD),
                                   ("broken-d2t-double-subtracted", "invalid", BAD)):
        result = check_wiring(Checkpoint.open(demo_dir / variant), target=target, engine="vllm==0.33.0", inputs=ids)
        assert result.logits is not None and result.d2t_state == state == result.to_dict()["d2t_state"]
        assert flow_stages(result)[-1][0] == "d2t"
        d2t_box = figures(result)[0].layout.shapes[-1]
        assert d2t_box.line.color == colour
    assert d2t_state(torch.zeros(512, dtype=torch.long), True, 2048) == "identity"  # stored, all zero, N < V
    assert d2t_state(torch.zeros(2048, dtype=torch.long), False, 2048) == "not-needed"
    assert d2t_state(torch.zeros(512, dtype=torch.long, device="meta"), True, 2048) == "unknown"
    identity = dataclasses.replace(result, d2t_state="identity")
    assert figures(identity)[0].layout.shapes[-1].line.color == WARN


def test_only_the_engines_assert_is_reported_other_errors_propagate(demo_dir, target, monkeypatch):
    """An OOM / device error in the draft forward is not a wiring finding: it reaches the caller."""
    from eagle3lens.draft import Eagle3Draft

    def boom(self, *args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(Eagle3Draft, "project", boom)
    with pytest.raises(RuntimeError, match="out of memory"):
        check_wiring(Checkpoint.open(demo_dir / "speculators"), target=target, engine="vllm==0.33.0")


def test_sglang_wrong_width_is_a_mismatch_not_a_crash(demo_dir, target):
    """Two 64-wide states reach an fc that needs three: SGLang's fc would fail, it is not a silent bypass."""
    from eagle3lens.probes.wiring import wire

    ckpt = Checkpoint.open(demo_dir / "eagle")
    res = resolve_aux_layers(ckpt.spec, 10, resolve("sglang==0.5.11"))
    two = dataclasses.replace(res, captured=(2, 5))
    module = load_draft_as(ckpt, "sglang==0.5.11")
    result = wire(target, module, two, resolve("sglang==0.5.11"))
    mismatch = next(f for f in result.findings if f.code == "trace/aux-width-mismatch")
    assert mismatch.evidence["feature_width"] == 128 and mismatch.evidence["fc_in_features"] == 192
    assert result.engine_error is None and not result.fc_ran and "trace/fc-bypassed" not in codes(result)


# -- the Kimi-like pair: DeepSeek-V3 target, MLA drafter ---------------------------------------
@pytest.mark.slow
def test_trace_runs_the_kimi_mla_pair_on_cpu(demo_dir, capsys):
    from eagle3lens.cli import main

    args = ["trace", "--target", str(demo_dir / "kimi-target"), "--draft", str(demo_dir / "kimi-mla"),
            "--engine", "sglang==0.5.23", "--json"]
    assert main(args) == 0
    wiring = json.loads(capsys.readouterr().out)["results"]["wiring"]
    assert wiring["num_target_layers"] == 8 and wiring["layers_used"] == [2, 4, 5]  # [1, 3, 4] + 1
    assert wiring["feature"]["shape"][-1] == 192 == wiring["fc_in_features"] and wiring["fc_ran"]
    rows = {row["path"]: row for row in wiring["draft_trace"]}
    assert rows["layers.0.self_attn.q_a_proj"]["all_inputs"][0]["shape"][-1] == 128  # MLA reads [embed ; g] = 2H
    assert wiring["decoder_input"]["shape"][-1] == 128 and wiring["logits"]["shape"][-1] == 512
    assert main(args + ["--scenario", "aux-off"]) == 1  # SGLang's gate lets the H-wide final state skip fc
    data = json.loads(capsys.readouterr().out)
    assert "trace/fc-bypassed" in {f["code"] for f in data["findings"]}
    assert not data["results"]["wiring"]["fc_ran"] and data["results"]["wiring"]["decoder_input"]["shape"][-1] == 128


@pytest.mark.slow
def test_kimi_wiring_feeds_the_mla_draft_the_target_hidden_states(demo_dir):
    from transformers import AutoModelForCausalLM

    from eagle3lens.probes.wiring import wire

    target = AutoModelForCausalLM.from_pretrained(demo_dir / "kimi-target", dtype=torch.float32).eval()
    ckpt = Checkpoint.open(demo_dir / "kimi-mla")
    draft = load_draft_as(ckpt)  # every tensor (the trainer's view): the MLA attention included
    assert draft.cfg.mla is not None and draft.decoder_input_path == "layers.0.self_attn.q_a_proj"
    ids = torch.randint(0, 64, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
        hs = out.hidden_states
        expected = draft(ids[:, 1:], torch.cat([hs[2], hs[4], hs[5]], -1)[:, :-1]).logits.argmax(-1)
    profile = resolve("sglang==0.5.23")
    resolution = resolve_aux_layers(ckpt.spec, 8, profile)
    result = wire(target, draft, resolution, profile, inputs=ids)
    mapped = expected + draft.d2t[expected]
    assert result.agreement == pytest.approx(float((mapped == out.logits[:, 1:].argmax(-1)).float().mean()))
    assert result.fc_ran and result.layers_used == (2, 4, 5)


def test_cli_trace_of_an_moe_target_on_meta_is_one_line(demo_dir, capsys):
    from eagle3lens.cli import main

    code = main(["trace", "--target", str(demo_dir / "kimi-target"), "--draft", str(demo_dir / "kimi-mla"),
                 "--engine", "sglang==0.5.23", "--device", "meta"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "cannot run on the meta device" in err and "--device cpu" in err

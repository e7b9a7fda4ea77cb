"""convert: renames + config rewrite, verified, never touching the source; in-place with .orig; refusals."""

from __future__ import annotations

import json
import os

import pytest
import torch
from _builders import draft_tensors, sglang_config, speculators_config, write

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.cli import main
from eagle3lens.convert import convert
from eagle3lens.errors import CheckpointError, ConversionRefused, UsageError
from eagle3lens.plots import rich_view
from eagle3lens.probes.diff import diff
from eagle3lens.probes.keys import simulate_load


def _snapshot(path):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(path.iterdir())}


@pytest.fixture()
def spec_dir(tmp_path):
    d = write(tmp_path / "spec", draft_tensors("layers.0."), speculators_config(), shards=2)
    (d / "tokenizer.json").write_text("{}")
    return d


def test_speculators_to_sglang_0_5_11_round_trip(spec_dir, tmp_path):
    before = _snapshot(spec_dir)
    result = convert(spec_dir, "sglang==0.5.11", tmp_path / "sg")
    assert _snapshot(spec_dir) == before  # source untouched
    out = Checkpoint.open(tmp_path / "sg")
    load = simulate_load(out, "sglang==0.5.11", num_target_layers=10)
    assert load.dropped == () and load.left_at_init == () and load.recognised
    assert not [f for f in load.findings if f.severity.value != "info"]
    assert diff(Checkpoint.open(spec_dir), out).renames_only
    cfg = json.loads((tmp_path / "sg" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 6]
    assert (tmp_path / "sg" / "model.safetensors.index.json").exists() and (tmp_path / "sg" / "tokenizer.json").exists()
    assert len(result.renamed) == 10
    convert(tmp_path / "sg", "speculators", tmp_path / "back")
    back = Checkpoint.open(tmp_path / "back")
    rt = diff(Checkpoint.open(spec_dir), back)
    assert rt.renames_only and rt.renamed == () and len(rt.identical) == len(back.tensors)
    assert back.spec.aux_layer_ids == (2, 5, 7) and back.layout == "speculators"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_in_place_keeps_backup_and_refuses_second(spec_dir):
    original = {k: Checkpoint.open(spec_dir).read(k) for k in Checkpoint.open(spec_dir).tensors}
    result = convert(spec_dir, "sglang==0.5.11", None, in_place=True)
    backup = spec_dir.with_name("spec.orig")
    assert result.backup == str(backup) and backup.is_dir()
    orig = Checkpoint.open(backup)
    assert all(torch.equal(orig.read(k), v) for k, v in original.items())
    assert Checkpoint.open(spec_dir).spec.decoder_prefix == "midlayer."
    with pytest.raises(ConversionRefused, match="backup already exists"):
        convert(spec_dir, "sglang==0.5.12", None, in_place=True)


def test_refuses_unfaithful_and_force(tmp_path):
    cfg = {**speculators_config(), "norm_before_residual": True}
    src = write(tmp_path / "nbr", draft_tensors("layers.0."), cfg)
    with pytest.raises(ConversionRefused, match="norm_before_residual"):
        convert(src, "sglang==0.5.11", tmp_path / "o")
    assert not (tmp_path / "o").exists()
    convert(src, "sglang==0.5.11", tmp_path / "o", force=True)
    assert (tmp_path / "o" / "config.json").exists()
    norm_src = write(tmp_path / "inorm", draft_tensors("layers.0.", extra={"input_norm.weight": torch.ones(48)}),
                     speculators_config(norm_before_fc=True))
    with pytest.raises(ConversionRefused, match="norm_before_fc"):
        convert(norm_src, "sglang==0.5.12", tmp_path / "o2")
    convert(norm_src, "sglang==0.5.23", tmp_path / "o3")
    assert json.loads((tmp_path / "o3" / "config.json").read_text())["norm_before_fc"] is True


def test_existing_out_is_never_overwritten(spec_dir, tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(CheckpointError, match="already exists"):
        convert(spec_dir, "sglang==0.5.11", tmp_path / "taken")


def test_sglang_to_vllm_moves_ids(tmp_path):
    src = write(tmp_path / "sg", draft_tensors("midlayer."), sglang_config(ids=(1, 4, 6)))
    convert(src, "vllm==0.33.0", tmp_path / "v")
    out = Checkpoint.open(tmp_path / "v")
    assert out.config["eagle_aux_hidden_state_layer_ids"] == [2, 5, 7]
    assert not [f for f in simulate_load(out, "vllm==0.33.0", num_target_layers=10).findings if f.severity.value != "info"]


def test_overrides_change_only_those_bytes(spec_dir, tmp_path):
    ckpt = Checkpoint.open(spec_dir)
    new_d2t = ckpt.read("d2t") + 1
    result = convert(spec_dir, None, tmp_path / "fixed", tensor_overrides={"d2t": new_d2t})
    out = Checkpoint.open(tmp_path / "fixed")
    assert result.overridden == ("d2t",) and torch.equal(out.read("d2t"), new_d2t)
    d = diff(ckpt, out)
    assert [c.name for c in d.changed] == ["d2t"] and not d.only_in_a and not d.renamed


def test_cli_convert_and_repair_flag(spec_dir, tmp_path, capsys):
    assert main(["convert", str(spec_dir), "--to", "sglang==0.5.11", str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]["convert"]["verified"]["renames_only"] is True
    assert main(["convert", str(spec_dir), "--to", "sglang==0.5.11", str(tmp_path / "c")]) == 2
    assert main(["convert", str(spec_dir), "--repair-d2t", str(tmp_path / "r")]) == 2  # mapping already valid
    assert "nothing to repair" in capsys.readouterr().err


def test_demo_convert(demo_dir, tmp_path):
    src = demo_dir / "speculators"
    before = _snapshot(src)
    convert(src, "sglang==0.5.11", tmp_path / "sg")
    assert _snapshot(src) == before
    out = Checkpoint.open(tmp_path / "sg")
    assert simulate_load(out, "sglang==0.5.11").dropped == ()
    assert diff(Checkpoint.open(src), out).renames_only
    convert(tmp_path / "sg", "speculators", tmp_path / "back")
    rt = diff(Checkpoint.open(src), Checkpoint.open(tmp_path / "back"))
    assert rt.renames_only and rt.renamed == ()
    fixed = tmp_path / "fixed"
    assert main(["convert", str(demo_dir / "broken-d2t-double-subtracted"), "--repair-d2t", str(fixed)]) in (0, 1)
    repaired = Checkpoint.open(fixed).read("d2t")
    assert torch.equal(repaired, Checkpoint.open(src).read("d2t"))
    assert os.path.isdir(demo_dir / "broken-d2t-double-subtracted")


def test_single_file_source_copies_only_its_config_and_tokenizer(tmp_path):
    models = tmp_path / "models"
    write(models, draft_tensors("layers.0."), speculators_config())
    (models / "model.safetensors").rename(models / "draft.safetensors")
    (models / "tokenizer.json").write_text("{}")
    (models / "generation_config.json").write_text("{}")
    (models / "notes.txt").write_text("unrelated")
    (models / "other-model").mkdir()
    (models / "other-model" / "weights.bin").write_bytes(b"x" * 10)
    convert(models / "draft.safetensors", "sglang==0.5.11", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json", "draft.safetensors", "generation_config.json", "tokenizer.json"]
    assert simulate_load(Checkpoint.open(tmp_path / "out"), "sglang==0.5.11").dropped == ()


def test_in_place_on_a_single_file_is_refused_and_changes_nothing(tmp_path):
    models = write(tmp_path / "models", draft_tensors("layers.0."), speculators_config())
    before = _snapshot(models)
    with pytest.raises(UsageError, match="--in-place needs a checkpoint directory"):
        convert(models / "model.safetensors", "sglang==0.5.11", None, in_place=True)
    assert _snapshot(models) == before and sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    assert main(["convert", str(models / "model.safetensors"), "--to", "sglang==0.5.11", "--in-place"]) == 2


def test_in_place_on_dot(spec_dir, monkeypatch):
    monkeypatch.chdir(spec_dir)
    result = convert(".", "sglang==0.5.11", None, in_place=True)
    assert result.backup == str(spec_dir.resolve().with_name("spec.orig"))
    assert Checkpoint.open(spec_dir).spec.decoder_prefix == "midlayer."
    assert Checkpoint.open(spec_dir.with_name("spec.orig")).spec.decoder_prefix == "layers.0."


def test_cli_in_place_on_dot_reports_the_new_checkpoint(spec_dir, monkeypatch, capsys):
    monkeypatch.chdir(spec_dir)
    assert main(["convert", ".", "--to", "sglang==0.5.11", "--in-place", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["checkpoint"]["spec"]["decoder_prefix"] == "midlayer."
    assert report["results"]["convert"]["backup"] == str(spec_dir.resolve().with_name("spec.orig"))


@pytest.mark.parametrize("where", ["sub", "sub/deeper", "."])
def test_out_inside_or_equal_to_source_is_refused(spec_dir, where, capsys):
    before = _snapshot(spec_dir)
    with pytest.raises(UsageError, match="outside the source"):
        convert(spec_dir, "sglang==0.5.11", spec_dir / where)
    assert _snapshot(spec_dir) == before
    assert main(["convert", str(spec_dir), "--to", "sglang==0.5.11", str(spec_dir / where)]) == 2
    assert "outside the source" in capsys.readouterr().err


def test_force_is_reported_as_a_warning_per_forced_item(tmp_path, capsys):
    cfg = {**speculators_config(), "norm_before_residual": True}
    src = write(tmp_path / "nbr", draft_tensors("layers.0."), cfg)
    result = convert(src, "sglang==0.5.11", tmp_path / "o", force=True)
    forced = [f for f in result.findings if f.code == "convert/forced"]
    assert len(forced) == len(result.forced) == 1 and forced[0].severity.value == "warning"
    assert "norm_before_residual" in forced[0].title
    assert main(["convert", str(src), "--to", "sglang==0.5.11", str(tmp_path / "o2"), "--force",
                 "--fail-on", "warning"]) == 1
    out = capsys.readouterr().out
    assert "convert/forced" in out and "engine loads every tensor" not in out
    # without --force nothing is forced: no such finding, and the terminal says it verified
    assert main(["convert", str(spec_dir_of(tmp_path)), "--to", "sglang==0.5.11", str(tmp_path / "o3")]) == 0
    out = capsys.readouterr().out
    assert "convert/forced" not in out and "engine loads every tensor" in out


def spec_dir_of(tmp_path):
    return write(tmp_path / "plain", draft_tensors("layers.0."), speculators_config())


VLLM_READS = ("speculators_model_type", "transformer_layer_config", "draft_vocab_size", "target_hidden_size",
              "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "eagle_aux_hidden_state_layer_ids")


def _vllm_view(cfg):
    """What vLLM 0.33.0 reads from a speculators config (update_eagle3 defaults included)."""
    view = {k: cfg.get(k) for k in VLLM_READS}
    view["norm_before_residual"] = cfg.get("norm_before_residual", True)
    block = cfg["speculators_config"]
    return view, block["proposal_methods"][0].get("speculative_tokens"), block["verifier"].get("name_or_path")


def test_demo_speculators_sglang_speculators_round_trip_keeps_what_vllm_reads(demo_dir, tmp_path):
    src = demo_dir / "speculators"
    convert(src, "sglang==0.5.11", tmp_path / "sg")
    convert(tmp_path / "sg", "speculators", tmp_path / "back")
    original = json.loads((src / "config.json").read_text())
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert _vllm_view(back) == _vllm_view(original)
    assert back["speculators_config"] == original["speculators_config"]
    load = simulate_load(Checkpoint.open(tmp_path / "back"), "vllm==0.33.0")
    assert load.recognised and load.findings == ()


def test_to_speculators_writes_every_flag_and_marks_a_missing_verifier(tmp_path):
    src = write(tmp_path / "sg", draft_tensors("midlayer."), sglang_config())  # no flags, no verifier
    convert(src, "speculators", tmp_path / "spec")
    cfg = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert {f: cfg[f] for f in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")} == dict.fromkeys(
        ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"), False)
    load = simulate_load(Checkpoint.open(tmp_path / "spec"), "vllm==0.33.0", num_target_layers=10)
    assert not [f for f in load.findings if f.code == "config/flag-ignored"]
    (unrec,) = [f for f in load.findings if f.code == "config/unrecognized"]
    assert unrec.evidence["missing"] == ["speculators_config.verifier.name_or_path"]
    # a speculators source missing flags gets them written explicitly (vLLM would read norm_before_residual as true)
    bare = {k: v for k, v in speculators_config().items() if k != "norm_before_residual"}
    src2 = write(tmp_path / "bare", draft_tensors("layers.0."), bare)
    assert [f.code for f in simulate_load(Checkpoint.open(src2), "vllm==0.33.0", num_target_layers=10).findings] \
        == ["config/flag-ignored"]
    convert(src2, "vllm==0.33.0", tmp_path / "v")
    assert simulate_load(Checkpoint.open(tmp_path / "v"), "vllm==0.33.0", num_target_layers=10).findings == ()


def test_speculators_without_verifier_to_vllm_is_refused_unless_forced(tmp_path):
    cfg = speculators_config()
    cfg["speculators_config"]["verifier"]["name_or_path"] = None
    src = write(tmp_path / "nover", draft_tensors("layers.0."), cfg)
    with pytest.raises(ConversionRefused, match=r"verifier\.name_or_path"):
        convert(src, "vllm==0.33.0", tmp_path / "v")
    result = convert(src, "vllm==0.33.0", tmp_path / "v", force=True)
    assert [f.code for f in result.findings] == ["convert/forced"]


def test_rich_table_keeps_bracketed_names(spec_dir, tmp_path):
    """Names in [brackets] are data, not rich markup: they are printed, not swallowed."""
    from rich.console import Console

    out = tmp_path / "out [v2]"
    result = convert(spec_dir, "sglang==0.5.11", out)
    console = Console(width=300, record=True)
    console.print(rich_view(result))
    assert "[v2]" in console.export_text()


def test_atomic_write_replaces_whole_or_leaves_the_old_file(tmp_path):
    from eagle3lens.io.safewrite import replacing, write_text_atomic

    target = tmp_path / "report.html"
    target.write_text("old")
    assert write_text_atomic(target, "new ✓") == target and target.read_text(encoding="utf-8") == "new ✓"
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("failed mid-write")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temporary left behind


def _hf_cache_snapshot(tmp_path, src):
    """``models--org--draft/snapshots/REV/*`` as symlinks into ``../../blobs``, like the Hugging Face cache."""
    cache = tmp_path / "hub" / "models--org--draft"
    (cache / "blobs").mkdir(parents=True)
    snap = cache / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(src.iterdir())):
        (cache / "blobs" / f"blob{i}").write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(f"../../blobs/blob{i}")
    return snap


def test_side_files_linked_into_the_cache_blobs_are_copied_others_noted(spec_dir, tmp_path):
    from eagle3lens.io.safewrite import copy_side_files

    (spec_dir / "generation_config.json").write_text('{"do_sample": false}')
    snap = _hf_cache_snapshot(tmp_path, spec_dir)
    outside = tmp_path / "secret.txt"
    outside.write_text("not part of the checkpoint")
    (snap / "notes.txt").symlink_to(outside)
    (snap / "dangling.json").symlink_to("../../blobs/missing")
    dst, notes = tmp_path / "dst", []
    dst.mkdir()
    copied = copy_side_files(snap, dst, {"config.json"}, notes=notes)
    assert {"tokenizer.json", "generation_config.json"} <= set(copied)
    assert "notes.txt" not in copied and "dangling.json" not in copied
    assert (dst / "generation_config.json").read_text() == '{"do_sample": false}'
    assert not (dst / "tokenizer.json").is_symlink()  # the blob's bytes, not a link that would dangle
    assert not (dst / "notes.txt").exists() and not (dst / "dangling.json").exists()
    assert any(n.startswith("notes.txt not copied") and "outside" in n for n in notes)
    assert any(n.startswith("dangling.json not copied") for n in notes)
    result = convert(snap, "sglang==0.5.11", tmp_path / "sg")  # end to end: the tokenizer comes along
    assert any(n.startswith("notes.txt not copied") for n in result.notes)  # and the user is told what stayed behind
    assert (tmp_path / "sg" / "tokenizer.json").read_text() == "{}"
    assert (tmp_path / "sg" / "generation_config.json").is_file() and not (tmp_path / "sg" / "notes.txt").exists()


def test_every_engine_config_style_has_a_config_writer() -> None:
    """convert writes a config per style from the registry: each profile's style must have a writer."""
    from eagle3lens.convert_config import CONFIG_WRITERS
    from eagle3lens.engines import all_profiles

    assert {p.config_style for p in all_profiles()} <= set(CONFIG_WRITERS)


@pytest.mark.slow
def test_convert_data_verifies_acceptance_as_served(demo_dir, tmp_path, capsys):
    """--data: the output as the engine serves it is scored against the source as trained (offline)."""
    out = tmp_path / "fixed"
    code = main(["convert", str(demo_dir / "speculators"), "--to", "sglang==0.5.11", str(out), "--data",
                 str(demo_dir / "hidden-states"), "--target", str(demo_dir / "target"), "--limit", "6", "--json"])
    data = json.loads(capsys.readouterr().out)
    views = data["results"]["acceptance"]
    assert code == 0 and not data["findings"]
    assert views["fixed"]["accept_len"] == pytest.approx(views["as_trained"]["accept_len"], abs=1e-9)
    assert views["as_served"]["accept_len"] <= 1.05  # the source as SGLang 0.5.11 serves it: why convert
    assert views["fixed"]["setup"]["weights"].startswith(str(out))
    assert any(n.startswith("acceptance verified") for n in data["notes"])


@pytest.mark.slow
def test_convert_data_catches_an_output_that_lost_the_training(demo_dir):
    from eagle3lens.probes.acceptance import verify_conversion

    result = verify_conversion(demo_dir / "speculators", demo_dir / "broken-untrained", demo_dir / "hidden-states",
                               target=demo_dir / "target", engine="sglang==0.5.11", limit=6)
    (finding,) = result.findings
    assert finding.code == "acceptance/not-restored" and finding.severity.value == "critical"
    assert result.accept_len("fixed") < result.accept_len("as_trained") - 0.1


@pytest.mark.parametrize("extra, message", [
    (["--data", "D"], "needs --to E and --target T"),
    (["--to", "sglang==0.5.11", "--data", "D"], "needs --to E and --target T"),
    (["--to", "sglang==0.5.11", "--target", "T"], "--target serves --repair-d2t"),
])
def test_convert_data_usage_errors(demo_dir, tmp_path, capsys, extra, message):
    code = main(["convert", str(demo_dir / "speculators"), str(tmp_path / "out"), *extra])
    assert code == 2 and message in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_convert_reports_its_bytes_to_a_progress_callback(spec_dir, tmp_path):
    """The library never draws a bar: it reports the bytes it writes; the CLI passes a tqdm callback."""
    calls: list[tuple[int, int | None, str]] = []
    convert(spec_dir, "sglang==0.5.11", tmp_path / "sg", progress=lambda done, total, label: calls.append(
        (done, total, label)))
    total = sum(t.nbytes for t in Checkpoint.open(spec_dir).tensors.values())
    assert calls[0] == (0, total, "writing") and calls[-1] == (total, total, "writing")
    assert [done for done, _, _ in calls] == sorted(done for done, _, _ in calls)


def test_convert_data_that_does_not_fit_stops_before_writing(demo_dir, tmp_path, capsys):
    from eagle3lens.probes.data import write_speculators_sample

    dump = tmp_path / "narrow"
    dump.mkdir()
    write_speculators_sample(dump / "hs_0.safetensors", torch.arange(12), [torch.randn(12, 32)] * 3, torch.randn(12, 32))
    code = main(["convert", str(demo_dir / "speculators"), "--to", "sglang==0.5.11", str(tmp_path / "out"),
                 "--data", str(dump), "--target", str(demo_dir / "target")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and str(dump / "hs_0.safetensors") in err and "32" in err
    assert not (tmp_path / "out").exists()

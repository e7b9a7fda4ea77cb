"""One calling convention: probe(draft, *, target=None, engine=None, ..., progress=None) on paths or Checkpoints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _builders import draft_tensors, sglang_config, speculators_config, write
from _paths import ROOT

from eagle3lens.checkpoint import Checkpoint, as_checkpoint
from eagle3lens.doctor import diagnose
from eagle3lens.engines import EngineProfile, as_profile, own_loader, resolve
from eagle3lens.errors import UsageError
from eagle3lens.notebook.kernel import codes
from eagle3lens.probes.aux_layers import resolve_aux_layers
from eagle3lens.probes.diff import diff
from eagle3lens.probes.keys import compare_engines, simulate_load
from eagle3lens.probes.logs import parse_log
from eagle3lens.probes.vocab import compare_mappings, inspect_vocab
from eagle3lens.probes.weights import weight_stats
from eagle3lens.progress import Counter, TqdmBars

PACKAGE = ROOT / "eagle3lens"


@pytest.fixture(scope="module")
def drafts(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("convention")
    spec = write(root / "spec", draft_tensors("layers.0."), speculators_config())
    eagle = write(root / "eagle", draft_tensors("midlayer."), sglang_config())
    return spec, eagle


def test_helpers_pass_objects_open_paths_and_keep_none(drafts) -> None:
    spec, _ = drafts
    ckpt = Checkpoint.open(spec)
    assert as_checkpoint(ckpt) is ckpt and as_checkpoint(None) is None
    assert as_checkpoint(spec).tensors.keys() == as_checkpoint(str(spec)).tensors.keys() == ckpt.tensors.keys()
    profile = resolve("sglang==0.5.11")
    assert as_profile(profile) is profile and as_profile(None) is None
    assert isinstance(as_profile("vllm"), EngineProfile)
    assert own_loader("sglang").name == "sglang" and own_loader("no-such-flavour").name == "vllm"


def test_every_probe_takes_a_path_or_a_checkpoint_alike(drafts) -> None:
    spec, eagle = drafts
    ckpt = Checkpoint.open(spec)
    for probe in (lambda d: simulate_load(d, "sglang==0.5.11"), lambda d: simulate_load(d, engine="vllm==0.33.0"),
                  inspect_vocab, lambda d: weight_stats(d, names="fc.*"),
                  lambda d: resolve_aux_layers(d, 10, "sglang==0.5.11"), lambda d: diff(d, eagle)):
        assert probe(spec).to_dict() == probe(ckpt).to_dict() == probe(str(spec)).to_dict()
    by_path, by_ckpt = diagnose(spec, engine="vllm==0.33.0", weights=False), diagnose(ckpt, engine="vllm==0.33.0",
                                                                                       weights=False)
    assert by_path.to_dict() == by_ckpt.to_dict()


def test_target_and_engine_are_keywords_and_default_sensibly(drafts) -> None:
    spec, eagle = drafts
    with pytest.raises(UsageError, match="needs an engine"):
        simulate_load(spec)
    with pytest.raises(TypeError):
        inspect_vocab(spec, eagle)  # type: ignore[misc]  # the target is keyword-only
    # without an engine the aux layers are judged as the layout's own loader reads them
    assert resolve_aux_layers(eagle).engine == own_loader("sglang").spec
    # a target gives the layer count that otherwise comes from num_target_layers
    target = write(spec.parent / "target", {"model.layers.0.mlp.up_proj.weight": draft_tensors()["fc.weight"]},
                   {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 10, "hidden_size": 16})
    assert (resolve_aux_layers(spec, target=target, engine="vllm").to_dict()
            == resolve_aux_layers(spec, 10, "vllm").to_dict())
    assert simulate_load(spec, "sglang==0.5.11", target=target).to_dict() == simulate_load(
        spec, "sglang==0.5.11", num_target_layers=10).to_dict()
    log = "[2026-05-04 09:12:10] Decode batch, #running-req: 8, accept len: 1.00, gen throughput (token/s): 24.80\n"
    assert parse_log(log, engine=resolve("sglang==0.5.11")).to_dict() == parse_log(log, engine="sglang==0.5.11").to_dict()


def test_progress_is_a_callback_of_done_total_label(drafts) -> None:
    spec, _ = drafts
    calls: list[tuple[int, int | None, str]] = []
    ckpt = Checkpoint.open(spec)
    weight_stats(ckpt, against=ckpt, progress=lambda done, total, label: calls.append((done, total, label)))
    labels = list(dict.fromkeys(label for _, _, label in calls))
    assert labels == [f"weights {ckpt.path}", f"weights against {ckpt.path}"]
    total = sum(i.nbytes for i in ckpt.tensors.values())
    for label in labels:
        phase = [(done, total) for done, total, lab in calls if lab == label]
        assert phase[0] == (0, total) and [d for d, _ in phase] == sorted(d for d, _ in phase)
        assert phase[-1] == (total, total)
    calls.clear()
    diff(spec, spec, progress=lambda done, total, label: calls.append((done, total, label)))
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] == sum(i.nbytes for i in ckpt.tensors.values())
    calls.clear()
    diff(spec, spec, names_only=True, progress=lambda *call: calls.append(call))
    assert calls == []  # headers only: nothing to report


def test_counter_and_bars(capsys) -> None:
    seen: list[tuple[int, int | None, str]] = []
    counter = Counter(lambda *call: seen.append(call), 10, "phase")
    counter.add(4)
    counter.add(6)
    assert seen == [(0, 10, "phase"), (4, 10, "phase"), (10, 10, "phase")]
    Counter(None, 10, "silent").add(3)  # no callback: nothing happens
    bars = TqdmBars(min_total=100)
    bars(0, 50, "small")
    bars(50, 50, "small")
    bars(0, 2048, "large")
    bars(2048, 2048, "large")
    err = capsys.readouterr().err
    assert "small" not in err and "large" in err and "2.00k/2.00k" in err


def test_probes_leave_the_bar_to_the_caller() -> None:
    """No probe, nor the doctor, imports tqdm or decides whether a bar is shown."""
    modules = [*(PACKAGE / "probes").glob("*.py"), PACKAGE / "doctor.py"]
    for path in modules:
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] == "tqdm"}, path.name


def test_summary_rows_for_the_walkthroughs(drafts) -> None:
    spec, eagle = drafts
    rows = compare_engines(spec, engines=["sglang==0.5.11", "vllm==0.33.0"])
    assert [r["engine"] for r in rows] == ["sglang==0.5.11", "vllm==0.33.0"]
    assert rows[0]["dropped"] == len(simulate_load(spec, "sglang==0.5.11").dropped) > 0 and rows[1]["dropped"] == 0
    assert rows[0]["findings"] == codes(simulate_load(spec, "sglang==0.5.11"))
    assert len(compare_engines(spec)) > 4  # every known profile by default
    mappings = compare_mappings([spec, eagle])
    assert [(m["draft"], m["status"]) for m in mappings] == [
        ("spec", inspect_vocab(spec).status), ("eagle", inspect_vocab(eagle).status)]

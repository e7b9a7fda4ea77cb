"""Bad input on the acceptance / provenance / convert / wiring / trace surfaces: one line naming the file or flag,
exit 2, bounded work (issue 25, items 5, 8, 9, 11, 16, 17)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3lens.cli import main
from eagle3lens.launch import launch_from_log, parse_launch
from eagle3lens.probes.limits import MAX_STEPS


def one_line_error(capsys: pytest.CaptureFixture[str], code: int) -> str:
    """The CLI exited 2 with exactly one eagle3lens error line on stderr (no traceback, no internal error)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("eagle3lens: error: "), err
    assert "internal error" not in lines[0] and "\\x0a" not in lines[0], lines[0]
    return lines[0]


def _dump_of(demo_dir: Path, out: Path, tokens: int) -> Path:
    """A speculators dump of one sample: the demo's first, cut (or repeated) to ``tokens`` positions."""
    first = load_file(str(demo_dir / "hidden-states" / "hs_0.safetensors"))
    reps = tokens // first["token_ids"].shape[0] + 1
    out.mkdir()
    save_file({k: torch.cat([v] * reps)[:tokens].contiguous() for k, v in first.items()}, str(out / "hs_0.safetensors"))
    return out


# -- 25.5: samples of 0 or 1 tokens ---------------------------------------------------------------
@pytest.mark.parametrize("tokens", [0, 1])
@pytest.mark.parametrize("surface", ["acceptance", "provenance", "convert"])
def test_a_sample_too_short_to_predict_is_one_line(demo_dir, tmp_path, capsys, tokens, surface) -> None:
    dump = _dump_of(demo_dir, tmp_path / "short", tokens)
    args = {"acceptance": ["acceptance", str(demo_dir / "speculators"), "--data", str(dump)],
            "provenance": ["provenance", "--data", str(dump)],
            "convert": ["convert", str(demo_dir / "speculators"), "--to", "sglang==0.5.11", str(tmp_path / "out"),
                        "--data", str(dump)]}[surface]
    line = one_line_error(capsys, main([*args, "--target", str(demo_dir / "target")]))
    assert "hs_0.safetensors" in line and f"holds {tokens} token" in line and "at least 2" in line
    assert not (tmp_path / "out").exists()  # convert wrote nothing


# -- 25.8: bounded work --------------------------------------------------------------------------
def test_steps_are_capped_at_what_an_engine_could_run(demo_dir, capsys) -> None:
    line = one_line_error(capsys, main(["acceptance", str(demo_dir / "speculators"), "--data",
                                        str(demo_dir / "hidden-states"), "--target", str(demo_dir / "target"),
                                        "--steps", "1000000"]))
    assert "--steps" in line and "1000000" in line and f"1 to {MAX_STEPS}" in line


def test_a_draft_config_asking_for_a_million_steps_is_refused(demo_dir, tmp_path) -> None:
    from eagle3lens.errors import UsageError
    from eagle3lens.probes.acceptance import estimate_acceptance

    draft = shutil.copytree(demo_dir / "speculators", tmp_path / "draft")
    config = json.loads((draft / "config.json").read_text())
    config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 10**6
    (draft / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="speculative_tokens in config.json: 1000000 draft steps"):
        estimate_acceptance(draft, demo_dir / "hidden-states", target=demo_dir / "target")


@pytest.mark.parametrize("surface", ["acceptance", "provenance"])
def test_a_sample_longer_than_the_targets_positions_is_refused(demo_dir, tmp_path, capsys, surface) -> None:
    positions = json.loads((demo_dir / "target" / "config.json").read_text())["max_position_embeddings"]
    dump = _dump_of(demo_dir, tmp_path / "long", positions + 1)
    args = ["acceptance", str(demo_dir / "speculators")] if surface == "acceptance" else ["provenance"]
    line = one_line_error(capsys, main([*args, "--data", str(dump), "--target", str(demo_dir / "target")]))
    assert "hs_0.safetensors" in line and f"{positions + 1} tokens" in line
    assert f"max_position_embeddings {positions}" in line


def test_a_prompt_that_outgrows_the_targets_positions_is_refused_before_any_forward(demo_dir, tmp_path,
                                                                                   capsys) -> None:
    prompts = tmp_path / "long.txt"
    prompts.write_text(" ".join(["5"] * 20000) + "\n")
    line = one_line_error(capsys, main(["acceptance", str(demo_dir / "speculators"), "--target",
                                        str(demo_dir / "target"), "--prompts", str(prompts)]))
    assert "long.txt" in line and "prompt 1 with 32 new tokens has 20032 tokens" in line


# -- 25.5 / 25.11: --prompts ids -------------------------------------------------------------------
@pytest.mark.parametrize("text, expect", [
    ("1 2 99999\n", "token id 99999 at position 2"),
    ("[[1, 2, -1]]", "token id -1 at position 2"),
    ("7 -1 3\n", "token id -1 at position 1"),
    ("1 2 " + "1" + "0" * 30 + "\n", "an integer of 31 digits"),
    ("[[1, " + "1" + "0" * 30 + "]]", "integer of 31 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[]", "non-empty list"),
])
def test_prompt_ids_the_target_cannot_take_are_one_line(demo_dir, tmp_path, capsys, text, expect) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(text)
    line = one_line_error(capsys, main(["acceptance", str(demo_dir / "speculators"), "--target",
                                        str(demo_dir / "target"), "--prompts", str(prompts), "--new-tokens", "1"]))
    assert "prompts.txt" in line and expect in line, line
    if "token id" in expect:
        assert "vocabulary of 2048" in line


def test_the_range_error_names_the_offending_id_not_the_largest(demo_dir, tmp_path, capsys) -> None:
    sample = load_file(str(demo_dir / "hidden-states" / "hs_0.safetensors"))
    assert int(sample["token_ids"].max()) > 0
    sample["token_ids"][5] = -1
    (tmp_path / "neg").mkdir()
    save_file(sample, str(tmp_path / "neg" / "hs_0.safetensors"))
    line = one_line_error(capsys, main(["acceptance", str(demo_dir / "speculators"), "--data", str(tmp_path / "neg"),
                                        "--target", str(demo_dir / "target")]))
    assert "token id -1 at position 5" in line and f"token id {int(sample['token_ids'].max())}" not in line


# -- 25.17: text prompts, no tokenizer --------------------------------------------------------------
def test_text_prompts_on_a_target_without_a_tokenizer(demo_dir, tmp_path, capsys) -> None:
    prompts = tmp_path / "text.txt"
    prompts.write_text("hello world\nsecond prompt\n")
    target = tmp_path / "target"  # the demo target without the tokenizer files the demo now ships
    target.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(demo_dir / "target" / name, target / name)
    line = one_line_error(capsys, main(["acceptance", str(demo_dir / "speculators"), "--target",
                                        str(target), "--prompts", str(prompts)]))
    assert line.endswith("the target has no tokenizer (" + str(target) + "): give one line of token "
                         "ids per prompt")


# -- 25.5: a manifest's aux_layers --------------------------------------------------------------------
@pytest.mark.parametrize("layers", [["x", 1, 2], [True, 1, 2], [-1, 2, 3], [1.5], "3,6,8", []])
def test_manifest_aux_layers_that_are_no_layer_indices(demo_dir, tmp_path, capsys, layers) -> None:
    dump = shutil.copytree(demo_dir / "hidden-states-sglang", tmp_path / "dump")
    manifest = json.loads((dump / "eagle3lens-dump.json").read_text())
    (dump / "eagle3lens-dump.json").write_text(json.dumps({**manifest, "aux_layers": layers}))
    for args in (["provenance"], ["acceptance", str(demo_dir / "eagle")]):
        line = one_line_error(capsys, main([*args, "--data", str(dump), "--target", str(demo_dir / "target")]))
        assert "eagle3lens-dump.json: aux_layers must be null or a list of layer indices" in line


# -- 25.5: the launch, given or read from a log ---------------------------------------------------------
@pytest.mark.parametrize("value", ["²", "3x", "-1", "99999999999", "٣"])
def test_a_launch_count_that_is_not_a_count_names_the_flag(demo_dir, capsys, value) -> None:
    launch = ("python -m sglang.launch_server --model-path t --speculative-algorithm EAGLE3 "
              f"--speculative-num-steps {value}")
    line = one_line_error(capsys, main(["wiring", "--target", str(demo_dir / "target"), "--draft",
                                        str(demo_dir / "eagle"), "--launch", launch]))
    assert line.startswith("eagle3lens: error: --launch: --speculative-num-steps is ") and "not a count" in line
    assert parse_launch(launch.replace(value, "4")).num_steps == 4


@pytest.mark.parametrize("nest", [
    lambda n: "f(" * n + ")" * n, lambda n: "[" * n + "]" * n, lambda n: "-" * n + "1", lambda n: "a." * n + "b"])
def test_a_server_args_line_nested_2000_deep_names_the_log(demo_dir, tmp_path, capsys, nest) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-05-04 09:12:01] server_args=ServerArgs(model_path='t', speculative_algorithm='EAGLE3', "
                   f"other={nest(2000)})\n")
    line = one_line_error(capsys, main(["wiring", "--target", str(demo_dir / "target"), "--draft",
                                        str(demo_dir / "eagle"), "--log", str(log)]))
    assert "server.log: line 1: its ServerArgs(...) call is nested too deeply" in line


def test_a_shallow_server_args_line_still_reads(tmp_path) -> None:
    log = tmp_path / "server.log"
    log.write_text("server_args=ServerArgs(model_path='t', speculative_algorithm='EAGLE3', speculative_num_steps=3, "
                   "json_model_override_args='{\"a\": [[1]]}', other=[[[{'k': (1, 2)}]]], neg=-1)\n")
    launch = launch_from_log(log)
    assert launch is not None and launch.algorithm == "EAGLE3" and launch.num_steps == 3


# -- 25.9: doctor refuses --data with --prompts ------------------------------------------------------------
def test_doctor_refuses_data_and_prompts_together(demo_dir, tmp_path, capsys) -> None:
    line = one_line_error(capsys, main(["doctor", str(demo_dir / "eagle"), "--target", str(demo_dir / "target"),
                                        "--data", str(demo_dir / "hidden-states"), "--prompts",
                                        str(tmp_path / "missing.txt")]))
    assert "--data" in line and "--prompts" in line and "not both" in line


# -- 25.16: trace --target config.json --device meta ------------------------------------------------------
def test_trace_accepts_a_config_file_on_meta_and_hints_meta_otherwise(demo_dir, tmp_path, capsys) -> None:
    config = demo_dir / "target" / "config.json"
    draft = str(demo_dir / "eagle")
    assert main(["trace", "--target", str(config), "--draft", draft, "--device", "meta", "--json"]) == 0
    on_file = json.loads(capsys.readouterr().out)["results"]["wiring"]
    assert main(["trace", "--target", str(demo_dir / "target"), "--draft", draft, "--device", "meta", "--json"]) == 0
    on_dir = json.loads(capsys.readouterr().out)["results"]["wiring"]
    assert on_file["captured"] == on_dir["captured"] and on_file["captured"]
    line = one_line_error(capsys, main(["trace", "--target", str(config), "--draft", draft]))
    assert "config.json: a config file holds no weights: add --device meta" in line
    only = tmp_path / "config-only"
    only.mkdir()
    shutil.copy(config, only / "config.json")
    line = one_line_error(capsys, main(["trace", "--target", str(only), "--draft", draft]))
    assert "config-only: holds only config.json, no weights: add --device meta" in line
    assert main(["trace", "--target", str(only), "--draft", draft, "--device", "meta"]) == 0

"""keys --execute on a miniature engine package the test writes: a draft class whose load_weights renames, skips,
logs and raises like SGLang's, parallel state that refuses to work without torch.distributed, and a compiled
extension that cannot load here. The recorder, the stand-ins and engine/simulation-disagrees are judged on it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from _builders import BIAS, HEADS, INTER, KV, H, draft_tensors, sglang_config, two_shards_with_bias, write
from _mini_engine import DRAFT, write_engine
from _paths import ROOT
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.engines.execute import Execution, record_execution
from eagle3lens.probes.executed import execute_load
from eagle3lens.engines.standins import forget_modules


@pytest.fixture
def engine(tmp_path: Path):
    """A miniature sglang 0.5.11 in tmp_path: its package, dist-info and a compiled extension that cannot load."""
    yield write_engine(tmp_path / "site")
    forget_modules(("sglang", "sgl_kernel"))


def _eagle(tmp_path: Path, prefix: str = "midlayer.", extra: dict | None = None) -> Path:
    tensors = {k: v for k, v in draft_tensors(prefix, extra=extra).items() if not k.startswith("embed_tokens")}
    return write(tmp_path / "draft", tensors, sglang_config())


def test_recorder_follows_every_key_to_its_parameter(engine: Path, tmp_path: Path) -> None:
    ex = record_execution(_eagle(tmp_path), engine)
    assert ex.phase == "done" and ex.error is None and ex.recognised
    assert (ex.engine, ex.version, ex.draft_class) == ("sglang", "0.5.11", "LlamaForCausalLMEagle3")
    written = {(w["param"], tuple(w["keys"]), w["offset"]) for w in ex.writes}
    d = H // HEADS
    assert ("model.midlayer.self_attn.qkv_proj.weight", ("midlayer.self_attn.k_proj.weight",), HEADS * d * 2 * H) in written
    assert ("model.midlayer.mlp.gate_up_proj.weight", ("midlayer.mlp.up_proj.weight",), INTER * H) in written
    assert ("lm_head.weight", ("lm_head.weight",), 0) in written
    assert ex.converted == {"d2t": ["hot_token_id"]}  # d2t + arange kept as an attribute, traced through the add
    assert ex.processed == tuple(sorted(ex.processed)) and "t2d" in ex.processed
    assert not any(w for w in ex.writes if "t2d" in w["keys"])
    assert ex.params["model.midlayer.self_attn.qkv_proj.weight"] == [(HEADS + 2 * KV) * d, 2 * H]


def test_stand_ins_cover_the_extension_and_the_parallel_group(engine: Path, tmp_path: Path) -> None:
    ex = record_execution(_eagle(tmp_path), engine)
    used = {s.target: s for s in ex.stand_ins}
    assert used["sgl_kernel"].kind == "module" and "compiled" in used["sgl_kernel"].why
    assert used["sglang.srt.distributed.parallel_state.get_tp_group"].kind == "attribute"
    assert "sglang.srt.models.llama_eagle3" not in used  # the engine's own Python is never replaced
    assert "sgl_kernel" not in sys.modules  # the stand-in does not outlive the execution, nor did the real one run


def test_a_loader_that_renames_disagrees_with_the_simulated_drop(engine: Path, tmp_path: Path) -> None:
    draft = _eagle(tmp_path, prefix="layers.0.")
    result = execute_load(draft, root=engine, isolate=False)
    assert result.origin == "executed" and result.to_dict()["origin"] == "executed"
    fates = {f.key: f for f in result.fates}
    assert fates["layers.0.self_attn.q_proj.weight"].fate == "loaded-shard"
    assert fates["layers.0.self_attn.q_proj.weight"].shard == "q"
    disagree = [f for f in result.findings if f.code == "engine/simulation-disagrees"]
    keys = {f.evidence.get("tensor") for f in disagree}
    assert "layers.0.self_attn.q_proj.weight" in keys and "fc.weight" not in keys
    one = next(f for f in disagree if f.evidence.get("tensor") == "layers.0.mlp.down_proj.weight")
    assert one.evidence["simulated"] == "dropped"
    assert one.evidence["executed"] == "loaded -> model.midlayer.mlp.down_proj.weight"
    assert "keys/dropped" not in {f.code for f in result.findings}


def test_the_same_rules_executed_agree_with_the_simulation(engine: Path, tmp_path: Path) -> None:
    result = execute_load(_eagle(tmp_path), root=engine, isolate=False)
    assert not [f for f in result.findings if f.code == "engine/simulation-disagrees"]
    assert {p.param.name: p.status for p in result.params}["model.embed_tokens.weight"] == "by-design"


def test_a_raise_is_recorded_with_its_key_and_place(engine: Path, tmp_path: Path) -> None:
    extra = {"midlayer.self_attn.q_proj.bias": torch.zeros(H), "zz.unknown.weight": torch.zeros(2)}
    result = execute_load(_eagle(tmp_path, extra=extra), root=engine, isolate=False)
    fates = {f.key: f.fate for f in result.fates}
    assert fates["midlayer.self_attn.q_proj.bias"] == "raises"
    assert fates["norm.weight"] == "not-reached" and fates["zz.unknown.weight"] == "not-reached"
    assert fates["midlayer.input_layernorm.weight"] == "loaded"  # processed before the raise
    err = result.execution["error"]
    assert err["type"] == "KeyError" and err["file"] == "srt/models/llama_eagle3.py"
    assert "params[name]" in err["code"]
    raises = [f for f in result.findings if f.code == "keys/raises"]
    assert raises and "midlayer.self_attn.q_proj.bias" in raises[0].title
    where = next(f for f in result.findings if f.code == "engine/simulation-disagrees"
                 and f.evidence["what"] == "where the load raises")
    assert where.evidence["simulated"] == "no raise"


def test_a_constructor_that_raises_is_the_executed_refusal(engine: Path, tmp_path: Path) -> None:
    """The class's own constructor raising is the executed result's refusal (stage construct), so the served draft
    built on it stops there, as the simulated one does for a constructor rule it knows."""
    from eagle3lens.served import serve_draft

    tensors = {k: v for k, v in draft_tensors("midlayer.").items() if not k.startswith("embed_tokens")}
    draft = write(tmp_path / "draft", tensors, {**sglang_config(), "num_hidden_layers": 2})
    result = execute_load(draft, root=engine, isolate=False)
    assert result.execution["phase"] == "construct" and result.refused_at == "construct"
    assert result.refused.startswith(result.execution["error"]["type"])
    assert {f.fate for f in result.fates} == {"not-reached"}
    assert not [f for f in result.findings if f.code == "engine/simulation-disagrees"]  # the rule is simulated too
    served = serve_draft(draft, engine=result.engine, load=result)
    assert served.stops is not None and (served.stops.stage, served.stops.error) == ("construct", result.refused)


def test_the_executed_loader_is_fed_in_the_releases_shard_order(engine: Path, tmp_path: Path) -> None:
    """The model loader around load_weights is the release's order (sglang 0.5.11 sorts the shard paths): model-10
    before model-2, so the raise in model-10 leaves model-2 unread."""
    ckpt = two_shards_with_bias(tmp_path / "draft", sglang_config())
    result = execute_load(ckpt, root=engine, isolate=False)
    fates = {f.key: f.fate for f in result.fates}
    assert fates[BIAS] == "raises"
    in_2 = [n for n, i in ckpt.tensors.items() if i.file.name == "model-2.safetensors"]
    assert in_2 and {fates[n] for n in in_2} == {"not-reached"}
    assert all(fates[n] != "not-reached" for n, i in ckpt.tensors.items()
               if i.file.name == "model-10.safetensors" and n < BIAS)
    ex = record_execution(ckpt, engine)  # the order fed travels with the record (--host: the host's listing)
    assert ex.files == ("model-10.safetensors", "model-2.safetensors")
    assert Execution.from_dict(json.loads(json.dumps(ex.to_dict()))).files == ex.files


def test_the_strict_check_judges_what_the_execution_wrote(engine: Path, tmp_path: Path) -> None:
    """vLLM 0.9.0's model loader refuses any parameter load_weights did not write: on an executed load it counts the
    parameters the engine's own code wrote (a record of the miniature engine, read as that release's)."""
    from dataclasses import replace

    from eagle3lens.probes.executed import executed_result

    for name, tensors, unwritten in (("without-embed", None, "model.embed_tokens.weight"),
                                     ("whole", draft_tensors("midlayer."), None)):
        draft = write(tmp_path / name, tensors, sglang_config()) if tensors else _eagle(tmp_path / name)
        ex = replace(record_execution(draft, engine), engine="vllm", version="0.9.0")
        result = executed_result(Checkpoint.open(draft), ex)
        if unwritten:
            assert result.refused_at == "strict-check" and unwritten in (result.refused or "")
        else:
            assert result.refused is None and result.refused_at is None


def test_a_logged_skip_is_a_drop_with_its_warning(engine: Path, tmp_path: Path) -> None:
    result = execute_load(_eagle(tmp_path, extra={"zz.unknown.weight": torch.zeros(2)}), root=engine, isolate=False)
    f = next(f for f in result.fates if f.key == "zz.unknown.weight")
    assert f.fate == "dropped" and "not found in params_dict" in f.log
    assert result.execution["logs"][0]["key"] == "zz.unknown.weight"


@pytest.mark.slow
def test_cli_keys_execute_json(engine: Path, tmp_path: Path) -> None:
    draft = _eagle(tmp_path, prefix="layers.0.")
    done = subprocess.run([sys.executable, "-m", "eagle3lens", "keys", str(draft), "--engine", "installed",
                           "--execute", "--engine-root", str(engine), "--json"], capture_output=True, text=True,
                          check=False, timeout=300)
    out = json.loads(done.stdout)
    assert out["results"]["keys"]["origin"] == "executed"
    assert "engine/simulation-disagrees" in {f["code"] for f in out["findings"]}
    assert any(s["target"] == "sgl_kernel" for s in out["results"]["keys"]["stand_ins"])


@pytest.mark.slow
def test_doctor_execute_uses_the_executed_fate(engine: Path, tmp_path: Path) -> None:
    """``doctor --execute``: the keys result is the engine's own loader (its disagreement with the simulation is a
    finding of the report), and the other probes judge as the release that ran."""
    draft = _eagle(tmp_path, prefix="layers.0.")
    done = subprocess.run([sys.executable, "-m", "eagle3lens", "doctor", str(draft), "--engine", "installed",
                           "--execute", "--engine-root", str(engine), "--no-weights", "--json"], capture_output=True,
                          text=True, check=False, timeout=300)
    out = json.loads(done.stdout)
    assert out["engine"] == "sglang==0.5.11" and out["results"]["keys"]["origin"] == "executed"
    assert any(f["code"] == "engine/simulation-disagrees" and f["evidence"].get("tensor") ==
               "layers.0.mlp.down_proj.weight" for f in out["findings"])
    assert any(n.startswith("executed: the engine's own load_weights ran") for n in out["notes"])


@pytest.mark.slow
def test_doctor_execute_keeps_the_server_stops_of_the_simulated_path(engine: Path, tmp_path: Path) -> None:
    """The server stops that come before the draft's load (here: a Gemma-2 target, which sglang 0.5.11 cannot ask
    to capture aux states) are the same finding with --execute as without: only the load is executed."""
    draft = _eagle(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": H, "num_hidden_layers": 4,
        "vocab_size": 256, "num_attention_heads": HEADS, "intermediate_size": INTER}))
    reports = {}
    for how, extra in (("executed", ["--engine", "installed", "--execute", "--engine-root", str(engine)]),
                       ("simulated", ["--engine", "sglang==0.5.11"])):
        done = subprocess.run([sys.executable, "-m", "eagle3lens", "doctor", str(draft), "--target", str(target),
                               *extra, "--no-weights", "--json"], capture_output=True, text=True, check=False,
                              timeout=300)
        reports[how] = json.loads(done.stdout)
    assert reports["executed"]["results"]["keys"]["origin"] == "executed"
    stops = {how: [(f["evidence"]["stage"], f["evidence"]["error"]) for f in r["findings"]
                   if f["code"] == "launch/server-fails"] for how, r in reports.items()}
    assert stops["executed"] == stops["simulated"] and stops["executed"][0][0] == "target-capture"
    assert "Gemma2ForCausalLM" in stops["executed"][0][1]


@pytest.mark.parametrize("command", ["keys", "doctor"])
def test_cli_execute_refuses_a_named_release(tmp_path: Path, command: str) -> None:
    draft = write(tmp_path / "d", draft_tensors("midlayer."), sglang_config())
    for extra, said in ((["--engine", "sglang==0.5.11", "--execute"], "--engine installed"),
                        (["--engine", "installed", "--host", "gpu"], "add --execute")):
        done = subprocess.run([sys.executable, "-m", "eagle3lens", command, str(draft), *extra], capture_output=True,
                              text=True, check=False, timeout=120)
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_a_loader_that_gathers_first_raises_on_the_key_its_frame_holds(engine: Path, tmp_path: Path) -> None:
    """vLLM 0.10's EAGLE-3 load_weights collects every weight before loading: when it raises, every key has been
    pulled. The raise is placed on the key whose tensor the engine's frame held, and the keys after it are not
    reached (pulled, never written), not dropped."""
    draft_file = engine / "sglang/srt/models/llama_eagle3.py"
    draft_file.write_text(textwrap.dedent(DRAFT).replace("for name, w in weights:", "for name, w in list(weights):"))
    extra = {"midlayer.self_attn.q_proj.bias": torch.zeros(H), "zz.unknown.weight": torch.zeros(2)}
    result = execute_load(_eagle(tmp_path, extra=extra), root=engine, isolate=False)
    assert result.execution["error"]["key"] == "midlayer.self_attn.q_proj.bias"
    fates = {f.key: f for f in result.fates}
    assert fates["midlayer.self_attn.q_proj.bias"].fate == "raises"
    assert fates["zz.unknown.weight"].fate == fates["norm.weight"].fate == "not-reached"
    assert "raised before it wrote" in fates["norm.weight"].reason
    assert fates["midlayer.input_layernorm.weight"].fate == "loaded"


def test_real_dependencies_follow_the_release_requirements(tmp_path: Path) -> None:
    from eagle3lens.engines.wheels import real_dependencies

    dist = tmp_path / "sglang-9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9\n"
                                   "Requires-Dist: msgspec>=0.18\nRequires-Dist: torch==2.9\n"
                                   "Requires-Dist: msgspec<0.1; extra == \"old\"\n")
    assert [str(r) for r in real_dependencies(tmp_path, "sglang")] == ["msgspec>=0.18"]


@pytest.mark.slow
def test_audit_release_prints_where_the_miniature_engine_disagrees(engine: Path, capsys) -> None:
    """``python -m eagle3lens.release_audit --root DIR``: the built-in drafts through the miniature 0.5.11, whose
    loader renames layers.0. to midlayer. where the simulated 0.5.11 drops it; exit 1, each difference printed."""
    from eagle3lens.release_audit import main

    code = main(["--root", str(engine), "--draft", "specforge", "--draft", "sglang-layers0"])
    out = capsys.readouterr().out
    assert code == 1
    assert "sglang==0.5.11   sglang-layers0      tensor layers.0.mlp.down_proj.weight" in out
    assert "simulated: dropped" in out and "executed:  loaded -> model.midlayer.mlp.down_proj.weight" in out
    assert "specforge" not in out.split("sglang==0.5.11:")[0]  # the midlayer. draft agrees
    assert "disagrees with the simulation on 1 of 2 built-in drafts" in out


@pytest.mark.slow
def test_audit_release_exits_0_when_the_engine_agrees(engine: Path, capsys) -> None:
    from eagle3lens.release_audit import main

    assert main(["--root", str(engine), "--draft", "specforge"]) == 0
    assert "agrees with the simulation on all 1 built-in drafts" in capsys.readouterr().out


def test_audit_release_refuses_a_root_of_another_release(engine: Path, capsys) -> None:
    from eagle3lens.release_audit import main

    assert main(["--release", "sglang==0.5.23", "--root", str(engine)]) == 2
    assert "holds sglang==0.5.11, not sglang==0.5.23" in capsys.readouterr().err


@pytest.mark.ssh
def test_keys_execute_on_a_loopback_host_ships_only_headers(engine: Path, tmp_path: Path) -> None:
    """``keys --execute --host H``: the headers go to the host (a real sshd on 127.0.0.1), the worker there rebuilds
    the checkpoint as sparse files and runs the engine in --engine-root (a directory there); the executed result
    comes back and is judged here, and the host's private directory is gone afterwards."""
    import os
    import stat

    from _sshd import make_sshd, ssh_host, sshd_missing_reason, write_ed25519_key

    if sshd_missing_reason():
        pytest.skip(sshd_missing_reason())
    key = tmp_path / "id"
    server = make_sshd(tmp_path / "sshd", [write_ed25519_key(key)]).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.host_key_line())
        config = tmp_path / "ssh_config"
        config.write_text(ssh_host("e3l-gpu", server.port, key, f"UserKnownHostsFile {known}"))
        # the host's Python: this interpreter with this checkout of eagle3lens (a login shell does not inherit ours)
        python = tmp_path / "host-python"
        python.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} "
                          "\"$@\"\n")
        python.chmod(python.stat().st_mode | stat.S_IXUSR)
        draft = _eagle(tmp_path, prefix="layers.0.")
        before = set(Path("/tmp").glob("eagle3lens-execute-*"))
        done = subprocess.run([sys.executable, "-m", "eagle3lens", "keys", str(draft), "--engine", "installed",
                               "--execute", "--host", "e3l-gpu", "--ssh-config", str(config), "--python", str(python),
                               "--engine-root", str(engine), "--json"], capture_output=True, text=True, check=False,
                              timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        out = json.loads(done.stdout)
        keys = out["results"]["keys"]
        assert keys["origin"] == "executed" and keys["execution"]["root"] == str(engine.resolve())
        assert any(f["code"] == "engine/simulation-disagrees" and f["evidence"].get("tensor") ==
                   "layers.0.mlp.down_proj.weight" for f in out["findings"])
        fates = {f["key"]: f["fate"] for f in keys["tensors"]}
        assert fates["layers.0.self_attn.q_proj.weight"] == "loaded-shard"
        assert set(Path("/tmp").glob("eagle3lens-execute-*")) == before  # removed on the host
        # doctor --execute --host: the same executed fate ranked among the report's causes
        done = subprocess.run([sys.executable, "-m", "eagle3lens", "doctor", str(draft), "--engine", "installed",
                               "--execute", "--host", "e3l-gpu", "--ssh-config", str(config), "--python", str(python),
                               "--engine-root", str(engine), "--no-weights", "--json"], capture_output=True,
                              text=True, check=False, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        report = json.loads(done.stdout)
        assert report["results"]["keys"]["origin"] == "executed"
        assert report["results"]["keys"]["execution"]["root"] == str(engine.resolve())
        assert any(f["code"] == "engine/simulation-disagrees" for f in report["findings"])
        assert set(Path("/tmp").glob("eagle3lens-execute-*")) == before
    finally:
        server.stop()


def test_each_logged_warning_lands_on_its_key_among_thousands(engine: Path, tmp_path: Path) -> None:
    """2 000 extra zero-size tensors the loader logs and skips: each is a drop carrying its own warning, each
    warning recorded once (the tap sits on two loggers)."""
    extra = {f"zz.{i}.weight": torch.zeros(0) for i in range(2000)}
    result = execute_load(_eagle(tmp_path, extra=extra), root=engine, isolate=False)
    fates = {f.key: f for f in result.fates}
    assert all(fates[k].fate == "dropped" and fates[k].log == f"Parameter {k} not found in params_dict" for k in extra)
    assert len(result.execution["logs"]) == len(extra)


def test_logs_name_keys_by_dotted_words_or_the_key_in_flight() -> None:
    from eagle3lens.probes.executed import logs_by_key

    keys = {"norm.weight", "fc.weight", "odd key/x", "lm_head.weight"}
    logs = [{"message": "Parameter model.norm.weight not found", "key": "fc.weight"},
            {"message": "found odd key/x here", "key": None},
            {"message": "xnorm.weight and lm_head.weights are other names", "key": None}]
    assert logs_by_key(logs, keys) == {"norm.weight": [logs[0]["message"]], "fc.weight": [logs[0]["message"]],
                                       "odd key/x": [logs[1]["message"]]}


def test_the_engines_audit_points_at_the_release_audit_for_running_loaders(capsys) -> None:
    """Running a release's loader judges its load (a workflow): ``engines.audit`` says where that moved, one line."""
    from eagle3lens.engines.audit import main

    for argv in (["--release", "sglang==0.5.11"], ["--execute"], ["--root", "/nonexistent", "--draft", "eagle"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and "python -m eagle3lens.release_audit" in err[-1]

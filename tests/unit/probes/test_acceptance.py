"""Offline acceptance on the demo: speculators' metrics, the served chain, the fix, and the data readers."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from eagle3lens import cli
from eagle3lens.checkpoint import Checkpoint
from eagle3lens.draft import Eagle3Draft, map_to_target, rope
from eagle3lens.convert import estimate_acceptance  # the probe, its fixed view on what convert writes
from eagle3lens.probes.data import (
    Sample,
    describe_dump,
    iter_samples,
    read_prompts,
    write_dump,
    write_speculators_sample,
)
from eagle3lens.probes.logs import parse_log
from eagle3lens.probes.wiring import load_draft_as

SGLANG = "sglang==0.5.11"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def masked_dump(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six demo samples re-written in speculators' format with a random loss mask (so masking is exercised)."""
    out = tmp_path_factory.mktemp("masked") / "hidden_states"
    out.mkdir()
    gen = torch.Generator().manual_seed(7)
    for i, s in enumerate(iter_samples(demo_dir / "hidden-states", limit=6)):
        chunks = list(s.aux.split(64, dim=-1))
        assert s.last is not None
        write_speculators_sample(out / f"hs_{i}.safetensors", s.token_ids, chunks, s.last,
                                 torch.rand(len(s), generator=gen) < 0.7)
    return out.parent


# -- an independent, straightforward restatement of speculators' definitions ----------------------
def _dense_ttt(draft: Eagle3Draft, ids: torch.Tensor, feat: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The TTT loop with one dense mask over all steps' keys (speculators' extend_dense_mask_for_draft_tokens)."""
    cfg, layer = draft.cfg, cast(Any, draft.layers[0])
    attn = layer.self_attn
    T = ids.shape[0]
    g = draft.fc(feat[None])
    x_ids, pos = ids[None], torch.arange(1, T + 1)[None]
    ks, vs, preds = [], [], []
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = causal
    for k in range(steps):
        xe, xh = layer.input_layernorm(draft.embed_tokens(x_ids)), layer.hidden_norm(g)
        x = torch.cat([xe, xh], -1)
        q = attn.q_proj(x).view(1, T, cfg.heads, cfg.head_dim).transpose(1, 2)
        kk = attn.k_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        q, kk = rope(q, pos, cfg.rope_theta), rope(kk, pos, cfg.rope_theta)
        rep = cfg.heads // cfg.kv_heads
        ks.append(kk.repeat_interleave(rep, 1))
        vs.append(v.repeat_interleave(rep, 1))
        if k:
            mask = torch.cat([mask, torch.eye(T, dtype=torch.bool)], dim=1)
        y = F.scaled_dot_product_attention(q, torch.cat(ks, 2), torch.cat(vs, 2), attn_mask=mask)
        h = attn.o_proj(y.transpose(1, 2).reshape(1, T, -1)) + g
        h = layer.mlp(layer.post_attention_layernorm(h)) + h
        preds.append(draft.lm_head(draft.norm(h)).argmax(-1)[0])
        g = h
        x_ids = torch.cat([ids[k + 1:], torch.zeros(k + 1, dtype=ids.dtype)])[None]
        pos = pos + 1
    return preds


def _reference_metrics(demo_dir: Path, dump: Path, steps: int) -> tuple[list[float], list[float]]:
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(demo_dir / "target").eval()
    draft = load_draft_as(Checkpoint.open(demo_dir / "speculators"))
    rows = torch.arange(draft.cfg.draft_vocab) + draft.d2t
    hit, full_total, cond_total = [0] * steps, [0] * steps, [0] * steps
    with torch.no_grad():
        for s in iter_samples(dump):
            logits = target(input_ids=s.token_ids[None]).logits[0]
            teacher = logits[1:, rows].argmax(-1)  # verifier lm_head rows of the draft vocab, shifted batch
            ids, feat, mask = s.token_ids[1:], s.aux[:-1], s.loss_mask[1:].tolist()
            preds = _dense_ttt(draft, ids, feat, steps)
            T = len(ids)
            for k in range(steps):
                for i in range(T - k):
                    right_before = mask[i] and all(preds[j][i] == teacher[i + j] for j in range(k))
                    right_now = right_before and bool(preds[k][i] == teacher[i + k])
                    cond_total[k] += right_before
                    hit[k] += right_now and mask[i + k]
                    full_total[k] += mask[i + k]
    return [h / t for h, t in zip(hit, full_total, strict=True)], [h / t for h, t in zip(hit, cond_total, strict=True)]


def test_metric_view_reproduces_speculators_definitions(demo_dir: Path, masked_dump: Path) -> None:
    steps = 3
    result = estimate_acceptance(demo_dir / "speculators", masked_dump, target=demo_dir / "target", steps=steps)
    full, cond = _reference_metrics(demo_dir, masked_dump, steps)
    view = result.views["metrics"]
    assert view.full_acc == pytest.approx(full, abs=1e-6)
    assert view.cond_acc == pytest.approx(cond, abs=1e-6)
    assert view.full_acc[0] > 0.1 and view.cond_acc[1] > view.full_acc[1]  # trained, and conditioning matters
    assert set(result.views) == {"metrics", "as_trained"}  # no engine: nothing served


def test_demo_as_trained_as_served_and_fixed(demo_dir: Path) -> None:
    manifest = json.loads((demo_dir / "manifest.json").read_text())["hidden_states"]
    result = estimate_acceptance(demo_dir / "speculators", demo_dir / manifest["path"], target=demo_dir / "target",
                                 engine=SGLANG)
    views = result.views
    # as trained: the demo's own held-out step-0 accuracy, and a chain that accepts
    assert views["metrics"].full_acc[0] == pytest.approx(manifest["step0_accuracy"], abs=2e-3)
    assert views["as_trained"].accept_len > 1.1  # well above the bonus token alone (1.05 is zero)
    # as served by SGLang 0.5.11 (decoder dropped): what the demo's server log says
    logged = parse_log(demo_dir / "sglang.log", engine=SGLANG).summary.mean_accept_len
    assert views["as_served"].accept_len <= 1.05
    assert abs(views["as_served"].accept_len - logged) <= 0.05
    assert views["as_served"].log_lines["sglang"].startswith("accept len: 1.0")
    # after convert --to sglang==0.5.11 the engine serves what was trained
    assert views["fixed"].accept_len == pytest.approx(views["as_trained"].accept_len, abs=1e-9)
    assert result.toggles == {"keys": pytest.approx(views["as_trained"].accept_len)}
    (gap,) = [f for f in result.findings if f.code == "acceptance/gap"]
    assert gap.severity.value == "critical" and "convert" in (gap.fix or "")
    per_position = views["as_trained"].full_acc
    assert all(a >= b for a, b in itertools.pairwise(per_position))  # a chain: never rises
    assert views["as_trained"].accept_len == pytest.approx(1 + sum(per_position))
    # the engine's count: per round, where the rounds skip the stretches the chain accepts (acceptance clusters
    # on the demo's data), against every start counted alike; the log lines print the engine's count
    start = views["as_trained"].per_start
    assert start is not None and start.accept_len == pytest.approx(1 + sum(start.full_acc))
    assert views["as_trained"].accept_len <= start.accept_len
    assert 0 < views["as_trained"].rounds < views["as_trained"].positions
    assert f"accept len: {views['as_trained'].accept_len:.2f}" in views["as_trained"].log_lines["sglang"]


def test_untrained_draft_accepts_nothing_in_any_view(demo_dir: Path) -> None:
    result = estimate_acceptance(demo_dir / "broken-untrained", demo_dir / "hidden-states",
                                 target=demo_dir / "target", engine=SGLANG, limit=12)
    for name, view in result.views.items():
        assert view.accept_len is not None and view.accept_len <= 1.05, name


@pytest.mark.slow
def test_aux_off_scenario(demo_dir: Path) -> None:
    """No aux capture: SGLang's EAGLE algorithm skips fc, feeds the final state and installs the target's embed and
    head (first N rows from 0.5.4.post2, ids unmapped): the draft accepts next to nothing, as the incident's logs say;
    capture on restores; vLLM's fc assert stops it."""
    sg = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                             engine=SGLANG, scenario="aux-off", fixed=False)
    served = sg.views["as_served"]
    assert served.setup["scenario"] == "aux-off" and served.accept_len is not None and served.accept_len <= 1.05
    assert "EAGLE algorithm" in served.setup["weights"] and "first N rows" in served.setup["weights"]
    assert sg.toggles["aux-capture"] == pytest.approx(sg.views["as_trained"].accept_len)
    assert sg.views["as_trained"].accept_len > 1.1
    # the speculators draft as SGLang 0.5.11 serves it (decoder dropped) without aux capture: nothing either
    spec = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                               engine=SGLANG, scenario="aux-off", fixed=False)
    assert spec.views["as_served"].accept_len is not None and spec.views["as_served"].accept_len <= 1.05
    # before 0.5.4.post2 the draft's logits span the whole installed head: every target id is proposable
    old = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                              engine="sglang==0.5.4", scenario="aux-off", fixed=False, limit=8)
    assert "all of its head" in old.views["as_served"].setup["weights"]
    vl = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                             engine="vllm==0.33.0", scenario="aux-off", limit=4, fixed=False)
    assert vl.views["as_served"].accept_len is None and "fc expects 192" in (vl.views["as_served"].error or "")
    assert [f.code for f in vl.findings] == ["acceptance/gap"]


def test_never_written_parameters_hold_the_engines_init(demo_dir: Path, capsys) -> None:
    """SGLang 0.5.11 drops speculators/'s decoder: its linears hold torch.empty memory (noise by default, zeros on
    request), its norms 1.0; the setup lists them, and either reading leaves the served draft accepting nothing."""
    views = {}
    for empty in ("noise", "zeros"):
        result = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                                     engine=SGLANG, fixed=False, empty_memory=empty)
        views[empty] = result.views["as_served"]
        never = views[empty].setup["never_written"]
        assert never["layers.0.self_attn.q_proj.weight"] == f"torch.empty ({empty})"
        assert never["layers.0.input_layernorm.weight"] == "ones"
        assert "fc.weight" not in never and "lm_head.weight" not in never  # loaded
        # (almost) nothing: the untrained target's continuations repeat a token now and then, which even a draft
        # without its decoder guesses (about 6 % of rounds on the demo)
        assert views[empty].accept_len is not None and views[empty].accept_len <= 1.1
        assert views[empty].accept_len < result.views["as_trained"].accept_len - 0.2
        assert any(f"torch.empty memory, modelled as {empty}" in n for n in result.notes)
    whole = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                                engine=SGLANG, fixed=False, limit=2)
    assert whole.views["as_served"].setup["never_written"] == {}  # eagle/ loads whole on SGLang
    code = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"),
                     "--target", str(demo_dir / "target"), "--engine", SGLANG, "--steps", "2", "--limit", "2",
                     "--no-fixed", "--empty-memory", "zeros", "--json"])  # exit 1: the gap is a finding
    served = json.loads(capsys.readouterr().out)["results"]["acceptance"]["as_served"]
    assert code == 1 and served["setup"]["never_written"]["layers.0.mlp.down_proj.weight"] == "torch.empty (zeros)"
    with pytest.raises(SystemExit):
        cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"),
                  "--target", str(demo_dir / "target"), "--empty-memory", "garbage"])
    capsys.readouterr()


def test_cli_json_contract(demo_dir: Path, capsys) -> None:
    code = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"),
                     "--target", str(demo_dir / "target"), "--engine", SGLANG, "--steps", "3", "--limit", "6",
                     "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1  # the gap is critical
    acc = data["results"]["acceptance"]
    for name in ("metrics", "as_trained", "as_served", "fixed"):
        view = acc[name]
        assert len(view["full_acc"]) == len(view["cond_acc"]) == 3
        assert view["accept_len"] >= 1.0 and view["positions"] > 0
    assert acc["as_served"]["engine"] == SGLANG and set(acc["toggles"]) == {"keys"}
    assert [f["code"] for f in data["findings"]] == ["acceptance/gap"]


def test_dump_width_mismatch_is_one_line_exit_2(demo_dir: Path, tmp_path: Path, capsys) -> None:
    dump = tmp_path / "narrow"
    dump.mkdir()
    T, H = 12, 32
    write_speculators_sample(dump / "hs_0.safetensors", torch.arange(T), [torch.randn(T, H)] * 3, torch.randn(T, H))
    code = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(dump), "--target",
                     str(demo_dir / "target")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert str(dump / "hs_0.safetensors") in err and "32" in err and "64" in err


def test_readers_agree_across_formats(demo_dir: Path, tmp_path: Path) -> None:
    """The same samples as speculators files, SpecForge .ckpt dicts and eagle3lens's own dump read alike."""
    originals = list(iter_samples(demo_dir / "hidden-states", limit=3))
    specforge = tmp_path / "specforge" / "rows_0-2000"
    specforge.mkdir(parents=True)
    from eagle3lens.probes.acceptance import Teacher

    teacher = Teacher.open(demo_dir / "target", torch.device("cpu"))
    normed = []
    for i, s in enumerate(originals):
        assert s.last is not None
        last = teacher.final_norm(s.last)
        normed.append(last)
        torch.save({"input_ids": s.token_ids, "loss_mask": s.loss_mask.long(), "aux_hidden_state": s.aux[None],
                    "hidden_state": last[None]}, specforge / f"data_{i}.ckpt")
    own = write_dump(tmp_path / "own", [Sample(s.token_ids, s.aux, n, s.loss_mask, True, "x", (2, 5, 7))
                                        for s, n in zip(originals, normed, strict=True)])
    assert describe_dump(tmp_path / "specforge").format == "specforge"
    assert describe_dump(own).layers == (2, 5, 7)
    for path in (tmp_path / "specforge", own):
        for a, b, n in zip(originals, iter_samples(path), normed, strict=True):
            assert torch.equal(a.token_ids, b.token_ids) and torch.equal(a.aux, b.aux)
            assert torch.equal(a.loss_mask, b.loss_mask) and b.last_normed and torch.equal(b.last, n)
    views = [estimate_acceptance(demo_dir / "speculators", p, target=demo_dir / "target", steps=2).views
             for p in (tmp_path / "specforge", own)]
    assert views[0]["metrics"].full_acc == pytest.approx(views[1]["metrics"].full_acc)


def test_pickle_dump_that_imports_code_is_refused(demo_dir: Path, tmp_path: Path, capsys) -> None:
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(pickle.dumps({"input_ids": Evil()}))
    code = cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(bad), "--target",
                     str(demo_dir / "target")])
    captured = capsys.readouterr()
    assert code == 2 and "pwned" not in captured.out and "refused" in captured.err


def test_live_capture_from_prompts(demo_dir: Path, tmp_path: Path, capsys) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("3 17 5 9 12\n40, 2, 33, 8\n")
    assert [p.tolist() for p in read_prompts(prompts)] == [[3, 17, 5, 9, 12], [40, 2, 33, 8]]
    code = cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"),
                     "--prompts", str(prompts), "--engine", SGLANG, "--new-tokens", "12", "--steps", "2",
                     "--no-fixed", "--json"])
    data = json.loads(capsys.readouterr().out)
    acc = data["results"]["acceptance"]
    assert code in (0, 1) and acc["greedy_agreement"] == 1.0  # greedy continuations: the verified path exactly
    assert acc["samples"] == 2 and acc["as_served"]["positions"] == 2 * (12 - 2 + 1)  # starts on generated tokens


def test_usage_errors(demo_dir: Path, capsys) -> None:
    assert cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target")]) == 2
    assert "--data" in capsys.readouterr().err
    assert cli.main(["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states")]) == 2
    assert "--target" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(demo_dir: Path) -> None:
    kwargs = {"target": demo_dir / "target", "engine": SGLANG, "limit": 8, "steps": 3}
    cpu = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", device="cpu", **kwargs)
    gpu = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", device="cuda", **kwargs)
    for name, view in cpu.views.items():
        assert gpu.views[name].positions == view.positions
        assert gpu.views[name].full_acc == pytest.approx(view.full_acc, abs=0.02), name
        assert math.isclose(gpu.views[name].accept_len, view.accept_len, abs_tol=0.05), name


def test_serving_chain_feeds_its_own_tokens(demo_dir: Path) -> None:
    """Step 2 of the chain reads the token step 1 proposed (mapped through d2t), not the data's token."""
    from eagle3lens.probes.acceptance import chain

    draft = load_draft_as(Checkpoint.open(demo_dir / "speculators"))
    s = next(iter_samples(demo_dir / "hidden-states"))
    ids, feat = s.token_ids[1:], s.aux[:-1]
    preds = chain(draft, ids, feat, "always", 2)
    manual = _dense_ttt(draft, ids, feat, 1)[0]
    assert torch.equal(preds[0], manual)
    forced = chain(draft, ids, feat, "always", 2, teacher_forced=ids)
    assert not torch.equal(map_to_target(preds[0], draft.d2t), ids[1:].roll(-1))
    assert not torch.equal(preds[1], forced[1])


def test_doctor_holds_the_estimate_against_the_log(demo_dir: Path, tmp_path: Path) -> None:
    from eagle3lens.doctor import diagnose

    common = {"engine": SGLANG, "target": demo_dir / "target", "data": demo_dir / "hidden-states", "weights": False}
    agree = diagnose(demo_dir / "speculators", log=demo_dir / "sglang.log", **common)
    assert "acceptance" in agree.results and "acceptance/gap" in [f.code for f in agree.findings]
    assert any("explained by the causes above" in n for n in agree.notes)
    assert "acceptance" not in {c.finding.area for c in agree.results["doctor"].causes}  # a measurement, not a cause
    # a log claiming 2.40 while the checkpoint as served accepts nothing: something outside the checkpoint differs
    log = tmp_path / "sglang.log"
    log.write_text((demo_dir / "sglang.log").read_text().replace("accept len: 1.00, accept rate: 0.00",
                                                                 "accept len: 2.40, accept rate: 0.35"))
    differ = diagnose(demo_dir / "speculators", log=log, **common)
    (mismatch,) = [f for f in differ.findings if f.code == "acceptance/served-vs-log-mismatch"]
    assert "2.40" in mismatch.title and mismatch.evidence["logged"] == pytest.approx(2.4)
    assert not any("explained by" in n for n in differ.notes)


def test_doctor_scores_an_eagle_launch_as_aux_off(demo_dir: Path) -> None:
    """sglang-eagle.log records an EAGLE (not EAGLE3) launch: the doctor's acceptance follows the predicted wiring
    (no aux capture), agrees with that log's 1.00 and names the launch flag as the fix."""
    from eagle3lens.doctor import diagnose

    report = diagnose(demo_dir / "eagle", engine=SGLANG, target=demo_dir / "target", data=demo_dir / "hidden-states",
                      log=demo_dir / "sglang-eagle.log", weights=False)
    served = report.results["acceptance"].views["as_served"]
    assert served.setup["scenario"] == "aux-off" and served.accept_len is not None and served.accept_len <= 1.05
    assert any("aux-off scenario: the launch" in n for n in report.notes)
    assert any("explained by the causes above" in n for n in report.notes)
    assert "acceptance/served-vs-log-mismatch" not in [f.code for f in report.findings]
    (gap,) = [f for f in report.findings if f.code == "acceptance/gap"]
    assert "EAGLE3" in (gap.fix or "") and "convert" not in (gap.fix or "")


def test_aux_ids_in_the_other_convention(demo_dir: Path, tmp_path: Path) -> None:
    """vLLM's V1 runner reads eagle/'s SGLang-convention ids raw (the default V2 runner ignores them): live capture scores it and the aux-ids toggle restores it;
    a dump without those layers is scored by running the target again for them, and left unscored (a note, no
    finding) when the target cannot run."""
    from eagle3lens.probes.acceptance import live_samples

    prompts = tmp_path / "prompts.json"
    prompts.write_text("[[3, 17, 5, 9, 12], [40, 2, 33, 8]]")
    samples, model = live_samples(demo_dir / "eagle", demo_dir / "target", prompts, "vllm==0.33.0:v1", new_tokens=10)
    assert samples[0].layers == (1, 2, 4, 5, 6, 7)  # trained [2, 5, 7] and vLLM's raw [1, 4, 6]
    live = estimate_acceptance(demo_dir / "eagle", samples, target=model, engine="vllm==0.33.0:v1", steps=2)
    assert live.views["as_served"].setup["layers_hf"] == [1, 4, 6]
    assert live.views["as_trained"].setup["layers_hf"] == [2, 5, 7]
    assert live.toggles["aux-ids"] == pytest.approx(live.views["as_trained"].accept_len)
    dump = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=demo_dir / "target",
                               engine="vllm==0.33.0:v1", steps=2, limit=3)
    assert dump.views["as_served"].setup["layers_hf"] == [1, 4, 6] and dump.accept_len("as_served") is not None
    assert any("run again" in n for n in dump.notes)  # for [1, 4, 6], and [2, 5, 7] the converted draft reads
    head_only = tmp_path / "head-only"
    head_only.mkdir()
    shutil.copy(demo_dir / "target" / "config.json", head_only / "config.json")
    tensors = load_file(str(next((demo_dir / "target").glob("*.safetensors"))))
    save_file({k: tensors[k] for k in ("model.norm.weight", "lm_head.weight", "model.embed_tokens.weight")},
              str(head_only / "model.safetensors"))
    unscored = estimate_acceptance(demo_dir / "eagle", demo_dir / "hidden-states", target=head_only,
                                   engine="vllm==0.33.0:v1", steps=2, limit=3)
    assert unscored.accept_len("as_served") is None
    assert "[1, 4, 6]" in (unscored.views["as_served"].unavailable or "")
    assert not [f for f in unscored.findings if "not servable" in f.title]
    assert any("not scored" in n for n in unscored.notes)


def test_live_capture_ends_at_the_targets_eos(demo_dir: Path) -> None:
    """The server stops generating at an eos id: live capture does too, and scores nothing after it."""
    from eagle3lens.probes.data import capture_samples
    from eagle3lens.probes.wiring import load_target

    target = load_target(demo_dir / "target", "cpu")
    prompt = torch.arange(7, 19)
    target.config.eos_token_id = target.generation_config.eos_token_id = -1  # no stop id: the whole 8 tokens
    free = next(capture_samples(target, [prompt], [2, 5, 7], new_tokens=8))
    assert free.token_ids.numel() == prompt.numel() + 8 and int(free.loss_mask.sum()) == 8
    generated = free.token_ids[prompt.numel():].tolist()
    stop = generated[2]  # declare the target's third greedy token its eos (a list, as generation_config allows)
    target.generation_config.eos_token_id = [10**6, stop]
    ended = next(capture_samples(target, [prompt], [2, 5, 7], new_tokens=8))
    first = generated.index(stop)
    assert ended.token_ids.tolist() == free.token_ids.tolist()[:prompt.numel() + first + 1]
    assert int(ended.loss_mask.sum()) == first + 1 and int(ended.token_ids[-1]) == stop
    target.generation_config.eos_token_id = -1  # the tokenizer's eos, passed by the chat capture
    by_tokenizer = next(capture_samples(target, [prompt], [2, 5, 7], new_tokens=8, stop=[stop]))
    assert by_tokenizer.token_ids.tolist() == ended.token_ids.tolist()


def test_continuations_that_end_at_once_score_nothing_and_say_so(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """Every id an eos: each continuation ends after one token, no verify start remains: no ceiling is charged."""
    target = tmp_path / "target"
    shutil.copytree(demo_dir / "target", target)
    config = json.loads((target / "generation_config.json").read_text())
    (target / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": list(range(2048))}))
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                   str(demo_dir / "chat.jsonl"), "--temperature", "0.7", "--limit", "2", "--new-tokens", "8",
                   "--no-fixed", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["results"]["acceptance"]["traffic"]["served_vocab"] is None
    assert any(n.startswith("nothing scored: no sample has a verify start") for n in out["notes"]), out["notes"]


@pytest.mark.parametrize("model_type", ["llama", "gemma2", "qwen3_next"])
def test_the_teachers_final_norm_is_the_targets_own(model_type: str, tmp_path: Path) -> None:
    """Gemma's and Qwen3-Next's RMSNorm scale by (1 + weight): the teacher applies the target's own norm, from a
    loaded model and from its checkpoint alone (a dump of pre-norm states is normed by it)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from eagle3lens.probes.acceptance import Teacher

    config = AutoConfig.for_model(model_type, vocab_size=64, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    norm = model.get_submodule("model.norm")
    with torch.no_grad():
        norm.weight.copy_(torch.randn_like(norm.weight) * 0.3)
    model.save_pretrained(tmp_path / "target")
    pre = torch.randn(5, 32)
    with torch.no_grad():
        own = norm(pre).float()
    for source in (model, tmp_path / "target"):
        teacher = Teacher.open(source, torch.device("cpu"))
        assert torch.allclose(teacher.final_norm(pre), own, atol=1e-5), (model_type, source)


def _sglang_log_at(demo_dir: Path, path: Path, accept_len: float) -> Path:
    """The demo's SGLang log (its launch drafts speculative_num_steps=4) with every decode line at ``accept_len``
    (0.5.11+'s rate: (len - 1) / (num_draft_tokens - 1))."""
    rate = (accept_len - 1) / 4
    path.write_text((demo_dir / "sglang.log").read_text().replace(
        "accept len: 1.00, accept rate: 0.00", f"accept len: {accept_len:.2f}, accept rate: {rate:.2f}"))
    return path


@pytest.mark.slow
def test_acceptance_log_raises_the_doctors_mismatch_at_the_logs_k(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """A log at 1.60 against a draft the engine serves at 1.00: `acceptance --log` gives the finding the doctor
    gives (one function), both scoring the K the log's launch drafts (4), not the draft config's (5)."""
    from eagle3lens.doctor import diagnose

    log = _sglang_log_at(demo_dir, tmp_path / "sglang.log", 1.6)
    argv = ["acceptance", str(demo_dir / "speculators"), "--data", str(demo_dir / "hidden-states"), "--target",
            str(demo_dir / "target"), "--engine", SGLANG, "--no-fixed", "--log", str(log)]
    assert cli.main([*argv, "--json"]) == 1  # the gap is critical
    out = json.loads(capsys.readouterr().out)
    config_k = Checkpoint.open(demo_dir / "speculators").config["speculators_config"]["proposal_methods"][0]
    assert out["results"]["acceptance"]["steps"] == 4 != config_k["speculative_tokens"]
    assert any("K = 4 draft steps, from speculative_num_steps=4" in n for n in out["notes"])
    (mismatch,) = [f for f in out["findings"] if f["code"] == "acceptance/served-vs-log-mismatch"]
    assert mismatch["evidence"]["logged"] == pytest.approx(1.6) and mismatch["evidence"]["count"] == "per-round"
    report = diagnose(demo_dir / "speculators", engine=SGLANG, target=demo_dir / "target",
                      data=demo_dir / "hidden-states", log=log, weights=False)
    (same,) = [f for f in report.findings if f.code == "acceptance/served-vs-log-mismatch"]
    assert same.title == mismatch["title"] and report.results["acceptance"].steps == 4
    # --steps overrides what the log says; the finding then names the K the server drafts
    assert cli.main([*argv, "--steps", "3", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    (other,) = [f for f in out["findings"] if f["code"] == "acceptance/served-vs-log-mismatch"]
    assert out["results"]["acceptance"]["steps"] == 3 and "score with --steps 4" in other["detail"]
    # the doctor takes --steps too
    assert cli.main(["doctor", str(demo_dir / "speculators"), "--engine", SGLANG, "--target", str(demo_dir / "target"),
                     "--data", str(demo_dir / "hidden-states"), "--log", str(log), "--steps", "3", "--no-weights",
                     "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["results"]["acceptance"]["steps"] == 3


def test_a_dump_from_another_target_is_named_without_an_engine(demo_dir: Path, capsys) -> None:
    """No --engine, so no layer needs capturing: the dump is still held against the target's own states."""
    for target, foreign in (("kimi-target", True), ("target", False)):
        assert cli.main(["acceptance", str(demo_dir / "eagle"), "--target", str(demo_dir / target), "--data",
                         str(demo_dir / "hidden-states"), "--limit", "4", "--json"]) == int(foreign)
        out = json.loads(capsys.readouterr().out)
        assert ("data/not-from-target" in [f["code"] for f in out["findings"]]) == foreign, target
        assert any("last hidden states are its own" in n for n in out["notes"]) != foreign


def test_temperature_without_an_engine_scores_the_draft_as_trained(demo_dir: Path, capsys) -> None:
    assert cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--data",
                     str(demo_dir / "hidden-states"), "--limit", "2", "--temperature", "0.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sampled = out["results"]["acceptance"]["traffic"]["sampled"]
    assert list(sampled) == ["as_trained"] and sampled["as_trained"]["accept_len"] >= 1.0
    assert sampled["as_trained"]["count"] == "per-round" and sampled["as_trained"]["per_start"]["accept_len"] >= 1.0
    assert any(n.startswith("sampled without --engine: the draft as trained") for n in out["notes"])

"""The served chat template: conversations rendered as served, and the demo's dumps held against it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lens import cli
from eagle3lens.errors import CheckpointError
from eagle3lens.probes import chat
from eagle3lens.probes.acceptance import estimate_acceptance


pytestmark = pytest.mark.usefixtures("one_thread")


def test_demo_tokenizer_renders_the_served_template(demo_dir: Path) -> None:
    tokenizer = chat.load_tokenizer(demo_dir / "target")
    conv = chat.read_chat(demo_dir / "chat.jsonl")[0]
    ids = chat.render(tokenizer, conv)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens[:2] == ["<s>", "<|system|>"] and tokens[-2:] == ["<|end|>", "<|assistant|>"]
    assert tokens.count("<|user|>") == 1 and tokens.count("<|end|>") == 2
    assert tokenizer.decode(ids, skip_special_tokens=True).split() == " ".join(m["content"] for m in conv).split()
    assert chat.markers(tokenizer, conv) == {"<s>": (1,), "<|system|>": (3,), "<|user|>": (4,), "<|end|>": (6,),
                                             "<|assistant|>": (5,), "generation prompt '<|assistant|>'": (5,)}


def test_dump_without_the_template_is_a_mismatch(demo_dir: Path) -> None:
    raw = chat.check_template(demo_dir / "hidden-states-raw", demo_dir / "target", chat=demo_dir / "chat.jsonl")
    assert [f.code for f in raw.findings] == ["data/template-mismatch"]
    assert set(raw.missing) == {"<|system|>", "<|user|>", "<|end|>", "<|assistant|>",
                                "generation prompt '<|assistant|>'"}
    assert raw.carried["<s>"] == raw.samples == 8  # bos is there: raw text after bos
    added = [tok for op, tok in raw.shown if op == "+"]  # the served turns: system, user, then the generation prompt
    assert added == ["<|system|>", "<|end|>", "<|user|>", "<|end|>", "<|assistant|>"]
    assert not [tok for op, tok in raw.shown if op == "-"]  # the content itself is the same
    assert "[+<|user|>]" in raw.findings[0].detail
    assert raw.side is not None and [s.part for s in raw.side.served] == ["system", "user", "generation prompt", "reply"]
    templated = chat.check_template(demo_dir / "hidden-states-chat", demo_dir / "target", chat=demo_dir / "chat.jsonl")
    assert templated.findings == () and templated.missing == [] and templated.shown == ()


def test_served_conversations_accept_otherwise_than_the_raw_dump(demo_dir: Path) -> None:
    draft = demo_dir / "speculators"
    samples, model = chat.chat_samples(draft, demo_dir / "target", demo_dir / "chat.jsonl", new_tokens=24)
    served = estimate_acceptance(draft, samples, target=model, fixed=False, served_vocab=True, traffic="chat")
    dump = estimate_acceptance(draft, demo_dir / "hidden-states-raw", target=demo_dir / "target", fixed=False)
    templated = estimate_acceptance(draft, demo_dir / "hidden-states-chat", target=demo_dir / "target", fixed=False)
    a, b, c = (r.accept_len("as_trained") for r in (served, dump, templated))
    assert a is not None and b is not None and c is not None
    assert abs(a - c) < 1e-6, (a, c)  # the templated dump holds exactly the served conversations
    # the raw dump's estimate is not what served conversations accept (per start, every position alike; per round
    # the walk lands on fewer of the positions where they differ)
    start_a, start_b = (r.views["as_trained"].per_start for r in (served, dump))
    assert start_a is not None and start_b is not None and a != b
    assert abs(start_a.accept_len - start_b.accept_len) > 0.05, (start_a, start_b)
    assert served.traffic is not None and served.traffic.source == "chat" and served.traffic.vocab is not None


@pytest.mark.parametrize("content,problem", [
    ("{not json\n", "line 1: not JSON"),
    ('[{"role": "user"}]\n', "line 1: every message needs a string"),
    ('[]\n', "line 1: a conversation is a non-empty JSON list"),
    ("\n\n", "no conversations"),
    ('{"messages": [{"role": "user", "content": 3}]}\n', "line 1: every message needs a string"),
    ("[" * 100_000 + "]" * 100_000 + "\n", "line 1: nested too deeply"),
    ('\n[{"role": "user", "content": "x", "n": 1' + "0" * 5000 + '}]\n', "line 2: not JSON"),
])
def test_bad_chat_files_are_one_line_errors(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(content)
    with pytest.raises(CheckpointError, match=problem):
        chat.read_chat(path)


def test_a_line_separator_inside_a_string_is_text(tmp_path: Path) -> None:
    """JSON Lines end at \\n only: json.dumps(ensure_ascii=False) writes U+2028 raw inside a string."""
    path = tmp_path / "chat.jsonl"
    path.write_text('[{"role": "user", "content": "w9\u2028w10"}]\n[{"role": "user", "content": "w3"}]\n',
                    encoding="utf-8")
    conversations = chat.read_chat(path)
    assert [c[0]["content"] for c in conversations] == ["w9\u2028w10", "w3"]


def test_chat_file_must_be_a_bounded_regular_file(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(CheckpointError, match="expected a chat file"):
        chat.read_chat(tmp_path)
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps([{"role": "user", "content": "x" * 200}]) + "\n")
    monkeypatch.setattr(chat, "MAX_CHAT_BYTES", 100)
    with pytest.raises(CheckpointError, match="over the 100 bytes limit"):
        chat.read_chat(big)


def test_cli_chat_with_sampling(demo_dir: Path, capsys) -> None:
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--chat",
                   str(demo_dir / "chat.jsonl"), "--limit", "2", "--new-tokens", "8", "--temperature", "0.7",
                   "--top-p", "0.9", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    traffic = out["results"]["acceptance"]["traffic"]
    assert traffic["source"] == "chat" and traffic["sampled"]["as_trained"]["top_p"] == 0.9
    assert traffic["sampled"]["as_trained"]["exact_chain"] is True
    assert traffic["served_vocab"]["starts"] > 0


@pytest.mark.parametrize("args,problem", [
    (["--top-p", "0.9"], "--top-p / --top-k need --temperature"),
    (["--temperature", "0"], "--temperature must be"),
])
def test_cli_sampling_flags_checked(demo_dir: Path, capsys, args: list[str], problem: str) -> None:
    rc = cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--chat",
                   str(demo_dir / "chat.jsonl"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and problem in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_doctor_chat_scores_the_served_conversations(demo_dir: Path, capsys) -> None:
    """`doctor --chat` runs the live acceptance over the conversations as served: the same figures `acceptance
    --chat` prints for the same draft, target, engine and conversations."""
    common = [str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--engine", "vllm==0.33.0",
              "--chat", str(demo_dir / "chat.jsonl"), "--json"]
    rc = cli.main(["doctor", *common, "--no-weights"])
    doctor = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    acceptance = doctor["results"]["acceptance"]
    assert acceptance["traffic"]["source"] == "chat" and acceptance["traffic"]["served_vocab"]["starts"] > 0
    assert "template" not in doctor["results"]  # no dump to check against the conversations
    assert cli.main(["acceptance", *common, "--no-fixed"]) == 0
    alone = json.loads(capsys.readouterr().out)["results"]["acceptance"]
    for view in ("as_trained", "as_served"):
        assert acceptance[view]["accept_len"] == alone[view]["accept_len"]
        assert acceptance[view]["positions"] == alone[view]["positions"] > 0


@pytest.mark.parametrize("dump,mismatch", [("hidden-states-raw", True), ("hidden-states-chat", False)])
def test_doctor_checks_the_dump_against_the_chat_given(demo_dir: Path, capsys, dump: str, mismatch: bool) -> None:
    rc = cli.main(["doctor", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--data",
                   str(demo_dir / dump), "--chat", str(demo_dir / "chat.jsonl"), "--no-weights", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    codes = [f["code"] for f in out["findings"]]
    assert ("data/template-mismatch" in codes) is mismatch
    assert out["results"]["acceptance"]["as_trained"]["positions"] > 0  # scored on the dump, not the chat
    assert out["results"]["acceptance"].get("traffic") is None


def test_doctor_chat_with_prompts_is_refused(demo_dir: Path, capsys) -> None:
    rc = cli.main(["doctor", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--prompts", "p",
                   "--chat", str(demo_dir / "chat.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "not both" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("template,note", [
    (None, "chat template not checked: the target's tokenizer has no chat_template"),
    ("{% for m in messages %}{{ m['content'] }} {% endfor %}", "chat template check inconclusive"),
])
def test_a_template_check_that_cannot_tell_says_so(demo_dir: Path, tmp_path: Path, capsys, template, note) -> None:
    """No chat_template (a base model), or one whose rendering holds no special token: a note, not silence."""
    import shutil

    target = tmp_path / "target"
    shutil.copytree(demo_dir / "target", target)
    (target / "chat_template.jinja").unlink()
    if template is not None:
        (target / "chat_template.jinja").write_text(template)
    rc = cli.main(["provenance", "--data", str(demo_dir / "hidden-states-raw"), "--target", str(target), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and "data/template-mismatch" not in [f["code"] for f in out["findings"]]
    assert any(n.startswith(note) for n in out["notes"]), out["notes"]
    rc = cli.main(["provenance", "--data", str(demo_dir / "hidden-states-chat"), "--target", str(demo_dir / "target"),
                   "--json"])
    assert not any("chat template" in n for n in json.loads(capsys.readouterr().out)["notes"])

"""A checkpoint or target directory is untrusted input: code in it never runs, its links never lead out, its chat
template runs bounded, and a bad chat line or tokenizer file is one line naming the file (issue 36, items 1-3).

Every test builds its directory from the demo's target (its tiny word-level tokenizer and chat template) and
changes one thing. Code shipped in a directory would write a marker file beside it when imported; the marker never
appears, whatever stdin answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _builders import sglang_config
from eagle3lens import cli
from eagle3lens.chat_template import render_chat
from eagle3lens.errors import CheckpointError
from eagle3lens.probes import chat
from eagle3lens.probes.data import iter_samples
from eagle3lens.probes.served_sampling import resolve_sampling
from unit.engines.test_execute import _eagle, engine  # noqa: F401  (the miniature sglang package fixture)

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"
CUSTOM = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}


pytestmark = pytest.mark.usefixtures("one_thread")


def _copy_target(demo_dir: Path, dest: Path) -> Path:
    shutil.copytree(demo_dir / "target", dest)
    return dest


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _with_code(directory: Path, marker: Path, model_type: str | None = "evil_arch", tokenizer: bool = True) -> Path:
    """``directory`` with evil.py and configs whose auto_map names it (an unknown model_type: only it reads it)."""
    (directory / "evil.py").write_text(EVIL.format(marker=str(marker)))
    changes = {"auto_map": CUSTOM, **({"model_type": model_type} if model_type else {})}
    _edit_json(directory / "config.json", **changes)
    if tokenizer:
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config.pop("tokenizer_class", None)
        config["auto_map"] = {"AutoTokenizer": [None, "evil.EvilTok"]}
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def _run(args: list[str], stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "eagle3lens", *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=600, cwd=cwd, env=env)


def _one_line_error(capsys, *args: str) -> str:
    assert cli.main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- 1. code in an input never runs ----------------------------------------------------------------------------
def _paths(demo_dir: Path, target: Path, work: Path) -> dict[str, list[str]]:
    (work / "prompts.txt").write_text("w5 w6 w7\n")
    draft = str(demo_dir / "speculators")
    return {
        "vocab": ["vocab", draft, "--tokenizer", str(target), "--text", str(work / "prompts.txt")],
        "trace": ["trace", "--target", str(target), "--draft", draft],
        "acceptance --prompts": ["acceptance", draft, "--target", str(target), "--prompts", str(work / "prompts.txt")],
        "acceptance --chat": ["acceptance", draft, "--target", str(target), "--chat", str(demo_dir / "chat.jsonl")],
    }


@pytest.mark.slow
@pytest.mark.parametrize("stdin", ["y\n", ""])
def test_code_a_target_names_never_runs_and_the_refusal_is_one_line(demo_dir: Path, tmp_path: Path, stdin: str) -> None:
    marker = tmp_path / "MARKER"
    target = _with_code(_copy_target(demo_dir, tmp_path / "target"), marker)
    for name, args in _paths(demo_dir, target, tmp_path).items():
        done = _run([*args, "--json"], stdin, tmp_path)
        assert not marker.exists(), name
        assert done.returncode == 2 and done.stdout == "", (name, done.stdout[-300:])
        err = done.stderr.strip()
        assert len(err.splitlines()) == 1 and "custom code" in err and "never runs code" in err, (name, err)
        assert "[y/N]" not in done.stdout + done.stderr


@pytest.mark.slow
def test_code_beside_a_known_architecture_is_not_run_and_said_in_a_note(demo_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    target = _with_code(_copy_target(demo_dir, tmp_path / "target"), marker, model_type=None, tokenizer=False)
    for stdin in ("y\n", ""):
        done = _run(["trace", "--target", str(target), "--draft", str(demo_dir / "speculators"), "--json"], stdin,
                    tmp_path)
        assert done.returncode == 0 and not marker.exists(), done.stderr[-500:]
        notes = json.loads(done.stdout)["notes"]
        assert f"{target / 'config.json'}: auto_map names custom code (evil.py); eagle3lens never runs code from an " \
               "input: read with transformers' built-in classes" in notes


@pytest.mark.slow  # about 20 s or more on an idle 2-core machine (test-fast leaves it out)
@pytest.mark.parametrize("command", ["keys", "doctor"])
def test_execute_never_runs_code_the_draft_config_names(engine: Path, tmp_path: Path, command: str) -> None:  # noqa: F811
    draft = _eagle(tmp_path)
    marker = tmp_path / "MARKER"
    (draft / "evil.py").write_text(EVIL.format(marker=str(marker)))
    (draft / "config.json").write_text(json.dumps({**sglang_config(), "model_type": "evil_arch", "auto_map": CUSTOM}))
    for stdin in ("y\n", ""):
        extra = ["--no-weights"] if command == "doctor" else []
        done = _run([command, str(draft), "--engine", "installed", "--execute", "--engine-root", str(engine), *extra,
                     "--json"], stdin, tmp_path)
        assert not marker.exists()
        out = json.loads(done.stdout)  # nothing but the report on stdout
        assert "[y/N]" not in done.stdout + done.stderr
        assert any("auto_map names custom code (evil.py)" in n for n in out["notes"])


# -- 2. links out of a directory are refused -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tokenizer.json", "chat_template.jinja", "generation_config.json",
                                  "tokenizer_config.json"])
def test_a_tokenizer_file_linking_outside_the_target_is_refused(demo_dir: Path, tmp_path: Path, capsys,
                                                                 name: str) -> None:
    target = _copy_target(demo_dir, tmp_path / "target")
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    (target / name).rename(outside)
    (target / name).symlink_to(outside)
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(demo_dir / "chat.jsonl"))
    assert err.endswith(f"{target / name}: {name} leads outside the checkpoint directory (to {outside})")


def test_a_link_that_stays_inside_the_target_is_followed(demo_dir: Path, tmp_path: Path) -> None:
    target = _copy_target(demo_dir, tmp_path / "target")
    (target / "files").mkdir()
    (target / "tokenizer.json").rename(target / "files" / "tokenizer.json")
    (target / "tokenizer.json").symlink_to(Path("files") / "tokenizer.json")
    tokenizer = chat.load_tokenizer(target)
    assert chat.render(tokenizer, [{"role": "user", "content": "w7"}])[:2] == [1, 4]


def test_generation_config_linking_outside_is_not_used(demo_dir: Path, tmp_path: Path) -> None:
    target = _copy_target(demo_dir, tmp_path / "target")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"temperature": 0.01, "top_p": 0.1}))
    (target / "generation_config.json").unlink()
    (target / "generation_config.json").symlink_to(secret)
    for engine_name in ("vllm", "sglang"):
        with pytest.raises(CheckpointError, match="generation_config.json leads outside the checkpoint directory"):
            resolve_sampling(engine_name, target=target, endpoint="chat")


def test_a_config_linking_outside_a_config_only_target_is_refused(demo_dir: Path, tmp_path: Path, capsys) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").symlink_to(demo_dir / "target" / "config.json")
    for args in (["wiring", "--target", str(target), "--draft", str(demo_dir / "speculators"), "--engine",
                  "sglang==0.5.11", "--log", str(demo_dir / "sglang.log")],
                 ["trace", "--target", str(target), "--draft", str(demo_dir / "speculators"), "--device", "meta"]):
        err = _one_line_error(capsys, *args)
        assert f"{target / 'config.json'}: config.json leads outside the checkpoint directory" in err


def test_a_dump_sample_linking_outside_the_dump_is_refused(demo_dir: Path, tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    shutil.copytree(demo_dir / "hidden-states", dump)
    first = sorted(dump.rglob("hs_*.safetensors"))[0]
    outside = tmp_path / first.name
    first.rename(outside)
    first.symlink_to(outside)
    with pytest.raises(CheckpointError, match="hidden-state sample leads outside"):
        next(iter_samples(dump))


# -- 3. chat templates run bounded -----------------------------------------------------------------------------
LOOPS = ("{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}"
         "{% endfor %}{% endfor %}")


def _with_template(demo_dir: Path, tmp_path: Path, template: str) -> Path:
    target = _copy_target(demo_dir, tmp_path / "target")
    (target / "chat_template.jinja").write_text(template)
    return target


def test_a_looping_template_is_stopped_at_its_deadline(demo_dir: Path, tmp_path: Path) -> None:
    target = _with_template(demo_dir, tmp_path, LOOPS)
    tokenizer = chat.load_tokenizer(target)
    with pytest.raises(CheckpointError) as caught:
        render_chat(tokenizer, [{"role": "user", "content": "w5"}], seconds=0.2)
    assert str(caught.value) == (f"{target / 'chat_template.jinja'}: the chat template ran past its 0.2 s bound: "
                                 "stopped (a template is code from the model directory)")


@pytest.mark.slow
def test_a_looping_template_through_the_cli_is_one_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    target = _with_template(demo_dir, tmp_path, "{{ bos_token }}" + LOOPS.replace("{% endfor %}", "x{% endfor %}", 1))
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(demo_dir / "chat.jsonl"))
    assert err.endswith(f"{target / 'chat_template.jinja'}: the chat template ran past its 5 s bound: stopped (a "
                        "template is code from the model directory)")


@pytest.mark.parametrize("template", ["{{ 'x' * 3000000000 }}", "{{ 'x'|center(3000000000) }}",
                                      "{{ '%3000000000d' % 1 }}", "{% set s = 'x' * 100000 %}{{ s|replace('x', s) }}",
                                      "{% set ns = namespace(s='x' * 1000) %}{% for i in range(40) %}"
                                      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"])
def test_a_template_building_a_huge_string_is_stopped(demo_dir: Path, tmp_path: Path, capsys, template: str) -> None:
    target = _with_template(demo_dir, tmp_path, template)
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(demo_dir / "chat.jsonl"))
    assert f"{target / 'chat_template.jinja'}: the chat template " in err and err.endswith(
        "stopped (a template is code from the model directory)")
    assert "characters (the bound is 16,777,216)" in err or "a width of ten million characters" in err


def test_the_bounded_rendering_is_transformers_rendering(demo_dir: Path, tmp_path: Path) -> None:
    """Loop controls, namespace, tojson, dict, raise_exception's absence, the generation tag, bos/eos and the
    generation prompt: what apply_chat_template renders, character for character."""
    template = ("{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% if m['role'] == 'skip' %}"
                "{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}<|{{ m['role'] }}|> {{ m['content']|tojson }} "
                "{% if loop.last %}{{ dict(n=ns.n)|tojson }}{% endif %}{% generation %}<|end|>{% endgeneration %} "
                "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}{{ eos_token if false }}")
    target = _with_template(demo_dir, tmp_path, template)
    tokenizer = chat.load_tokenizer(target)
    conversation = [{"role": "system", "content": "w9 \"q\""}, {"role": "skip", "content": "w3"},
                    {"role": "user", "content": "w5 é"}]
    for prompt in (True, False):
        ours = render_chat(tokenizer, conversation, add_generation_prompt=prompt)
        assert ours == tokenizer.apply_chat_template(conversation, add_generation_prompt=prompt, tokenize=False)
        assert ours.startswith("<s><|system|> \"w9 \\\"q\\\"\"")


def test_a_template_refusing_the_conversation_is_one_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    target = _with_template(demo_dir, tmp_path, "{{ raise_exception('System role not supported\nat all') }}")
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(demo_dir / "chat.jsonl"))
    assert err.endswith(f"{target / 'chat_template.jinja'}: the chat template refuses the conversation (TemplateError: "
                        "System role not supported at all)")


# -- minor: chat lines and tokenizer files ---------------------------------------------------------------------
def test_a_lone_surrogate_in_a_chat_message_names_the_file_and_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "chat.jsonl"
    file.write_text('[{"role": "user", "content": "w5"}]\n[{"role": "user", "content": "w5 \\ud800"}]\n')
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"),
                          "--chat", str(file))
    assert err.endswith(f"{file}: line 2: message 1 holds a lone surrogate (\\ud800), which is not text: a server "
                        "refuses it")


def test_a_long_chat_line_is_refused_before_it_is_rendered(demo_dir: Path, tmp_path: Path, capsys) -> None:
    """The template refuses every conversation it renders: the length refusal naming the line comes first."""
    target = _with_template(demo_dir, tmp_path, "{{ raise_exception('rendered') }}")
    file = tmp_path / "chat.jsonl"
    file.write_text('[{"role": "user", "content": "w5"}]\n\n' +
                    json.dumps([{"role": "user", "content": " ".join(["w5"] * 3_000_000)}]) + "\n")
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(file), "--limit", "1")
    assert "rendered" in err  # --limit 1: only the first line is read, and rendered
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(file))
    assert err.startswith(f"eagle3lens: error: {file}: line 3: 6000000 characters of content, more than the target's "
                          "max_position_embeddings")


def test_a_chat_line_too_long_once_rendered_names_the_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "chat.jsonl"
    file.write_text(json.dumps([{"role": "user", "content": " ".join(["w5"] * 200)}]) + "\n")
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"),
                          "--chat", str(file), "--new-tokens", "200")
    assert f"{file}: line 1 with 200 new tokens has " in err and "max_position_embeddings" in err


def test_a_target_without_a_tokenizer_says_what_chat_needs(demo_dir: Path, capsys) -> None:
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "eagle"), "--target", str(demo_dir / "eagle"),
                          "--chat", str(demo_dir / "chat.jsonl"))
    assert err == (f"eagle3lens: error: {demo_dir / 'eagle'}: no tokenizer to render chat with: --target must be the "
                   "HF target model directory with its tokenizer (tokenizer.json / tokenizer_config.json)")


def test_a_huge_tokenizer_file_is_refused_by_its_size(demo_dir: Path, tmp_path: Path, capsys) -> None:
    target = _copy_target(demo_dir, tmp_path / "target")
    with open(target / "tokenizer.json", "r+b") as fh:
        fh.truncate(150 * 1024 * 1024)  # sparse: no 150 MB written
    err = _one_line_error(capsys, "vocab", str(demo_dir / "speculators"), "--tokenizer", str(target), "--text",
                          str(demo_dir / "chat.jsonl"))
    assert err.endswith(f"{target / 'tokenizer.json'}: tokenizer.json is 150 MiB, over the 64 MiB limit for a "
                        "config, tokenizer or template file")


def test_a_deeply_nested_tokenizer_file_is_one_line(demo_dir: Path, tmp_path: Path, capsys) -> None:
    target = _copy_target(demo_dir, tmp_path / "target")
    (target / "tokenizer.json").write_text("[" * 200_000 + "]" * 200_000)
    err = _one_line_error(capsys, "acceptance", str(demo_dir / "speculators"), "--target", str(target), "--chat",
                          str(demo_dir / "chat.jsonl"))
    assert err.endswith(f"{target / 'tokenizer.json'}: tokenizer.json is nested too deeply (more than 64 levels)")


def test_chat_capture_reports_progress(demo_dir: Path, capsys) -> None:
    calls: list[tuple[int, int | None, str]] = []
    samples, _ = chat.chat_samples(demo_dir / "speculators", demo_dir / "target", demo_dir / "chat.jsonl",
                                   new_tokens=4, limit=3, progress=lambda d, t, label: calls.append((d, t, label)))
    assert len(samples) == 3
    for label in ("rendering the chat", "capturing the target's states"):
        assert [(d, t) for d, t, lab in calls if lab == label] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert cli.main(["acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--chat",
                     str(demo_dir / "chat.jsonl"), "--limit", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"]["acceptance"] and "conversation" not in captured.err

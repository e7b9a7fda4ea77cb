"""The walkthroughs' page inputs: a real demo's manifest read with every part kept inside its directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lens.errors import UsageError
from eagle3lens.notebook import pages

REAL = {"target": "target", "draft": "draft", "draft_raw": "draft-raw", "chat": "chat.jsonl",
        "dumps": {"train": "dumps/train", "train_raw": "dumps/train-raw"},
        "launch": {"engine": "vllm", "num_speculative_tokens": 3}}


def manifest(tmp_path: Path, real: object) -> Path:
    (tmp_path / "manifest.json").write_text(json.dumps({"tool": "eagle3lens demo --real", "real": real}))
    return tmp_path


def test_a_real_demo_names_its_parts_and_its_k(tmp_path: Path) -> None:
    real = pages.real_demo(manifest(tmp_path, REAL))
    assert (real.target, real.draft_raw, real.chat) == (tmp_path / "target", tmp_path / "draft-raw",
                                                         tmp_path / "chat.jsonl")
    assert real.dumps == {"train": tmp_path / "dumps/train", "train_raw": tmp_path / "dumps/train-raw"}
    assert (real.steps, real.engine, real.draft_specforge) == (3, "vllm", None)


@pytest.mark.parametrize("real,problem", [
    ({**REAL, "target": "../elsewhere"}, "real.target leads outside the demo directory"),
    ({**REAL, "chat": "/etc/passwd"}, "real.chat leads outside the demo directory"),
    ({**REAL, "draft": 7}, "real.draft must be a path relative to the demo"),
    ({**REAL, "dumps": ["train"]}, "real.dumps must name the dumps"),
    ("not a dict", "no \"real\" key: not a real demo"),
])
def test_a_manifest_that_is_not_a_real_demo_is_one_line(tmp_path: Path, real: object, problem: str) -> None:
    with pytest.raises(UsageError) as caught:
        pages.real_demo(manifest(tmp_path, real))
    message = str(caught.value)
    assert problem in message and str(tmp_path / "manifest.json") in message and "\n" not in message


def test_the_template_cost_is_the_dump_less_the_served_traffic(demo_dir: Path) -> None:
    from eagle3lens.probes.acceptance import estimate_acceptance
    from eagle3lens.probes.budget import acceptance_budget

    draft, target = demo_dir / "speculators", demo_dir / "target"
    raw = estimate_acceptance(draft, demo_dir / "hidden-states-raw", target=target, fixed=False, steps=3)
    chat = estimate_acceptance(draft, demo_dir / "hidden-states-chat", target=target, fixed=False, steps=3)
    cost = pages.template_cost(raw, chat)
    # the budget's figure (doctor and acceptance print the same): rounded to 0.01, within the draft vocabulary
    assert cost == pytest.approx(round(raw.in_vocab_accept_len, 2) - round(chat.in_vocab_accept_len, 2))
    assert cost == -acceptance_budget(chat, promise=raw).row("template").delta
    assert pages.template_cost(chat, chat) == 0.0

"""What the server sends beside what the dump held: a tiny tokenizer with a real ChatML template (SmolLM2's, a
default system prompt included), built here."""

from __future__ import annotations

from typing import Any

import pytest

from eagle3lens.probes import served_render

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
WORDS = ("system", "user", "assistant", "You", "are", "helpful", "hi", "there", "what", "is", "rain", "water",
         "falls", "<s>", "\n")


@pytest.fixture(scope="module")
def chatml(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A ChatML tokenizer (WordLevel, newline a token of its own), saved and reloaded as a target ships it."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate([*specials, *WORDS])}
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n|[^\s]+"), "removed", invert=True)  # words and newlines
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
                                  pad_token="<|im_end|>", additional_special_tokens=specials[1:3])
    tok.chat_template = CHATML
    path = tmp_path_factory.mktemp("chatml")
    tok.save_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)


def ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_the_served_side_is_the_template_then_the_generation_prompt_then_the_reply(chatml: Any) -> None:
    conversation = [{"role": "user", "content": "what is rain"}]
    reply = ids(chatml, "water falls")
    raw = ids(chatml, "what is rain \n") + reply  # the same conversation rendered without the template
    side = served_render.side_by_side(chatml, raw, [False] * (len(raw) - 2) + [True, True], [conversation])
    assert side.conversation == "the chat file's conversation 1"
    assert [s.part for s in side.served] == ["user", "generation prompt", "reply"]
    served = [t for s in side.served for t in s.tokens]
    # exactly what apply_chat_template(add_generation_prompt=True) renders, then the dump's own reply tokens
    rendered = chatml.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert served == [chatml.decode([i]) for i in ids(chatml, rendered) + reply]
    assert served[:4] == ["<|im_start|>", "system", "\n", "You"]  # the template's default system prompt
    assert side.served[1].tokens == ("<|im_start|>", "assistant", "\n")  # the generation prompt, before the reply
    assert side.served[-1].tokens == side.dump[-1].tokens == ("water", "falls")
    assert side.dump[0].tokens == ("what", "is", "rain", "\n")
    # the markers on each side: the template's system default and the user turn open twice, the prompt once more
    prompt = "generation prompt " + repr(chatml.decode(ids(chatml, "<|im_start|>assistant\n")))
    assert side.markers == {"<|im_start|>": (0, 3), "<|im_end|>": (0, 2), prompt: (0, 1)}
    added, shared = ([t for op, t in side.aligned if op == want] for want in "+=")
    assert added.count("<|im_start|>") == 3 and "<|im_start|>" not in shared
    assert shared[:3] == ["what", "is", "rain"] and shared[-2:] == ["water", "falls"]


def test_a_templated_dump_matches_what_is_served(chatml: Any) -> None:
    conversation = [{"role": "system", "content": "You are helpful"}, {"role": "user", "content": "hi there"}]
    prompt = ids(chatml, chatml.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False))
    sample = prompt + ids(chatml, "water falls")
    side = served_render.side_by_side(chatml, sample, [False] * len(prompt) + [True, True],
                                      [[{"role": "user", "content": "what is rain"}], conversation])
    assert side.conversation == "the chat file's conversation 2"  # the one the prompt holds, not the first
    assert [s.part for s in side.served] == ["system", "user", "generation prompt", "reply"]
    assert all(op == "=" for op, _ in side.aligned)
    assert all(dump == served for dump, served in side.markers.values()) and side.markers["<|im_start|>"] == (3, 3)


def test_without_its_conversation_the_prompt_is_one_user_turn(chatml: Any) -> None:
    sample = ids(chatml, "what is rain water falls")
    side = served_render.side_by_side(chatml, sample, [False, False, False, True, True],
                                      [[{"role": "user", "content": "hi there"}]])
    assert side.conversation.startswith("the sample's prompt text as one user turn")
    rendered = chatml.apply_chat_template([{"role": "user", "content": "what is rain"}], add_generation_prompt=True,
                                          tokenize=False)
    assert [t for s in side.served[:-1] for t in s.tokens] == [chatml.decode([i]) for i in ids(chatml, rendered)]


def test_the_template_runs_bounded(chatml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendering goes through the bounded sandbox (chat_template.render_chat), not transformers' own."""
    from eagle3lens.errors import CheckpointError

    monkeypatch.setattr(chatml, "chat_template", "{{ 'x' * 3000000000 }}")
    with pytest.raises(CheckpointError, match="would build a value of 3,000,000,000 characters"):
        served_render.side_by_side(chatml, [6, 7], [False, True], [[{"role": "user", "content": "hi"}]])

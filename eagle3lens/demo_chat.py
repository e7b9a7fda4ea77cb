"""The demo's served traffic: a tiny word-level tokenizer with a chat template, chat conversations, and two dumps
of the same conversations, one rendered with the template (as served) and one without it (raw text).

The tokenizer is built in code (``tokenizers`` WordLevel model, no download): ids 0..2 are ``<unk> <s> </s>``
(the target's bos 1 / eos 2), 3..6 the template's role markers, and every other id ``i`` is the word ``w{i}``,
so the demo's token streams decode to text and back without loss.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
SPECIALS = ("<unk>", "<s>", "</s>", *MARKERS)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}")
SYSTEM = "w9 w17 w33 w12"  # the served system prompt
CONVERSATIONS, USER_WORDS, REPLY_TOKENS = 8, 12, 24


def build_tokenizer(vocab_size: int) -> Any:
    """A PreTrainedTokenizerFast over a WordLevel model: specials, then ``w{i}`` for every other id."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  additional_special_tokens=list(MARKERS))
    tok.chat_template = CHAT_TEMPLATE
    return tok


def save_tokenizer(tokenizer: Any, path: Path) -> None:
    """The tokenizer files beside the target's weights (what ``AutoTokenizer.from_pretrained`` reads)."""
    tokenizer.save_pretrained(str(path))


def conversations(gen: torch.Generator, low_ids: int) -> list[list[dict[str, str]]]:
    """System prompt + one user turn of low-id words each (the words the demo's prompts use)."""
    out = []
    for _ in range(CONVERSATIONS):
        words = torch.randint(len(SPECIALS), low_ids, (USER_WORDS,), generator=gen).tolist()
        out.append([{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": " ".join(f"w{w}" for w in words)}])
    return out


def write_chat(path: Path, convs: list[list[dict[str, str]]]) -> None:
    path.write_text("".join(json.dumps(c) + "\n" for c in convs), encoding="utf-8")


def rendered(tokenizer: Any, convs: list[list[dict[str, str]]], template: bool) -> torch.Tensor:
    """[B, T] ids: with the served template (generation prompt on), or the contents as raw text after bos."""
    rows = []
    for conv in convs:
        if template:
            ids = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            rows.append(tokenizer(ids, add_special_tokens=False)["input_ids"])
        else:
            text = " ".join(m["content"] for m in conv)
            rows.append([tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"]])
    return torch.tensor(rows, dtype=torch.long)


def continued(target: Any, prompts: torch.Tensor, new_tokens: int = REPLY_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts continued greedily by the target (plain forwards); the loss mask covers the reply only."""
    ids = prompts
    with torch.no_grad():
        for _ in range(new_tokens):
            ids = torch.cat([ids, target(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, prompts.shape[1]:] = True
    return ids, mask

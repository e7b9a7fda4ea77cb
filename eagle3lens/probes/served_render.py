"""What the server sends for a conversation, beside what the training data held for it.

    side = side_by_side(tokenizer, sample_ids, loss_mask, conversations)
    [s.part for s in side.served]       # ['system', 'user', 'generation prompt', 'reply']
    side.markers["<|im_start|>"]        # (0, 3): in the dump, served

A chat server renders the request's messages with the target tokenizer's chat template, generation prompt on
(``apply_chat_template(messages, add_generation_prompt=True)``), and the model's reply follows that prompt. The
served side is exactly that: each message's part of the rendering, the generation prompt, then the dump's own reply
tokens. The dump side is the sample's tokens as stored (its prompt, then its reply). The conversation is the chat
file's whose contents the sample's prompt holds (by their tokens), else the sample's prompt text as one user
turn. The markers are the template's special tokens in the served rendering (role and turn tokens) and its
generation prompt, each counted on both sides.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PROMPT_SHOWN = 160  # tokens of each side's prompt shown (a real system prompt and a user turn fit)
REPLY_SHOWN = 12  # tokens of the reply shown: the same on both sides
CANDIDATES = 64  # chat conversations held against the sample to find its own
HELD = 0.9  # share of a conversation's content tokens the sample's prompt must hold to be that conversation
Conversation = list[dict[str, str]]


@dataclass(frozen=True)
class Segment:
    """One part of a side: a message's rendering (its role), the generation prompt, the prompt or the reply."""

    part: str
    tokens: tuple[str, ...]  # each token as the tokenizer decodes it alone


@dataclass(frozen=True)
class SideBySide:
    """One sample as the dump held it and its conversation as the server sends it, with the markers on each."""

    conversation: str  # where the served conversation came from
    dump: tuple[Segment, ...]
    served: tuple[Segment, ...]
    markers: dict[str, tuple[int, int]]  # marker label -> (count in the dump's sample, count served)
    aligned: tuple[tuple[str, str], ...]  # ("=" both | "-" dump only | "+" served only, token)

    def to_dict(self) -> dict[str, Any]:
        return {"conversation": self.conversation,
                "dump": [{"part": s.part, "tokens": list(s.tokens)} for s in self.dump],
                "served": [{"part": s.part, "tokens": list(s.tokens)} for s in self.served],
                "markers": {k: {"dump": a, "served": b} for k, (a, b) in self.markers.items()}}


def render(tokenizer: Any, conversation: Conversation, generation_prompt: bool = True) -> list[int]:
    """Token ids of ``conversation`` as the server renders it (template text, then tokenized without specials);
    the template runs within a bound on time and size (``chat_template.render_chat``)."""
    from ..chat_template import render_chat

    text = render_chat(tokenizer, conversation, add_generation_prompt=generation_prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def served_parts(tokenizer: Any, conversation: Conversation) -> list[tuple[str, list[int]]]:
    """The served prompt by part: each message's share of the rendering (its role), then the generation prompt.

    A template whose rendering of the first messages is not the start of the whole one (it rewrites earlier turns)
    is shown as one part, ``conversation``."""
    whole = render(tokenizer, conversation, True)
    parts: list[tuple[str, list[int]]] = []
    done = 0
    for n, message in enumerate(conversation, 1):
        upto = render(tokenizer, conversation[:n], False)
        if upto[:done] != whole[:done] or whole[:len(upto)] != upto:
            return [("conversation", whole)]
        parts.append((message["role"], upto[done:]))
        done = len(upto)
    if done < len(whole):
        parts.append(("generation prompt", whole[done:]))
    return [(part, ids) for part, ids in parts if ids]


def closest(tokenizer: Any, prompt: Sequence[int], conversations: Sequence[Conversation]) -> int | None:
    """Index of the conversation (of the first :data:`CANDIDATES`) whose contents the prompt holds (at least
    :data:`HELD` of their tokens) and that shares the most tokens with it (Jaccard over token sets); None when no
    conversation is the prompt's."""
    have = set(prompt)
    best, best_score = None, 0.0
    for i, conversation in enumerate(conversations[:CANDIDATES]):
        words = set(tokenizer(" ".join(m["content"] for m in conversation), add_special_tokens=False)["input_ids"])
        if not words or len(have & words) < HELD * len(words):
            continue
        score = len(have & words) / len(have | words)
        if score > best_score:
            best, best_score = i, score
    return best


def _texts(tokenizer: Any, ids: Sequence[int]) -> tuple[str, ...]:
    return tuple(str(t) for t in tokenizer.batch_decode([[int(i)] for i in ids]))


def _count(ids: Sequence[int], run: tuple[int, ...]) -> int:
    """Non-overlapping occurrences of ``run`` in ``ids``."""
    n, i, found = len(run), 0, 0
    while i + n <= len(ids):
        if tuple(ids[i:i + n]) == run:
            found, i = found + 1, i + n
        else:
            i += 1
    return found


def marker_runs(tokenizer: Any, parts: Sequence[tuple[str, list[int]]]) -> dict[str, tuple[int, ...]]:
    """The served prompt's markers: each special token it holds (role and turn tokens, bos), and its generation
    prompt, by label -> token ids."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= {i for i, tok in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items()
                if getattr(tok, "special", False)}
    special.discard(tokenizer.unk_token_id)
    out: dict[str, tuple[int, ...]] = {}
    for _, ids in parts:
        for i in ids:
            if i in special:
                out.setdefault(str(tokenizer.convert_ids_to_tokens(i)), (i,))
    prompt = next((tuple(ids) for part, ids in parts if part == "generation prompt"), ())
    if prompt:
        out.setdefault(f"generation prompt {tokenizer.decode(list(prompt))!r}", prompt)
    return out


def side_by_side(tokenizer: Any, sample: Sequence[int], loss_mask: Sequence[bool],
                 conversations: Sequence[Conversation] = ()) -> SideBySide:
    """``sample`` (its prompt: the tokens before the first one ``loss_mask`` scores; the rest its reply) beside
    what the server sends for its conversation: the chat's closest one, else the prompt's text as one user turn."""
    ids = [int(i) for i in sample]
    start = next((k for k, m in enumerate(loss_mask) if m), len(ids))
    prompt, reply = ids[:start], ids[start:]
    pick = closest(tokenizer, prompt, conversations)
    if pick is not None:
        conversation, source = list(conversations[pick]), f"the chat file's conversation {pick + 1}"
    else:
        text = tokenizer.decode(prompt, skip_special_tokens=True).strip()
        conversation, source = [{"role": "user", "content": text}], ("the sample's prompt text as one user turn (no chat "
                                                                  "conversation is the sample's)")
    parts = served_parts(tokenizer, conversation)
    served_prompt = [i for _, p in parts for i in p]
    runs = marker_runs(tokenizer, parts)
    markers = {label: (_count(ids, run), _count(served_prompt + reply, run)) for label, run in runs.items()}
    shown_reply = reply[:REPLY_SHOWN]
    served: list[Segment] = []
    room = PROMPT_SHOWN
    for part, p in parts:
        if room > 0:
            served.append(Segment(part, _texts(tokenizer, p[:room])))
            room -= len(p)
    served.append(Segment("reply", _texts(tokenizer, shown_reply)))
    dump = (Segment("prompt", _texts(tokenizer, prompt[:PROMPT_SHOWN])), Segment("reply", _texts(tokenizer, shown_reply)))
    a, b = prompt[:PROMPT_SHOWN] + shown_reply, served_prompt[:PROMPT_SHOWN] + shown_reply
    ta, tb = _texts(tokenizer, a), _texts(tokenizer, b)
    aligned: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            aligned += [("=", t) for t in ta[i1:i2]]
        else:
            aligned += [("-", t) for t in ta[i1:i2]] + [("+", t) for t in tb[j1:j2]]
    return SideBySide(source, dump, tuple(served), markers, tuple(aligned))

"""The real demo's data: a built-in prompt set, the target's own replies to it, and the aux hidden states.

Training conversations are one user turn each (a template x a topic); the held-out ones use topics the training
set never saw. :func:`generate` renders them with the served chat template, continues them greedily with the target
(batched, with its KV cache, as a server would) and keeps, for every position, the target's aux hidden states (HF
``hidden_states`` indices, the inputs of those decoder layers) and final state as generation computes them: the
prompt's from the prefill, each reply token's from its decode step, so no second forward is needed. The final
state through the lm_head is the target's next-token distribution, the drafter's teacher. :func:`raw_states` is
the template-less twin: the same conversations and replies as plain text (no role markers, no system prompt), one
forward each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

TEMPLATES = (
    "Explain {} in simple terms.",
    "Write a short paragraph about {}.",
    "What are three interesting facts about {}?",
    "Why is {} important?",
    "Give me a short summary of {}.",
    "Describe {} to a child.",
    "What should a beginner know about {}?",
    "Write a short poem about {}.",
)
TRAIN_TOPICS = (
    "the moon", "volcanoes", "bread", "chess", "rainbows", "honey bees", "the ocean", "trains", "coffee", "music",
    "recycling", "the internet", "dinosaurs", "gardening", "clouds", "electricity", "photosynthesis", "the sun",
    "football", "libraries", "rivers", "cats", "dogs", "the human heart", "mountains", "bicycles", "vaccines",
    "airplanes", "money", "friendship", "sleep", "rain forests", "the brain", "computers", "the weather", "tea",
    "ancient Rome", "the piano", "deserts", "earthquakes", "the stars", "bridges", "apples", "sharks", "soap",
    "the post office", "wind turbines", "butterflies",
)
TEMPLATES_PER_TOPIC = 8  # 48 topics x 8 templates: 384 training conversations
HELD_OUT_TOPICS = ("penguins", "glaciers", "the printing press", "solar panels", "birds", "the olympic games",
                   "cheese", "lighthouses")
HELD_OUT_TEMPLATES = (0, 2, 5)  # three templates per held-out topic: 24 conversations


def train_conversations() -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": TEMPLATES[(j + 2 * m) % len(TEMPLATES)].format(topic)}]
            for j, topic in enumerate(TRAIN_TOPICS) for m in range(TEMPLATES_PER_TOPIC)]


def held_out_conversations() -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": TEMPLATES[i].format(topic)}] for topic in HELD_OUT_TOPICS
            for i in HELD_OUT_TEMPLATES]


@dataclass(frozen=True)
class Sequence:
    """One rendered conversation continued by the target: ids [T], aux [T or T-1, n_aux*H] (a generated
    sequence's last token was never fed back), ``reply_start`` (first reply position)."""

    ids: torch.Tensor
    aux: torch.Tensor
    last: torch.Tensor  # [like aux, H]: the target's final state after its norm (its next-token teacher)
    reply_start: int


def rendered(tokenizer: Any, conv: list[dict[str, str]], template: bool, reply: str = "") -> list[int]:
    """Token ids of ``conv`` as served (chat template, generation prompt on) or as raw text (contents, then the
    reply, no markers)."""
    if template:
        text = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer("\n".join(m["content"] for m in conv) + "\n\n" + reply, add_special_tokens=False)["input_ids"])


def generate(target: Any, tokenizer: Any, convs: list[list[dict[str, str]]], layers: list[int], new_tokens: int,
             batch: int, eos: int) -> list[Sequence]:
    """Each conversation rendered with the template and continued greedily (stopping after ``eos``), with the aux
    states generation computed; in input order. Prompts of similar length share a batch (left padding)."""
    prompts = [rendered(tokenizer, c, True) for c in convs]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    out: dict[int, Sequence] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        out.update(zip(chunk, greedy_batch(target, [prompts[i] for i in chunk], layers, new_tokens, eos), strict=True))
    return [out[i] for i in range(len(prompts))]


def greedy_batch(target: Any, prompts: list[list[int]], layers: list[int], new_tokens: int, eos: int) -> list[Sequence]:
    """One batch continued greedily with the target's KV cache: a prefill over the left-padded prompts, then one
    decode step per token, each keeping the aux states and final state it computed (only the last position goes
    through the lm_head)."""
    from transformers import DynamicCache

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), eos, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=target.config)
    aux: list[torch.Tensor] = []
    last: list[torch.Tensor] = []
    new: list[torch.Tensor] = []
    done = torch.zeros(len(prompts), dtype=torch.bool)
    with torch.no_grad():
        while len(new) < new_tokens and not done.all():
            res = target.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                               use_cache=True, output_hidden_states=True)
            aux.append(torch.cat([res.hidden_states[k] for k in layers], dim=-1))
            last.append(res.hidden_states[-1])  # the final state after the norm
            token = torch.where(done, eos, target.lm_head(res.hidden_states[-1][:, -1]).argmax(-1))
            new.append(token)
            done |= token == eos
            ids, positions = token[:, None], positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
    aux_all, last_all, replies = torch.cat(aux, dim=1), torch.cat(last, dim=1), torch.stack(new, dim=1).tolist()
    out = []
    for row, p in enumerate(prompts):
        reply = replies[row][:replies[row].index(eos) + 1] if eos in replies[row] else replies[row]
        seq, pad = torch.tensor(p + reply), width - len(p)
        rows = slice(pad, pad + len(seq) - 1)  # every position but the last token's
        out.append(Sequence(seq, aux_all[row, rows].contiguous(), last_all[row, rows].contiguous(), len(p)))
    return out


def raw_states(target: Any, tokenizer: Any, convs: list[list[dict[str, str]]], replies: list[str],
               layers: list[int], batch: int, pad: int) -> list[Sequence]:
    """The conversations with their replies as raw text (no template): one forward each batch (no lm_head), aux
    states and final state at every position; the reply starts after the contents."""
    seqs = [rendered(tokenizer, c, False, r) for c, r in zip(convs, replies, strict=True)]
    starts = [len(rendered(tokenizer, c, False)) for c in convs]
    out = []
    for start in range(0, len(seqs), batch):
        chunk = seqs[start:start + batch]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        for row, s in enumerate(chunk):  # right padding: causal attention never reads it
            ids[row, :len(s)] = torch.tensor(s)
        with torch.no_grad():
            res = target.model(input_ids=ids, output_hidden_states=True, use_cache=False)
        aux = torch.cat([res.hidden_states[k] for k in layers], dim=-1)
        for row, s in enumerate(chunk):
            out.append(Sequence(torch.tensor(s), aux[row, :len(s)].contiguous(),
                                res.hidden_states[-1][row, :len(s)].contiguous(), starts[start + row]))
    return out

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
TRAIN_TOPICS = (  # everyday subjects of nature, food, science, society, pastimes and work: 383 of them
    "the moon", "volcanoes", "rainbows", "the ocean", "clouds", "rivers", "mountains", "rain forests", "deserts",
    "earthquakes", "the stars", "the weather", "tornadoes", "hurricanes", "lakes", "caves", "islands", "waterfalls",
    "snow", "lightning", "tides", "coral reefs", "wetlands", "the seasons", "fossils", "rocks and minerals", "soil",
    "the water cycle", "the northern lights", "comets", "planets", "black holes", "the speed of light", "galaxies",
    "meteors", "the atmosphere", "oxygen", "carbon dioxide", "the desert climate", "forests", "grasslands",
    "the arctic", "the equator", "time zones", "fog", "hail", "drought", "floods", "wildfires", "sand dunes",
    "canyons", "geysers", "honey bees", "cats", "dogs", "sharks", "butterflies", "dinosaurs", "elephants", "whales",
    "dolphins", "frogs", "snakes", "owls", "horses", "cows", "ants", "spiders", "octopuses", "turtles", "lions",
    "tigers", "wolves", "bats", "squirrels", "rabbits", "parrots", "bears", "camels", "giraffes", "monkeys",
    "crocodiles", "jellyfish", "salmon", "earthworms", "mushrooms", "trees", "flowers", "cactus plants", "seeds",
    "bamboo", "moss", "algae", "oak trees", "sunflowers", "roses", "tomatoes", "potatoes", "rice", "wheat", "corn",
    "bananas", "oranges", "grapes", "bread", "coffee", "tea", "apples", "soap", "chocolate", "pizza", "pasta",
    "soup", "salt", "sugar", "milk", "eggs", "butter", "yogurt", "ice cream", "sandwiches", "breakfast",
    "cooking rice", "baking cookies", "spices", "vegetables", "fruit salad", "drinking water", "vitamins",
    "a healthy diet", "kitchen safety", "refrigerators", "ovens", "washing machines", "vacuum cleaners", "candles",
    "furniture", "houseplants", "cleaning a room", "laundry", "doing the dishes", "a grocery list", "table manners",
    "picnics", "electricity", "photosynthesis", "the sun", "vaccines", "the human heart", "the brain", "computers",
    "the internet", "magnets", "gravity", "atoms", "light", "sound", "heat", "friction", "energy", "batteries",
    "electric cars", "rockets", "satellites", "telescopes", "microscopes", "robots", "artificial intelligence",
    "smartphones", "email", "passwords", "video games", "programming", "databases", "spreadsheets", "the cloud",
    "cameras", "television", "radio", "the telephone", "GPS", "lasers", "x-rays", "DNA", "cells", "bacteria",
    "viruses", "the immune system", "bones", "muscles", "the lungs", "the stomach", "blood", "the eyes", "the ears",
    "teeth", "skin", "genes", "evolution", "chemical reactions", "acids and bases", "the periodic table", "metals",
    "plastic", "glass", "paper", "rubber", "steel", "concrete", "nuclear power", "wind turbines",
    "hydroelectric dams", "climate change", "pollution", "recycling", "composting", "clean energy", "ancient Rome",
    "ancient Egypt", "the pyramids", "castles", "knights", "the Vikings", "the Renaissance",
    "the industrial revolution", "democracy", "elections", "taxes", "banks", "money", "credit cards", "saving money",
    "budgets", "markets", "trade", "maps", "languages", "writing", "the alphabet", "books", "libraries", "museums",
    "newspapers", "the post office", "holidays", "birthdays", "weddings", "festivals", "music", "the piano",
    "the guitar", "the violin", "drums", "singing", "dancing", "painting", "drawing", "sculpture", "photography",
    "movies", "theater", "poetry", "novels", "fairy tales", "comic books", "architecture", "bridges", "skyscrapers",
    "roads", "trains", "airplanes", "bicycles", "ships", "buses", "subways", "cars", "traffic lights", "airports",
    "hotels", "restaurants", "hospitals", "schools", "universities", "farms", "factories", "offices", "cities",
    "villages", "neighbors", "families", "grandparents", "friendship", "teamwork", "kindness", "honesty", "patience",
    "courage", "leadership", "volunteering", "chess", "football", "basketball", "tennis", "swimming", "running",
    "yoga", "hiking", "camping", "fishing", "skiing", "cycling", "board games", "puzzles", "knitting", "woodworking",
    "gardening", "learning a language", "studying for exams", "homework", "reading", "taking notes",
    "public speaking", "job interviews", "writing a resume", "time management", "sleep", "exercise", "stress",
    "meditation", "drinking enough water", "washing hands", "first aid", "fire safety", "crossing the street",
    "moving to a new city", "traveling abroad", "packing a suitcase", "making friends", "pets",
    "taking care of a dog", "feeding a cat", "raising chickens", "keeping fish", "planting a tree",
    "a morning routine", "a rainy day", "a snowy day", "summer vacation", "the beach", "the zoo", "the park",
    "the library card", "a birthday party", "doctors", "nurses", "teachers", "firefighters", "police officers",
    "farmers", "chefs", "pilots", "astronauts", "scientists", "engineers", "artists", "musicians", "writers",
    "lawyers", "judges", "mail carriers", "plumbers", "electricians", "carpenters", "programmers", "pharmacists",
    "dentists", "veterinarians", "librarians", "photographers", "journalists", "architects", "mechanics", "bakers",
)
TEMPLATES_PER_TOPIC = 4  # 383 topics x 4 templates: 1532 training conversations (the drafter is data-bound)
HELD_OUT_TOPICS = (  # 27 topics the training never saw
    "penguins", "glaciers", "the printing press", "solar panels", "birds", "the olympic games", "cheese",
    "lighthouses", "volcanoes in iceland", "submarines", "tea ceremonies", "windmills", "kangaroos",
    "the stock market", "origami", "the roman empire", "chess openings", "sourdough bread", "electric guitars",
    "the amazon rainforest", "marathons", "public libraries", "jazz music", "the desert", "hot air balloons",
    "recycling plastic", "sushi",
)
# three templates per held-out topic: 81 conversations, so that a few hundredths of accept length (the template's
# cost to this drafter) stand above the noise of the engine's count (its standard error near 0.012 here, 0.02 on 24)
HELD_OUT_TEMPLATES = (0, 2, 5)


def train_conversations() -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": TEMPLATES[(3 * j + m) % len(TEMPLATES)].format(topic)}]
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
             batch: int, eos: int, aux_dtype: torch.dtype = torch.float32) -> list[Sequence]:
    """Each conversation rendered with the template and continued greedily (stopping after ``eos``), with the aux
    states generation computed (kept in ``aux_dtype``); in input order. Prompts of similar length share a batch
    (left padding)."""
    prompts = [rendered(tokenizer, c, True) for c in convs]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    out: dict[int, Sequence] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        out.update(zip(chunk, greedy_batch(target, [prompts[i] for i in chunk], layers, new_tokens, eos, aux_dtype),
                              strict=True))
    return [out[i] for i in range(len(prompts))]


def greedy_batch(target: Any, prompts: list[list[int]], layers: list[int], new_tokens: int, eos: int,
                 aux_dtype: torch.dtype = torch.float32) -> list[Sequence]:
    """One batch continued greedily with the target's KV cache: a prefill over the left-padded prompts, then one
    decode step per token, each keeping the aux states (in ``aux_dtype``) and final state it computed (only the last
    position goes through the lm_head). Each sequence holds copies of its own rows, never views that would keep
    the whole batch's padded states alive."""
    from transformers import DynamicCache

    from .target_runtime.greedy import cache_kwarg

    kwarg = cache_kwarg(target.model) or "past_key_values"  # transformers 5.x deprecates the second name
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
            res = target.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                               output_hidden_states=True, **{kwarg: cache})
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
        out.append(Sequence(seq, aux_all[row, rows].to(aux_dtype, copy=True), last_all[row, rows].clone(), len(p)))
    return out


def raw_states(target: Any, tokenizer: Any, convs: list[list[dict[str, str]]], replies: list[str],
               layers: list[int], batch: int, pad: int, aux_dtype: torch.dtype = torch.float32) -> list[Sequence]:
    """The conversations with their replies as raw text (no template): one forward each batch of similar lengths (no
    lm_head), aux states (in ``aux_dtype``) and final state at every position, copied out of the batch; the reply
    starts after the contents; in input order."""
    seqs = [rendered(tokenizer, c, False, r) for c, r in zip(convs, replies, strict=True)]
    starts = [len(rendered(tokenizer, c, False)) for c in convs]
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i]), i))  # similar lengths share a batch: less padding
    out: dict[int, Sequence] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        width = max(len(seqs[i]) for i in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        for row, i in enumerate(chunk):  # right padding: causal attention never reads it
            ids[row, :len(seqs[i])] = torch.tensor(seqs[i])
        with torch.no_grad():
            res = target.model(input_ids=ids, output_hidden_states=True, use_cache=False)
        aux = torch.cat([res.hidden_states[k] for k in layers], dim=-1)
        for row, i in enumerate(chunk):
            n = len(seqs[i])
            out[i] = Sequence(torch.tensor(seqs[i]), aux[row, :n].to(aux_dtype, copy=True),
                              res.hidden_states[-1][row, :n].clone(), starts[i])
    return [out[i] for i in range(len(seqs))]

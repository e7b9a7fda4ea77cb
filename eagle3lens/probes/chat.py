"""The served chat template: conversations rendered as the server renders them, and the dump held against it.

    ids = render(tokenizer, [{"role": "user", "content": "hi"}])   # chat_template, generation prompt on
    check = check_template("demo/hidden-states-raw", "demo/target")
    [f.code for f in check.findings]                             # ['data/template-mismatch']

Servers render a chat request with the target tokenizer's ``chat_template`` (transformers' ``apply_chat_template``,
generation prompt on) and tokenize the text without adding special tokens again. A draft trained on text rendered
otherwise (no template, another model's, another system prompt) sees other tokens at serving than in training.
The check looks for the served template's markers in the dump's token stream: the special tokens its rendering
of a conversation holds (role headers, turn ends, bos) and its generation prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, NoChatTemplate
from ..findings import Finding, Severity, to_jsonable
from ..io.inputs import MiB, read_regular
from ..io.jsonio import bounded_int
from ..progress import Counter, Progress
from .limits import check_length, max_positions
from .served_render import SideBySide, render, side_by_side

MAX_CHAT_BYTES = 64 * MiB
MAX_MESSAGES = 4096
PROBE = [{"role": "user", "content": "Hello"}]  # the conversation the markers are read from without --chat
Conversation = list[dict[str, str]]


def read_chat(path: str | Path) -> list[Conversation]:
    """One conversation per line: a JSON list of ``{"role", "content"}`` messages (or ``{"messages": [...]}``)."""
    return [conversation for _, conversation in read_chat_lines(path)]


def read_chat_lines(path: str | Path) -> list[tuple[int, Conversation]]:
    """``read_chat`` with the line number of each conversation (what a refusal names)."""
    file = Path(path)
    text = read_regular(file, MAX_CHAT_BYTES, "chat file").decode("utf-8", errors="replace")
    out: list[tuple[int, Conversation]] = []
    for n, line in enumerate(text.split("\n"), 1):  # JSON Lines end at \n only (U+2028 is text inside a string)
        if not line.strip():
            continue
        try:
            item = json.loads(line, parse_int=bounded_int)
        except RecursionError:
            raise CheckpointError(file, f"line {n}: nested too deeply") from None
        except ValueError as exc:
            raise CheckpointError(file, f"line {n}: not JSON ({str(exc)[:80]})") from None
        messages = item.get("messages") if isinstance(item, dict) else item
        if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
            raise CheckpointError(file, f"line {n}: a conversation is a non-empty JSON list of messages "
                                        f"(at most {MAX_MESSAGES})")
        for k, m in enumerate(messages, 1):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise CheckpointError(file, f"line {n}: every message needs a string \"role\" and \"content\"")
            _check_text(file, n, k, m["role"] + m["content"])
        out.append((n, [{"role": m["role"], "content": m["content"]} for m in messages]))
    if not out:
        raise CheckpointError(file, "no conversations in the chat file")
    return out


def _check_text(file: Path, line: int, message: int, text: str) -> None:
    """Refuse a lone surrogate (``"\\ud800"`` in the JSON): not text a tokenizer or a server can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CheckpointError(file, f"line {line}: message {message} holds a lone surrogate "
                                    f"(\\u{ord(text[exc.start]):04x}), which is not text: a server refuses it") from None


def load_tokenizer(target: Any) -> Any:
    """The target's tokenizer (its directory, or its opened checkpoint), which must carry a chat template (what
    the server renders requests with)."""
    from ..checkpoint import Checkpoint
    from ..hf_load import TOKENIZER_FILES
    from ..hf_load import load_tokenizer as load

    target = target.root if isinstance(target, Checkpoint) else Path(target)
    if not any((target / name).is_file() for name in TOKENIZER_FILES):
        raise NoChatTemplate(target, "no tokenizer to render chat with: --target must be the HF target model "
                                     "directory with its tokenizer (tokenizer.json / tokenizer_config.json)")
    tokenizer = load(target)
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplate(target, "the tokenizer has no chat_template: the server would refuse chat requests")
    return tokenizer


def _longest_token(tokenizer: Any) -> int:
    """Characters of the tokenizer's longest vocabulary entry (a token covers at most that many, plus spaces)."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1) or 1


def chat_samples(draft: Any, target: Any, chat: str | Path, engine: Any = None, new_tokens: int = 32,
                 device: str = "cpu", device_map: str | None = None, limit: int | None = None,
                 progress: Progress | None = None) -> tuple[list, Any]:
    """``live_samples`` over chat conversations: each rendered with the served template, continued greedily by
    the target, the aux layers the draft and ``engine`` need captured; returns the samples and the target.

    A conversation longer than the target's positions is refused (naming its line) before it is rendered: its
    content holds more non-space characters than that many of the tokenizer's longest tokens could."""
    import torch

    from ..checkpoint import as_checkpoint
    from .acceptance_entry import needed_layers
    from .data import capture_samples
    from .wiring import find_decoder_layers, load_target

    tokenizer = load_tokenizer(target)
    positions = max_positions(as_checkpoint(target).config)
    widest = _longest_token(tokenizer)
    lines = read_chat_lines(chat)[:limit]
    for n, conversation in lines:
        chars = sum(len(m["content"]) - sum(c.isspace() for c in m["content"]) for m in conversation)
        if positions is not None and chars > positions * widest:
            raise CheckpointError(chat, f"line {n}: {chars} characters of content, more than the target's "
                                        f"max_position_embeddings {positions} tokens can hold (its longest token "
                                        f"has {widest}): the target cannot run it")
    prompts = []
    rendering = Counter(progress, len(lines), "rendering the chat")
    for n, conversation in lines:
        ids = render(tokenizer, conversation)
        check_length(len(ids) + new_tokens, positions, chat, what=f"line {n} with {new_tokens} new tokens")
        prompts.append(torch.tensor(ids, dtype=torch.long))
        rendering.add(1)
    model = load_target(target, device if device_map is None else "cpu", device_map=device_map)
    layers = needed_layers(draft, len(find_decoder_layers(model)[1]), engine)
    stop = [getattr(tokenizer, "eos_token_id", None)]  # the server stops at the tokenizer's eos too
    capturing = Counter(progress, len(prompts), "capturing the target's states")
    samples = []
    for sample in capture_samples(model, prompts, layers, new_tokens=new_tokens, source=chat, stop=stop):
        samples.append(sample)
        capturing.add(1)
    return samples, model


# -- the dump against the served template ----------------------------------------------------------------
def markers(tokenizer: Any, conversation: Conversation) -> dict[str, tuple[int, ...]]:
    """The served template's markers in its rendering of ``conversation``: each special token it holds, and the
    generation prompt (what generation-prompt-on adds), by label -> token ids."""
    with_prompt = render(tokenizer, conversation, True)
    without = render(tokenizer, conversation, False)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= {i for i, tok in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items()
                if getattr(tok, "special", False)}
    special -= {tokenizer.pad_token_id, tokenizer.unk_token_id}
    out: dict[str, tuple[int, ...]] = {}
    for i in with_prompt:
        if i in special:
            out.setdefault(str(tokenizer.convert_ids_to_tokens(i)), (i,))
    if with_prompt[:len(without)] == without and len(with_prompt) > len(without):
        prompt = tuple(with_prompt[len(without):])
        out.setdefault(f"generation prompt {tokenizer.decode(list(prompt))!r}", prompt)
    return out


@dataclass(frozen=True)
class TemplateCheck:
    """Which of the served template's markers the dump's sequences carry, and one sample beside its rendering."""

    data: str
    target: str
    samples: int
    markers: dict[str, tuple[int, ...]]
    carried: dict[str, int]  # marker label -> samples holding it
    shown: tuple[tuple[str, str], ...] = ()  # ("=" both | "-" dump only | "+" served only, token), where missing
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    side: SideBySide | None = None  # the first sequence lacking a marker (else the first) beside what is served

    @property
    def missing(self) -> list[str]:
        return [m for m, n in self.carried.items() if 2 * n < self.samples]

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"data": self.data, "target": self.target, "samples": self.samples,
                            "markers": {k: list(v) for k, v in self.markers.items()}, "carried": self.carried,
                            "missing": self.missing, "shown": [list(p) for p in self.shown],
                            "side_by_side": self.side.to_dict() if self.side is not None else None})


def _holds(ids: Sequence[int], run: tuple[int, ...]) -> bool:
    n = len(run)
    return any(tuple(ids[i:i + n]) == run for i in range(len(ids) - n + 1)) if n > 1 else run[0] in ids


def check_template(data: str | Path, target: str | Path, chat: str | Path | None = None,
                   limit: int = 16) -> TemplateCheck:
    """Does the dump carry the served template's markers where conversations would have them?

    The markers are read from the template's rendering of the first conversation of ``chat`` (else a one-line
    user turn); a marker that fewer than half of the first ``limit`` sequences hold is missing, and
    ``data/template-mismatch`` shows the first such sequence beside what the server sends for its conversation
    (``served_render.side_by_side``: the chat's closest conversation, generation prompt on, then the sequence's own
    reply); ``side`` holds that pair for every check.
    """
    from .data import iter_samples

    tokenizer = load_tokenizer(target)
    conversations = read_chat(chat) if chat is not None else []
    wanted = markers(tokenizer, conversations[0] if conversations else PROBE)
    samples = [(s.token_ids.tolist(), s.loss_mask.tolist()) for s in iter_samples(data, limit=limit)]
    if not samples:
        raise CheckpointError(data, "no samples to check")
    seqs = [ids for ids, _ in samples]
    carried = {label: sum(_holds(ids, run) for ids in seqs) for label, run in wanted.items()}
    check = TemplateCheck(str(data), str(target), len(seqs), wanted, carried)
    lacking = next((k for k, ids in enumerate(seqs) if not all(_holds(ids, wanted[m]) for m in check.missing)), 0)
    side = side_by_side(tokenizer, *samples[lacking], conversations)
    if not check.missing:
        return replace(check, side=side)
    shown = side.aligned
    marks = " ".join(t if op == "=" else f"[{op}{t}]" for op, t in shown)
    finding = Finding(
        "data/template-mismatch", Severity.WARNING,
        f"the dump lacks the served chat template's {', '.join(check.missing)}",
        f"Of {len(seqs)} sequences, {', '.join(f'{m}: {carried[m]}' for m in check.missing)} hold these markers, "
        f"which the target tokenizer's chat_template puts in every served conversation: the draft was trained on "
        f"text rendered otherwise (no template, another model's, another system prompt). One sequence against "
        f"{side.conversation} as served, generation prompt and the sequence's own reply after it ([-x] only in the "
        f"dump, [+x] only served): {marks}",
        evidence={"data": str(data), "samples": len(seqs), "carried": carried, "missing": check.missing,
                  "shown": [list(p) for p in shown]},
        fix="regenerate the training data with the served template (the target tokenizer's apply_chat_template) and "
            "retrain, or serve with the template the data was rendered with")
    return replace(check, shown=shown, findings=(finding,), side=side)


def served_template_check(data: str | Path, target: str | Path, chat: str | Path | None = None) -> TemplateCheck | None:
    """``check_template`` where the target's tokenizer carries a chat template; None where it has none (a
    target without a tokenizer, or a base model served without chat)."""
    try:
        load_tokenizer(target)
    except NoChatTemplate:
        if chat is not None:
            raise
        return None
    return check_template(data, target, chat=chat)


def template_note(check: TemplateCheck | None) -> str | None:
    """Why the template check said nothing, when it could not tell (None when it checked)."""
    if check is None:
        return ("chat template not checked: the target's tokenizer has no chat_template (a base model served "
                "without chat); the dump is not held against a served rendering")
    if not check.markers:
        return ("chat template check inconclusive: the served template's rendering holds no special token, so a "
                "templated dump cannot be told from a raw one by its markers")
    return None

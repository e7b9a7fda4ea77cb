"""``eagle3lens vocab CKPT``: check d2t / t2d, classify what is wrong, say what engines do with it."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..findings import Report
from ..io.inputs import read_regular
from ..io.textsafe import printable
from . import add_output_options, example_epilog, finish, positive_int

MAX_TEXT_BYTES = 64 << 20  # a text sample to count tokens in; larger samples add nothing to the counts


def run(args: argparse.Namespace) -> int:
    from ..probes.vocab import inspect_vocab

    ckpt = Checkpoint.open(args.checkpoint)
    if args.tokenizer and not (args.counts or args.text):
        raise UsageError("--tokenizer needs --counts or --text: it decodes the missed tokens or counts the text sample")
    text = None
    if args.text:
        if not args.tokenizer:
            raise UsageError("--text needs --tokenizer to count tokens")
        try:
            text = read_regular(args.text, MAX_TEXT_BYTES, "text sample").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{printable(args.text)}: the text sample is not UTF-8 ({exc.reason} at byte "
                             f"{exc.start})") from None
    counts = _served_counts(ckpt, args) if args.chat or args.prompts else args.counts
    report = Report(checkpoint=ckpt.summary())
    report.add("vocab", inspect_vocab(ckpt, target=args.target, tokenizer=args.tokenizer, token_counts=counts,
                                      text=text, served=bool(args.chat or args.prompts)))
    if args.target is None:
        report.notes.append("no --target: lm_head rows not compared with the target head")
    return finish(report, args)


def _served_counts(ckpt: Checkpoint, args: argparse.Namespace) -> object:
    """The target's greedy tokens over served traffic (--chat or --prompts), counted as acceptance counts them."""
    if args.chat and args.prompts:
        raise UsageError("give --chat FILE.jsonl or --prompts F, not both")
    if args.counts or args.text:
        raise UsageError("--chat / --prompts count the served traffic: not with --counts or --text")
    if args.target is None:
        raise UsageError("--chat / --prompts need --target T: the target continues the traffic and its tokens are "
                         "counted")
    from ._target import require_target_weights
    from ..probes.served_tokens import served_token_counts
    from ..probes.vocab_coverage import TokenCounts

    require_target_weights(args.target, "vocab", "08_low_acceptance")
    ckpt.require_draft()
    if args.chat:
        from ..probes.chat import chat_samples

        samples, model = chat_samples(ckpt, args.target, args.chat, new_tokens=args.new_tokens, limit=args.limit)
        source = f"served chat traffic ({Path(args.chat).name}, greedy)"
    else:
        from ..probes.acceptance import live_samples

        samples, model = live_samples(ckpt, args.target, args.prompts, new_tokens=args.new_tokens, limit=args.limit)
        source = f"served prompts ({Path(args.prompts).name}, greedy)"
    return TokenCounts(served_token_counts(samples, model), source)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "vocab", help="check the d2t / t2d vocabulary mapping and what each engine does with it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Checks d2t / t2d against their invariants, classifies a broken mapping (arange subtracted "
                    "twice, absolute ids, missing, default, t2d disagreeing) with proof, and measures coverage.",
        epilog=example_epilog("eagle3lens vocab demo/broken-d2t-double-subtracted",
                              "eagle3lens vocab demo/speculators --target demo/target --counts demo/token_counts.json",
                              "eagle3lens vocab DRAFT --tokenizer TOKENIZER_DIR --text sample.txt --json",
                              "eagle3lens vocab demo/speculators --target demo/target --chat demo/chat.jsonl",
                              "eagle3lens convert DRAFT --repair-d2t OUT   # apply the proven repair"))
    p.add_argument("checkpoint", metavar="CKPT", help="draft checkpoint directory or file")
    p.add_argument("--target", metavar="T", help="target checkpoint: compare the draft lm_head with target rows")
    p.add_argument("--tokenizer", metavar="DIR", help="tokenizer directory (decodes missed tokens; counts --text)")
    p.add_argument("--counts", metavar="FILE", help="target-token counts: JSON list / {id: count} or .npy")
    p.add_argument("--text", metavar="FILE", help="text sample to count tokens in (with --tokenizer)")
    p.add_argument("--chat", metavar="FILE.jsonl",
                   help="coverage over served conversations (with --target): rendered with the target tokenizer's "
                        "chat_template and continued greedily by the target, whose tokens are counted")
    p.add_argument("--prompts", metavar="F", help="coverage over served prompts (with --target), the same way")
    p.add_argument("--new-tokens", type=positive_int, default=32, metavar="N",
                   help="with --chat / --prompts: greedy tokens generated per conversation (default 32)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="with --chat / --prompts: at most N of them")
    add_output_options(p)
    p.set_defaults(func=run)

"""The served vocabulary: target tokens outside the draft vocabulary, counted per draft position."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from eagle3lens.probes.acceptance import estimate_acceptance
from eagle3lens.probes.served_vocab import ServedVocabCounts, in_draft_vocab

# target ids 0..4 in the draft vocab (N = 5 of V = 10); the target's tokens with 7, 9, 8 outside at 1, 4, 6
TOKENS = torch.tensor([1, 7, 2, 3, 9, 0, 8, 4])
OUTSIDE_AT = (1, 4, 6)


def _vocab() -> torch.Tensor:
    return in_draft_vocab(torch.zeros(5, dtype=torch.long), 5, 10)


def test_oov_positions_counted_exactly() -> None:
    in_vocab = _vocab()
    assert in_vocab.tolist() == [True] * 5 + [False] * 5
    perfect = TOKENS.clone()
    perfect[list(OUTSIDE_AT)] = 0  # a draft right wherever it can be: only the vocabulary stops it
    counts = ServedVocabCounts(2)
    counts.add(TOKENS, torch.ones(8, dtype=torch.bool), in_vocab, [perfect, torch.roll(perfect, -1)])
    r = counts.result()
    # 7 verify starts (i = 0..6), positions i and i + 1
    assert (r.starts, r.tokens, r.oov_tokens) == (7, 8, 3)
    assert r.oov_share == (3 / 7, 3 / 7)  # outside at i in {1, 4, 6}; at i + 1 in {0, 3, 5}
    assert r.ceiling == (4 / 7, 1 / 7)  # both inside only from i = 2
    assert r.cut == (3, 3)  # the chain reached position 1 at i in {0, 2, 3, 5}: 0, 3, 5 cut there
    assert abs(r.ceiling_accept_len - (1 + 5 / 7)) < 1e-12 and abs(r.cost - (3 - (1 + 5 / 7))) < 1e-12


def test_masked_starts_do_not_count_and_sampled_mass_is_averaged() -> None:
    mask = torch.ones(8, dtype=torch.bool)
    mask[[0, 4]] = False  # starts 0 and 4 (and token 4, one of the outside ones) do not count
    counts = ServedVocabCounts(1)
    mass = torch.linspace(0, 0.7, 8)
    counts.add(TOKENS, mask, _vocab(), [TOKENS], sampled_mass=mass)
    r = counts.result()
    assert (r.starts, r.tokens, r.oov_tokens) == (6, 6, 2)
    assert r.oov_share == (2 / 6,) and r.cut == (2,)  # outside at 1 and 6 among the starts 1, 2, 3, 5, 6, 7
    assert r.sampled_oov_share is not None
    assert abs(r.sampled_oov_share[0] - float(mass[[1, 2, 3, 5, 6, 7]].mean())) < 1e-6


@pytest.mark.slow  # about 20 s or more on an idle 2-core machine (test-fast leaves it out)
def test_demo_dump_share_matches_the_training_coverage(demo_dir: Path) -> None:
    """On the held-out dump, the target's greedy tokens outside the draft vocab are exactly the complement of the
    draft-vocab coverage the demo measured when it trained the draft (same positions, same target)."""
    result = estimate_acceptance(demo_dir / "speculators", demo_dir / "hidden-states", target=demo_dir / "target",
                                 fixed=False, served_vocab=True)
    assert result.traffic is not None and result.traffic.vocab is not None
    vocab = result.traffic.vocab
    coverage = json.loads((demo_dir / "manifest.json").read_text())["training"]["draft_vocab_coverage"]
    assert vocab.view == "as_trained" and vocab.tokens == 32 * 63
    assert abs((1 - vocab.oov_tokens / vocab.tokens) - coverage) < 5e-5
    assert all(c <= 1 - s for c, s in zip(vocab.ceiling, vocab.oov_share, strict=True))
    trained = result.accept_len("as_trained")
    assert trained is not None and trained <= vocab.ceiling_accept_len


@pytest.mark.slow  # about 20 s or more on an idle 2-core machine (test-fast leaves it out)
@pytest.mark.parametrize("traffic,draft", [("chat", "speculators"), ("prompts", "speculators"),
                                           ("prompts", "broken-d2t-double-subtracted")])
def test_vocab_coverage_over_served_traffic_is_acceptances_served_vocabulary(demo_dir: Path, tmp_path: Path,
                                                                             capsys, traffic: str, draft: str) -> None:
    """`vocab --chat / --prompts` counts the target's greedy tokens over the served traffic exactly where
    `acceptance` counts them: its coverage is 1 - the acceptance probe's out-of-vocabulary share of tokens, also
    for a corrupted d2t (coverage of the ids the served draft proposes, the repair's coverage in a note)."""
    from eagle3lens import cli

    if traffic == "chat":
        source, limit = demo_dir / "chat.jsonl", 3
    else:  # prompts the untrained demo target continues outside the draft's 512 ids about half the time
        source, limit = tmp_path / "prompts.json", 12
        source.write_text(json.dumps([[(37 * i + 11 * j * j) % 256 for j in range(24)] for i in range(12)]))
    common = ["--target", str(demo_dir / "target"), f"--{traffic}", str(source), "--limit", str(limit),
              "--new-tokens", "8", "--json"]
    assert cli.main(["vocab", str(demo_dir / draft), *common]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    coverage = out["results"]["vocab"]["coverage"]
    assert cli.main(["acceptance", str(demo_dir / draft), "--no-fixed", *common]) == 0
    served = json.loads(capsys.readouterr().out)["results"]["acceptance"]["traffic"]["served_vocab"]
    assert coverage["source"] == f"served {'chat traffic' if traffic == 'chat' else 'prompts'} ({source.name}, greedy)"
    assert served["view"] == "as_trained" and coverage["total"] == served["tokens"] == limit * 8
    assert abs(coverage["covered"] - (1 - served["oov_tokens"] / served["tokens"])) < 1e-12
    if draft != "speculators":  # the stored map proposes ids the target rarely emits; the repair restores them
        note = next(n for n in out["results"]["vocab"]["notes"] if "after the proven repair" in n)
        repaired = float(re.search(r"after the proven repair \([^)]*\) ([0-9.]+)%", note).group(1)) / 100
        assert repaired > coverage["covered"]  # the demo: 9.4% as stored, 27.1% repaired
    if traffic == "prompts":
        assert 0 < served["oov_tokens"] < served["tokens"]
        assert sum(m["count"] for m in coverage["missed"]) <= served["oov_tokens"]


def test_vocab_served_traffic_flags_are_checked(demo_dir: Path, capsys) -> None:
    from eagle3lens import cli

    for extra, problem in ((["--chat", "x.jsonl"], "need --target"),
                           (["--chat", "x", "--prompts", "y", "--target", "t"], "not both"),
                           (["--chat", "x", "--counts", "c", "--target", "t"], "not with --counts")):
        rc = cli.main(["vocab", str(demo_dir / "speculators"), *extra])
        err = capsys.readouterr().err
        assert rc == 2 and problem in err and len(err.strip().splitlines()) == 1, err

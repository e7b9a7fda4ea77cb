"""The real demo's data capture, drafter start and training batches, on a tiny random Llama (the real build runs
in test_real_demo)."""

from __future__ import annotations

import warnings

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from eagle3lens.demo_real_data import Sequence, greedy_batch
from eagle3lens.demo_real_train import batch_of, draft_for, target_start, ttt_forward
from eagle3lens.draft import DraftConfig

LAYERS = [2, 4, 5]  # aux_layers(8): the inputs of decoder layers 2, L//2, L-3
EOS = 96


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, vocab_size=97, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def test_batched_generation_keeps_the_states_one_forward_over_each_sequence_computes() -> None:
    target = tiny_llama()
    prompts = [[5, 17, 3], [8, 1, 44, 2, 9], [7, 7, 30, 61, 12, 5, 70]]  # left padding of 4 and 2 in the batch
    with warnings.catch_warnings():  # the cache passed by the keyword this transformers names (no deprecation)
        warnings.simplefilter("error", FutureWarning)
        seqs = greedy_batch(target, prompts, LAYERS, new_tokens=6, eos=EOS)
    for prompt, seq in zip(prompts, seqs, strict=True):
        ids = list(prompt)
        with torch.no_grad():
            while len(ids) < len(prompt) + 6 and EOS not in ids[len(prompt):]:  # greedy, one sequence, no cache
                ids.append(int(target(torch.tensor([ids])).logits[0, -1].argmax()))
            ref = target.model(torch.tensor([ids[:-1]]), output_hidden_states=True).hidden_states
        assert seq.ids.tolist() == ids and seq.reply_start == len(prompt)
        assert torch.allclose(seq.aux, torch.cat([ref[k][0] for k in LAYERS], dim=-1), atol=1e-4)
        assert torch.allclose(seq.last, ref[-1][0], atol=1e-4)
        # each sequence owns its rows: a view would keep the whole padded batch alive
        assert seq.aux.untyped_storage().nbytes() == seq.aux.nbytes
        assert seq.last.untyped_storage().nbytes() == seq.last.nbytes


def test_training_data_kept_in_bfloat16_holds_what_the_autocast_forward_reads() -> None:
    """The build keeps the training sequences' aux states in bfloat16: the same values the bfloat16 autocast
    forward casts the float32 ones to, so the training takes the very same steps on 0.6x the memory."""
    from eagle3lens.demo_real_train import train

    target = tiny_llama()
    prompts = [[5, 17, 3], [8, 1, 44, 2, 9], [7, 7, 30, 61, 12, 5, 70]]
    full = greedy_batch(target, prompts, LAYERS, new_tokens=6, eos=EOS)
    kept = greedy_batch(target, prompts, LAYERS, new_tokens=6, eos=EOS, aux_dtype=torch.bfloat16)
    for a, b in zip(full, kept, strict=True):
        assert b.aux.dtype == torch.bfloat16 and torch.equal(b.aux, a.aux.to(torch.bfloat16))
        assert b.aux.untyped_storage().nbytes() == b.aux.nbytes and torch.equal(a.last, b.last)
    cfg = target.config
    dcfg = DraftConfig(hidden=32, target_hidden=32, num_aux=3, intermediate=64, heads=4, kv_heads=2, head_dim=8,
                       draft_vocab=16, vocab=97, rms_eps=cfg.rms_norm_eps)
    t2d = torch.arange(97) < 16

    def trained(seqs: list[Sequence]) -> torch.Tensor:
        draft = draft_for(dcfg, target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach(),
                          torch.arange(16), t2d, seed=1, start=target_start(target, dcfg, LAYERS[-1]))
        train(draft, seqs, seqs[:1], steps=6, ttt=3, batch=2, lr=3e-3, seed=4)
        return torch.cat([p.detach().flatten() for p in draft.parameters()])

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(trained(full), trained(kept))
    finally:
        torch.set_num_threads(old)


def test_a_drafter_started_from_the_target_computes_the_layer_after_the_last_aux_state() -> None:
    target = tiny_llama()
    cfg = target.config
    dcfg = DraftConfig(hidden=32, target_hidden=32, num_aux=3, intermediate=64, heads=4, kv_heads=2, head_dim=8,
                       draft_vocab=16, vocab=97, rms_eps=cfg.rms_norm_eps)
    t2d = torch.zeros(97, dtype=torch.bool)
    t2d[:16] = True
    draft = draft_for(dcfg, target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach(),
                      torch.zeros(16, dtype=torch.long), t2d, seed=1, start=target_start(target, dcfg, LAYERS[-1]))
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        states = target.model(ids, output_hidden_states=True).hidden_states
        aux = torch.cat([states[k] for k in LAYERS], dim=-1)
        (h,) = ttt_forward(draft, ids, aux, steps=1)  # the tokens read are ignored: their half starts at zero
        assert torch.allclose(h, states[LAYERS[-1] + 1], atol=1e-4)  # the target's layer 5 output
        assert torch.equal(draft.norm.weight, target.model.norm.weight)
    assert not draft.lm_head.weight.requires_grad and draft.fc.weight.requires_grad


def _sequences() -> list[Sequence]:
    torch.manual_seed(3)
    return [Sequence(torch.randint(0, 16, (length,)), torch.randn(length - 1, 96), torch.randn(length - 1, 32), start)
            for length, start in ((30, 12), (25, 9), (33, 15))]


def test_a_batch_scores_each_step_on_the_reply_positions_it_predicts() -> None:
    seqs = _sequences()
    b = batch_of(seqs, steps=3)
    assert b.first_row == 9 - 2 - 2  # the earliest reply start, less two, less the later steps
    n = b.aux.shape[1]
    for k in range(3):
        lo = b.first_row if k else 0
        for row, s in enumerate(seqs):
            # row i of step k reads the aux states at i and predicts the target's next token at i + 1 + k:
            # scored when that token is a reply token and the sequence has the state
            want = [lo + i for i in range(n - lo) if lo + i + 2 + k >= s.reply_start and lo + i + 1 + k < len(s.aux)]
            assert torch.nonzero(b.mask(k)[row]).flatten().add(lo).tolist() == want
        states = b.at_step(b.last, k)
        expected = torch.cat([s.last[1 + k + i][None] for row, s in enumerate(seqs)
                              for i in torch.nonzero(b.mask(k)[row]).flatten().add(lo).tolist()])
        assert torch.equal(states, expected)


def test_later_steps_on_the_scored_rows_only_compute_what_the_full_steps_compute_there() -> None:
    dcfg = DraftConfig(hidden=32, target_hidden=32, num_aux=3, intermediate=64, heads=4, kv_heads=2, head_dim=8,
                       draft_vocab=16, vocab=97)
    t2d = torch.arange(97) < 16
    draft = draft_for(dcfg, torch.randn(97, 32), torch.randn(97, 32), torch.zeros(16, dtype=torch.long), t2d, seed=2)
    b = batch_of(_sequences(), steps=3)
    with torch.no_grad():
        full = ttt_forward(draft, b.ids, b.aux, 3)
        cropped = ttt_forward(draft, b.ids, b.aux, 3, b.first_row)
    for k in range(3):
        lo = b.first_row if k else 0
        assert cropped[k].shape[1] == b.aux.shape[1] - lo
        assert torch.allclose(cropped[k][b.mask(k)], full[k][:, lo:][b.mask(k)], atol=1e-5)


def test_drafters_trained_side_by_side_end_as_each_trained_alone(monkeypatch) -> None:
    """The build trains its two drafters at once, a thread each: each ends where it ends trained alone (up to the
    rounding of its bfloat16 products, which the kernels' scheduling moves), never on the other's data or state."""
    from eagle3lens import demo_real
    from eagle3lens.demo_real_train import train

    monkeypatch.setitem(demo_real.RECIPE, "train_steps", 12)
    monkeypatch.setitem(demo_real.RECIPE, "train_batch", 2)
    dcfg = DraftConfig(hidden=32, target_hidden=32, num_aux=3, intermediate=64, heads=4, kv_heads=2, head_dim=8,
                       draft_vocab=16, vocab=97)
    t2d = torch.arange(97) < 16
    tables = torch.randn(97, 32, generator=torch.Generator().manual_seed(5))

    def drafter(seed: int) -> torch.nn.Module:
        return draft_for(dcfg, tables, tables, torch.zeros(16, dtype=torch.long), t2d, seed=seed)

    def weights(draft: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in draft.parameters()])

    seqs = _sequences()
    data = (seqs, seqs[::-1][:2])
    together = [drafter(7), drafter(8)]
    metrics = demo_real._train_side_by_side(list(zip(together, data, strict=True)), seqs[:1])
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [drafter(7), drafter(8)]
        for draft, mine in zip(alone, data, strict=True):
            train(draft, mine, seqs[:1], steps=12, ttt=3, batch=2, lr=demo_real.RECIPE["lr"],
                  seed=demo_real.RECIPE["seed"] + 1)
    finally:
        torch.set_num_threads(old)
    assert torch.get_num_threads() == old
    for seed, mine, other, seen in zip((7, 8), together, alone, metrics, strict=True):
        moved = (weights(other) - weights(drafter(seed))).abs().max()
        assert (weights(mine) - weights(other)).abs().max() <= 0.05 * moved
        assert seen["draft_vocab_size"] == 16 and seen["steps"] == 12
    assert metrics[0]["final_train_loss"] != metrics[1]["final_train_loss"]


def test_the_training_loss_is_speculators_kl_with_its_gradient() -> None:
    """The loss takes the teacher's probabilities once a batch; value and gradient stay ``F.kl_div``'s (batch mean
    of KL(target || draft)), on bfloat16 logits as the autocast forward gives them."""
    import torch.nn.functional as F

    from eagle3lens.demo_real_train import _kl

    gen = torch.Generator().manual_seed(3)
    teacher = F.log_softmax(torch.randn(7, 50, generator=gen) * 3, dim=-1)
    logits = (torch.randn(7, 50, generator=gen) * 2).bfloat16()
    ours, ref = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    _kl(ours, teacher, teacher.exp()).backward()
    want = F.kl_div(F.log_softmax(ref.float(), dim=-1), teacher, log_target=True, reduction="batchmean")
    want.backward()
    assert torch.allclose(_kl(ours.detach(), teacher, teacher.exp()), want.detach(), rtol=1e-5)
    assert ours.grad is not None and ref.grad is not None and torch.allclose(ours.grad.float(), ref.grad.float())
    assert float(_kl(torch.zeros(0, 50), teacher[:0], teacher[:0].exp())) == 0.0


def test_raw_states_batch_by_length_and_return_each_conversation_in_order() -> None:
    """Raw-text states: batches of similar lengths (right padding), the sequences back in the conversations' order,
    each holding what one forward over it alone computes."""
    from eagle3lens.demo_chat import build_tokenizer
    from eagle3lens.demo_real_data import raw_states, rendered

    target, tokenizer = tiny_llama(), build_tokenizer(97)
    convs = [[{"role": "user", "content": " ".join(f"w{10 + i + j}" for j in range(n))}] for i, n in
             enumerate((7, 2, 9, 3, 5))]
    replies = [" ".join(f"w{40 + j}" for j in range(n)) for n in (1, 8, 2, 6, 4)]
    seqs = raw_states(target, tokenizer, convs, replies, LAYERS, batch=2, pad=0)
    for conv, reply, seq in zip(convs, replies, seqs, strict=True):
        assert seq.ids.tolist() == rendered(tokenizer, conv, False, reply)
        assert seq.reply_start == len(rendered(tokenizer, conv, False))
        with torch.no_grad():
            ref = target.model(seq.ids[None], output_hidden_states=True).hidden_states
        assert torch.allclose(seq.aux, torch.cat([ref[k][0] for k in LAYERS], dim=-1), atol=1e-5)
        assert torch.allclose(seq.last, ref[-1][0], atol=1e-5)


def test_the_training_logits_are_the_autocast_lm_heads_bit_for_bit() -> None:
    """The training casts the frozen lm_head to bfloat16 once; its logits are the ones autocast's own cast of the
    weight at every call gives."""
    import torch.nn.functional as F

    target = tiny_llama()
    cfg = DraftConfig(hidden=32, target_hidden=32, num_aux=3, intermediate=64, heads=4, kv_heads=2, head_dim=8,
                      draft_vocab=16, vocab=97, rms_eps=target.config.rms_norm_eps)
    draft = draft_for(cfg, target.model.embed_tokens.weight.detach(), target.lm_head.weight.detach(),
                      torch.arange(16), torch.arange(97) < 16, seed=1)
    h = torch.randn(11, 32, generator=torch.Generator().manual_seed(2))
    head = draft.lm_head.weight.detach().to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want, got = draft.lm_head(draft.norm(h)), F.linear(draft.norm(h), head)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)

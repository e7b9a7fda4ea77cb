"""The target runtime: named hook points read what the target's own ``output_hidden_states`` reports, a forward
stops where asked, and the teacher and the data probe read their states through them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagle3lens.probes.data import target_states
from eagle3lens.target_runtime import HookPoints, Teacher
from eagle3lens.target_runtime.load import load_target

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(demo_dir: Path) -> torch.nn.Module:
    return load_target(demo_dir / "target")


def test_points_are_the_models_hidden_states(model) -> None:
    points = HookPoints(model)
    L = len(points.decoder)
    ids = torch.arange(3, 19)[None]
    seen, out = points.run(ids, [points.layer(k) for k in range(L)] + ["norm.in", "norm.out"],
                           output_hidden_states=True)
    for k in range(L):
        assert torch.equal(seen[points.layer(k)], out.hidden_states[k]), k
    assert torch.equal(seen["norm.out"], out.hidden_states[L])  # HF's last entry is the final norm's output
    torch.testing.assert_close(points.norm(seen["norm.in"]), seen["norm.out"])
    with pytest.raises(ValueError, match="unknown hook point"):
        points.run(ids, ["layer.x.in"])


def test_a_forward_stops_where_asked(model) -> None:
    points = HookPoints(model)
    seen, out = points.run(torch.arange(3, 19)[None], [points.layer(1), "norm.out"], stop_before=2)
    assert out is None and points.layer(1) in seen and "norm.out" not in seen


def test_teacher_and_data_read_the_same_states(model, demo_dir: Path) -> None:
    teacher = Teacher.open(demo_dir / "target", torch.device("cpu"))
    ids = torch.arange(3, 19)
    layers, pre, post = teacher.states(ids, (1, 2), full=True)
    aux, last, normed = target_states(model, ids[None], [1, 2])
    assert all(torch.equal(layers[k], a[0]) for k, a in zip((1, 2), aux, strict=True))
    assert pre is not None and post is not None and torch.equal(pre, last[0]) and torch.equal(post, normed[0])
    torch.testing.assert_close(teacher.final_norm(pre), post, rtol=1e-5, atol=1e-5)
    shallow, none_pre, none_post = teacher.states(ids, (1,), full=False)
    assert torch.equal(shallow[1], layers[1]) and none_pre is None and none_post is None
    # the lm_head on the last position only (what a dump writer asks for): the very same states
    kept, kept_last, kept_normed = target_states(model, ids[None], [1, 2], logits_to_keep=1)
    assert all(torch.equal(a, b) for a, b in zip(aux, kept, strict=True))
    assert torch.equal(kept_last, last) and torch.equal(kept_normed, normed)


def _full_recompute(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy by plain forwards over the whole sequence each step, no cache: the reference."""
    for _ in range(new_tokens):
        with torch.no_grad():
            token = model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, token], dim=1)
    return ids


def test_greedy_continuation_against_the_kv_cache_is_the_full_recompute(model) -> None:
    from eagle3lens.target_runtime.greedy import cache_kwarg, greedy_continuation

    assert cache_kwarg(model) is not None  # an HF model decodes one token a step
    lengths: list[int] = []
    for prompt in (torch.arange(7, 19)[None], torch.tensor([[1, 900, 33, 5, 12]])):
        lengths.clear()
        hook = model.register_forward_pre_hook(lambda _m, _a, kw: lengths.append(kw["input_ids"].shape[1]),
                                               with_kwargs=True)
        try:
            with torch.no_grad():
                cached = greedy_continuation(model, prompt, 12)
        finally:
            hook.remove()
        assert lengths == [prompt.shape[1]] + [1] * 11  # the prompt once, then one token a step
        assert cached.tolist() == _full_recompute(model, prompt, 12).tolist()
        stop = int(cached[0, prompt.shape[1] + 3])  # ends after the first stop id, as a server does
        with torch.no_grad():
            ended = greedy_continuation(model, prompt, 12, {stop})
        first = cached[0, prompt.shape[1]:].tolist().index(stop)
        assert ended.tolist() == cached[:, :prompt.shape[1] + first + 1].tolist()


def test_greedy_continuation_of_a_model_without_a_cache_recomputes_the_sequence(model) -> None:
    from eagle3lens.target_runtime.greedy import cache_kwarg, greedy_continuation

    class NoCache(torch.nn.Module):
        """A causal LM whose forward takes no cache (a plain module wrapping the HF one)."""

        def __init__(self) -> None:
            super().__init__()
            self.inner, self.lengths = model, []

        def forward(self, input_ids: torch.Tensor, use_cache: bool = False) -> object:
            self.lengths.append(input_ids.shape[1])
            return self.inner(input_ids=input_ids, use_cache=use_cache)

    plain = NoCache()
    assert cache_kwarg(plain) is None
    prompt = torch.arange(7, 19)[None]
    with torch.no_grad():
        out = greedy_continuation(plain, prompt, 5)
    assert plain.lengths == [12, 13, 14, 15, 16]
    assert out.tolist() == _full_recompute(model, prompt, 5).tolist()

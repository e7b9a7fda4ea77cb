"""Served traffic inside the acceptance probe: each serving view's chain scored under sampling, and the served
vocabulary counted, from the same samples and chains the greedy views score (``estimate_acceptance`` calls it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ..draft import Eagle3Draft, map_to_target
from .sampling import RowStats, SampledCounts, sampled_alphas, sampled_oov_mass
from .served_vocab import ServedVocabCounts, in_draft_vocab
from .traffic_result import Sampling, Traffic


@dataclass
class TrafficScorer:
    """Accumulates the sampled views (when ``sampling``) and the served vocabulary of one view (``vocab_view``)."""

    steps: int
    sampling: Sampling | None
    lm_head: torch.Tensor  # [V, H] the teacher's head
    model: Any = None  # the loaded target, when there is one: the chain is then scored exactly
    vocab_view: str | None = None
    source: str | None = None
    sampled: dict[str, SampledCounts] = field(default_factory=dict)
    vocab: ServedVocabCounts | None = None
    _shared: dict[int, SampledCounts] = field(default_factory=dict)
    _scored: dict[int, Any] = field(default_factory=dict)  # share -> the sample last scored into it
    # the sample, chain and probabilities last scored: a view proposing the same chain on it reuses them
    _last: tuple[Any, list[torch.Tensor], list[torch.Tensor], bool] | None = None
    _stats: RowStats | None = None  # the current sample's row statistics under sampling

    def row_stats(self) -> Any:
        """A collector for the next sample's teacher logits (None when nothing is sampled)."""
        if self.sampling is None:
            return None
        self._stats = RowStats(self.sampling)
        return self._stats.add

    @property
    def active(self) -> bool:
        return self.sampling is not None or self.vocab_view is not None

    def add(self, name: str, module: Eagle3Draft, preds: list[torch.Tensor], prepared: Any, share: int) -> None:
        """One serving view's chain over one sample: ``preds`` (draft-vocab argmax per step), ``share`` the id of
        its greedy counts (views that run alike are scored once)."""
        d2t = cast(torch.Tensor, module.d2t)
        proposed = [map_to_target(p, d2t) for p in preds]
        rows, mask = prepared.rows, prepared.mask
        if self.sampling is not None:
            counts = self._shared.setdefault(share, SampledCounts(self.steps))
            if self._scored.get(share) is not prepared:  # views that run alike: once per sample
                self._scored[share] = prepared
                n = prepared.ids.shape[0] - self.steps + 1
                if n > 0:
                    alphas, exact = self._alphas(proposed, mask[:n], prepared)
                    counts.exact_chain = counts.exact_chain and exact
                    counts.add(alphas, mask[:n])
            self.sampled[name] = counts
        if name == self.vocab_view:
            cfg = module.cfg
            if self.vocab is None:
                self.vocab = ServedVocabCounts(self.steps, draft_vocab=cfg.draft_vocab)
            in_vocab = in_draft_vocab(d2t, cfg.draft_vocab, cfg.vocab).to(rows.device)
            mass = (sampled_oov_mass(rows, self.lm_head, self.sampling, in_vocab)
                    if self.sampling is not None else None)
            self.vocab.add(prepared.teacher_full, mask, in_vocab, proposed, mass)

    def _alphas(self, proposed: list[torch.Tensor], starts: torch.Tensor, prepared: Any
                ) -> tuple[list[torch.Tensor], bool]:
        """The chain's acceptance probabilities on ``prepared``: the ones last computed where another view proposed
        the very same chain on the same sample (a healthy draft's views mostly do: the target's forwards over
        the chain are the sampled views' main cost)."""
        last = self._last
        if last is not None and last[0] is prepared and len(last[1]) == len(proposed) \
                and all(torch.equal(a, b) for a, b in zip(last[1], proposed, strict=True)):
            return last[2], last[3]
        alphas, exact = sampled_alphas(proposed, starts, prepared.rows, self.lm_head, cast(Sampling, self.sampling),
                                       model=self.model, prefix=prepared.tokens if self.model is not None else None,
                                       stats=self._stats)
        self._last = (prepared, proposed, alphas, exact)
        return alphas, exact

    def result(self, greedy: dict[str, float | None]) -> Traffic | None:
        if not self.active:
            return None
        assert self.sampling is not None or not self.sampled
        sampled = {name: c.view(name, cast(Sampling, self.sampling), greedy.get(name))
                   for name, c in self.sampled.items()}
        # no verify start counted (every continuation ended at once): no ceiling to report, not a cost of K
        vocab = (self.vocab.result(self.vocab_view or "as_served") if self.vocab is not None and self.vocab.starts
                 else None)
        return Traffic(sampled, vocab, self.source)


def sampling_notes(result: Any, sampling: Sampling | None, engine: str | None) -> list[str]:
    """What the sampled figures mean, and what each engine samples with when the request names no temperature."""
    from .served_sampling import default_temperature_line

    from ..engines.versions import spec_parts

    name, release, _ = spec_parts(engine) if engine else (None, None, None)
    default_line = default_temperature_line(name, release)
    traffic = result.traffic
    if sampling is None:
        return [f"the figures are greedy; without a temperature in the request the server samples ({default_line}): "
                "pass --temperature T to score that"]
    out = [f"sampled ({sampling.label()}): a draft token is accepted with the target's probability of it after "
           f"temperature, top-k and top-p (SGLang and vLLM verify the draft's greedy token against the target's "
           f"distribution only); per round: expected accepted tokens over expected drafting rounds of the engine's "
           f"walk; request default: {default_line}"]
    if engine is None:
        out.append("sampled without --engine: the draft as trained, verified by the rule SGLang and vLLM share (no "
                   "engine's own rule is needed); --engine E adds it as E serves the draft")
    if traffic is not None and any(not v.exact_chain for v in traffic.sampled.values()):
        out.append("sampled: positions after the first read the target on the data's own prefix (a dump holds no "
                   "target run on the draft's chain): exact where the chain follows the data; --prompts or --chat "
                   "run the target on the chain itself")
    return out

"""Sampling as served: the expected accept length when the server samples at a temperature (and top-k, top-p).

Speculative sampling accepts a draft token x with probability min(1, p_target(x) / p_draft(x)) and, on a
rejection, emits a token from the residual max(0, p_target - p_draft), renormalised; the accepted prefix plus
that token is distributed exactly as the target samples. How SGLang and vLLM run it for EAGLE-3 (read from the
wheels, restated):

- vLLM (the V1 runner, 0.9.0-0.33; its V2 runner's default from 0.21 likewise): the EAGLE proposer's draft
  tokens are the argmax of the draft logits (``v1/spec_decode/eagle.py`` ``propose``: ``logits.argmax``) and no
  draft probabilities are passed unless the launch opts into ``draft_sample_method`` (0.22 on), so the rejection
  sampler takes the draft probability as 1 (``v1/sample/rejection_sampler.py``, ``NO_DRAFT_PROBS``): accept iff
  ``target_prob / 1 >= u``. The target probabilities are ``softmax(apply_top_k_top_p(logits / T))``: temperature,
  then top-k (logits below the k-th largest masked), then top-p on what is left (sorted ascending, the tokens
  whose cumulative mass stays <= 1 - p masked, the top token always kept); no min_p. The recovered token samples
  the target probabilities with the draft token removed.
- SGLang (0.4.4.post2-0.5.23): ``speculative/eagle_info.py`` (``eagle_utils.py`` ``eagle_sample`` from 0.5.14)
  builds ``target_probs = top_p_renorm(top_k_renorm(softmax(logits / T)))`` and passes ``draft_probs`` all zero
  to ``tree_speculative_sampling_target_only`` with ``speculative_accept_threshold_single =
  speculative_accept_threshold_acc = 1.0`` (the defaults in every release); for a chain the kernel (its source
  ships from 0.5.21) accepts when the coin is below the target probability and, on a rejection, samples the
  target with the rejected token removed. The draft tokens are the draft's top-1 (topk 1).

So in both, temperature, top-k and top-p shape only the target's distribution, the draft's distribution is one-hot on
its argmax, and min(1, p/q) = p(x): position k of a chain is accepted with the target's warped probability of the
draft's token there. This module computes that per position exactly; ``accept_probability`` also takes a full
draft distribution (the textbook rule, Leviathan et al. 2023) for servers that sample the draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..errors import UsageError
from .rounds import per_round, round_counts
from .traffic_result import PerStart, SampledView, Sampling

ROW_CHUNK = 256  # target rows per block when warping full-vocabulary distributions
CHAIN_TOKEN_BUDGET = 8192  # tokens per forward when the target is run on the draft's chains
TOP_KEPT = 64  # a row's most likely tokens whose scaled logits RowStats keeps (and the first top-p window)


def head_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The target's head output as its model returns logits: scaled, then soft-capped where its config says
    (``Sampling.for_target``); unchanged for most targets."""
    x = logits.float()
    if sampling.logit_scale != 1.0:
        x = x * sampling.logit_scale
    if sampling.softcap is not None:
        x = torch.tanh(x / sampling.softcap) * sampling.softcap
    return x


def finite(scaled: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """``scaled`` (the target's logits after its transform and ``/ T``), refused when the scaling overflowed:
    a NaN or +inf there would make every sampled probability nan."""
    if scaled.numel() and not bool(scaled.amax() < float("inf")):  # amax propagates NaN
        raise UsageError(f"sampling at {sampling.label()}: the target's logits are not finite after its logit "
                         "transform and the temperature (float32 overflow): give a higher --temperature, or check "
                         "the target config's logit_scale, logits_scaling and final_logit_softcapping")
    return scaled


def warp(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The target's sampling distribution over the last dimension: ``logits / T``, then top-k, then top-p over what
    top-k kept, then softmax.

    Top-k keeps the tokens whose logit reaches the k-th largest (vLLM's ``apply_top_k_top_p`` masks below it;
    SGLang's ``top_k_renorm_prob``). Top-p as vLLM's ``apply_top_k_top_p`` and SGLang's ``top_p_renorm_prob`` keep
    it: the smallest set of the most likely tokens whose mass reaches p (a token is kept when the mass of the
    tokens above it is below p).
    """
    scaled = finite(logits.float() / sampling.temperature, sampling)
    if 0 < sampling.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, sampling.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if sampling.top_p >= 1.0:
        return probs
    kept = torch.where(_top_p_keep(probs, sampling.top_p), probs, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def _top_p_keep(probs: torch.Tensor, top_p: float, first_k: int = 64) -> torch.Tensor:
    """The top-p mask, found from the few most likely tokens of each row (a partial sort, widened only for the
    rows whose cut lies further down: a peaked distribution never pays for sorting its whole vocabulary)."""
    V = probs.shape[-1]
    flat = probs.reshape(-1, V)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    todo = torch.arange(flat.shape[0], device=probs.device)
    k = min(first_k, V)
    while todo.numel():
        vals, idx = torch.topk(flat[todo], k, dim=-1)  # descending
        inside = (vals.cumsum(-1) - vals) < top_p  # the mass ranked above each token is below p
        inside[:, 0] = True
        done = ~inside[:, -1] if k < V else torch.ones_like(inside[:, -1])  # the cut falls inside the top k
        keep[todo[done]] = torch.zeros_like(keep[todo[done]]).scatter(-1, idx[done], inside[done])
        todo, k = todo[~done], min(V, 8 * k)
    return keep.reshape(probs.shape)


def accept_probability(target_probs: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """P(accept) at each row: sum_x min(p(x), q(x)); ``draft`` is a distribution over the same vocab or, as the
    engines run EAGLE-3, the draft's token ids (q one-hot there: min(1, p/q) = p(x))."""
    if draft.dtype in (torch.int64, torch.int32):
        return target_probs.gather(-1, draft.long().unsqueeze(-1)).squeeze(-1)
    return torch.minimum(target_probs, draft.to(target_probs.dtype)).sum(-1)


@dataclass
class RowStats:
    """Per row of the target's logits under ``sampling``: the top-k / top-p cut (the least kept scaled logit), the
    log-normaliser over the kept tokens and the row's most likely tokens with their scaled logits, gathered from
    the logits the teacher already computes; then ``p(x) = exp(l_x / T - lse)`` where ``l_x / T >= cut``, else 0,
    ``l_x`` taken from those logits for the row's top tokens (where low temperatures put the mass, so a rounding
    difference is not multiplied by 1 / T) and from one dot product for any other wanted token."""

    sampling: Sampling
    cut: list[torch.Tensor] = field(default_factory=list)
    lse: list[torch.Tensor] = field(default_factory=list)
    top_vals: list[torch.Tensor] = field(default_factory=list)
    top_ids: list[torch.Tensor] = field(default_factory=list)

    def add(self, logits: torch.Tensor) -> None:
        """One block of the teacher's head output (``rows @ lm_head.T``)."""
        scaled = finite(head_logits(logits, self.sampling) / self.sampling.temperature, self.sampling)
        lse = torch.logsumexp(scaled, dim=-1)
        vals, ids = torch.topk(scaled, min(TOP_KEPT, scaled.shape[-1]), dim=-1)  # descending
        self.top_vals.append(vals)
        self.top_ids.append(ids)
        top_k = self.sampling.top_k if 0 < self.sampling.top_k < scaled.shape[-1] else 0
        if self.sampling.top_p >= 1.0 and not top_k:
            self.cut.append(torch.full_like(lse, float("-inf")))
            self.lse.append(lse)
            return
        cut, mass = (_top_k_cut(scaled, lse, self.sampling.top_p, top_k, vals) if top_k
                     else _top_p_cut(scaled, lse, self.sampling.top_p, vals))
        self.cut.append(cut)
        self.lse.append(lse + torch.log(mass))

    def probs(self, rows: torch.Tensor, lm_head: torch.Tensor,
              wanted: Sequence[tuple[int, torch.Tensor]]) -> list[torch.Tensor]:
        """As :func:`token_probs`, from the gathered statistics (rows = the same final-norm states)."""
        cut, lse = torch.cat(self.cut), torch.cat(self.lse)
        top_vals, top_ids = torch.cat(self.top_vals), torch.cat(self.top_ids)
        out = []
        for k, tokens in wanted:
            n = min(tokens.shape[0], rows.shape[0] - k)
            r = torch.arange(k, k + n, device=rows.device)
            dot = finite(head_logits((rows[r].float() * lm_head[tokens[:n]].float()).sum(-1),
                                     self.sampling) / self.sampling.temperature, self.sampling)
            hit = top_ids[r] == tokens[:n, None].to(top_ids.device)
            scaled = torch.where(hit.any(-1), (top_vals[r] * hit).sum(-1), dot)
            slack = torch.where(hit.any(-1), 0.0, 1e-4 * (cut[r].abs() + 1.0))  # a dot rounds otherwise
            p = torch.where(scaled >= cut[r] - slack, torch.exp(scaled - lse[r]).clamp(max=1.0), 0.0)
            out.append(torch.cat([p, torch.zeros(tokens.shape[0] - n, device=rows.device)]))
        return out


def _top_p_cut(scaled: torch.Tensor, lse: torch.Tensor, top_p: float,
               first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of scaled logits [R, V]: the least kept scaled logit under top-p and the kept probability mass,
    from the top logits only (``first``: each row's top k, descending; k widened for the rows whose cut lies
    deeper); no pass over the whole row."""
    R, V = scaled.shape
    cut, mass = torch.empty(R, device=scaled.device), torch.empty(R, device=scaled.device)
    todo = torch.arange(R, device=scaled.device)
    k = first.shape[-1]
    while todo.numel():
        vals = first if k == first.shape[-1] else torch.topk(scaled[todo], k, dim=-1).values  # descending
        probs = torch.exp(vals - lse[todo, None])
        inside = (probs.cumsum(-1) - probs) < top_p  # a prefix: the mass ranked above each token is below p
        inside[:, 0] = True
        done = ~inside[:, -1] if k < V else torch.ones_like(inside[:, -1])
        count = inside.sum(-1, keepdim=True)
        cut[todo[done]] = vals.gather(-1, count - 1).squeeze(-1)[done]
        mass[todo[done]] = (probs * inside).sum(-1)[done]
        todo, k = todo[~done], min(V, 8 * k)
    return cut, mass


def _top_k_cut(scaled: torch.Tensor, lse: torch.Tensor, top_p: float, top_k: int,
               first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`_top_p_cut` under top-k: the k largest scaled logits are all that can be kept, and top-p cuts
    their renormalised distribution (``first``: each row's top logits already taken, descending)."""
    vals = first[:, :top_k] if top_k <= first.shape[-1] else torch.topk(scaled, top_k, dim=-1).values
    kept = int((scaled >= vals[:, -1:]).sum(-1).max())  # tokens tied with the k-th stay (vLLM masks below it)
    if kept > top_k:
        vals = torch.topk(scaled, kept, dim=-1).values
        vals = vals.masked_fill(vals < vals[:, top_k - 1:top_k], float("-inf"))
    probs = torch.softmax(vals, dim=-1)  # top-k renormalised
    inside = (probs.cumsum(-1) - probs) < top_p if top_p < 1.0 else torch.ones_like(probs, dtype=torch.bool)
    inside &= vals > float("-inf")  # a prefix: what top-k masked is out
    inside[:, 0] = True
    count = inside.sum(-1, keepdim=True)
    cut = vals.gather(-1, count - 1).squeeze(-1)
    mass = (torch.exp(vals - lse[:, None]) * inside).sum(-1)  # of the full distribution
    return cut, mass


def token_probs(rows: torch.Tensor, lm_head: torch.Tensor, sampling: Sampling,
                wanted: Sequence[tuple[int, torch.Tensor]]) -> list[torch.Tensor]:
    """``p_target(token)`` under ``sampling`` for each (offset, tokens) in ``wanted``: entry i of the result for
    offset k is the warped probability, at row i + k of ``rows`` [R, H] (final-norm states; logits =
    rows @ lm_head.T), of ``tokens[i]``. Rows are warped in blocks; only the wanted entries are kept."""
    R = rows.shape[0]
    out = [torch.zeros(t.shape[0], device=rows.device) for _, t in wanted]
    for start in range(0, R, ROW_CHUNK):
        stop = min(start + ROW_CHUNK, R)
        probs = warp(head_logits(rows[start:stop].float() @ lm_head.T, sampling), sampling)
        for (k, tokens), dest in zip(wanted, out, strict=True):
            lo, hi = max(start - k, 0), min(stop - k, tokens.shape[0])  # i with start <= i + k < stop
            if lo < hi:
                i = torch.arange(lo, hi, device=rows.device)
                dest[lo:hi] = probs[i + k - start, tokens[lo:hi]]
    return out


def chain_token_probs(model: torch.nn.Module, prefix: torch.Tensor, starts: torch.Tensor,
                      proposed: Sequence[torch.Tensor], sampling: Sampling,
                      token_budget: int = CHAIN_TOKEN_BUDGET) -> list[torch.Tensor]:
    """The exact chain: ``p_target(d_k)`` with the target run on its own prefix up to start i followed by the
    draft's earlier tokens d_0..d_{k-1} (what the server verifies), for each start index i in ``starts``.

    ``prefix`` [T] is the token stream; start i's prefix is ``prefix[:i + 2]`` (the draft at i proposes the token
    after position i + 1, acceptance's shifted convention); ``proposed[k]`` [n] the draft's target ids per start.
    The sequences are padded on the left so that the K rows each needs are the last K of every row: only those
    reach the head (``logits_to_keep``), and a batch holds at most ``token_budget`` tokens.
    """
    K = len(proposed)
    device = next(model.parameters()).device
    out = [torch.zeros(starts.shape[0]) for _ in range(K)]
    lo = 0
    while lo < starts.shape[0]:
        hi, longest = lo + 1, int(starts[lo])
        while hi < starts.shape[0] and (hi + 1 - lo) * (max(longest, int(starts[hi])) + 1 + K) <= token_budget:
            longest = max(longest, int(starts[hi]))
            hi += 1
        idx = starts[lo:hi]
        width = int(idx.max()) + 2 + (K - 1)
        ids = torch.zeros(idx.shape[0], width, dtype=torch.long)
        attn = torch.zeros(idx.shape[0], width, dtype=torch.long)
        for r, i in enumerate(idx.tolist()):
            chain = [int(proposed[k][lo + r]) for k in range(K - 1)]
            row = torch.cat([prefix[:i + 2].cpu(), torch.tensor(chain, dtype=torch.long)])
            ids[r, width - row.numel():] = row
            attn[r, width - row.numel():] = 1
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = _last_logits(model, ids.to(device), attn.to(device), positions.to(device), K)
        for k in range(K):
            token = proposed[k][lo:lo + idx.shape[0]].to(device)
            # the model's own logits: its scale and soft cap are applied already
            out[k][lo:lo + idx.shape[0]] = accept_probability(warp(logits[:, k], sampling), token).cpu()
        lo += idx.shape[0]
    return out


def _last_logits(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor,
                 keep: int) -> torch.Tensor:
    """The logits [B, keep, V] at the last ``keep`` positions (the head run on those rows only where the model
    takes ``logits_to_keep``)."""
    import inspect

    names = inspect.signature(model.forward).parameters
    # transformers names it logits_to_keep from 4.50, num_logits_to_keep in 4.45-4.49; else every row's logits
    extra = next(({name: keep} for name in ("logits_to_keep", "num_logits_to_keep") if name in names), {})
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False, **extra).logits
    return logits[:, -keep:]


@dataclass
class SampledCounts:
    """Summed expectations of one view over the samples: per start, the sum over starts of P(positions 0..k all
    accepted); per round, the expected rounds of the engine's walk and of those whose positions 0..k were all
    accepted (:func:`~.rounds.round_counts`)."""

    steps: int
    full_hit: list[float] = field(default_factory=list)
    cond_total: list[float] = field(default_factory=list)
    starts: float = 0.0
    rounds: float = 0.0
    round_hit: list[float] = field(default_factory=list)
    exact_chain: bool = True

    def __post_init__(self) -> None:
        self.full_hit, self.cond_total, self.round_hit = ([0.0] * self.steps for _ in range(3))

    def add(self, alphas: Sequence[torch.Tensor], starts: torch.Tensor) -> None:
        """``alphas[k]`` [n]: P(position k accepted | 0..k-1 accepted) per start; ``starts`` [n] which count."""
        weight = starts.float().cpu()
        run = torch.ones_like(weight)
        self.starts += float(weight.sum())
        runs = []
        for k, alpha in enumerate(alphas):
            self.cond_total[k] += float((run * weight).sum())
            run = run * alpha.float().cpu()
            runs.append(run)
            self.full_hit[k] += float((run * weight).sum())
        rounds, hits = round_counts(torch.stack(runs), starts.bool())
        self.rounds += rounds
        self.round_hit = [a + b for a, b in zip(self.round_hit, hits, strict=True)]

    def view(self, name: str, sampling: Sampling, greedy: float | None) -> SampledView:
        full = tuple(h / self.starts if self.starts else 0.0 for h in self.full_hit)
        cond = tuple(h / t if t else 0.0 for h, t in zip(self.full_hit, self.cond_total, strict=True))
        start = PerStart(1.0 + sum(full) if self.starts else None, full, cond)
        accept, r_full, r_cond = per_round(self.rounds, self.round_hit)
        return SampledView(name, sampling, r_full, r_cond, accept, greedy, self.exact_chain, start, self.rounds)


def sampled_alphas(proposed: Sequence[torch.Tensor], starts: torch.Tensor, rows: torch.Tensor, lm_head: torch.Tensor,
                   sampling: Sampling, model: torch.nn.Module | None = None, prefix: torch.Tensor | None = None,
                   stats: RowStats | None = None) -> tuple[list[torch.Tensor], bool]:
    """One sequence's acceptance probabilities under ``sampling`` (what ``SampledCounts.add`` takes) and whether the
    chain was scored exactly: ``proposed[k]`` [n] the chain's target ids at step k for each start, ``starts`` [n]
    the verify starts that count, ``rows`` [T', H] the target's final-norm states (row i + k scores start i's step
    k on the data's own prefix). With ``model`` and ``prefix``, steps after the first read the target run on the
    draft's own chain instead (exact); without, the data's prefix (approximate where the chain leaves it).
    ``stats``: the rows' statistics already gathered from the teacher's logits (no second pass over the
    vocabulary)."""
    n = starts.shape[0]

    def probs(wanted: list[tuple[int, torch.Tensor]]) -> list[torch.Tensor]:
        return stats.probs(rows, lm_head, wanted) if stats is not None else token_probs(rows, lm_head, sampling, wanted)

    if model is None or prefix is None or len(proposed) == 1:  # one pass over the rows for every step
        return probs([(k, p[:n]) for k, p in enumerate(proposed)]), len(proposed) == 1
    first = probs([(0, proposed[0][:n])])[0]
    where = torch.nonzero(starts.cpu(), as_tuple=False).flatten()
    later = chain_token_probs(model, prefix, where, [p[:n][where.to(p.device)].cpu() for p in proposed],
                              sampling)
    alphas = [first.cpu()]
    for k in range(1, len(proposed)):
        full = torch.zeros(n)
        full[where] = later[k]
        alphas.append(full)
    return alphas, True


def sampled_oov_mass(rows: torch.Tensor, lm_head: torch.Tensor, sampling: Sampling,
                     in_vocab: torch.Tensor) -> torch.Tensor:
    """The target's warped probability mass outside the draft vocabulary (``in_vocab`` [V] bool), per row."""
    out = []
    for start in range(0, rows.shape[0], ROW_CHUNK):
        probs = warp(head_logits(rows[start:start + ROW_CHUNK].float() @ lm_head.T, sampling), sampling)
        out.append((probs * (~in_vocab).to(probs.dtype)).sum(-1))
    return torch.cat(out) if out else torch.zeros(0)


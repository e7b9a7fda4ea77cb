"""Where the chain breaks: the served per-position acceptance (from the server's log) beside the offline one.

vLLM logs ``Per-position acceptance rate: r_1, r_2, ...`` with r_k = drafts whose first k tokens were accepted,
over drafts: the same quantity as the offline ``full_acc`` of a serving view, which counts per drafting round as
the engine does (:mod:`.rounds`; like with like only at the K the server drafts, since the rounds depend on K).
The first position where the two part is
the one to look at: position 1 parting says the step-0 features or weights differ from what was modelled (aux
layers, the template, sampling); a later one, what the chain feeds itself (its own tokens, the hidden state it
carries, the vocabulary).

SGLang logs no per-position rates: each ``Decode batch`` line has the accept length of the interval (and from
0.5.3.post2 an accept rate, whose formula the logs probe infers). Then the whole chain is held against the
offline one: accept length 1 + sum of the per-position rates, and the rate by the log's own formula. One position
can still be named: the served rate at position 1 is at most accept len - 1 (the served curve never rises), so a
logged accept len below 1 + the offline position-1 rate parts there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..findings import to_jsonable
from .acceptance_result import AcceptanceResult

TOLERANCE_ABS, TOLERANCE_REL = 0.05, 0.15  # a position parts when it differs by more than both


@dataclass(frozen=True)
class ChainComparison:
    """Logged and offline per-position acceptance of one view, and the first position (1-based) they part at."""

    view: str
    offline: tuple[float, ...]
    logged: tuple[float, ...]
    first_parting: int | None
    sampled: str | None = None  # the sampling the offline curve was scored with (None: greedy)
    log: str = ""
    findings: tuple[Any, ...] = ()
    whole: WholeChain | None = None  # the log has no per-position rates: the chain held as a whole
    logged_positions: int = 0  # per-position rates the log prints (the server's K), when it prints them
    offline_positions: int = 0  # positions the offline run scored (--steps)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"view": self.view, "offline": list(self.offline), "logged": list(self.logged),
                            "first_parting": self.first_parting, "sampled": self.sampled, "log": self.log,
                            "whole": self.whole.to_dict() if self.whole is not None else None,
                            "logged_positions": self.logged_positions, "offline_positions": self.offline_positions})


@dataclass(frozen=True)
class WholeChain:
    """A log's accept length (and accept rate, by its formula) beside the offline chain's."""

    logged_accept_len: float
    offline_accept_len: float
    logged_rate: float | None
    offline_rate: float | None
    rate_formula: str | None
    parts: bool
    served_steps: int  # K the server drafts (the log's launch), else the offline chain's

    def to_dict(self) -> dict[str, Any]:
        return {"logged_accept_len": self.logged_accept_len, "offline_accept_len": self.offline_accept_len,
                "logged_rate": self.logged_rate, "offline_rate": self.offline_rate,
                "rate_formula": self.rate_formula, "parts": self.parts, "served_steps": self.served_steps}


def served_steps(log: Any = None, launch: Any = None) -> tuple[int | None, str | None]:
    """K the server drafts per round and where it was read: the launch's (SGLang ``speculative_num_steps``, vLLM
    ``num_speculative_tokens``), else what the log's lines imply (:class:`~.logs.LogResult`; vLLM's
    per-position rates, SGLang's accept rate); (None, None) when neither says."""
    if launch is not None and launch.num_steps:
        key = "speculative_num_steps" if launch.engine == "sglang" else "num_speculative_tokens"
        return int(launch.num_steps), f"{key}={launch.num_steps} in the {launch.source}"
    inference = getattr(log, "inference", None)
    if inference is not None and inference.draft_steps:
        return int(inference.draft_steps), f"the log ({inference.source})"
    return None, None


def parts(offline: float, logged: float) -> bool:
    return abs(offline - logged) > max(TOLERANCE_ABS, TOLERANCE_REL * max(offline, logged))


def compare_chain(result: AcceptanceResult, logged: tuple[float, ...], log: str = "",
                  view: str | None = None) -> ChainComparison | None:
    """The logged per-position rates against ``view`` (default as served, else as trained); the sampled curve
    when the result was scored with a temperature. None when the log has no per-position rates."""
    curve = _offline_curve(result, view)
    if not logged or curve is None:
        return None
    name, offline, sampled = curve
    n = min(len(offline), len(logged))
    first = next((k + 1 for k in range(n) if parts(offline[k], logged[k])), None)
    return ChainComparison(name, tuple(offline[:n]), tuple(logged[:n]), first,
                           sampled.sampling.label() if sampled is not None else None, log,
                           logged_positions=len(logged), offline_positions=len(offline))


def _offline_curve(result: AcceptanceResult, view: str | None) -> tuple[str, tuple[float, ...], Any] | None:
    """(view name, its per-round curve, the sampled view when scored with a temperature)."""
    name = view or ("as_served" if "as_served" in result.views else "as_trained")
    if name not in result.views:
        return None
    sampled = result.traffic.sampled.get(name) if result.traffic is not None else None
    return name, (sampled.full_acc if sampled is not None else result.views[name].full_acc), sampled


def offline_rate(accept_len: float, formula: str | None, denominator: int | None, steps: int) -> float | None:
    """The accept rate SGLang would print for ``accept_len`` under the log's formula (None when it is unknown)."""
    if formula == "0.5.5" and denominator:
        return accept_len / denominator
    if formula == "0.5.11+":
        return (accept_len - 1) / (denominator - 1 if denominator and denominator > 1 else steps)
    return None


def compare_with_log(result: AcceptanceResult, log: Any, path: str = "", view: str | None = None
                     ) -> ChainComparison | None:
    """The offline chain against a parsed server log (:class:`~.logs.LogResult`): per position where the log
    prints per-position rates (vLLM), else as a whole from its accept length and rate (SGLang). None when the
    log has no acceptance figures."""
    s = log.summary
    if s.mean_per_position:
        return compare_chain(result, s.mean_per_position, log=path, view=view)
    curve = _offline_curve(result, view)
    if s.mean_accept_len is None or curve is None:
        return None
    name, offline, sampled = curve
    inference = log.inference
    served_steps = inference.draft_steps or len(offline)
    offline_len = 1 + sum(offline)  # per round, at the K scored (the rounds themselves depend on K)
    rate = offline_rate(offline_len, inference.formula, inference.denominator, len(offline))
    logged_len = float(s.mean_accept_len)
    whole = WholeChain(logged_len, offline_len, s.mean_accept_rate, rate, inference.formula,
                       parts(offline_len, logged_len), served_steps)
    first = 1 if offline and logged_len - 1 < offline[0] and parts(offline[0], max(0.0, logged_len - 1)) else None
    return ChainComparison(name, tuple(offline), (), first, sampled.sampling.label() if sampled is not None else None,
                           path, whole=whole)


def _whole_note(c: ChainComparison, w: WholeChain, curve: str) -> str:
    rates = (f", accept rate {w.logged_rate:.3f} against {w.offline_rate:.3f} by the log's formula "
             f"{w.rate_formula}" if w.logged_rate is not None and w.offline_rate is not None else "")
    text = (f"the log prints no per-position rates (SGLang logs the accept length per decode step): logged accept "
            f"len {w.logged_accept_len:.2f} against the {curve}'s {w.offline_accept_len:.2f} over "
            f"{len(c.offline)} positions{rates}")
    if len(c.offline) != w.served_steps:
        text += (f" (the server drafts {w.served_steps}, the offline run scored {len(c.offline)}: score with "
                 f"--steps {w.served_steps} to compare like with like)")
    if c.first_parting == 1:
        return (text + f": the served position-1 rate is at most {max(0.0, w.logged_accept_len - 1):.3f}, the "
                f"offline one {c.offline[0]:.3f}: the chain parts at position 1, look there first")
    if w.parts:
        return text + ": the chains part, at a position the log cannot show (vLLM's per-position metrics would)"
    return text + ": they agree"


def chain_note(c: ChainComparison) -> str:
    curve = f"offline {c.view} per round" + (f" sampled ({c.sampled})" if c.sampled else " greedy")
    if c.whole is not None:
        return _whole_note(c, c.whole, curve)
    if c.logged_positions > c.offline_positions:
        span = (f" (the server drafts {c.logged_positions}, the offline run scored {c.offline_positions}: score "
                f"with --steps {c.logged_positions} to compare them all)")
    elif c.logged_positions < c.offline_positions:
        span = (f" (the server drafts {c.logged_positions}, the offline run scored {c.offline_positions}: score "
                f"with --steps {c.logged_positions} to compare like with like)")
    else:
        span = ""
    if c.first_parting is None:
        return f"per position, the log and the {curve} agree over {len(c.logged)} positions{span}"
    k = c.first_parting - 1
    return (f"per position, the log and the {curve} part first at position {c.first_parting} (logged "
            f"{c.logged[k]:.3f}, offline {c.offline[k]:.3f}): look there first{span}")

"""Where the chain breaks: the served per-position acceptance (from the server's log) beside the offline one.

vLLM logs ``Per-position acceptance rate: r_1, r_2, ...`` with r_k = drafts whose first k tokens were accepted,
over drafts: the same quantity as the offline ``full_acc`` of a view. The first position where the two part is
the one to look at: position 1 parting says the step-0 features or weights differ from what was modelled (aux
layers, the template, sampling); a later one, what the chain feeds itself (its own tokens, the hidden state it
carries, the vocabulary).
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

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({"view": self.view, "offline": list(self.offline), "logged": list(self.logged),
                            "first_parting": self.first_parting, "sampled": self.sampled, "log": self.log})


def parts(offline: float, logged: float) -> bool:
    return abs(offline - logged) > max(TOLERANCE_ABS, TOLERANCE_REL * max(offline, logged))


def compare_chain(result: AcceptanceResult, logged: tuple[float, ...], log: str = "",
                  view: str | None = None) -> ChainComparison | None:
    """The logged per-position rates against ``view`` (default as served, else as trained); the sampled curve
    when the result was scored with a temperature. None when the log has no per-position rates."""
    name = view or ("as_served" if "as_served" in result.views else "as_trained")
    if not logged or name not in result.views:
        return None
    sampled = result.traffic.sampled.get(name) if result.traffic is not None else None
    offline = sampled.full_acc if sampled is not None else result.views[name].full_acc
    n = min(len(offline), len(logged))
    first = next((k + 1 for k in range(n) if parts(offline[k], logged[k])), None)
    return ChainComparison(name, tuple(offline[:n]), tuple(logged[:n]), first,
                           sampled.sampling.label() if sampled is not None else None, log)


def chain_note(c: ChainComparison) -> str:
    curve = f"offline {c.view}" + (f" sampled ({c.sampled})" if c.sampled else " greedy")
    if c.first_parting is None:
        return f"per position, the log and the {curve} agree over {len(c.logged)} positions"
    k = c.first_parting - 1
    return (f"per position, the log and the {curve} part first at position {c.first_parting} (logged "
            f"{c.logged[k]:.3f}, offline {c.offline[k]:.3f}): look there first")

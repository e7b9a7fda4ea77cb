"""The engine's counters as data: accept length and its standard error from the per-position counts alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from eagle3lens.engines.measure import ServedCounts


def _counts(accepted: list[int], k: int) -> ServedCounts:
    """What a server's counters hold after rounds that accepted these many of their ``k`` proposals each."""
    return ServedCounts(len(accepted), k * len(accepted), sum(accepted),
                        tuple(sum(a > pos for a in accepted) for pos in range(k)))


@given(st.lists(st.integers(0, 3), min_size=2, max_size=400))
def test_the_standard_error_is_the_rounds_own(accepted: list[int]) -> None:
    counts = _counts(accepted, 3)
    rounds = np.array(accepted, dtype=float)
    assert counts.accept_len is not None and abs(counts.accept_len - (1 + rounds.mean())) < 1e-12
    assert counts.standard_error is not None
    assert abs(counts.standard_error - rounds.std() / np.sqrt(len(rounds))) < 1e-9


def test_no_standard_error_before_two_rounds() -> None:
    assert _counts([], 3).standard_error is None and _counts([2], 3).standard_error is None
    assert _counts([0, 0], 3).standard_error == 0.0

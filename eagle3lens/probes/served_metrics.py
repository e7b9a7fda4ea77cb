"""``logs --metrics URL|FILE``: the accept length a live vLLM server counts, from its Prometheus ``/metrics``.

The counters (``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``, ``..._num_accepted_tokens``,
``..._num_accepted_tokens_per_pos``) are what the server's own log line is computed from, over the server's whole
life: accept length ``1 + accepted / drafts``, position k ``accepted_at_k / drafts`` (per drafting round). The
reading is a ``LogResult`` like a log's, judged by the same rules (``logs/zero-acceptance``, ``logs/low-acceptance``).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlparse

from ..engines.measure import ServedCounts, counters_from_prometheus
from ..errors import UsageError
from ..io.inputs import MiB, read_regular
from ..io.textsafe import printable
from .log_formats import DraftInference
from .logs import DEFAULT_DRAFT_STEPS, DRAFT_STEP_COST, LogResult, LogSummary, classify

MAX_METRICS_BYTES = 16 * MiB
_FETCH_TIMEOUT_S = 10.0


def read_metrics(source: str, *, num_draft_tokens: int | None = None, baseline_tps: float | None = None,
                 expected_accept_len: float | None = None) -> LogResult:
    """The server's counters read from ``source`` (an ``http(s)://`` URL of its ``/metrics``, or a saved copy)."""
    counts = counters_from_prometheus(_fetch(source), source)
    if not counts.drafts:
        raise UsageError(f"{printable(source)}: the speculative-decoding counters are all zero: the server has not "
                         "drafted yet (send it requests first)")
    return metrics_result(counts, source, num_draft_tokens=num_draft_tokens, baseline_tps=baseline_tps,
                          expected_accept_len=expected_accept_len)


def metrics_result(counts: ServedCounts, source: str, *, num_draft_tokens: int | None = None,
                   baseline_tps: float | None = None, expected_accept_len: float | None = None) -> LogResult:
    """A ``LogResult`` for a counter reading: the summary a log would give, and its findings."""
    k = num_draft_tokens or (len(counts.accepted_per_pos) or None)
    given = "option" if num_draft_tokens else "metrics"
    inference = DraftInference(formula=None, num_draft_tokens=k, draft_steps=k, source=given,
                               explanation="the number of per-position counters" if given == "metrics" else "")
    summary = LogSummary(lifetime_accept_len=counts.accept_len, mean_per_position=counts.per_position,
                         accepted_tokens=counts.accepted, drafted_tokens=counts.draft_tokens,
                         baseline_tps=baseline_tps, expected_accept_len=expected_accept_len,
                         break_even_accept_len=1 + DRAFT_STEP_COST * (k or DEFAULT_DRAFT_STEPS))
    result = LogResult(source=source, engine="vllm", formats=(("vllm-prometheus", 1),), samples=(), summary=summary,
                       inference=inference, total_lines=0, ignored_lines=0, unparsed_lines=0, unparsed_examples=(),
                       unknown_fields=(), notes=(f"{counts.drafts} drafting rounds counted by the server: accept "
                                                 f"len = 1 + {counts.accepted} accepted / {counts.drafts} drafts",))
    return LogResult(**{**result.__dict__, "findings": tuple(classify(result))})


def _fetch(source: str) -> str:
    scheme = urlparse(source).scheme.lower()
    if scheme not in ("http", "https"):
        return read_regular(source, MAX_METRICS_BYTES, "metrics file").decode("utf-8", "replace")
    try:
        with urllib.request.urlopen(source, timeout=_FETCH_TIMEOUT_S) as response:  # noqa: S310 - http(s) only
            body = response.read(MAX_METRICS_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UsageError(f"{printable(source)}: cannot read the server's metrics ({printable(exc)})") from None
    if len(body) > MAX_METRICS_BYTES:
        raise UsageError(f"{printable(source)}: metrics over {MAX_METRICS_BYTES // MiB} MiB")
    return body.decode("utf-8", "replace")

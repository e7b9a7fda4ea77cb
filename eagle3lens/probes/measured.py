"""The engine's own count held against the estimate: ``engine/served-disagrees`` where they part.

The measurement (``engines.measure``) served the same prompts the estimate scored. Under greedy decoding the
estimate walks the drafting rounds the engine runs, so the two agree to rounding unless something is not modelled;
under sampling the measurement is one draw, so the tolerance grows with its own standard error, computed from the
counters (a round's accepted count ``a`` has ``E[a^2] = sum_k (2k - 1) P(a >= k)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engines.measure import Measurement
from ..engines.versions import spec_parts
from ..errors import UsageError
from ..findings import Finding, Severity
from .acceptance_result import AcceptanceResult
from .served_sampling import verify_defect

GREEDY_TOLERANCE = 0.02  # accept length: rounding and the odd near-tie argmax between two float32 implementations
NOT_MODELLED = ("a tie between two tokens of near-equal logit decided otherwise (compare the generated tokens)",
                "a draft-side detail of the engine the simulation does not model (the release's proposer code)",
                "an engine option the launch set and eagle3lens did not read")


def tolerance(measurement: Measurement) -> float:
    """How far an estimate may sit from this measurement and still agree."""
    counts = measurement.counts
    if counts is None or not counts.drafts:
        return GREEDY_TOLERANCE
    if float(measurement.sampling.get("temperature", 0.0)) == 0.0:
        return GREEDY_TOLERANCE
    rates = counts.per_position
    mean = sum(rates)
    second = sum((2 * k + 1) * p for k, p in enumerate(rates))
    return max(GREEDY_TOLERANCE, 3.0 * math.sqrt(max(second - mean * mean, 0.0) / counts.drafts))


def sampled_verify_defect(measurement: Measurement) -> str | None:
    """Why ``measurement``'s engine build cannot be trusted under its sampling (None: greedy, or no known defect)."""
    if float(measurement.sampling.get("temperature", 0.0) or 0.0) <= 0:
        return None
    name, release, _ = spec_parts(measurement.engine)
    return verify_defect(name, release, measurement.build)


def same_tokens(measurement: Measurement, continuations: Sequence[Sequence[int]]) -> int:
    """How many prompts the engine continued with exactly the tokens the estimate scored."""
    return sum(tuple(a) == tuple(b) for a, b in zip(measurement.outputs, continuations, strict=False))


def judge(result: AcceptanceResult, measurement: Measurement,
          continuations: Sequence[Sequence[int]] = ()) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """Findings and notes from holding ``measurement`` against the as-served view of ``result``."""
    view = result.views.get("as_served")
    estimate = view.accept_len if view is not None else None
    predicted_stop = view.error if view is not None else None
    evidence = {"measured": measurement.to_dict(), "estimate": estimate, "predicted_stop": predicted_stop}
    who = f"{measurement.engine} ({measurement.build} build)" if measurement.build else measurement.engine
    if measurement.stop is not None:
        said = f"{who} stopped at {measurement.stop.stage}: {measurement.stop.text()}"
        if predicted_stop:
            return (), (f"measured: {said}; eagle3lens predicted the stop ({predicted_stop})",)
        return (Finding("engine/served-disagrees", Severity.CRITICAL,
                        f"the real engine refused to serve the draft; eagle3lens predicted it serves "
                        f"(accept len {_fmt(estimate)})",
                        f"{said}. The simulation does not model this stop: the server's own error decides.",
                        evidence=evidence),), ()
    measured = measurement.accept_len
    notes = [f"measured by {who}: accept len {_fmt(measured)} over {measurement.counts.drafts if measurement.counts else 0} "
             f"drafting rounds of {measurement.prompts} prompts (K = {measurement.k}); estimate {_fmt(estimate)}"]
    if continuations and measurement.outputs:
        notes.append(f"the engine generated the tokens the estimate scored on {same_tokens(measurement, continuations)}"
                     f" of {len(continuations)} prompts")
    if estimate is None or measured is None:
        if predicted_stop:
            return (Finding("engine/served-disagrees", Severity.CRITICAL,
                            f"the real engine served the draft (accept len {_fmt(measured)}); eagle3lens predicted a "
                            f"stop", f"predicted: {predicted_stop}; {notes[0]}.", evidence=evidence),), ()
        return (), tuple(notes)
    tol = tolerance(measurement)
    broken = sampled_verify_defect(measurement)
    if broken is not None and measured < estimate - tol:
        return (Finding("engine/sampled-verify-broken", Severity.CRITICAL,
                        f"{who} verifies sampled requests against garbage: it counts accept len {measured:.3f} where "
                        f"the draft earns {estimate:.3f}",
                        f"{notes[0]}. {broken} The measured figure is the build's defect, not the draft's.",
                        fix="measure greedily (--temperature 0) on this build, or serve the sampling on a GPU build "
                            "(--host)", evidence=evidence),), tuple(notes[1:])
    if abs(measured - estimate) <= tol:
        return (), tuple(notes)
    evidence["tolerance"] = tol
    return (Finding("engine/served-disagrees", Severity.WARNING,
                    f"the real engine counts accept len {measured:.3f}, eagle3lens estimates {estimate:.3f}",
                    f"{notes[0]}; they differ by {abs(measured - estimate):.3f}, more than the {tol:.3f} noise allows. "
                    "Most likely not modelled: " + "; ".join(NOT_MODELLED) + ". The measured figure is the "
                    "server's.", evidence=evidence),), tuple(notes[1:])


def serve_samples(target: str | Path, draft: str | Path, samples: Sequence[Any], teacher: Any, steps: int,
                  sampling: Any = None, *, engine: str = "vllm", python: str | None = None,
                  timeout_s: float | None = None, host: str | None = None,
                  ssh_config: str | Path | None = None) -> tuple[Measurement, list[list[int]]]:
    """Serve the prompts of ``samples`` (each sample's tokens before its first scored one) with the real engine,
    each for as many tokens as the estimate scored after it, at ``sampling`` (None: greedy); returns the
    measurement and those continuations. ``teacher``: the loaded target or its checkpoint (its eos ids end
    generation)."""
    import torch

    from ..engines.measure import DEFAULT_TIMEOUT_S, measure
    from .data import stop_ids

    prompts, continuations = [], []
    for sample in samples:
        mask = sample.loss_mask.nonzero()
        start = int(mask[0]) if mask.numel() else len(sample)
        ids = [int(i) for i in sample.token_ids]
        if start == 0 or start >= len(ids):
            continue  # nothing before the first scored token to prompt with, or nothing after it
        prompts.append(ids[:start])
        continuations.append(ids[start:])
    if not prompts:
        raise UsageError("--measure: no sample has a prompt followed by scored tokens to serve")
    stops = stop_ids(teacher) if isinstance(teacher, torch.nn.Module) else checkpoint_stop_ids(teacher)
    temperature = 0.0 if sampling is None else float(sampling.temperature)
    top_p = 1.0 if sampling is None else float(sampling.top_p)
    top_k = -1 if sampling is None or not sampling.top_k else int(sampling.top_k)
    measurement = measure(target, draft, prompts, k=steps, max_tokens=[len(c) for c in continuations],
                          stop_token_ids=sorted(stops), temperature=temperature, top_p=top_p, top_k=top_k,
                          engine=engine, python=python, timeout_s=timeout_s or DEFAULT_TIMEOUT_S, host=host,
                          ssh_config=ssh_config)
    return measurement, continuations


def checkpoint_stop_ids(target: Any) -> frozenset[int]:
    """The eos ids of a target checkpoint's config.json and generation_config.json (an id or a list), read as the
    engine reads them, where no model was loaded (``--data``: only the head was read)."""
    from ..checkpoint import Checkpoint
    from ..io.inputs import inside
    from ..io.jsonio import read_json

    ckpt = target if isinstance(target, Checkpoint) else Checkpoint.open(target)
    configs: list[Any] = [ckpt.config or {}]
    generation = ckpt.root / "generation_config.json"
    if generation.exists():
        inside(ckpt.root, generation, what="generation_config.json")
        configs.append(read_json(generation, "generation config", UsageError))
    values = [c.get("eos_token_id") for c in configs if isinstance(c, dict)]
    items = [i for v in values for i in (v if isinstance(v, list) else [v])]
    return frozenset(i for i in items if isinstance(i, int) and not isinstance(i, bool))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


@dataclass(frozen=True)
class ConversionMeasured:
    """``convert --measure``: the source and the converted checkpoint, each served by the real engine on the same
    prompts, and what the difference says about the fix."""

    source: Measurement
    output: Measurement
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.to_dict(), "output": self.output.to_dict(), "notes": list(self.notes)}


def judge_conversion(source: Measurement, output: Measurement) -> ConversionMeasured:
    """The fix verified by the engine: the output must serve, and accept at least what the source accepts."""
    who = f"{output.engine} ({output.build} build)" if output.build else output.engine
    evidence = {"source": source.to_dict(), "output": output.to_dict()}
    if output.stop is not None:
        finding = Finding("acceptance/not-restored", Severity.CRITICAL,
                          f"served by {who}, the converted checkpoint does not run",
                          f"{who} stopped at {output.stop.stage}: {output.stop.text()}.", evidence=evidence)
        return ConversionMeasured(source, output, (finding,))
    after = output.accept_len
    if source.stop is not None:
        note = (f"measured by {who}: the source stops at {source.stop.stage} ({source.stop.text()}); the converted "
                f"checkpoint serves at accept len {_fmt(after)}")
        return ConversionMeasured(source, output, (), (note,))
    before = source.accept_len
    note = f"measured by {who} on {output.prompts} prompts: accept len {_fmt(before)} before the fix, {_fmt(after)} after"
    if before is not None and after is not None and after < before - tolerance(output):
        finding = Finding("acceptance/not-restored", Severity.WARNING,
                          f"served by {who}, the converted checkpoint accepts less than the source "
                          f"({after:.3f} < {before:.3f})",
                          f"{note}: the fix costs acceptance on this engine; keep the source.", evidence=evidence)
        return ConversionMeasured(source, output, (finding,))
    return ConversionMeasured(source, output, (), (note,))

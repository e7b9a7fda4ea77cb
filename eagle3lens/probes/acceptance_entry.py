"""The acceptance probe as other callers run it: ``convert --data`` (:func:`check_data`, :func:`verify_conversion`),
the doctor (:func:`doctor_acceptance`), live capture from prompts (:func:`live_samples`) and ``--log``
(:func:`held_against_log`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint
from ..engines import EngineProfile
from ..errors import CheckpointError, UsageError
from ..findings import Finding, Severity
from ..progress import Progress
from ..target_runtime import Teacher
from .acceptance_findings import evidence, log_comparison, restored
from .acceptance_probe import estimate_acceptance
from .acceptance_result import AcceptanceResult
from .acceptance_samples import checked
from .acceptance_setup import Fixer, trained_setup
from .data import Sample, iter_samples
from .traffic_result import Sampling


def check_data(draft: str | Path | Checkpoint, data: str | Path, *, target: str | Path,
               limit: int | None = None) -> None:
    """The checks ``estimate_acceptance`` makes of each sample, on every sample it will score (the first
    ``limit``; ``convert --data`` runs them before it writes anything): one error naming the file and both widths
    when a sample does not fit. Samples are read one at a time."""
    ckpt = (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    cpu = torch.device("cpu")
    teacher = Teacher.open(target, cpu)
    trained = trained_setup(ckpt, teacher, teacher.num_layers, cpu)
    H_t = trained.draft.cfg.target_hidden
    for s in checked(iter_samples(data, limit=limit), ckpt, teacher, trained):
        layers = s.layers if s.layers is not None else trained.layers
        if len(layers) != s.aux.shape[-1] // H_t:  # what prepare refuses, without running the teacher
            raise CheckpointError(s.source, f"the dump holds {s.aux.shape[-1] // H_t} aux layers, the draft was "
                                            f"trained with {len(layers)} ({list(layers)})")


def verify_conversion(source: str | Path, out: str | Path, data: str | Path, *, target: str | Path,
                      engine: str | EngineProfile, steps: int | None = None, device: str = "cpu",
                      limit: int | None = None, progress: Progress | None = None) -> AcceptanceResult:
    """``convert --data``: the source as trained and as ``engine`` serves it, beside ``out`` (what convert wrote)
    as ``engine`` serves it, fed the layers the engine captures. "Verified" needs both: ``out`` restores as trained
    within noise, and provenance of the data against ``out`` and ``engine`` is clean (the engine feeds the layers
    the data came from); ``acceptance/not-restored`` when ``out`` falls short of as trained."""
    from .provenance import trace_provenance

    result = estimate_acceptance(source, data, target=target, engine=engine, steps=steps, device=device,
                                 limit=limit, fixed=out, progress=progress)
    trained, fixed = result.accept_len("as_trained"), result.accept_len("fixed")
    view = result.views.get("fixed")
    foreign = [f for f in result.findings if f.code == "data/not-from-target"]
    if foreign:
        return replace(result, notes=(*result.notes, f"acceptance not verified: {foreign[0].title}"))
    if fixed is None and view is not None and view.unavailable:  # the engine's layers could not be fed
        return replace(result, findings=(), notes=(*result.notes, f"acceptance not verified: {view.unavailable}"))
    if restored(result):
        provenance = trace_provenance(data, target, draft=out, engine=engine, device=device)
        bad = [f for f in provenance.findings if f.severity.rank >= Severity.WARNING.rank]
        if bad:
            return replace(result, findings=tuple(bad), notes=(
                *result.notes, f"acceptance not verified: provenance of the data against {out}: {bad[0].title}"))
        note = (f"acceptance verified: {out} as served by {result.engine} accepts {fixed:.2f}, as trained "
                f"{trained:.2f}; the engine feeds the layers the data came from")
        return replace(result, findings=(), notes=(*result.notes, note))
    shown = "not scored" if fixed is None else f"{fixed:.2f}"
    finding = Finding("acceptance/not-restored", Severity.CRITICAL,
                      f"after convert, as served by {result.engine}: accept len {shown}; as trained: "
                      + ("-" if trained is None else f"{trained:.2f}"),
                      f"Offline, on {result.samples} samples with K = {result.steps}: {out} as {result.engine} loads "
                      "and wires it does not accept what the draft accepts as trained. Something convert does not "
                      "change still differs (aux layers, the launch, the engine release).",
                      evidence=evidence(result))
    return replace(result, findings=(finding,))


def needed_layers(draft: str | Path | Checkpoint, num_target_layers: int,
                  engine: str | EngineProfile | None = None) -> tuple[int, ...]:
    """HF hidden_states indices a live capture must keep: the trained layers and those ``engine`` captures."""
    from ..served import serve_draft
    from ..aux_ids import trained_with

    ckpt = draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)
    layers = set(trained_with(ckpt.spec, num_target_layers)[0])
    if engine is not None:
        layers |= set(serve_draft(ckpt, engine=engine, num_target_layers=num_target_layers).captured)
    return tuple(sorted(k for k in layers if 0 <= k < num_target_layers))


def live_samples(draft: str | Path | Checkpoint, target: Any, prompts: str | Path,
                 engine: str | EngineProfile | None = None, new_tokens: int = 32, device: str = "cpu",
                 device_map: str | None = None, limit: int | None = None) -> tuple[list[Sample], Any]:
    """Prompts continued greedily by the target (loaded from ``target``), with the aux layers the trained draft and
    ``engine`` need captured by the tracer; returns the samples and the loaded target (the teacher)."""
    from .data import capture_samples, read_prompts
    from ..target_runtime.load import find_decoder_layers, load_target

    model = load_target(target, device if device_map is None else "cpu", device_map=device_map)
    tokenizer = target.root if isinstance(target, Checkpoint) else target if isinstance(target, (str, Path)) else None
    ids = read_prompts(prompts, tokenizer_dir=tokenizer)[:limit]
    layers = needed_layers(draft, len(find_decoder_layers(model)[1]), engine)
    return list(capture_samples(model, ids, layers, new_tokens=new_tokens, source=prompts)), model


def doctor_acceptance(draft: Checkpoint, target: Any, engine: str | EngineProfile | None, *,
                      data: str | Path | None = None, prompts: str | Path | None = None,
                      logged_accept_len: float | None = None, log_path: str | None = None,
                      scenario: str | None = None, chat: tuple[list[Sample], Any] | None = None,
                      steps: int | None = None, log_steps: int | None = None,
                      measure: Callable[[AcceptanceResult, Any, Any], AcceptanceResult] | None = None,
                      fixed: bool | Fixer = True, sampling: Sampling | None = None
                      ) -> tuple[AcceptanceResult, str | None]:
    """The acceptance probe as the doctor runs it, at ``steps`` (the K the server drafts, where the log or launch
    says): as served held against the logged accept len (:func:`log_comparison`).

    Returns the result (with ``acceptance/served-vs-log-mismatch`` added on disagreement) and, on agreement,
    the note that the served acceptance is explained by the causes found. ``fixed``: what makes the fixed
    view's checkpoint (the doctor passes ``eagle3lens.convert.fixed_draft``), as :func:`estimate_acceptance`;
    ``sampling``: also score the served sampling (the log is then held against the sampled figure).
    """

    samples: Any = data
    teacher: Any = target
    if data is None and chat is not None:
        samples, teacher = chat
    elif data is None:
        if prompts is None:
            raise UsageError("acceptance needs --data D, --prompts F or --chat FILE.jsonl")
        samples, teacher = live_samples(draft, target, prompts, engine)
    result = estimate_acceptance(draft, samples, target=teacher, engine=engine, steps=steps, fixed=fixed,
                                 scenario=scenario if scenario == "aux-off" else None,
                                 sampling=sampling, served_vocab=data is None,
                                 traffic="dump" if data is not None else
                                 "chat" if chat is not None else "prompts")
    if measure is not None:
        result = measure(result, samples, teacher)
    if logged_accept_len is None or engine is None:
        return result, None
    return held_against_log(result, logged_accept_len, log_path or "log", log_steps)


def held_against_log(result: AcceptanceResult, logged: float, log_path: str,
                     log_steps: int | None = None) -> tuple[AcceptanceResult, str | None]:
    """``result`` with :func:`log_comparison`'s finding added (the doctor and ``acceptance --log`` alike), and the
    note of agreement."""
    finding, note = log_comparison(result, logged, log_path, log_steps)
    if finding is not None:
        result = replace(result, findings=(*result.findings, finding))
    return result, note

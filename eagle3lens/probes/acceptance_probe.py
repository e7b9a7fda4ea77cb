"""The acceptance probe: every view scored over the samples, and the result assembled (see :mod:`.acceptance`)."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import Checkpoint
from ..engines import EngineProfile, resolve
from ..errors import CheckpointError, UsageError
from ..progress import Progress
from ..target_runtime import Teacher
from .acceptance_findings import gap_findings
from .acceptance_result import AcceptanceResult
from .acceptance_samples import Origin, checked, count, prepare
from .acceptance_score import Counts, score, score_in_vocab, shared_counts
from .acceptance_setup import (
    FixedDraft,
    Fixer,
    Setup,
    config_steps,
    eagle_mode,
    fixed_setup,
    given_fixed,
    never_written_note,
    served_setup,
    toggle_setups,
    trained_setup,
)
from .data import Sample, describe_dump, iter_samples
from .engine_init import EMPTY_MEMORY, EmptyMemory
from .limits import check_steps
from .acceptance_log_lines import log_lines
from .traffic import TrafficScorer
from .traffic_result import Sampling

DEFAULT_STEPS = 3  # speculators' ttt_steps default


def estimate_acceptance(draft: str | Path | Checkpoint, data: str | Path | Iterable[Sample] | None, *,
                        target: str | Path | Checkpoint | Any | None = None,
                        engine: str | EngineProfile | None = None, steps: int | None = None,
                        scenario: str | None = None, device: str = "cpu", limit: int | None = None,
                        fixed: bool | str | Path | Fixer = True, empty_memory: EmptyMemory = "noise",
                        progress: Progress | None = None, sampling: Sampling | None = None,
                        served_vocab: bool = False, traffic: str | None = None) -> AcceptanceResult:
    """Acceptance of ``draft`` over ``data`` (a dump path or Samples), as trained and as ``engine`` serves it.

    ``target``: the target checkpoint (its final norm and lm_head are the teacher; embed where the engine shares
    it) or a loaded HF model. ``steps``: draft steps K (default: the config's speculative token count, else 3).
    ``scenario="aux-off"``: the engine captures no aux states. ``fixed``: also score the checkpoint ``convert
    --to engine`` writes as the fixed view: a path (one ``convert`` already wrote), or what writes it
    (``eagle3lens.convert.fixed_draft``, which ``eagle3lens.convert.estimate_acceptance`` passes for ``True``);
    the probe converts nothing, so ``True`` here leaves a note and no fixed view.
    ``empty_memory``: what a ``torch.empty`` parameter the engine never writes holds, ``"noise"`` or ``"zeros"``.
    ``sampling``: also score each serving view under speculative sampling at that temperature / top-k / top-p
    (``result.traffic.sampled``); ``served_vocab``: count the target's tokens outside the draft vocabulary
    (``result.traffic.vocab``, for as served, else as trained); ``traffic``: what the samples are (``"chat"``,
    ``"prompts"``, ``"dump"``), for the report.
    """
    _check_options(empty_memory, scenario, engine)
    ckpt = (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    if target is None:
        raise UsageError("acceptance needs --target: its final norm and lm_head give the teacher's tokens")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible here; use --device cpu")
    dev = torch.device(device)
    K = check_steps(steps) if steps is not None else check_steps(
        config_steps(ckpt) or DEFAULT_STEPS, f"{ckpt.path}: speculative_tokens in config.json")
    if data is None:
        raise UsageError("acceptance needs data: a hidden-state dump, or samples captured live from the target")
    teacher = Teacher.open(target, dev)
    samples = iter_samples(data, limit=limit) if isinstance(data, (str, Path)) else iter(data)
    data_name = str(data) if isinstance(data, (str, Path)) else "live capture"
    profile = resolve(engine) if engine is not None else None
    trained = trained_setup(ckpt, teacher, teacher.num_layers, dev)
    plan = _Plan(trained)
    if isinstance(data, (str, Path)) and not describe_dump(data).has_loss_mask:
        plan.notes.append("the dump's files hold no loss_mask (speculators keeps it in its Arrow dataset): every "
                          "position counts")
    with ExitStack() as stack:
        if profile is not None:
            _plan_served(plan, ckpt, profile, teacher, dev, scenario == "aux-off", empty_memory, fixed, stack)
        run = _Run(plan, K, teacher, sampling, served_vocab, traffic, isinstance(data, (str, Path)))
        run.score_all(checked(samples, ckpt, teacher, trained), dev, count(data, limit), progress)
    if not run.done:
        raise CheckpointError(data_name, "no samples to score")
    return _result(run, ckpt, data_name, profile.spec if profile is not None else None, teacher)


def _check_options(empty_memory: str, scenario: str | None, engine: str | EngineProfile | None) -> None:
    if empty_memory not in EMPTY_MEMORY:
        raise UsageError(f"--empty-memory is one of {', '.join(EMPTY_MEMORY)}, not {empty_memory!r}")
    if scenario not in (None, "aux-off"):
        raise UsageError(f"acceptance models the scenario 'aux-off' only, not {scenario!r}")
    if scenario and engine is None:
        raise UsageError("--scenario needs --engine: it is the engine that captures no aux states")


@dataclass
class _Plan:
    """The setups to score: the views (name -> setup, whether it is a serving view), each cause fixed alone."""

    trained: Setup
    setups: dict[str, tuple[Setup, bool]] = field(default_factory=dict)
    toggles: dict[str, Setup] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.setups = {"metrics": (self.trained, False), "as_trained": (self.trained, True)}


def _plan_served(plan: _Plan, ckpt: Checkpoint, profile: EngineProfile, teacher: Teacher, dev: torch.device,
                 aux_off: bool, empty: EmptyMemory, fixed: bool | str | Path | Fixer, stack: ExitStack) -> None:
    """As served, each cause fixed alone, and the fixed view (the fixer's temporary folder lives in ``stack``)."""
    L = teacher.num_layers
    served = served_setup(ckpt, profile, teacher, L, dev, aux_off=aux_off, empty=empty)
    plan.toggles = toggle_setups(served, plan.trained, ckpt, profile, aux_off=aux_off)
    if served.aux_off and profile.eagle_mode_vocab is not None:
        served = eagle_mode(served, teacher, profile)
        plan.toggles = {name: eagle_mode(st, teacher, profile) if st.aux_off else st
                        for name, st in plan.toggles.items()}
    plan.setups["as_served"] = (served, True)
    plan.notes.extend(never_written_note(served, profile, empty))
    made: FixedDraft | None = None
    if isinstance(fixed, (str, Path)):  # a checkpoint convert already wrote: scored as the fixed view
        made = given_fixed(fixed, profile)
    elif fixed is True and profile.kind == "serving":
        plan.notes.append("fixed: not scored: the probe converts nothing (pass fixed=eagle3lens.convert.fixed_draft, "
                          "or a checkpoint convert wrote)")
    elif callable(fixed) and profile.kind == "serving":
        made = stack.enter_context(fixed(ckpt, profile))
    if made is not None:
        setup = fixed_setup(made, profile, teacher, L, dev, empty)
        if setup is not None:
            plan.setups["fixed"] = (setup, True)
        plan.notes.append(made.note)


class _Run:
    """The scoring pass: every sample through every distinct setup, counts shared by setups that run alike."""

    def __init__(self, plan: _Plan, K: int, teacher: Teacher, sampling: Sampling | None, served_vocab: bool,
                 traffic: str | None, verify: bool) -> None:
        self.plan, self.K, self.teacher = plan, K, teacher
        serving = {n: st for n, (st, is_serving) in plan.setups.items() if is_serving}
        self.counts = {"metrics": Counts(K), **shared_counts(serving, K)}
        self.toggle_counts = shared_counts(plan.toggles, K, known=[(plan.setups[n][0], c)
                                                                   for n, c in self.counts.items() if n != "metrics"])
        if sampling is not None:  # the target's own logit scale / soft cap, as its model and the engines apply
            sampling = sampling.for_target(teacher.config())
        self.scorer = TrafficScorer(K, sampling, teacher.lm_head, model=teacher.model,
                                    vocab_view=("as_served" if "as_served" in plan.setups else "as_trained")
                                    if served_vocab else None, source=traffic)
        # the served vocabulary's price: the as-trained chain against the target's greedy token over the draft vocab
        self.in_vocab = Counts(K)
        self.agree = [0.0, 0.0]
        self.done = 0
        self.capture = tuple(sorted({k for st, is_serving in plan.setups.values() for k in st.layers
                                     if is_serving and st.feed == "layers" and not st.aux_off}
                                    | {k for st in plan.toggles.values() for k in st.layers
                                       if st.feed == "layers" and not st.aux_off}))
        self.origin = Origin(verify=verify)

    def score_all(self, samples: Iterable[Sample], dev: torch.device, total: int | None,
                  progress: Progress | None) -> None:
        for sample in samples:
            self.score_one(prepare(sample, self.teacher, self.plan.trained, dev, self.capture, self.origin,
                                   each=self.scorer.row_stats()))
            self.done += 1
            if progress is not None:
                progress(self.done, total, "samples")

    def score_one(self, prepared: Any) -> None:
        self.agree[0] += prepared.agree
        self.agree[1] += prepared.agree_total
        scored: set[int] = set()  # setups that run alike share one Counts: score it once per sample
        chains: dict[int, list[torch.Tensor] | None] = {}
        for name, (setup, serving) in self.plan.setups.items():
            counts = self.counts[name]
            if id(counts) not in scored:
                chains[id(counts)] = score(setup, prepared, self.K, counts, serving)
                scored.add(id(counts))
            preds = chains.get(id(counts))
            if serving and preds is not None and self.scorer.active:
                self.scorer.add(name, setup.draft, preds, prepared, id(counts))
            if name == "as_trained" and preds is not None:
                score_in_vocab(setup.draft, preds, prepared, self.K, self.in_vocab)
        for name, setup in self.plan.toggles.items():
            if id(self.toggle_counts[name]) not in scored:
                score(setup, prepared, self.K, self.toggle_counts[name], True)
                scored.add(id(self.toggle_counts[name]))


def _result(run: _Run, ckpt: Checkpoint, data_name: str, label: str | None, teacher: Teacher) -> AcceptanceResult:
    """The views, toggles and notes of a finished run, with the gap (and foreign-data) findings."""
    K, setups, origin = run.K, run.plan.setups, run.origin
    views = {name: run.counts[name].view(name, setups[name][0].describe(),
                                         label if name in ("as_served", "fixed") else None, serving)
             for name, (_, serving) in setups.items()}
    views = {name: replace(v, log_lines=log_lines(v, K, label)) if name != "metrics" else v for name, v in views.items()}
    toggles = {name: c.view(name, {}, label, True).accept_len for name, c in run.toggle_counts.items()}
    agreement = run.agree[0] / run.agree[1] if run.agree[1] else None
    notes = run.plan.notes + [f"{name}: not scored: {v.unavailable}" for name, v in views.items() if v.unavailable]
    if agreement is not None and agreement < 0.99:
        notes.append(f"the data follows the target's greedy path at {agreement:.1%} of positions: steps after a "
                     "departure are checked against a prefix the server would not have seen (approximate)")
    if views["as_trained"].positions == 0:
        notes.append("nothing scored: no sample has a verify start (a continuation that ended at the target's eos "
                     f"within its first tokens, or samples shorter than K + 1 = {K + 1} tokens)")
    if origin.captured:
        notes.append(f"as served: the target was run again on each sample's tokens to capture hidden_states "
                     f"{list(run.capture)}, the layers the served views read")
    elif origin.checked and not origin.foreign:
        notes.append(f"the target was run on {origin.checked} samples' tokens: the data's last hidden states are "
                     "its own")
    result = AcceptanceResult(str(ckpt.path), data_name, label, K, run.done, views, toggles, agreement,
                              notes=tuple(notes), traffic=run.scorer.result({n: v.accept_len for n, v in views.items()}),
                              in_vocab_accept_len=run.in_vocab.view("in_vocab", {}, None, True).accept_len)
    findings = gap_findings(result, ckpt)
    if origin.foreign:
        from .provenance import not_from_target

        findings.insert(0, not_from_target(origin.foreign, origin.checked, origin.worst, origin.first_foreign or "",
                                           teacher.source))
    return replace(result, findings=tuple(findings))

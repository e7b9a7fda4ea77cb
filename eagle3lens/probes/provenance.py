"""Training-data provenance: which target layer each aux hidden state of a dump really came from.

    result = trace_provenance("demo/data-sglang", "demo/target", draft="demo/eagle", engine="sglang==0.5.11")
    [(c.chunk, c.best) for c in result.chunks]   # [('aux 0', 3), ('aux 1', 6), ('aux 2', 8), ('last', 'post-norm')]

The target is run on the dump's own token ids; every decoder layer's input (HF ``hidden_states[k]``), the
last layer's output before the final norm and the norm's output are candidates, and each chunk of the dump
is matched against them on a sample of positions (cosine similarity and relative error). Shapes cannot
tell these apart; values can. The match says which convention the data was extracted in (vLLM: id k is
the input of layer k; SGLang: id k is the output of layer k, so k+1), whether the last hidden state is
pre- or post-norm, and, against the draft's config and the engine's capture, whether training and serving
see the same features.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import Checkpoint
from ..engines import EngineProfile, all_profiles, resolve
from ..errors import CheckpointError, UsageError
from ..findings import Finding, Severity, fix_command, to_jsonable
from ..progress import Progress
from ..served import serve_draft
from ..aux_ids import trained_with
from ..target_runtime import HookPoints
from .data import Sample, describe_dump, iter_samples
from .limits import check_length, max_positions

PRE, POST = -1, -2  # candidate indices for the last layer's output before and after the final norm
MATCH_TOLERANCE = 0.05  # relative error a stored copy of the same state stays under (bf16 ~0.4 %, fp8 ~3 %)
PER_SEQUENCE = 64  # positions taken from one sequence at most, so a sample spans sequences
# the trainer that reads a dump expects its last hidden state pre-norm (speculators applies verifier_norm) or
# post-norm (SpecForge's teacher is the bare lm_head). A trainer's own dump format names the trainer; an
# eagle3lens dump is judged by the trainer the draft's layout points at.
EXPECTED_LAST = {"speculators": "pre-norm", "SpecForge": "post-norm"}
TRAINER_OF = {"speculators": "speculators", "specforge": "SpecForge", "sglang": "SpecForge"}


def candidate_label(k: int, num_layers: int) -> str:
    if k == PRE:
        return f"layer {num_layers - 1} output, pre-norm"
    if k == POST:
        return "final norm output"
    return f"hidden_states[{k}]"


@dataclass(frozen=True)
class ChunkMatch:
    """The target state one chunk of the dump matches best, and by how much."""

    chunk: str  # "aux 0", "aux 1", ..., "last"
    best: int | None  # HF hidden_states index, PRE / POST, or None when nothing matches
    cosine: float
    rel_error: float
    runner_up: int | None
    runner_up_rel_error: float
    matched: bool  # rel_error within MATCH_TOLERANCE

    @property
    def margin(self) -> float:
        """How much worse the runner-up fits (relative error difference)."""
        return self.runner_up_rel_error - self.rel_error

    def to_dict(self) -> dict[str, Any]:
        return {"chunk": self.chunk, "best": self.best, "cosine": self.cosine, "rel_error": self.rel_error,
                "runner_up": self.runner_up, "runner_up_rel_error": self.runner_up_rel_error,
                "margin": self.margin, "matched": self.matched}


@dataclass(frozen=True)
class ProvenanceResult:
    """Per chunk of a hidden-state dump: the target layer it came from; and what that means for training/serving."""

    data: str
    format: str
    target: str
    num_target_layers: int
    hidden: int
    stored_dtype: str
    sequences: int
    positions: int
    candidates: tuple[int, ...]  # column order of the matrices
    cosine: tuple[tuple[float, ...], ...]  # [chunk][candidate]
    rel_error: tuple[tuple[float, ...], ...]
    chunks: tuple[ChunkMatch, ...]
    layers: tuple[int | None, ...]  # HF index per aux chunk (None: unmatched)
    last_hidden: str  # "pre-norm" | "post-norm" | "unmatched" | "absent"
    convention: str  # what the data implies about the ids it was extracted with
    recorded_ids: tuple[int, ...] | None  # ids the dump or the draft records for it
    trained_layers: tuple[int, ...] | None  # HF layers the draft's config says it was trained with
    engine: str | None
    engine_layers: tuple[int, ...] | None  # HF layers the engine captures at serving
    findings: tuple[Finding, ...] = field(default=())

    def candidate_labels(self) -> tuple[str, ...]:
        return tuple(candidate_label(k, self.num_target_layers) for k in self.candidates)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "data": self.data, "format": self.format, "target": self.target,
            "num_target_layers": self.num_target_layers, "hidden": self.hidden, "stored_dtype": self.stored_dtype,
            "sequences": self.sequences, "positions": self.positions, "candidates": list(self.candidate_labels()),
            "cosine": [list(r) for r in self.cosine], "rel_error": [list(r) for r in self.rel_error],
            "chunks": [c.to_dict() for c in self.chunks], "layers": list(self.layers),
            "as_vllm_ids": [k for k in self.layers if k is not None],
            "as_sglang_ids": [k - 1 for k in self.layers if k is not None],
            "last_hidden": self.last_hidden, "convention": self.convention,
            "recorded_ids": self.recorded_ids, "trained_layers": self.trained_layers, "engine": self.engine,
            "engine_layers": self.engine_layers, "findings": [f.to_dict() for f in self.findings]})


class _Accumulator:
    """Running sums per (chunk, candidate): cosine over positions, squared error and squared reference norm."""

    def __init__(self, chunks: int, candidates: int) -> None:
        self.cos = torch.zeros(chunks, candidates, dtype=torch.float64)
        self.err = torch.zeros(chunks, candidates, dtype=torch.float64)
        self.ref = torch.zeros(candidates, dtype=torch.float64)
        self.positions = 0

    def add(self, chunks: torch.Tensor, states: torch.Tensor) -> None:
        """``chunks`` [n, P, H] from the dump, ``states`` [C, P, H] from the target (float64)."""
        a = torch.nn.functional.normalize(chunks, dim=-1)
        b = torch.nn.functional.normalize(states, dim=-1)
        self.cos += torch.einsum("nph,cph->nc", a, b)
        diff2 = (chunks.pow(2).sum(-1).sum(-1)[:, None] + states.pow(2).sum(-1).sum(-1)[None, :]
                 - 2 * torch.einsum("nph,cph->nc", chunks, states))
        self.err += diff2.clamp_min(0)
        self.ref += states.pow(2).sum(-1).sum(-1)
        self.positions += chunks.shape[1]

    def matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        cos = self.cos / max(self.positions, 1)
        rel = (self.err / self.ref.clamp_min(1e-30)[None, :]).sqrt()
        return cos, rel


@dataclass
class _Stream:
    """The dump's samples compared so far against the target's states: accumulators and what was skipped."""

    aux: _Accumulator
    last: _Accumulator
    n_aux: int  # aux chunks per position, each ``hidden`` wide
    hidden: int
    vocab: int
    counts: dict[str, int] = field(default_factory=lambda: {"out_of_vocab": 0, "empty_mask": 0, "non_finite": 0,
                                                             "sequences": 0})
    has_last: bool = False
    dtype: str = "unknown"
    compared: bool = False  # the last sample offered was compared (not skipped)

    def compare(self, sample: Sample, points: HookPoints, candidates: tuple[int, ...], samples: int) -> None:
        """Compare one sample's aux chunks (and last state) with every candidate layer, unless it is unusable."""
        counts = self.counts
        self.compared = False
        self.dtype = str(sample.aux.dtype).replace("torch.", "")
        if not bool(sample.loss_mask.any()):
            counts["empty_mask"] += 1
        if int(sample.token_ids.max()) >= self.vocab or int(sample.token_ids.min()) < 0:
            counts["out_of_vocab"] += 1
            return
        if not bool(torch.isfinite(sample.aux).all()) or (sample.last is not None and
                                                          not bool(torch.isfinite(sample.last).all())):
            counts["non_finite"] += 1
            return
        states = _target_states(points, sample.token_ids, candidates)
        pos = _positions(len(sample), min(PER_SEQUENCE, samples - self.aux.positions))
        chunks = sample.aux[pos].double().reshape(len(pos), self.n_aux, self.hidden).transpose(0, 1)
        self.aux.add(chunks, states[:, pos])
        if sample.last is not None:
            self.has_last = True
            self.last.add(sample.last[pos].double()[None], states[:, pos])
        counts["sequences"] += 1
        self.compared = True


def trace_provenance(data: str | Path, target: str | Path | Checkpoint | nn.Module, *,
                     draft: str | Path | Checkpoint | None = None, engine: str | EngineProfile | None = None,
                     samples: int = 256, device: str = "cpu", device_map: str | None = None,
                     progress: Progress | None = None) -> ProvenanceResult:
    """Attribute every aux chunk (and the last hidden state) of the dump at ``data`` to a layer of ``target``.

    ``samples``: positions compared (a few hundred settle a layer's identity); sequences are streamed until
    that many are used. ``draft`` / ``engine`` add the agreement with training ids and serving capture.
    """
    if samples < 1:
        raise UsageError("--samples must be at least 1")
    info = describe_dump(data)
    ckpt = None if draft is None else (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    profile = resolve(engine) if engine is not None else None
    model = _load(target, device, device_map)
    hf_config: Any = model.config
    config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    H, L, V = int(config.hidden_size), int(config.num_hidden_layers), int(config.vocab_size)
    if info.hidden != H or info.aux_width % H:
        raise UsageError(f"{data}: the dump's hidden width is {info.hidden} (aux {info.aux_width} wide), the "
                         f"target's is {H}: this data was not extracted from this target")
    n_aux = info.aux_width // H
    positions = max_positions(config)
    points = HookPoints(model)
    candidates = tuple(range(L)) + ((PRE,) if points.norm is not None else ()) + (POST,)
    stream = _Stream(_Accumulator(n_aux, len(candidates)), _Accumulator(1, len(candidates)), n_aux, H, V)
    for sample in iter_samples(data, max_tokens=positions):
        if stream.aux.positions >= samples:
            break
        check_length(len(sample), positions, sample.source)
        stream.compare(sample, points, candidates, samples)
        if progress is not None and stream.compared:
            progress(stream.aux.positions, samples, "positions compared")
    acc_aux, acc_last, counts, has_last, dtype = stream.aux, stream.last, stream.counts, stream.has_last, stream.dtype
    if acc_aux.positions == 0:
        raise CheckpointError(data, "no sample of the dump could be compared (see the token-id / non-finite checks)"
                              if counts["sequences"] == 0 and any(counts.values()) else "the dump holds no samples")
    findings: list[Finding] = []
    cos, rel = acc_aux.matrices()
    matches = [_match(f"aux {j}", cos[j], rel[j], candidates) for j in range(n_aux)]
    # an aux chunk equal to the last layer's pre-norm output is HF index L (speculators' datagen appends it)
    layers = tuple((L if m.best == PRE else m.best) if m.matched and m.best not in (None, POST) else None
                   for m in matches)
    if has_last:
        lcos, lrel = acc_last.matrices()
        last = _match("last", lcos[0], lrel[0], candidates)
        matches.append(last)
        cos, rel = torch.cat([cos, lcos]), torch.cat([rel, lrel])
        last_hidden = ("pre-norm" if last.best == PRE else "post-norm" if last.best == POST else
                       f"hidden_states[{last.best}]") if last.matched else "unmatched"
    else:
        last_hidden = "absent"

    spec = ckpt.spec if ckpt is not None else None
    recorded = info.layers or (spec.aux_layer_ids if spec is not None else None)
    convention = _convention(layers, recorded)
    trained = tuple(trained_with(spec, L)[0]) if spec is not None else None
    engine_layers = None
    if profile is not None and ckpt is not None:
        engine_layers = serve_draft(ckpt, engine=profile, num_target_layers=L).captured
    findings += _findings(layers, matches, last_hidden, trained, engine_layers, profile, ckpt, info.format,
                          counts, L)
    return ProvenanceResult(
        str(data), info.format, _name(target), L, H, dtype, counts["sequences"], acc_aux.positions, candidates,
        tuple(tuple(round(float(v), 6) for v in row) for row in cos),
        tuple(tuple(round(float(v), 6) for v in row) for row in rel), tuple(matches), layers, last_hidden, convention,
        tuple(recorded) if recorded else None, trained or None, profile.spec if profile else None,
        tuple(engine_layers) if engine_layers is not None else None, tuple(findings))


# -- the target --------------------------------------------------------------------------------
def _load(target: Any, device: str, device_map: str | None) -> nn.Module:
    from ..target_runtime.load import load_target

    if isinstance(target, nn.Module):
        return target.eval()
    ckpt = target if isinstance(target, Checkpoint) else Checkpoint.open(target)
    needed = ckpt.total_bytes * (4 / 2 if "BF16" in ckpt.spec.dtypes or "F16" in ckpt.spec.dtypes else 1)
    available = _available_memory()
    if device == "cpu" and device_map is None and available is not None and needed > 0.8 * available:
        raise UsageError(f"{ckpt.path}: the target needs about {needed / 2**30:.0f} GiB in float32 and this machine "
                         f"has {available / 2**30:.0f} GiB free: run provenance on the GPU host "
                         "(eagle3lens notebook 07_provenance --host HOST) or pass --device-map auto")
    return load_target(ckpt, device=device, device_map=device_map)


def _available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _target_states(points: HookPoints, ids: torch.Tensor, candidates: tuple[int, ...]) -> torch.Tensor:
    """[C, T, H] float64: the candidates' states for one sequence, from one forward with output_hidden_states."""
    names = ["norm.in", "norm.out"] if points.norm is not None else []
    seen, out = points.run(ids[None], names, output_hidden_states=True)
    hidden = out.hidden_states
    rows = []
    for k in candidates:
        t = seen["norm.in"] if k == PRE else seen.get("norm.out", hidden[-1]) if k == POST else hidden[k]
        rows.append(t[0].detach().to("cpu", torch.float64))
    return torch.stack(rows)


def _positions(length: int, want: int) -> torch.Tensor:
    """``want`` positions spread evenly over a sequence (all of them when it is shorter)."""
    if want >= length:
        return torch.arange(length)
    return torch.linspace(0, length - 1, want).round().long().unique()


# -- reading the matrices ------------------------------------------------------------------------
def _match(chunk: str, cos: torch.Tensor, rel: torch.Tensor, candidates: tuple[int, ...]) -> ChunkMatch:
    order = torch.argsort(rel)
    best, second = int(order[0]), int(order[1]) if len(order) > 1 else None
    best_rel = float(rel[best])
    return ChunkMatch(chunk, candidates[best], round(float(cos[best]), 6), round(best_rel, 6),
                      None if second is None else candidates[second],
                      round(float(rel[second]), 6) if second is not None else math.inf,
                      best_rel <= MATCH_TOLERANCE)


def _convention(layers: tuple[int | None, ...], recorded: Any) -> str:
    found = [k for k in layers if k is not None]
    if not found:
        return "unknown: no aux chunk matches a target layer"
    if recorded:
        ids = list(recorded)
        if found == ids:
            return f"vLLM-style: the recorded ids {ids} are HF hidden_states indices (input of layer k)"
        if found == [i + 1 for i in ids]:
            return f"SGLang-style: the recorded ids {ids} are outputs of layer k (HF index k + 1)"
        return f"neither: the recorded ids {ids} do not describe the layers {found} in either convention"
    return (f"as vLLM ids (input of layer k): {found}; as SGLang ids (output of layer k): {[k - 1 for k in found]}")


def feeding_profiles(ckpt: Checkpoint, layers: tuple[int, ...], num_layers: int) -> tuple[list[str], list[str]]:
    """Serving engine groups (newest release of each) whose capture for ``ckpt`` is / is not ``layers``."""
    right: list[str] = []
    wrong: list[str] = []
    for profile in all_profiles():
        if profile.kind != "serving":
            continue
        captured = serve_draft(ckpt, engine=profile, num_target_layers=num_layers).captured
        (right if captured == layers else wrong).append(profile.spec)
    return right, wrong


def _findings(layers: tuple[int | None, ...], matches: list[ChunkMatch], last_hidden: str,
              trained: tuple[int, ...] | None, engine_layers: tuple[int, ...] | None,
              profile: EngineProfile | None, ckpt: Checkpoint | None, fmt: str, counts: dict[str, int],
              num_layers: int) -> list[Finding]:
    spec = ckpt.spec if ckpt is not None else None
    return (_layer_findings(layers, matches, trained, engine_layers, profile, ckpt, num_layers)
            + _last_hidden_findings(TRAINER_OF.get(fmt) or (TRAINER_OF.get(spec.flavour) if spec is not None else None),
                                    last_hidden)
            + _count_findings(counts))


def _layer_findings(layers: tuple[int | None, ...], matches: list[ChunkMatch], trained: tuple[int, ...] | None,
                    engine_layers: tuple[int, ...] | None, profile: EngineProfile | None, ckpt: Checkpoint | None,
                    num_layers: int) -> list[Finding]:
    """The dump from another model, or from other layers than the engine (or the draft's config) reads."""
    out: list[Finding] = []
    found = [k for k in layers if k is not None]
    evidence = {"data_layers_hf": list(layers), "chunks": [m.to_dict() for m in matches]}
    if not any(m.matched for m in matches):
        best = min(matches, key=lambda m: m.rel_error)
        out.append(Finding(
            "data/not-from-target", Severity.CRITICAL, "no chunk of the dump matches any layer of this target",
            f"The closest fit is {best.chunk} at relative error {best.rel_error:.3f} (a copy of the same state stays "
            f"under {MATCH_TOLERANCE}): the data comes from another model or another revision of it.",
            evidence=evidence))
    elif engine_layers is not None and found and len(found) == len(layers) and tuple(found) != tuple(engine_layers):
        out.append(Finding(
            "data/aux-layers-mismatch", Severity.CRITICAL,
            f"trained on layers {found}, but {profile.spec if profile else 'the engine'} feeds layers "
            f"{list(engine_layers)}",
            "The dump's aux states are the inputs of target layers "
            f"{found} (HF hidden_states indices); at serving the engine captures {list(engine_layers)}, so the draft "
            "sees other features than it was trained on. The fix writes the ids in the engine's convention so that "
            "it captures the layers the data came from.",
            evidence={**evidence, "engine_layers_hf": list(engine_layers), "engine": profile.spec if profile else None},
            fix=_aux_fix(ckpt, profile, found)))
    elif trained and found and len(found) == len(layers) and tuple(found) != tuple(trained) and ckpt is not None:
        right, wrong = feeding_profiles(ckpt, tuple(found), num_layers)
        everywhere = not right
        out.append(Finding(
            "data/aux-layers-mismatch", Severity.CRITICAL if everywhere else Severity.WARNING,
            f"the draft's config says layers {list(trained)}, the data came from layers {found}"
            + (": every engine release feeds other layers" if everywhere else ""),
            "The config's ids, read in its trainer's convention, describe other layers than the ones the data was "
            "extracted from. " + ("Under every serving engine profile the engine captures other layers than the "
                                  "data holds." if everywhere else
                                  f"{len(wrong)} of {len(right) + len(wrong)} serving engine profiles capture other "
                                  f"layers ({', '.join(wrong[:3])}{' ...' if len(wrong) > 3 else ''}); "
                                  f"{', '.join(right[:3])}{' ...' if len(right) > 3 else ''} capture the data's."),
            evidence={**evidence, "config_layers_hf": list(trained), "engines_feeding_data_layers": right,
                      "engines_feeding_other_layers": wrong},
            fix=_aux_fix(ckpt, None, found)))
    return out


def _last_hidden_findings(trainer: str | None, last_hidden: str) -> list[Finding]:
    """The last hidden state stored on the other side of the final norm than the trainer expects."""
    out: list[Finding] = []
    expected = EXPECTED_LAST.get(trainer or "")
    if expected == "pre-norm" and last_hidden == "post-norm":
        out.append(Finding(
            "data/last-hidden-normed", Severity.WARNING, "the dump's last hidden state is already normed",
            f"{trainer} applies the target's final norm to the last hidden state itself; this dump stores it after "
            "the norm, so the teacher's logits come from a state normed twice.",
            evidence={"last_hidden": last_hidden, "trainer": trainer}))
    elif expected == "post-norm" and last_hidden == "pre-norm":
        out.append(Finding(
            "data/last-hidden-unnormed", Severity.WARNING, "the dump's last hidden state is before the final norm",
            f"{trainer} feeds the last hidden state to the bare lm_head; this dump stores it before the final norm "
            "(as vLLM's data generation does), so the teacher's logits are wrong (speculators PR #313: 25 % -> 40 %).",
            evidence={"last_hidden": last_hidden, "trainer": trainer}))
    return out


def _count_findings(counts: dict[str, int]) -> list[Finding]:
    """Sequences skipped or useless: token ids outside the vocabulary, an empty loss mask, non-finite states."""
    out: list[Finding] = []
    if counts["out_of_vocab"]:
        out.append(Finding(
            "data/token-ids-out-of-vocab", Severity.CRITICAL,
            f"{counts['out_of_vocab']} sequences hold token ids outside the target's vocabulary",
            "Ids at or above the target's vocab size cannot come from this target's tokenizer; those sequences "
            "were skipped.", evidence={"sequences": counts["out_of_vocab"]}))
    if counts["empty_mask"]:
        out.append(Finding(
            "data/loss-mask-empty", Severity.WARNING, f"{counts['empty_mask']} sequences have an all-false loss mask",
            "No position of these sequences trains the draft: the data preparation masked everything "
            "(a chat template that did not match, say).", evidence={"sequences": counts["empty_mask"]}))
    if counts["non_finite"]:
        out.append(Finding(
            "data/non-finite", Severity.CRITICAL, f"{counts['non_finite']} sequences hold NaN or Inf hidden states",
            "Non-finite features poison training; those sequences were skipped.",
            evidence={"sequences": counts["non_finite"]}))
    return out


def _aux_fix(ckpt: Checkpoint | None, profile: EngineProfile | None, layers: list[int]) -> str | None:
    """The convert that writes ids making the engine (or, without one, the config's own readers) capture ``layers``."""
    if ckpt is None:
        return None
    ids = ",".join(str(k) for k in layers)
    if profile is None or profile.kind != "serving":
        return fix_command("convert", ckpt.path, "--aux-layers", ids, "OUT")
    return fix_command("convert", ckpt.path, "--to", profile.spec, "--aux-layers", ids, "OUT")


def priced_mismatch(finding: Finding, served: float, with_data_layers: float) -> Finding:
    """``data/aux-layers-mismatch`` with its measured cost: the draft as served (the engine's layers) against the
    same draft fed the layers the data holds. Within noise it is a warning naming both figures."""
    from .acceptance_result import within_noise

    cost = with_data_layers - served
    calm = within_noise(served, with_data_layers)
    words = (f"{finding.title}; measured: as served {served:.2f}, with the data's layers {with_data_layers:.2f}"
             + (" (no measurable cost)" if calm else f" (costs {cost:.2f})"))
    return replace(finding, severity=Severity.WARNING if calm else Severity.CRITICAL, title=words,
                   evidence={**finding.evidence, "accept_len_served": served,
                             "accept_len_with_data_layers": with_data_layers, "cost": round(cost, 6)})


def relative_error(stored: torch.Tensor, reference: torch.Tensor) -> float:
    """||stored - reference|| / ||reference|| over a whole sequence (float64)."""
    a, b = stored.double().cpu(), reference.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def not_from_target(foreign: int, checked: int, worst: float, first: str, target: str) -> Finding:
    """The data's last hidden states are not what ``target`` computes on the data's own tokens."""
    return Finding(
        "data/not-from-target", Severity.CRITICAL,
        f"{foreign} of {checked} samples were not produced by this target",
        f"Run on each sample's own token ids, {target} computes other last hidden states than the dump holds "
        f"(relative error up to {worst:.3f}; a stored copy of the same state stays under {MATCH_TOLERANCE}; first: "
        f"{first}): the data comes from another model or another revision of it, and no acceptance figure on it "
        "says anything about this target.",
        evidence={"samples_checked": checked, "samples_foreign": foreign, "worst_rel_error": round(worst, 6),
                  "first": first, "target": target})


def _name(target: Any) -> str:
    if isinstance(target, nn.Module):
        return type(target).__name__
    return str(target.path if isinstance(target, Checkpoint) else target)


__all__ = ["ChunkMatch", "ProvenanceResult", "Sample", "trace_provenance"]

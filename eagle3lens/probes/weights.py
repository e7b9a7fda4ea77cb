"""Weight statistics and provenance: are these weights trained, an initialiser, NaN placeholders or a copy?

Every tensor is streamed in bounded chunks (``probes.stats``). Each float tensor gets a verdict from its
statistics and the initialisers the DraftSpec predicts (FACTS.md §8): HF normal(0, initializer_range),
PyTorch kaiming-uniform U(±1/√fan_in) as the EAGLE reference code uses, RMSNorm ones, speculators' NaN
placeholders. With a target, ``embed_tokens`` must equal the target's table and (speculators drafters)
``lm_head`` must equal ``target.lm_head[t2d]``. With ``against``, every common tensor gets its relative
change and cosine similarity.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..checkpoint import (
    DECODER_KEY,
    Checkpoint,
    CheckpointLike,
    DraftSpec,
    as_checkpoint,
)
from ..errors import UsageError
from ..findings import Finding, Severity, to_jsonable
from ..progress import Counter, Progress
from ..io.prefetch import ReadAhead
from ..io.safetensors_header import DTYPE_BITS, torch_dtype
from .stats import (
    DEFAULT_CHUNK_BYTES,
    TensorStats,
    as_float64,
    iter_element_chunks,
    tensor_stats,
)

HF_DEFAULT_INIT_RANGE = 0.02
KURTOSIS = {"normal": 0.0, "uniform": -1.2}
TRAINED, ONES, NAN, INF, ZERO, BUFFER, UNREAD = "trained", "init:ones", "nan", "inf", "all-zero", "buffer", "unsupported"
EMPTY, GARBAGE = "empty", "init:torch.empty"
TARGET_COPY = "target-copy"
# |x| this large is never a trained weight: uninitialised memory saved as is (FACTS §8, "empty-memory garbage")
GARBAGE_ABSMAX = 1e4


@dataclass(frozen=True)
class Initialiser:
    """An initialiser a trainer or engine would have used for a tensor."""

    name: str  # e.g. "normal(0, 0.02)", "kaiming-uniform(±0.0110)"
    family: str  # "normal" | "uniform"
    std: float
    bound: float | None = None  # uniform only

    def matches(self, s: TensorStats) -> bool:
        """std within 5%, mean ≈ 0, kurtosis of the family (and |x| ≤ bound for uniform)."""
        if s.std is None or s.mean is None or s.kurtosis is None or s.finite < 64:
            return False
        n = s.finite
        if abs(s.std / self.std - 1) > 0.05 + 3 / math.sqrt(n):
            return False
        if abs(s.mean) > 0.05 * self.std + 5 * self.std / math.sqrt(n):
            return False
        if abs(s.kurtosis - KURTOSIS[self.family]) > max(0.2, 6 * math.sqrt(24 / n)):
            return False
        return self.bound is None or (s.absmax or 0.0) <= self.bound * 1.01


def predicted_inits(name: str, shape: tuple[int, ...], spec: DraftSpec) -> tuple[Initialiser, ...]:
    """The initialisers FACTS.md §8 predicts for a 2-D weight of this checkpoint."""
    if len(shape) != 2 or not shape[1]:
        return ()
    std = spec.initializer_range or HF_DEFAULT_INIT_RANGE
    bound = 1 / math.sqrt(shape[1])
    inits = [Initialiser(f"normal(0, {std:g})", "normal", std),
             Initialiser(f"kaiming-uniform(±{bound:.4g})", "uniform", bound / math.sqrt(3), bound)]
    if "embed" in name:
        inits.append(Initialiser("normal(0, 1) (torch Embedding)", "normal", 1.0))
    return tuple(inits)


def module_of(name: str) -> str:
    """Group key: the decoder layer (``layers.0``/``midlayer``) or the top-level component (``fc``, ``lm_head``...)."""
    m = DECODER_KEY.match(name)
    if m:
        return m.group("prefix").rstrip(".")
    stem = name[: -len(".weight")] if name.endswith(".weight") else name
    stem = re.sub(r"\.\d+$", "", stem)
    return stem[len("model."):] if stem.startswith("model.") else stem


def is_norm(name: str, shape: tuple[int, ...]) -> bool:
    """A 1-D norm weight: ``norm.weight``, ``layers.0.input_layernorm.weight``, ``fc_norm.2.weight``..."""
    stem = re.sub(r"\.\d+$", "", name[: -len(".weight")] if name.endswith(".weight") else name)
    return len(shape) == 1 and "norm" in stem.rsplit(".", 1)[-1]


def target_derived(module: str, layout: str) -> bool:
    """Modules a drafter copies from the target (FACTS §8): embed_tokens always; lm_head in speculators drafters
    only (``target.lm_head[t2d]``), since SpecForge and EAGLE train their head from random init."""
    return module == "embed_tokens" or (module == "lm_head" and layout == "speculators")


@dataclass(frozen=True)
class TensorReport:
    """One tensor: its statistics, its verdict and the initialiser it was compared with."""

    stats: TensorStats
    module: str
    verdict: str  # trained | target-copy | init:<initialiser> | init:ones | nan | inf | all-zero | buffer | unsupported
    init: Initialiser | None = None  # matched initialiser, else the first predicted one (for plots)

    @property
    def name(self) -> str:
        return self.stats.name

    @property
    def looks_trained(self) -> bool:
        return self.verdict in (TRAINED, TARGET_COPY)

    @property
    def init_like(self) -> bool:
        """At an initialiser (or uninitialised memory); RMSNorm ones have their own finding."""
        return self.verdict.startswith("init:") and self.verdict != ONES

    def to_dict(self) -> dict[str, Any]:
        return {**self.stats.to_dict(), "module": self.module, "verdict": self.verdict,
                "init": None if self.init is None else {"name": self.init.name, "std": self.init.std}}


@dataclass(frozen=True)
class ModuleSummary:
    """What share of a module's float parameters looks trained."""

    module: str
    tensors: int
    params: int
    trained_params: int
    verdicts: Mapping[str, int]

    @property
    def trained_share(self) -> float:
        return self.trained_params / self.params if self.params else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "tensors": self.tensors, "params": self.params,
                "trained_params": self.trained_params, "trained_share": self.trained_share,
                "verdicts": dict(self.verdicts)}


@dataclass(frozen=True)
class CopyCheck:
    """A draft tensor that should be a (row-selected) copy of a target tensor, and how far off it is."""

    draft: str
    target: str
    rows: str  # "all" | "t2d"
    shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    mismatched_elements: int = 0
    mismatched_rows: int = 0
    max_abs_diff: float = 0.0
    rel_l2: float = 0.0  # ||draft - target|| / ||target||
    problem: str | None = None  # shape / mapping problem that prevented the comparison
    required: bool = True  # False: a match confirms a copy, a difference is normal (a trained head)

    @property
    def matches(self) -> bool:
        return self.problem is None and self.mismatched_elements == 0

    @property
    def difference(self) -> str:
        """How far off, in words: rows, relative L2, largest difference (NaN where one side is NaN)."""
        if math.isnan(self.rel_l2):
            return f"{self.mismatched_rows} rows differ, NaN where the other side has numbers"
        return f"{self.mismatched_rows} rows differ, relative L2 {self.rel_l2:.3g}, max |diff| {self.max_abs_diff:.3g}"

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "matches": self.matches}


@dataclass(frozen=True)
class TensorChange:
    """One tensor against the same tensor of a reference checkpoint."""

    name: str
    shape: tuple[int, ...]
    rel_change: float  # ||a - b|| / ||b||
    cosine: float
    max_abs_diff: float

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """``against``: per-tensor changes plus the names only one side has or whose shapes differ."""

    against: str
    changes: tuple[TensorChange, ...]
    only_here: tuple[str, ...] = ()
    only_there: tuple[str, ...] = ()
    shape_differs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"against": self.against, "changes": [c.to_dict() for c in self.changes],
                "only_here": list(self.only_here), "only_there": list(self.only_there),
                "shape_differs": list(self.shape_differs)}

    def summary(self) -> list[str]:
        """What the change table cannot show: tensors left unchanged, and those that could not be compared."""
        unchanged = [c.name for c in self.changes if c.rel_change == 0]
        lines = [] if self.changes else ["no tensor in common could be compared"]
        for names, what in ((unchanged, "identical to the reference (not updated since it)"),
                            (self.only_here, "only in this checkpoint"), (self.only_there, "only in the reference"),
                            (self.shape_differs, "with another shape in the reference (not compared)")):
            if names:
                shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
                lines.append(f"{len(names)} tensor(s) {what}: {shown}")
        return lines


@dataclass(frozen=True)
class WeightsResult:
    """Per-tensor statistics and verdicts, per-module trained share, copy checks, comparison, findings."""

    path: str
    tensors: tuple[TensorReport, ...]
    modules: tuple[ModuleSummary, ...]
    decoder_module: str | None
    copies: tuple[CopyCheck, ...] = ()
    comparison: Comparison | None = None
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> TensorReport:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def module(self, name: str) -> ModuleSummary:
        return next(m for m in self.modules if m.module == name)

    @property
    def decoder_trained_share(self) -> float | None:
        """Share of the decoder layer's parameters that look trained (None without a decoder layer)."""
        return self.module(self.decoder_module).trained_share if self.decoder_module else None

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "path": self.path,
            "decoder_module": self.decoder_module,
            "decoder_trained_share": self.decoder_trained_share,
            "modules": [m.to_dict() for m in self.modules],
            "tensors": [t.to_dict() for t in self.tensors],
            "copies": [c.to_dict() for c in self.copies],
            "comparison": None if self.comparison is None else self.comparison.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "notes": list(self.notes),
        })


# -- the probe ------------------------------------------------------------------------------
def weight_stats(
    draft: CheckpointLike,
    *,
    target: CheckpointLike | None = None,
    against: CheckpointLike | None = None,
    names: str | Iterable[str] | None = None,
    device: str = "cpu",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int | None = None,
    progress: Progress | None = None,
) -> WeightsResult:
    """Stream every tensor (or ``names``: a glob pattern or exact names) and judge its provenance.

    ``target``: check the embed_tokens / lm_head copies; ``against``: compare every common tensor with it.
    ``progress(done, total, label)``: bytes read, one phase per label (the draft, the copies, the comparison).
    ``device="cuda"`` moves each chunk to the GPU before reducing it.
    ``threads``: CPU threads that stream a large tensor's spans side by side (default: up to 4 usable cores).
    """
    check_device(device)
    threads = default_threads() if threads is None else threads
    if threads < 1:
        raise UsageError(f"threads must be at least 1, got {threads}")
    ckpt, target, against = as_checkpoint(draft), as_checkpoint(target), as_checkpoint(against)
    selected = select_names(ckpt, names)
    total = sum(ckpt.info(n).nbytes for n in selected)
    read = Counter(progress, total, f"weights {ckpt.path}")
    # the disk reads ahead while torch is imported (on the first tensor) and while each chunk is reduced
    with ReadAhead(byte_ranges(ckpt, selected)) as ahead:
        def took(n: int) -> None:
            read.add(n)
            ahead.consumed(n)

        stats = [tensor_stats(ckpt, n, chunk_bytes, device, took, threads) for n in selected]
    spec = ckpt.spec
    notes: list[str] = []
    copies: tuple[CopyCheck, ...] = ()
    if target is not None:
        head_and_embed = sum(ckpt.info(n).nbytes for n in ckpt.tensors if module_of(n) in ("lm_head", "embed_tokens"))
        copied = Counter(progress, head_and_embed, f"weights copies of {target.path}")
        copies = tuple(check_copies(ckpt, target, chunk_bytes, notes, copied.add))
    confirmed = {c.draft for c in copies if c.matches}
    reports = tuple(replace(r, verdict=TARGET_COPY) if r.name in confirmed else r for r in (judge(s, spec) for s in stats))
    modules = summarise_modules(reports)
    decoder = spec.decoder_prefix.rstrip(".") if spec.decoder_prefix else None
    decoder = decoder if any(m.module == decoder for m in modules) else None
    derived_init = [r.name for r in reports if target_derived(r.module, ckpt.layout) and r.init_like]
    if derived_init:
        notes.append(f"{', '.join(derived_init)} look like an initialiser; drafters copy them from the target, so this "
                     "is expected only when the target is itself untrained" +
                     ("" if target is not None else ": run with --target to check the copy"))
    comparison = None
    if against is not None:
        common = sum(ckpt.info(n).nbytes for n in selected if n in against)
        compared = Counter(progress, common, f"weights against {against.path}")
        comparison = compare(ckpt, against, selected, chunk_bytes, notes, compared.add)
    findings = provenance_findings(reports, spec, ckpt.layout, target is not None) + copy_findings(copies)
    return WeightsResult(str(ckpt.path), reports, modules, decoder, copies, comparison, tuple(findings), tuple(notes))


def default_threads() -> int:
    """Cores this process may use, at most 4 (beyond that a page-cache read is the limit, not the reduction)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, usable))


def check_device(device: str) -> None:
    """A UsageError for a device other than cpu or an available cuda one (torch is imported for cuda only)."""
    if not (device == "cpu" or device.startswith("cuda")):
        raise UsageError(f"unknown device {device!r}: use cpu or cuda")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: torch sees no CUDA device on this machine (use --device cpu)")


def byte_ranges(ckpt: Checkpoint, names: Iterable[str]) -> list[tuple[Path, int, int]]:
    """(file, begin, end) of each named tensor stored in a file, in the order given (pickled tensors have none)."""
    infos = (ckpt.info(n) for n in names)
    return [(i.file, i.begin, i.end) for i in infos if i.begin is not None and i.end is not None]


def select_names(ckpt: Checkpoint, names: str | Iterable[str] | None) -> list[str]:
    if names is None:
        return list(ckpt.tensors)
    if isinstance(names, str):
        picked = [n for n in ckpt.tensors if fnmatch.fnmatchcase(n, names)]
        if not picked:
            raise UsageError(f"{ckpt.path}: no tensor matches {names!r}")
        return picked
    return [ckpt.info(n).name for n in names]


def judge(s: TensorStats, spec: DraftSpec) -> TensorReport:
    """Verdict for one tensor from its statistics alone."""
    module = module_of(s.name)
    if s.kind == "unsupported":
        return TensorReport(s, module, UNREAD)
    if s.kind != "float":
        return TensorReport(s, module, BUFFER)
    if s.numel == 0:
        return TensorReport(s, module, EMPTY)
    inits = predicted_inits(s.name, s.shape, spec)
    first = inits[0] if inits else None
    if s.nan:
        return TensorReport(s, module, NAN, first)
    if s.inf:
        return TensorReport(s, module, INF, first)
    if s.zeros == s.numel:
        return TensorReport(s, module, ZERO, first)
    if (s.absmax or 0.0) >= GARBAGE_ABSMAX:
        return TensorReport(s, module, GARBAGE, first)
    if is_norm(s.name, s.shape) and s.min == 1.0 and s.max == 1.0:
        return TensorReport(s, module, ONES)
    for init in inits:
        if init.matches(s):
            return TensorReport(s, module, f"init:{init.name}", init)
    return TensorReport(s, module, TRAINED, first)


def summarise_modules(reports: Iterable[TensorReport]) -> tuple[ModuleSummary, ...]:
    groups: dict[str, list[TensorReport]] = {}
    for r in reports:
        if r.verdict not in (BUFFER, UNREAD, EMPTY):
            groups.setdefault(r.module, []).append(r)
    out = []
    for module, members in groups.items():
        verdicts: dict[str, int] = {}
        for r in members:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
        out.append(ModuleSummary(module, len(members), sum(r.stats.numel for r in members),
                                 sum(r.stats.numel for r in members if r.looks_trained), verdicts))
    return tuple(out)


def _by_module(reports: Iterable[TensorReport], keep: Callable[[TensorReport], bool]) -> dict[str, list[TensorReport]]:
    groups: dict[str, list[TensorReport]] = {}
    for r in reports:
        if keep(r):
            groups.setdefault(r.module, []).append(r)
    return groups


def provenance_findings(reports: tuple[TensorReport, ...], spec: DraftSpec, layout: str = "unknown",
                        target_checked: bool = False) -> list[Finding]:
    """One finding per (code, module) with the tensors and numbers as evidence. ``layout`` says which modules are
    copies of the target (their look is the target's); ``target_checked``: copies were compared with a target."""
    findings: list[Finding] = []
    for module, rs in _by_module(reports, lambda r: r.verdict == NAN).items():
        placeholder = spec.flavour == "speculators" and module in ("lm_head", "embed_tokens")
        findings.append(Finding(
            "weights/nan", Severity.CRITICAL, f"{module}: {len(rs)} tensor(s) contain NaN",
            ("speculators leaves lm_head/embed_tokens as NaN placeholders until the verifier's weights are "
             "loaded: load the verifier, then save again." if placeholder else
             "NaN weights make every logit NaN; the draft's proposals are meaningless."),
            {"tensors": {r.name: {"nan": r.stats.nan, "numel": r.stats.numel, "shape": list(r.stats.shape)} for r in rs}},
        ))
    for module, rs in _by_module(reports, lambda r: r.verdict == INF).items():
        findings.append(Finding(
            "weights/inf", Severity.CRITICAL, f"{module}: {len(rs)} tensor(s) contain Inf",
            "Infinite weights overflow every activation they touch.",
            {"tensors": {r.name: {"inf": r.stats.inf, "numel": r.stats.numel} for r in rs}},
        ))
    for module, rs in _by_module(reports, lambda r: r.verdict == ZERO).items():
        biases = all(r.name.endswith(".bias") for r in rs)
        findings.append(Finding(
            "weights/all-zero", Severity.WARNING if biases else Severity.CRITICAL,
            f"{module}: {len(rs)} tensor(s) are all zero",
            "All-zero weights are never trained values: an engine's empty buffer, a failed save or a zero init.",
            {"tensors": {r.name: list(r.stats.shape) for r in rs}},
        ))
    for module, rs in _by_module(reports, lambda r: r.verdict == ONES).items():
        findings.append(Finding(
            "weights/norm-at-init", Severity.WARNING, f"{module}: {len(rs)} norm weight(s) are exactly 1.0",
            "RMSNorm weights start at 1.0 and never stay exactly there after training: this module looks untrained.",
            {"tensors": [r.name for r in rs]},
        ))
    for module, rs in _by_module(reports, lambda r: r.verdict == GARBAGE).items():
        findings.append(Finding(
            "weights/init-like", Severity.CRITICAL,
            f"{module}: {len(rs)} tensor(s) hold uninitialised memory (|x| up to {max(r.stats.absmax or 0.0 for r in rs):.3g})",
            "Values this large are never trained weights: a parameter no checkpoint tensor wrote was saved from "
            "torch.empty memory as is.",
            {"tensors": {r.name: {"absmax": r.stats.absmax, "std": r.stats.std, "shape": list(r.stats.shape)}
                         for r in rs}},
        ))
    initialised = _by_module(reports, lambda r: r.init_like and r.verdict != GARBAGE
                             and not target_derived(r.module, layout))
    for module, rs in initialised.items():
        head = module == "lm_head"
        findings.append(Finding(
            "weights/init-like", Severity.CRITICAL,
            f"{module}: {len(rs)} weight(s) match an initialiser, not trained values",
            ("SpecForge and EAGLE train lm_head from random init: a head still at its initialiser proposes tokens "
             "at random. " + ("" if target_checked else "A head copied from a target that is itself untrained "
                              "would look the same: --target tells the two apart.") if head else
             "std, mean and kurtosis match the initialiser the config predicts: the engine would run an "
             "untrained module. Check that the trainer saved the final weights (compare with --against)."),
            {"tensors": {r.name: {"init": r.init.name if r.init else None, "std": r.stats.std, "mean": r.stats.mean,
                                  "kurtosis": r.stats.kurtosis, "absmax": r.stats.absmax,
                                  "shape": list(r.stats.shape)} for r in rs}},
        ))
    return findings


# -- copies of the target -------------------------------------------------------------------
def _find(ckpt: Checkpoint, suffix: str) -> str | None:
    hits = [n for n in ckpt.tensors if n == suffix or n.endswith("." + suffix)]
    return min(hits, key=len) if hits else None


def check_copies(draft: Checkpoint, target: Checkpoint, chunk_bytes: int, notes: list[str],
                 on_bytes: Callable[[int], object] | None = None) -> list[CopyCheck]:
    """embed_tokens == target embed; lm_head == target.lm_head[t2d] (required for speculators drafters, which copy
    it; for other layouts a match confirms a copied head, e.g. a speculators draft converted for SGLang, and a
    difference is normal: SpecForge and EAGLE train their heads)."""
    checks = []
    t_embed = _find(target, "embed_tokens.weight")
    d_embed = _find(draft, "embed_tokens.weight")
    if d_embed and t_embed:
        if not _unreadable(notes, "embed_tokens copy not checked", (draft, d_embed), (target, t_embed)):
            checks.append(_compare_rows(draft, d_embed, target, t_embed, None, "all", chunk_bytes, on_bytes))
    elif d_embed:
        notes.append(f"target {target.path} has no embed_tokens: draft embeddings not checked")
    d_head = draft.tensors.get("lm_head.weight")
    required = draft.layout == "speculators"
    t_head = _find(target, "lm_head.weight") or t_embed  # tied: the head is the embedding
    same_rows = t_head is not None and d_head is not None and d_head.shape[0] == target.info(t_head).shape[0]
    if d_head is not None and (required or same_rows or _find(draft, "t2d") is not None):
        rows, problem = _t2d_rows(draft, d_head.shape[0], target.info(t_head).shape[0] if t_head else None)
        if t_head is None:
            notes.append(f"target {target.path} has neither lm_head nor embed_tokens: lm_head not checked")
        elif problem:
            checks.append(CopyCheck("lm_head.weight", t_head, "t2d", d_head.shape, target.info(t_head).shape,
                                    problem=problem, required=required))
        elif not _unreadable(notes, "lm_head copy not checked", (draft, "lm_head.weight"), (target, t_head)):
            check = _compare_rows(draft, "lm_head.weight", target, t_head, rows, "t2d", chunk_bytes, on_bytes)
            checks.append(replace(check, required=required))
    return checks


def _t2d_rows(draft: Checkpoint, n_rows: int, v: int | None):
    """Target row ids for the draft's lm_head rows: nonzero(t2d), or identity when N = V."""
    import torch

    t2d = _find(draft, "t2d")
    if t2d is None:
        return (None, None) if n_rows == v else (None, f"no t2d and lm_head has {n_rows} rows, target {v}: rows unknown")
    if torch_dtype(draft.info(t2d).dtype) is None:
        return None, f"{t2d} has dtype {draft.info(t2d).dtype}, which torch cannot read: rows unknown"
    mask = torch.cat([c.to(torch.bool, copy=True) for _, c in iter_element_chunks(draft, t2d, 1 << 24)])
    rows = torch.nonzero(mask).flatten()
    if rows.numel() != n_rows or (v is not None and mask.numel() != v):
        return None, f"t2d selects {rows.numel()} of {mask.numel()} ids, lm_head has {n_rows} rows, target {v}"
    return rows, None


def _unreadable(notes: list[str], consequence: str, *tensors: tuple[Checkpoint, str]) -> bool:
    """True (and a note) when a tensor's dtype has no torch dtype (F4, F6...), so its values cannot be compared."""
    for ckpt, name in tensors:
        dtype = ckpt.info(name).dtype
        if torch_dtype(dtype) is None:
            notes.append(f"{name} in {ckpt.path} has dtype {dtype}, which torch cannot read: {consequence}")
            return True
    return False


def _compare_rows(draft: Checkpoint, d_name: str, target: Checkpoint, t_name: str, rows, label: str,
                  chunk_bytes: int, on_bytes: Callable[[int], object] | None = None) -> CopyCheck:
    """Compare the draft tensor with target rows (all rows, or ``rows``), bitwise after casting to the draft dtype."""
    import torch

    d_info, t_info = draft.info(d_name), target.info(t_name)
    want = (t_info.shape[0] if rows is None else int(rows.numel()),) + tuple(t_info.shape[1:])
    if tuple(d_info.shape) != want:
        return CopyCheck(d_name, t_name, label, d_info.shape, t_info.shape,
                         problem=f"shape {list(d_info.shape)} cannot be target rows {list(want)}")
    width = math.prod(d_info.shape[1:]) or 1
    rows_per = max(1, chunk_bytes // max(width * 8, 1))
    bad_el = bad_rows = 0
    max_diff = diff2 = ref2 = 0.0
    for first, d in iter_element_chunks(draft, d_name, rows_per * width):
        r0 = first // width
        n = d.numel() // width
        ids = range(r0, r0 + n) if rows is None else rows[r0: r0 + n].tolist()
        t = _gather_rows(target, t_name, ids, width).to(d.dtype)
        a, b = d.view(n, width), t.view(n, width)
        differ = (a != b) & ~(torch.isnan(a.float()) & torch.isnan(b.float()))
        bad_el += int(differ.sum())
        bad_rows += int(differ.any(dim=1).sum())
        a64, b64 = a.double(), b.double()
        delta = torch.where(differ, a64 - b64, 0.0)  # NaN where exactly one side is NaN
        max_diff = _max_nan(max_diff, float(delta.abs().max()) if delta.numel() else 0.0)
        diff2 += float((delta * delta).sum())
        ref2 += float((b64 * b64).sum())
        if on_bytes is not None:
            on_bytes(d.numel() * d.element_size())
    return CopyCheck(d_name, t_name, label, d_info.shape, t_info.shape, bad_el, bad_rows, max_diff,
                     math.sqrt(diff2 / ref2) if ref2 else (0.0 if diff2 == 0 else math.inf))


def _max_nan(a: float, b: float) -> float:
    """max that keeps NaN (a NaN on one side only is a difference of unknown size, never 0)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _gather_rows(ckpt: Checkpoint, name: str, ids: Iterable[int], width: int):
    """Rows ``ids`` (ascending) of a 2-D tensor, reading each run of consecutive rows at once."""
    import torch

    parts: list[torch.Tensor] = []
    run: list[int] = []
    for i in ids:
        if run and i != run[-1] + 1:
            parts.append(_read_run(ckpt, name, run[0], run[-1] + 1, width))
            run = []
        run.append(i)
    if run:
        parts.append(_read_run(ckpt, name, run[0], run[-1] + 1, width))
    return torch.cat(parts) if parts else torch.empty(0)


def _read_run(ckpt: Checkpoint, name: str, r0: int, r1: int, width: int):
    (_, t), = iter_element_chunks(ckpt, name, (r1 - r0) * width, r0 * width, r1 * width)
    return t.clone()


def copy_findings(copies: Iterable[CopyCheck]) -> list[Finding]:
    findings = []
    for c in copies:
        if c.matches or not c.required:
            continue
        what = "target embed_tokens" if c.rows == "all" else "target.lm_head[t2d]"
        evidence = {k: v for k, v in c.to_dict().items() if k != "matches"}
        if c.problem:
            title, detail = f"{c.draft} cannot be compared with {what}", c.problem
        else:
            title = f"{c.draft} differs from {what} ({c.difference})"
            detail = ("The draft must serve the target's own embeddings (all trainers copy and freeze them)."
                      if c.rows == "all" else
                      "speculators drafters copy lm_head rows from the target (since 2026-04-15); older ones "
                      "trained from those rows and drift.")
        severity = Severity.INFO if c.problem else Severity.CRITICAL if c.rows == "all" else Severity.WARNING
        findings.append(Finding("weights/target-copy-mismatch", severity, title, detail, evidence))
    return findings


# -- comparison -----------------------------------------------------------------------------
def compare(ckpt: Checkpoint, against: Checkpoint, names: list[str], chunk_bytes: int,
            notes: list[str] | None = None, on_bytes: Callable[[int], object] | None = None) -> Comparison:
    """Relative change ||a - b|| / ||b|| and cosine similarity of every common float tensor (b = ``against``);
    tensors whose dtype torch lacks are skipped with a note in ``notes``."""
    changes, shape_differs = [], []
    notes = notes if notes is not None else []
    for name in names:
        if name not in against:
            continue
        if _unreadable(notes, "not compared", (ckpt, name), (against, name)):
            continue
        a_info, b_info = ckpt.info(name), against.info(name)
        if a_info.shape != b_info.shape:
            shape_differs.append(name)
            continue
        if _is_complex(a_info.dtype) != _is_complex(b_info.dtype):  # (re, im) pairs against plain values
            notes.append(f"{name} is {a_info.dtype} here and {b_info.dtype} in {against.path}: a complex and a real "
                         "tensor are not compared")
            continue
        changes.append(_change(ckpt, against, name, chunk_bytes, on_bytes))
    return Comparison(str(against.path), tuple(changes),
                      only_here=tuple(n for n in names if n not in against),
                      only_there=tuple(n for n in against.tensors if n not in ckpt),
                      shape_differs=tuple(shape_differs))


def _is_complex(dtype: str) -> bool:
    found = torch_dtype(dtype)
    return found is not None and found.is_complex


def _change(a: Checkpoint, b: Checkpoint, name: str, chunk_bytes: int,
            on_bytes: Callable[[int], object] | None = None) -> TensorChange:
    elems = max(1, chunk_bytes // 8)
    a_elem = max(DTYPE_BITS[a.info(name).dtype] // 8, 1)
    dot = aa = bb = dd = 0.0
    max_diff = 0.0
    for (_, x), (_, y) in zip(iter_element_chunks(a, name, elems), iter_element_chunks(b, name, elems), strict=True):
        x, y = as_float64(x), as_float64(y)
        d = x - y
        dot += float((x * y).sum())
        aa += float((x * x).sum())
        bb += float((y * y).sum())
        dd += float((d * d).sum())
        max_diff = _max_nan(max_diff, float(d.abs().max()) if d.numel() else 0.0)
        if on_bytes is not None:
            on_bytes(x.numel() * a_elem)
    rel = math.sqrt(dd / bb) if bb else (0.0 if dd == 0 else math.inf)
    cos = dot / math.sqrt(aa * bb) if aa and bb else (1.0 if aa == bb == 0 else 0.0)
    return TensorChange(name, a.info(name).shape, rel, cos, max_diff)

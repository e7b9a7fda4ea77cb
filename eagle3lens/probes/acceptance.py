"""Offline acceptance: what a draft accepts as trained, as an engine loads and wires it, and after the fix.

    result = estimate_acceptance("demo/speculators", "demo/hidden-states", target="demo/target",
                                 engine="sglang==0.5.11")
    result.views["as_served"].accept_len, result.views["as_trained"].accept_len, result.toggles

Views (each over the same samples, ``steps`` = K draft steps):

- ``metrics``: speculators 0.9.0's EAGLE-3 validation metrics, restated (``models/eagle3/data.py::shift_batch``,
  ``models/eagle3/core.py`` TTT loop, ``models/eagle3/metrics.py::align_for_step``,
  ``models/metrics.py::compute_accuracy_single_step``): position i sees token i+1 and the aux state of i; step k
  is fed the ground-truth tokens shifted k to the left (teacher forcing) and step k-1's hidden output, attends
  to step 0's keys causally and to its own earlier steps' keys at the same position only; the teacher is the
  argmax of the verifier's lm_head rows of the draft vocab over the verifier's final norm of the last hidden
  state. ``full_acc_k`` counts positions where steps 0..k were all right over the loss-masked positions of step
  k; ``cond_acc_k`` the same count over the positions whose earlier steps were right. Counts are summed over
  samples, as speculators' validation sums them over batches.
- ``as_trained`` / ``as_served`` / ``fixed``: greedy chain drafting as engines run it at decode time (topk 1):
  step 0 reads the target's aux states through fc, each further step its own predicted token (mapped to target
  ids with d2t) and its own hidden output, with the same attention pattern as above; step k at a start is
  accepted when it and every earlier step equal the target's greedy tokens. ``full_acc`` is then the
  per-position acceptance rate, ``cond_acc`` the rate given every earlier position was accepted, and the
  expected accept length per verify step is ``1 + sum(full_acc)`` (the bonus token included).
  ``as_served`` loads only what the engine loads (``keys.simulate_load``; every parameter it never writes holds
  the engine's init, ``torch.empty`` memory modelled as noise or zeros: ``engine_init``), shares embed / lm_head
  from the target where the engine does, reads d2t as the engine does, captures the layers the engine captures
  (aux-layer resolver, in its convention) and applies its fc gate; ``scenario="aux-off"`` feeds the target's
  single final (post-norm) hidden state instead, and on SGLang (whose route there is ``--speculative-algorithm
  EAGLE``) also installs the target's embed and head as that worker does (``EngineProfile.eagle_mode_vocab``).
  ``fixed`` is ``as_served`` on the checkpoint ``convert --to E`` writes (in a temporary folder), with aux
  capture on.

The verified tokens are the target's greedy tokens on the data's own prefix; where the data leaves the
target's greedy path, a later step is checked against a prefix the server would not have seen
(``greedy_agreement`` says how often the data follows it; live capture continues prompts greedily, so it is 1).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F

from ..checkpoint import Checkpoint
from ..draft import (
    Attention,
    DecoderLayer,
    Eagle3Draft,
    FcGate,
    canonical_key,
    map_to_target,
    rope,
)
from ..engines import EngineProfile, resolve
from ..errors import CheckpointError, UsageError
from ..findings import Finding, Severity, fix_command
from .acceptance_result import CAUSE_LABELS, TEACHER_FORCED, AcceptanceResult, AcceptanceView, within_noise
from .data import Sample, describe_dump, iter_samples
from .limits import check_length, check_steps, check_token_ids, max_positions
from .engine_init import EMPTY_MEMORY, EmptyMemory, apply_engine_init
from .rounds import per_round, round_counts
from .traffic import TrafficScorer
from .traffic_result import PerStart, Sampling

Progress = Callable[[int, "int | None", str], None]
DEFAULT_STEPS = 3  # speculators' ttt_steps default
ZERO_ACCEPT_LEN = 1.05
GAP_ABS, GAP_REL = 0.1, 0.1  # as served below as trained by more than both: a gap
QUERY_CHUNK = 256  # query rows per attention block (bounds the [heads, rows, T] score tensor)
TEACHER_CHUNK = 256  # rows per lm_head block when taking the teacher's argmax over the full vocab


# -- the setups a view runs -----------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """How the draft is loaded and fed: weights, aux layers (HF indices), fc gate, aux capture."""

    draft: Eagle3Draft
    layers: tuple[int, ...]
    gate: FcGate
    aux_off: bool = False
    weights: str = "as trained"
    never_written: tuple[tuple[str, str], ...] = ()  # (parameter, the init it holds) the engine never wrote
    # "stored": the data's own aux states, as the draft was trained on them; "layers": the target's states at
    # ``layers`` (from the data where it records them, else captured again from the target)
    feed: str = "layers"

    def describe(self) -> dict[str, Any]:
        return {"weights": self.weights, "layers_hf": list(self.layers), "fc_gate": self.gate,
                "scenario": "aux-off" if self.aux_off else None, "feed": self.feed,
                "never_written": dict(self.never_written)}


@dataclass
class _Counts:
    """Summed counts of one view over the samples."""

    steps: int
    full_hit: list[float] = field(default_factory=list)
    full_total: list[float] = field(default_factory=list)
    cond_total: list[float] = field(default_factory=list)
    blocks: float = 0.0
    block_len: float = 0.0
    rounds: float = 0.0  # drafting rounds of the engine's walk (serving views)
    round_hit: list[float] = field(default_factory=list)  # rounds whose positions 0..k were all accepted
    error: str | None = None
    unavailable: str | None = None

    def __post_init__(self) -> None:
        self.full_hit, self.full_total, self.cond_total, self.round_hit = ([0.0] * self.steps for _ in range(4))

    def view(self, name: str, setup: dict[str, Any], engine: str | None, serving: bool) -> AcceptanceView:
        if self.error or self.unavailable:
            return AcceptanceView(name, (), (), None, 0, setup, engine, error=self.error, unavailable=self.unavailable)
        full = tuple(_ratio(h, t) for h, t in zip(self.full_hit, self.full_total, strict=True))
        cond = tuple(_ratio(h, t) for h, t in zip(self.full_hit, self.cond_total, strict=True))
        positions = int(self.full_total[0])
        if not serving:
            accept = self.block_len / self.blocks if self.blocks else None
            return AcceptanceView(name, full, cond, accept, positions, setup, engine, count=TEACHER_FORCED)
        start = PerStart(1.0 + sum(full) if self.full_total[0] else None, full, cond)
        accept, r_full, r_cond = per_round(self.rounds, self.round_hit)
        return AcceptanceView(name, r_full, r_cond, accept, positions, setup, engine, rounds=int(self.rounds),
                              per_start=start)


def _ratio(hit: float, total: float) -> float:
    return hit / total if total > 0 else 0.0


# -- the probe ----------------------------------------------------------------------------------
def estimate_acceptance(draft: str | Path | Checkpoint, data: str | Path | Iterable[Sample] | None, *,
                        target: str | Path | Checkpoint | Any | None = None,
                        engine: str | EngineProfile | None = None, steps: int | None = None,
                        scenario: str | None = None, device: str = "cpu", limit: int | None = None,
                        fixed: bool | str | Path = True, empty_memory: EmptyMemory = "noise",
                        progress: Progress | None = None, sampling: Sampling | None = None,
                        served_vocab: bool = False, traffic: str | None = None) -> AcceptanceResult:
    """Acceptance of ``draft`` over ``data`` (a dump path or Samples), as trained and as ``engine`` serves it.

    ``target``: the target checkpoint (its final norm and lm_head are the teacher; embed where the engine shares
    it) or a loaded HF model. ``steps``: draft steps K (default: the config's speculative token count, else 3).
    ``scenario="aux-off"``: the engine captures no aux states. ``fixed``: also score ``convert --to engine`` (a
    path: score that checkpoint, one ``convert`` already wrote, as the fixed view).
    ``empty_memory``: what a ``torch.empty`` parameter the engine never writes holds, ``"noise"`` or ``"zeros"``.
    ``sampling``: also score each serving view under speculative sampling at that temperature / top-k / top-p
    (``result.traffic.sampled``); ``served_vocab``: count the target's tokens outside the draft vocabulary
    (``result.traffic.vocab``, for as served, else as trained); ``traffic``: what the samples are (``"chat"``,
    ``"prompts"``, ``"dump"``), for the report.
    """
    if empty_memory not in EMPTY_MEMORY:
        raise UsageError(f"--empty-memory is one of {', '.join(EMPTY_MEMORY)}, not {empty_memory!r}")
    if scenario not in (None, "aux-off"):
        raise UsageError(f"acceptance models the scenario 'aux-off' only, not {scenario!r}")
    if scenario and engine is None:
        raise UsageError("--scenario needs --engine: it is the engine that captures no aux states")
    ckpt = (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    if target is None:
        raise UsageError("acceptance needs --target: its final norm and lm_head give the teacher's tokens")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible here; use --device cpu")
    dev = torch.device(device)
    K = check_steps(steps) if steps is not None else check_steps(
        _config_steps(ckpt) or DEFAULT_STEPS, f"{ckpt.path}: speculative_tokens in config.json")
    if data is None:
        raise UsageError("acceptance needs data: a hidden-state dump, or samples captured live from the target")
    teacher = Teacher.open(target, dev)
    samples = iter_samples(data, limit=limit) if isinstance(data, (str, Path)) else iter(data)
    data_name = str(data) if isinstance(data, (str, Path)) else "live capture"
    profile = resolve(engine) if engine is not None else None
    L = teacher.num_layers
    trained = _trained_setup(ckpt, teacher, L, dev)
    setups: dict[str, tuple[Setup, bool]] = {"metrics": (trained, False), "as_trained": (trained, True)}
    notes: list[str] = []
    if isinstance(data, (str, Path)) and not describe_dump(data).has_loss_mask:
        notes.append("the dump's files hold no loss_mask (speculators keeps it in its Arrow dataset): every position "
                     "counts")
    toggles_setups: dict[str, Setup] = {}
    tmp: tempfile.TemporaryDirectory[str] | None = None
    try:
        if profile is not None:
            served = _served_setup(ckpt, profile, teacher, L, dev, aux_off=scenario == "aux-off", empty=empty_memory)
            toggles_setups = _toggle_setups(served, trained, ckpt, profile, aux_off=scenario == "aux-off")
            if served.aux_off and profile.eagle_mode_vocab is not None:
                served = _eagle_mode(served, teacher, profile)
                toggles_setups = {name: _eagle_mode(st, teacher, profile) if st.aux_off else st
                                  for name, st in toggles_setups.items()}
            setups["as_served"] = (served, True)
            notes.extend(_never_written_note(served, profile, empty_memory))
            if isinstance(fixed, (str, Path)):  # a checkpoint convert already wrote: scored as the fixed view
                converted = Checkpoint.open(fixed).require_draft()
                setup = _served_setup(converted, profile, teacher, L, dev, aux_off=False, empty=empty_memory)
                setups["fixed"] = (replace(setup, weights=f"{converted.path} as {profile.spec} loads it"), True)
                notes.append(f"fixed: {converted.path}, served by {profile.spec} with aux capture on")
            elif fixed and profile.kind == "serving":
                tmp = tempfile.TemporaryDirectory(prefix="eagle3lens-fixed-")
                fixed_setup, note = _fixed_setup(ckpt, profile, teacher, L, dev, Path(tmp.name), empty_memory)
                if fixed_setup is not None:
                    setups["fixed"] = (fixed_setup, True)
                notes.append(note)
        counts = {"metrics": _Counts(K), **_shared_counts({n: st for n, (st, serving) in setups.items() if serving}, K)}
        toggle_counts = _shared_counts(toggles_setups, K, known=[(setups[n][0], c) for n, c in counts.items()
                                                                  if n != "metrics"])
        if sampling is not None:  # the target's own logit scale / soft cap, as its model and the engines apply
            sampling = sampling.for_target(teacher.config())
        scorer = TrafficScorer(K, sampling, teacher.lm_head, model=teacher.model,
                               vocab_view=("as_served" if "as_served" in setups else "as_trained") if served_vocab
                               else None, source=traffic)
        agree = [0.0, 0.0]
        total = _count(data, limit)
        done = 0
        capture = tuple(sorted({k for st, serving in setups.values() for k in st.layers
                                if serving and st.feed == "layers" and not st.aux_off}
                               | {k for st in toggles_setups.values() for k in st.layers
                                  if st.feed == "layers" and not st.aux_off}))
        origin = _Origin(verify=isinstance(data, (str, Path)))
        for sample in _checked(samples, ckpt, teacher, trained):
            prepared = _prepare(sample, teacher, trained, dev, capture, origin, each=scorer.row_stats())
            agree[0] += prepared.agree
            agree[1] += prepared.agree_total
            scored: set[int] = set()  # setups that run alike share one _Counts: score it once per sample
            chains: dict[int, list[torch.Tensor] | None] = {}
            for name, (setup, serving) in setups.items():
                if id(counts[name]) not in scored:
                    chains[id(counts[name])] = _score(setup, prepared, K, counts[name], serving)
                    scored.add(id(counts[name]))
                preds = chains.get(id(counts[name]))
                if serving and preds is not None and scorer.active:
                    scorer.add(name, setup.draft, preds, prepared, id(counts[name]))
            for name, setup in toggles_setups.items():
                if id(toggle_counts[name]) not in scored:
                    _score(setup, prepared, K, toggle_counts[name], True)
                    scored.add(id(toggle_counts[name]))
            done += 1
            if progress is not None:
                progress(done, total, "samples")
        if not done:
            raise CheckpointError(data_name, "no samples to score")
    finally:
        if tmp is not None:
            tmp.cleanup()
    label = profile.spec if profile is not None else None
    views = {name: counts[name].view(name, setups[name][0].describe(), label if name in ("as_served", "fixed") else None,
                                     serving) for name, (_, serving) in setups.items()}
    views = {name: replace(v, log_lines=log_lines(v, K, label)) if name != "metrics" else v for name, v in views.items()}
    toggles = {name: c.view(name, {}, label, True).accept_len for name, c in toggle_counts.items()}
    agreement = agree[0] / agree[1] if agree[1] else None
    notes += [f"{name}: not scored: {v.unavailable}" for name, v in views.items() if v.unavailable]
    if agreement is not None and agreement < 0.99:
        notes.append(f"the data follows the target's greedy path at {agreement:.1%} of positions: steps after a "
                     "departure are checked against a prefix the server would not have seen (approximate)")
    if views["as_trained"].positions == 0:
        notes.append("nothing scored: no sample has a verify start (a continuation that ended at the target's eos "
                     f"within its first tokens, or samples shorter than K + 1 = {K + 1} tokens)")
    if origin.captured:
        notes.append(f"as served: the target was run again on each sample's tokens to capture hidden_states "
                     f"{list(capture)}, the layers the served views read")
    elif origin.checked and not origin.foreign:
        notes.append(f"the target was run on {origin.checked} samples' tokens: the data's last hidden states are "
                     "its own")
    result = AcceptanceResult(str(ckpt.path), data_name, label, K, done, views, toggles, agreement, notes=tuple(notes),
                              traffic=scorer.result({n: v.accept_len for n, v in views.items()}))
    findings = gap_findings(result, ckpt)
    if origin.foreign:
        from .provenance import not_from_target

        findings.insert(0, not_from_target(origin.foreign, origin.checked, origin.worst, origin.first_foreign or "",
                                           teacher.source))
    return replace(result, findings=tuple(findings))


def _shared_counts(setups: dict[str, Setup], K: int,
                   known: list[tuple[Setup, _Counts]] | None = None) -> dict[str, _Counts]:
    """One _Counts per distinct way of running (same weights, features and effective fc gate)."""
    pool = list(known or [])
    out: dict[str, _Counts] = {}
    for name, setup in setups.items():
        match = next((c for other, c in pool if _runs_alike(setup, other)), None)
        if match is None:
            match = _Counts(K)
            pool.append((setup, match))
        out[name] = match
    return out


def _runs_alike(a: Setup, b: Setup) -> bool:
    if (a.layers, a.aux_off, a.feed) != (b.layers, b.aux_off, b.feed) or _effective_gate(a) != _effective_gate(b):
        return False
    sa, sb = a.draft.state_dict(), b.draft.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa if k != "t2d")


def _effective_gate(setup: Setup) -> str:
    """What the gate does with this setup's feature width: fc applied, skipped, or the engine's assert firing."""
    cfg = setup.draft.cfg
    width = cfg.target_hidden if setup.aux_off else len(setup.layers) * cfg.target_hidden
    if setup.gate == "width-differs":
        return "skip" if width == cfg.hidden else "fc"
    if setup.gate == "always-assert" and width != cfg.num_aux * cfg.target_hidden:
        return "assert"
    return "fc"


# -- the teacher ----------------------------------------------------------------------------------
@dataclass
class Teacher:
    """The target's final norm, lm_head (and embed when an engine shares it), read alone from its checkpoint."""

    norm: torch.Tensor
    eps: float
    lm_head: torch.Tensor  # [V, H]
    num_layers: int
    hidden: int
    source: str
    ckpt: Checkpoint | None = None
    model: Any = None  # a loaded HF model when one was given
    _sub: tuple[torch.Tensor, torch.Tensor] | None = None
    norm_offset: float = 0.0  # 1.0 where the final norm scales by (1 + weight) (Gemma's, Qwen3-Next's)

    @classmethod
    def open(cls, target: Any, device: torch.device) -> Teacher:
        from torch import nn

        if isinstance(target, nn.Module):
            from .wiring import find_decoder_layers

            decoder_path, layers = find_decoder_layers(target)
            parent = decoder_path.rsplit(".", 1)[0] if "." in decoder_path else ""
            norm = dict(target.named_modules())[f"{parent}.norm" if parent else "norm"]
            model: Any = target
            head = cast(torch.Tensor, model.get_output_embeddings().weight)
            eps = float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or 1e-6)
            hf_config: Any = getattr(target, "config", None)
            config = hf_config.to_dict() if hasattr(hf_config, "to_dict") else {}
            return cls(cast(torch.Tensor, norm.weight).detach().float().to(device), eps,
                       head.detach().float().to(device), len(layers), head.shape[1], "model", model=target,
                       norm_offset=norm_offset(config))
        ckpt = target if isinstance(target, Checkpoint) else Checkpoint.open(target)
        if ckpt.spec.is_draft:
            raise CheckpointError(ckpt.path, "--target must be the target model, not a draft")
        config = ckpt.config or {}
        config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
        norm_key = _first(ckpt, ("model.norm.weight", "model.language_model.norm.weight", "norm.weight"))
        head_key = _first(ckpt, ("lm_head.weight", "model.embed_tokens.weight", "embed_tokens.weight"))
        num_layers = config.get("num_hidden_layers")
        if norm_key is None or head_key is None or not isinstance(num_layers, int):
            raise CheckpointError(ckpt.path, "not an HF target: needs model.norm.weight, lm_head.weight (or tied "
                                             "embed_tokens) and num_hidden_layers in config.json")
        head = ckpt.read(head_key).float().to(device)
        return cls(ckpt.read(norm_key).float().to(device), float(config.get("rms_norm_eps") or 1e-6), head,
                   num_layers, int(head.shape[1]), str(ckpt.path), ckpt=ckpt, norm_offset=norm_offset(config))

    @property
    def runnable(self) -> bool:
        """The whole target is at hand (a loaded model, or a checkpoint holding every decoder layer's weights)."""
        if self.model is not None:
            return True
        keys = self.ckpt.tensors if self.ckpt is not None else {}
        return all(any(f"layers.{i}." in k for k in keys) for i in range(self.num_layers))

    def states(self, ids: torch.Tensor, layers: tuple[int, ...],
               full: bool) -> tuple[dict[int, torch.Tensor], torch.Tensor | None, torch.Tensor | None]:
        """The target run on ``ids`` [T]: the inputs of decoder layers ``layers`` (HF indices) as the engine captures
        them, each [T, H]; with ``full`` also the final norm's input and output (else the forward stops after the
        deepest layer asked for). The target is loaded on first use."""
        from .wiring import find_decoder_layers, input_device, load_target

        if self.model is None:
            self.model = load_target(self.ckpt, "cpu")
        model = self.model
        decoder_path, decoder = find_decoder_layers(model)
        seen: dict[Any, torch.Tensor] = {}

        def grab(key: Any) -> Callable[..., None]:
            def hook(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                seen[key] = (args[0] if args else kwargs["hidden_states"])[0].detach().float()
            return hook

        def enough(_module: Any, _args: Any, _kwargs: Any) -> None:
            raise _Enough

        hooks = [decoder[k].register_forward_pre_hook(grab(k), with_kwargs=True) for k in layers]
        deepest = max(layers, default=-1) + 1  # no layer asked for: the forward runs whole (``full``)
        norm = None
        if full:
            parent = decoder_path.rsplit(".", 1)[0] if "." in decoder_path else ""
            norm = model.get_submodule(f"{parent}.norm" if parent else "norm")
            hooks.append(norm.register_forward_pre_hook(grab("pre"), with_kwargs=True))
            hooks.append(norm.register_forward_hook(lambda _m, _a, out: seen.__setitem__("post", out[0].float())))
        elif deepest < len(decoder):
            hooks.append(decoder[deepest].register_forward_pre_hook(enough, with_kwargs=True))
        try:
            with torch.no_grad():
                model(input_ids=ids[None].to(input_device(model)), use_cache=False)
        except _Enough:
            pass
        finally:
            for handle in hooks:
                handle.remove()
        return {k: seen[k] for k in layers}, seen.get("pre"), seen.get("post")

    def _rows(self, rows: torch.Tensor | None) -> torch.Tensor:
        """The verifier lm_head rows of the draft vocab (gathered once per mapping, not per sample)."""
        if rows is None:
            return self.lm_head
        cached = self._sub
        if cached is None or not torch.equal(cached[0], rows):
            self._sub = cached = (rows, self.lm_head[rows])
        return cached[1]

    def config(self) -> dict[str, Any]:
        """The target's config.json as a dict (a loaded model's config, else the checkpoint's)."""
        config = getattr(self.model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            return cast(dict[str, Any], config.to_dict())
        return dict(self.ckpt.config or {}) if self.ckpt is not None else {}

    def embed(self) -> torch.Tensor | None:
        if self.model is not None:
            return self.model.get_input_embeddings().weight.detach().float()
        key = _first(self.ckpt, ("model.embed_tokens.weight", "embed_tokens.weight")) if self.ckpt else None
        return self.ckpt.read(key).float() if key and self.ckpt else None

    def final_norm(self, last: torch.Tensor) -> torch.Tensor:
        x = last.float()
        return (self.norm + self.norm_offset) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def greedy_tokens(self, normed: torch.Tensor) -> torch.Tensor:
        """The target's greedy token over the full vocabulary at each row (the ``full`` half of ``greedy``)."""
        return torch.cat([(chunk @ self.lm_head.T).argmax(-1) for chunk in normed.split(TEACHER_CHUNK)])

    def greedy(self, normed: torch.Tensor, rows: torch.Tensor | None,
               each: Callable[[torch.Tensor], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Argmax over the full vocabulary and over the draft-vocab rows ``rows`` (index into the draft vocab);
        ``each`` sees every block of full-vocabulary logits (the sampled view gathers its statistics there)."""
        full, draft = [], []
        sub = self._rows(rows)
        for chunk in normed.split(TEACHER_CHUNK):
            logits = chunk @ self.lm_head.T
            if each is not None:
                each(logits)
            full.append(logits.argmax(-1))
            draft.append((chunk @ sub.T).argmax(-1))
        return torch.cat(full), torch.cat(draft)


# model types whose RMSNorm scales by (1 + weight) (transformers' Gemma*RMSNorm, Qwen3NextRMSNorm)
ZERO_CENTERED_NORM = ("gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n_text", "qwen3_next")


def norm_offset(config: dict[str, Any]) -> float:
    """1.0 where the target's final norm multiplies by (1 + weight), else 0.0 (``config``: its config.json)."""
    text = config.get("text_config")
    types = {config.get("model_type"), text.get("model_type") if isinstance(text, dict) else None}
    return 1.0 if types & set(ZERO_CENTERED_NORM) else 0.0


def _first(ckpt: Checkpoint | None, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if ckpt is not None and n in ckpt.tensors), None)


# -- building the setups ------------------------------------------------------------------------
def _reference(ckpt: Checkpoint, keys: Iterable[str] | None, seed: int = 0) -> Eagle3Draft:
    from .wiring import load_draft_as

    if keys is None:
        return load_draft_as(ckpt, None, seed=seed)
    from ..draft import DraftConfig

    torch.manual_seed(seed)
    module = Eagle3Draft(DraftConfig.from_spec(ckpt.spec, ckpt.path))
    own = module.state_dict()
    state = {canonical_key(k): ckpt.read(k) for k in keys}
    module.load_state_dict({k: v for k, v in state.items() if k in own and v.shape == own[k].shape}, strict=False)
    return module.eval()


def _check_attention(module: Eagle3Draft, ckpt: Checkpoint) -> None:
    attn = module.layers[0].self_attn
    if not all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")):
        raise UsageError(f"{ckpt.path}: acceptance runs Llama-attention drafts (q/k/v projections); "
                         f"this draft's attention is {type(attn).__name__}")


def _trained_setup(ckpt: Checkpoint, teacher: Teacher, L: int, dev: torch.device) -> Setup:
    from .aux_layers import trained_with

    module = _reference(ckpt, None)
    _check_attention(module, ckpt)
    if not any(canonical_key(k) == "embed_tokens.weight" for k in ckpt.tensors):  # SpecForge: the target's table
        _install(module, "embed_tokens.weight", teacher.embed())
    t2d_rows = _draft_rows(module)
    V = int(teacher.lm_head.shape[0])
    if t2d_rows is not None and (int(t2d_rows.max()) >= V or int(t2d_rows.min()) < 0):
        raise CheckpointError(ckpt.path, f"d2t maps draft ids to target id {int(t2d_rows.max())}, outside the "
                                         f"target's vocabulary of {V}: repair d2t first (eagle3lens vocab)")
    if "lm_head.weight" not in {canonical_key(k) for k in ckpt.tensors} and t2d_rows is not None:
        _install(module, "lm_head.weight", teacher.lm_head[t2d_rows.to(teacher.lm_head.device)].cpu())
    layers, _ = trained_with(ckpt.spec, L)
    return Setup(module.to(dev), tuple(sorted(set(layers))), "always", feed="stored")


def _served_setup(ckpt: Checkpoint, profile: EngineProfile, teacher: Teacher, L: int, dev: torch.device,
                  aux_off: bool, empty: EmptyMemory) -> Setup:
    """The draft as :func:`~eagle3lens.served.serve_draft` says ``profile`` serves it: the keys it loads, the init
    of every parameter it never writes, the tables it shares from the target, the layers it captures, its fc gate."""
    from ..served import serve_draft

    served = serve_draft(ckpt, engine=profile, num_target_layers=L)
    module = _reference(ckpt, served.loaded_keys)
    never_written = apply_engine_init(module, _written(module, ckpt, served.loaded_keys), profile, empty=empty)
    tables = {"embed": ("embed_tokens.weight", teacher.embed), "lm_head": ("lm_head.weight", lambda: teacher.lm_head.cpu())}
    for param in served.params:
        if param.source == "target" and param.role in tables:
            name, table = tables[param.role]
            if _install(module, name, table()):
                never_written.pop(name, None)
    return Setup(module.to(dev), served.captured, profile.fc_gate, aux_off, f"as {profile.spec} loads them",
                 tuple(sorted(never_written.items())))


def _never_written_note(served: Setup, profile: EngineProfile, empty: EmptyMemory) -> list[str]:
    empty_params = [name for name, init in served.never_written if init.startswith("torch.empty")]
    if not empty_params:
        return []
    names = ", ".join(empty_params[:3]) + (f" and {len(empty_params) - 3} more" if len(empty_params) > 3 else "")
    other = "zeros" if empty == "noise" else "noise"
    return [f"as served: {len(empty_params)} parameters {profile.spec} never writes hold torch.empty memory, "
            f"modelled as {empty} (--empty-memory {other} for the other reading): {names}"]


def _eagle_mode(served: Setup, teacher: Teacher, profile: EngineProfile) -> Setup:
    """``served`` as SGLang runs an EAGLE-3 draft without aux capture (``--speculative-algorithm EAGLE``).

    The worker installs the target's embed and head (``set_embed_and_head``); the draft's logits span the head's
    first N rows (``first-n``) or all V (``full``), and a draft id is proposed as that target id (no
    ``hot_token_id``): d2t is not read.
    """
    cfg = served.draft.cfg
    vocab = cfg.draft_vocab if profile.eagle_mode_vocab == "first-n" else cfg.vocab
    module = Eagle3Draft(replace(cfg, draft_vocab=vocab))
    own = module.state_dict()
    kept = {k: v for k, v in served.draft.state_dict().items() if k in own and v.shape == own[k].shape
            and k not in ("lm_head.weight", "d2t")}
    module.load_state_dict(kept, strict=False)
    _install(module, "embed_tokens.weight", teacher.embed())
    _install(module, "lm_head.weight", teacher.lm_head[:vocab].cpu())
    with torch.no_grad():
        _d2t(module).zero_()
    rows = "the first N rows of" if vocab < cfg.vocab else "all of"
    weights = (f"{served.weights}; no aux capture is {profile.spec}'s EAGLE algorithm: the target's embed and "
               f"{rows} its head installed, draft ids proposed unmapped (d2t unused)")
    return replace(served, draft=module.eval().to(next(served.draft.parameters()).device), weights=weights)


def _written(module: Eagle3Draft, ckpt: Checkpoint, keys: Iterable[str]) -> set[str]:
    """The module's parameters the engine's load wrote (a key of the wrong shape writes nothing)."""
    own = module.state_dict()
    return {canonical_key(k) for k in keys
            if canonical_key(k) in own and tuple(ckpt.tensors[k].shape) == tuple(own[canonical_key(k)].shape)}


def _toggle_setups(served: Setup, trained: Setup, ckpt: Checkpoint, profile: EngineProfile,
                   aux_off: bool) -> dict[str, Setup]:
    """For each cause by which served differs from trained: served with that cause alone fixed."""
    out: dict[str, Setup] = {}
    s_state, t_state = served.draft.state_dict(), trained.draft.state_dict()
    differs = [k for k in s_state if not torch.equal(s_state[k], t_state[k])]
    shared = {"embed_tokens.weight": "embed", "lm_head.weight": "lm_head"}
    groups: dict[str, list[str]] = {}
    for key in differs:
        if key == "d2t":
            cause = "d2t"
        elif key in shared and profile.shared(shared[key], ckpt.spec):
            cause = "shared-tables"
        elif key == "t2d":
            continue
        else:
            cause = "keys"
        groups.setdefault(cause, []).append(key)
    for cause, keys in groups.items():
        module = _clone(served.draft)
        with torch.no_grad():
            for key in keys:
                module.state_dict()[key].copy_(t_state[key])
        out[cause] = replace(served, draft=module, weights=f"{served.weights}, {cause} as trained")
    if served.layers != trained.layers and not aux_off:  # the engine's weights fed the data's own features
        out["aux-ids"] = replace(served, layers=trained.layers, feed="stored")
    if aux_off:
        out["aux-capture"] = replace(served, aux_off=False)
    return out


def _fixed_setup(ckpt: Checkpoint, profile: EngineProfile, teacher: Teacher, L: int, dev: torch.device,
                 tmp: Path, empty: EmptyMemory) -> tuple[Setup | None, str]:
    from ..convert import convert
    from ..errors import ConversionRefused

    out = tmp / "converted"
    try:
        convert(ckpt.path, profile.spec, out)
    except (ConversionRefused, UsageError) as exc:
        return None, f"fixed: not scored, convert --to {profile.spec} refused ({str(exc)[:160]})"
    setup = _served_setup(Checkpoint.open(out), profile, teacher, L, dev, aux_off=False, empty=empty)
    return replace(setup, weights=f"after convert --to {profile.spec}, as it loads them"), \
        f"fixed: the checkpoint `eagle3lens convert --to {profile.spec}` writes, served with aux capture on"


def _clone(module: Eagle3Draft) -> Eagle3Draft:
    copy = Eagle3Draft(module.cfg).to(next(module.parameters()).device)
    copy.load_state_dict(module.state_dict())
    return copy.eval()


def _install(module: Eagle3Draft, name: str, table: torch.Tensor | None) -> bool:
    """Copy ``table`` into parameter ``name`` when it fits; whether it did."""
    own = module.state_dict()[name]
    if table is None or tuple(table.shape) != tuple(own.shape):
        return False
    with torch.no_grad():
        own.copy_(table.to(own.device, own.dtype))
    return True


def _draft_rows(module: Eagle3Draft) -> torch.Tensor | None:
    """Target ids of the draft vocab (t2d rows of the verifier lm_head); None when N == V."""
    N, V = module.cfg.draft_vocab, module.cfg.vocab
    if N >= V:
        return None
    return torch.arange(N) + _d2t(module).cpu()


def _d2t(module: Eagle3Draft) -> torch.Tensor:
    return cast(torch.Tensor, module.d2t)


def _config_steps(ckpt: Checkpoint) -> int | None:
    block = (ckpt.config or {}).get("speculators_config")
    methods = block.get("proposal_methods") if isinstance(block, dict) else None
    first = methods[0] if isinstance(methods, list) and methods and isinstance(methods[0], dict) else {}
    value = first.get("speculative_tokens")
    return value if isinstance(value, int) and value > 0 else None


# -- per-sample preparation -----------------------------------------------------------------------
@dataclass
class _Prepared:
    ids: torch.Tensor  # [T'] token i+1 at position i (speculators' shift_batch)
    stored: torch.Tensor | None  # [T', n_aux * H] the data's own aux states of position i (the training features)
    feats: dict[int, torch.Tensor]  # HF index -> [T', H] aux state of position i (recorded, or captured again)
    recorded: tuple[int, ...] | None  # the HF layers the data records for its chunks
    rows: torch.Tensor  # [T', H] the target's final-norm state of position i+1 (its logits give teacher_full)
    tokens: torch.Tensor  # [T'+1] the sample's own token ids (unshifted)
    final: torch.Tensor | None  # [T', H] the target's final post-norm state (aux-off feed)
    mask: torch.Tensor  # [T'] loss mask of position i (that of token i+1)
    teacher_full: torch.Tensor  # [T'] target greedy token after position i+1 (full vocab)
    teacher_draft: torch.Tensor  # [T'] the same, restricted to the draft vocab (index into it)
    agree: float
    agree_total: float


def _checked(samples: Iterator[Sample], ckpt: Checkpoint, teacher: Teacher, trained: Setup) -> Iterator[Sample]:
    """Samples whose widths fit the draft and target (else one clear error naming the file and both widths)."""
    cfg = trained.draft.cfg
    positions = max_positions(teacher.model.config if teacher.model is not None else
                              (teacher.ckpt.config if teacher.ckpt is not None else None) or {})
    for s in samples:
        check_length(len(s), positions, s.source)
        if s.last is not None and s.last.shape[-1] != teacher.hidden:
            raise CheckpointError(s.source, f"last hidden state is {s.last.shape[-1]} wide, the target's hidden size "
                                            f"is {teacher.hidden} ({teacher.source})")
        width = s.aux.shape[-1]
        H_t = cfg.target_hidden
        if width % H_t or (s.layers is not None and width != len(s.layers) * H_t):
            raise CheckpointError(s.source, f"aux hidden states are {width} wide, the draft reads {cfg.num_aux} x {H_t} "
                                            f"= {cfg.num_aux * H_t} ({ckpt.path})")
        if s.layers is None and width != cfg.num_aux * H_t:
            raise CheckpointError(s.source, f"aux hidden states are {width} wide, the draft's fc reads "
                                            f"{cfg.num_aux} x {H_t} = {cfg.num_aux * H_t} ({ckpt.path})")
        if s.last is None:
            raise CheckpointError(s.source, "the dump holds no last hidden state: the teacher cannot be computed")
        for name, values in (("aux hidden states", s.aux), ("last hidden state", s.last)):
            bad = (~torch.isfinite(values)).nonzero()
            if bad.numel():
                raise CheckpointError(s.source, f"non-finite values in the {name} (first at position "
                                                f"{int(bad[0][0])}): the dump is not usable")
        check_token_ids(s.token_ids, int(teacher.lm_head.shape[0]), s.source)
        yield s


def _prepare(s: Sample, teacher: Teacher, trained: Setup, dev: torch.device, capture: tuple[int, ...],
             origin: _Origin, each: Callable[[torch.Tensor], None] | None = None) -> _Prepared:
    """speculators' shift_batch (position i: token i+1, aux state of i, last hidden of i+1) and the teacher; the
    target's states at ``capture`` (HF indices the served setups read) taken from the data where it records them,
    else captured again by running the target on the sample's tokens (when it can run here)."""
    module = trained.draft
    H_t = module.cfg.target_hidden
    chunks = s.aux.split(H_t, dim=-1)
    feats: dict[int, torch.Tensor] = {}
    if s.layers is not None:
        if len(s.layers) != len(chunks):
            raise CheckpointError(s.source, f"the dump holds {len(chunks)} aux layers but records {len(s.layers)} "
                                            f"({list(s.layers)})")
        feats = {k: c[:-1].to(dev, torch.float32) for k, c in zip(sorted(s.layers), chunks, strict=True)}
    stored = s.aux[:-1].to(dev, torch.float32) if s.aux.shape[-1] == module.cfg.num_aux * H_t else None
    if stored is None and not all(k in feats for k in trained.layers):
        raise CheckpointError(s.source, f"the dump holds {len(chunks)} aux layers, the draft was trained with "
                              f"{module.cfg.num_aux} ({list(trained.layers)})")
    assert s.last is not None
    missing = tuple(k for k in capture if k not in feats)
    check = origin.checked < ORIGIN_SAMPLES
    if (missing or (check and origin.verify)) and teacher.runnable:
        captured, pre, post = teacher.states(s.token_ids, missing, full=check)
        feats.update({k: v[:-1].to(dev) for k, v in captured.items()})
        origin.captured = origin.captured or bool(missing)
        if pre is not None and post is not None:
            origin.check(s, pre, post)
    normed = s.last.to(dev, torch.float32) if s.last_normed else teacher.final_norm(s.last.to(dev))
    rows = _draft_rows(module)
    full, draft = teacher.greedy(normed[1:], rows.to(dev) if rows is not None else None, each=each)
    ids = s.token_ids.to(dev)
    mask = s.loss_mask.to(dev)[1:]
    follows = (ids[2:] == full[:-1]) & mask[:-1]
    return _Prepared(ids[1:], stored, feats, s.layers, normed[1:], ids, normed[:-1], mask, full, draft,
                     float(follows.sum()), float(mask[:-1].sum()))


class _Enough(Exception):
    """Raised by a hook to end a target forward once the layers asked for are captured."""


ORIGIN_SAMPLES = 4  # samples whose last hidden states are checked against the target's (the whole forward runs)


class _Origin:
    """Whether the data's last hidden states are this target's own: checked wherever the target is run again to
    capture layers, and with ``verify`` (a dump, whatever the views need) on the first samples in any case."""

    def __init__(self, verify: bool = False) -> None:
        self.verify = verify
        self.captured = False  # the target was run to capture layers the data does not hold
        self.checked = self.foreign = 0
        self.worst = 0.0
        self.first_foreign: str | None = None

    def check(self, s: Sample, pre: torch.Tensor, post: torch.Tensor) -> None:
        from .provenance import MATCH_TOLERANCE, relative_error

        assert s.last is not None
        error = min(relative_error(s.last, pre), relative_error(s.last, post))
        self.checked += 1
        self.worst = max(self.worst, error)
        if error > MATCH_TOLERANCE:
            self.foreign += 1
            self.first_foreign = self.first_foreign or s.source


# -- scoring ----------------------------------------------------------------------------------------
def _feature(setup: Setup, p: _Prepared) -> torch.Tensor:
    if setup.aux_off:
        if p.final is None:
            raise UsageError("aux-off needs the target's final hidden state")
        return p.final
    if setup.feed == "stored" and p.stored is not None:  # as wide as fc reads: the training features as stored
        return p.stored
    missing = [k for k in setup.layers if k not in p.feats]
    if missing:
        raise _MissingLayers(setup.layers, p.recorded)
    return torch.cat([p.feats[k] for k in setup.layers], dim=-1)


class _MissingLayers(Exception):
    def __init__(self, wanted: tuple[int, ...], recorded: tuple[int, ...] | None) -> None:
        held = (f"the dump holds {list(recorded)}" if recorded is not None else
                "the dump does not record which layers it holds")
        super().__init__(f"the engine captures hidden_states {list(wanted)}, {held}, and the target cannot be run "
                         "here to capture them (its checkpoint lacks decoder weights): give a full target, or "
                         "--target T --prompts F")


def _score(setup: Setup, p: _Prepared, K: int, counts: _Counts, serving: bool) -> list[torch.Tensor] | None:
    """Score one sample into ``counts``; the chain's predictions (None when the view cannot run)."""
    if counts.error or counts.unavailable:
        return None
    try:
        feature = _feature(setup, p)
        preds = chain(setup.draft, p.ids, feature, setup.gate, K,
                      teacher_forced=None if serving else p.ids)
    except _MissingLayers as exc:
        counts.unavailable = str(exc)
        return None
    except (AssertionError, RuntimeError) as exc:  # the engine's fc shape check, or fc's matmul on the wrong width
        counts.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return None
    if serving:
        _score_serving(setup.draft, preds, p, K, counts)
    else:
        _score_metrics(preds, p, K, counts)
    return preds


def _score_metrics(preds: list[torch.Tensor], p: _Prepared, K: int, counts: _Counts) -> None:
    """speculators' compute_accuracy_single_step after align_for_step, summed (restated, not imported)."""
    T = p.ids.shape[0]
    prev = p.mask.clone()  # prev_correct starts as the (shifted) loss mask
    block_ok = torch.ones(T, dtype=torch.bool, device=p.ids.device)
    block_valid = torch.zeros(T, dtype=torch.bool, device=p.ids.device)
    block_run = torch.zeros(T, device=p.ids.device)
    for k in range(min(K, T)):
        n = T - k
        correct = preds[k][:n] == p.teacher_draft[k:]
        counts.cond_total[k] += float(prev[:n].sum())
        prev[:n] &= correct
        slot_mask = p.mask[k:]
        counts.full_hit[k] += float((prev[:n] & slot_mask).sum())
        counts.full_total[k] += float(slot_mask.sum())
        # compute_accepted_length_counts: leading run of correct & valid slots per block, + 1
        block_ok[:n] &= correct & slot_mask
        block_ok[n:] = False
        block_run += block_ok.float()
        block_valid[:n] |= slot_mask
    counts.blocks += float(block_valid.sum())
    counts.block_len += float(((block_run + 1) * block_valid.float()).sum())


def _score_serving(module: Eagle3Draft, preds: list[torch.Tensor], p: _Prepared, K: int, counts: _Counts) -> None:
    """Per start (every verify start) and per round (the starts the engine's walk drafts at, :mod:`.rounds`)."""
    T = p.ids.shape[0]
    n = T - K + 1  # verify starts with all K draft positions inside the sequence
    if n <= 0:
        return
    starts = p.mask[:n]
    run = torch.ones_like(starts)
    runs = []
    for k in range(K):
        proposed = map_to_target(preds[k][:n], _d2t(module))
        counts.cond_total[k] += float((run & starts).sum())
        run = run & (proposed == p.teacher_full[k:k + n])
        runs.append(run)
        counts.full_hit[k] += float((run & starts).sum())
        counts.full_total[k] += float(starts.sum())
    rounds, hits = round_counts(torch.stack(runs), starts)
    counts.rounds += rounds
    counts.round_hit = [a + b for a, b in zip(counts.round_hit, hits, strict=True)]


def chain(module: Eagle3Draft, ids: torch.Tensor, feature: torch.Tensor, gate: FcGate, steps: int,
          teacher_forced: torch.Tensor | None = None) -> list[torch.Tensor]:
    """``steps`` draft steps from every position of one sequence; the draft-vocab argmax of each step.

    Step 0 reads ``ids`` [T] and ``feature`` [T, width] through fc (as ``gate`` decides); step k reads step k-1's
    hidden output and either its own prediction mapped to target ids (serving) or, with ``teacher_forced``, the
    ground-truth ids shifted k to the left (speculators' TTT). Step k's queries attend to step 0's keys causally
    and to steps 1..k's keys at their own position (speculators' ``extend_*_mask_for_draft_tokens``; at decode time
    the chain's own earlier tokens).
    """
    cfg = module.cfg
    layer = cast(DecoderLayer, module.layers[0])
    attn = layer.self_attn
    if not isinstance(attn, Attention):  # the chain below reads q/k/v projections: MLA's latent path has none
        raise UsageError("the acceptance chain runs drafts with Llama-style attention only; this draft uses MLA")
    T = ids.shape[0]
    with torch.no_grad():
        g, _ = module.project(feature[None].to(next(module.parameters()).dtype), gate)
        positions = torch.arange(1, T + 1, device=ids.device)[None]  # shift_batch: positions start at 1
        x_ids = ids[None]
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        preds = []
        for k in range(steps):
            xe, xh = layer.input_layernorm(module.embed_tokens(x_ids)), layer.hidden_norm(g)
            residual = xh if cfg.norm_before_residual else g
            x = torch.cat([xe, xh], dim=-1)
            q = attn.q_proj(x).view(1, T, cfg.heads, cfg.head_dim).transpose(1, 2)
            kk = attn.k_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, T, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            q, kk = rope(q, positions, cfg.rope_theta), rope(kk, positions, cfg.rope_theta)
            group = cfg.heads // cfg.kv_heads
            keys.append(kk.repeat_interleave(group, dim=1))
            values.append(v.repeat_interleave(group, dim=1))
            y = ttt_attention(q, keys, values)
            h = attn.o_proj(y.transpose(1, 2).reshape(1, T, cfg.heads * cfg.head_dim)) + residual
            h = layer.mlp(layer.post_attention_layernorm(h)) + h
            n = module.norm(h)
            pred = module.lm_head(n).argmax(-1)
            preds.append(pred[0])
            g = n if cfg.norm_output else h
            if teacher_forced is not None:
                x_ids = F.pad(teacher_forced[k + 1:], (0, k + 1))[None]
            else:
                x_ids = map_to_target(pred, _d2t(module))
            positions = positions + 1
    return preds


def ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """Attention of ``q`` [1, h, T, d] over step 0's keys (causal) and steps 1..k's keys (own position only)."""
    T, d = q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    k0, v0 = keys[0], values[0]
    diag_scores = [(q.float() * kk.float()).sum(-1, keepdim=True) * scale for kk in keys[1:]]  # [1, h, T, 1] each
    out = []
    for start in range(0, T, QUERY_CHUNK):
        stop = min(start + QUERY_CHUNK, T)
        qc = q[:, :, start:stop].float()
        s0 = (qc @ k0[:, :, :stop].float().transpose(-1, -2)) * scale  # keys beyond stop are all masked
        rows = torch.arange(start, stop, device=q.device)[:, None]
        s0 = s0.masked_fill(torch.arange(stop, device=q.device)[None, :] > rows, float("-inf"))
        scores = torch.cat([s0, *(s[:, :, start:stop] for s in diag_scores)], dim=-1)
        p = torch.softmax(scores, dim=-1)
        y = p[..., :stop] @ v0[:, :, :stop].float()
        for m, vv in enumerate(values[1:]):
            y = y + p[..., stop + m:stop + m + 1] * vv[:, :, start:stop].float()
        out.append(y)
    return torch.cat(out, dim=2).to(q.dtype)


# -- engine log lines -------------------------------------------------------------------------------
def log_lines(view: AcceptanceView, steps: int, engine: str | None) -> dict[str, str]:
    """The acceptance part of the line each engine's log would print for this view (topk 1, K = steps): from its
    per-round figures, the engine's own count (never the per-start average)."""
    if view.accept_len is None:
        return {}
    length, per_pos = view.accept_len, view.full_acc
    version = _version(engine)
    name = engine.split("==")[0] if engine else None
    lines: dict[str, str] = {}
    if name in (None, "sglang"):
        v = version if name == "sglang" else None
        if v is not None and v < (0, 5, 3, 2):
            lines["sglang"] = f"accept len: {length:.2f}"
        elif v is not None and v < (0, 5, 11):
            lines["sglang"] = f"accept len: {length:.2f}, accept rate: {length / (steps + 1):.2f}"
        else:  # 0.5.11+: (accept_len - 1) / (num_draft_tokens - 1), num_draft_tokens = K + 1 at topk 1
            lines["sglang"] = f"accept len: {length:.2f}, accept rate: {(length - 1) / steps:.2f}"
    if name in (None, "vllm"):
        mean = length - 1 if version is not None and name == "vllm" and version < (0, 9) else length
        lines["vllm"] = (f"Mean acceptance length: {mean:.2f}, Per-position acceptance rate: "
                         + ", ".join(f"{r:.3f}" for r in per_pos)
                         + f", Avg Draft acceptance rate: {100 * (length - 1) / steps:.1f}%")
    return lines


def _version(engine: str | None) -> tuple[int, ...] | None:
    if not engine or "==" not in engine:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(engine.split("==", 1)[1])
    except InvalidVersion:
        return None
    return tuple(v.release) + ((v.post,) if v.post is not None else ())


# -- findings -----------------------------------------------------------------------------------------
def gap_findings(result: AcceptanceResult, ckpt: Checkpoint) -> list[Finding]:
    """``acceptance/gap``: the engine serves the draft worse than it was trained (with what fixes it)."""
    trained, served = result.accept_len("as_trained"), result.accept_len("as_served")
    if result.engine is None or trained is None:
        return []
    fixed = result.accept_len("fixed")
    view = result.views.get("as_served")
    if served is None:
        error = view.error if view is not None else None
        if error is None:  # not scored (data lacking a layer): nothing to judge
            return []
        return [Finding("acceptance/gap", Severity.CRITICAL, f"as served by {result.engine}: not servable ({error})",
                        f"As trained the draft reaches accept len {trained:.2f}; the engine as modelled stops first.",
                        evidence=_evidence(result))]
    if trained - served <= max(GAP_ABS, GAP_REL * (trained - 1)):
        return []
    severity = Severity.CRITICAL if served <= ZERO_ACCEPT_LEN else Severity.WARNING
    toggles = "; ".join(f"{CAUSE_LABELS.get(c, c)}: {v:.2f}" if v is not None else f"{CAUSE_LABELS.get(c, c)}: n/a"
                        for c, v in result.toggles.items())
    title = (f"as served by {result.engine}: accept len {served:.2f}; as trained: {trained:.2f}"
             + (f"; after convert: {fixed:.2f}" if fixed is not None else ""))
    return [Finding("acceptance/gap", severity, title,
                    f"Offline, on {result.samples} samples with K = {result.steps}: the draft as {result.engine} loads "
                    f"and wires it accepts {served:.2f} tokens per drafting round (the engine's count), as trained "
                    f"{trained:.2f}."
                    + (f" Each cause fixed alone: {toggles}." if toggles else ""),
                    evidence=_evidence(result), fix=_gap_fix(result, ckpt, trained, fixed))]


def restored(result: AcceptanceResult) -> bool | None:
    """Whether the fixed view accepts what the draft accepts as trained, within noise (None: not both scored)."""
    trained, fixed = result.accept_len("as_trained"), result.accept_len("fixed")
    if trained is None or fixed is None:
        return None
    return within_noise(fixed, trained)


def check_data(draft: str | Path | Checkpoint, data: str | Path, *, target: str | Path,
               limit: int | None = None) -> None:
    """The checks ``estimate_acceptance`` makes of each sample, on every sample it will score (the first
    ``limit``; ``convert --data`` runs them before it writes anything): one error naming the file and both widths
    when a sample does not fit. Samples are read one at a time."""
    ckpt = (draft if isinstance(draft, Checkpoint) else Checkpoint.open(draft)).require_draft()
    cpu = torch.device("cpu")
    teacher = Teacher.open(target, cpu)
    trained = _trained_setup(ckpt, teacher, teacher.num_layers, cpu)
    H_t = trained.draft.cfg.target_hidden
    for s in _checked(iter_samples(data, limit=limit), ckpt, teacher, trained):
        layers = s.layers if s.layers is not None else trained.layers
        if len(layers) != s.aux.shape[-1] // H_t:  # what _prepare refuses, without running the teacher
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
                      evidence=_evidence(result))
    return replace(result, findings=(finding,))


def _gap_fix(result: AcceptanceResult, ckpt: Checkpoint, trained: float, fixed: float | None) -> str | None:
    """convert when it restores as trained; with aux capture off, switching capture on (and convert if needed)."""
    def restores(value: float | None) -> bool:
        return within_noise(value, trained)

    convert = fix_command("convert", ckpt.path, "--to", result.engine or "", "OUT")
    view = result.views.get("as_served")
    if view is not None and view.setup.get("scenario") == "aux-off":
        capture = "switch aux hidden-state capture on (SGLang: --speculative-algorithm EAGLE3)"
        if restores(result.toggles.get("aux-capture")):
            return capture
        return f"{capture}, and {convert}" if restores(fixed) else None
    return convert if restores(fixed) else None


def _evidence(result: AcceptanceResult) -> dict[str, Any]:
    return {"accept_len": {n: v.accept_len for n, v in result.views.items()}, "toggles": dict(result.toggles),
            "steps": result.steps, "samples": result.samples}


def log_comparison(result: AcceptanceResult, logged: float, log_path: str,
                   log_steps: int | None = None) -> tuple[Finding | None, str | None]:
    """Hold the offline estimate against the server's logged accept len, like with like: per drafting round (the
    engine's count), as served (as trained without an engine), sampled where the result was scored with a
    temperature. ``acceptance/served-vs-log-mismatch``, or the note of agreement. ``log_steps``: K the log's
    server drafts, when it says (a different K scored is named in the finding)."""
    name = "as_served" if "as_served" in result.views else "as_trained"
    sampled = result.traffic.sampled.get(name) if result.traffic is not None else None
    served = sampled.accept_len if sampled is not None else result.accept_len(name)
    if served is None:
        return None, None
    label = name.replace("_", " ") + (f", sampled ({sampled.sampling.label()})" if sampled is not None else "")
    tolerance = max(0.05, 0.1 * (served - 1))
    if abs(served - logged) <= tolerance:
        return None, (f"{label}: accept len {served:.2f} per round (your log: {logged:.2f}): the served acceptance "
                      "is explained by the causes above")
    other_k = (f" The log's server drafts K = {log_steps}, the estimate scored K = {result.steps}: score with "
               f"--steps {log_steps}." if log_steps is not None and log_steps != result.steps else "")
    return Finding("acceptance/served-vs-log-mismatch", Severity.WARNING,
                   f"offline {label}: accept len {served:.2f} per round; the log says {logged:.2f}",
                   "Something outside the checkpoint differs from what was modelled: sampling (temperature > 0), "
                   "tree width (topk > 1), a different K, other data, or a wiring path not modelled." + other_k,
                   evidence={"estimated": served, "logged": logged, "log": log_path, "steps": result.steps,
                             "log_steps": log_steps, "view": name, "count": "per-round",
                             "sampled": sampled.sampling.label() if sampled is not None else None,
                             "engine": result.engine}), None


def _count(data: Any, limit: int | None) -> int | None:
    if isinstance(data, (str, Path)):
        from .data import dump_files

        n: int | None = len(dump_files(data)[1])
    else:
        n = len(data) if hasattr(data, "__len__") else None
    return min(n, limit) if n is not None and limit is not None else n


def needed_layers(draft: str | Path | Checkpoint, num_target_layers: int,
                  engine: str | EngineProfile | None = None) -> tuple[int, ...]:
    """HF hidden_states indices a live capture must keep: the trained layers and those ``engine`` captures."""
    from ..served import serve_draft
    from .aux_layers import trained_with

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
    from .wiring import find_decoder_layers, load_target

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
                      measure: Callable[[AcceptanceResult, Any, Any], AcceptanceResult] | None = None
                      ) -> tuple[AcceptanceResult, str | None]:
    """The acceptance probe as the doctor runs it, at ``steps`` (the K the server drafts, where the log or launch
    says): as served held against the logged accept len (:func:`log_comparison`).

    Returns the result (with ``acceptance/served-vs-log-mismatch`` added on disagreement) and, on agreement,
    the note that the served acceptance is explained by the causes found.
    """
    samples: Any = data
    teacher: Any = target
    if data is None and chat is not None:
        samples, teacher = chat
    elif data is None:
        if prompts is None:
            raise UsageError("acceptance needs --data D, --prompts F or --chat FILE.jsonl")
        samples, teacher = live_samples(draft, target, prompts, engine)
    result = estimate_acceptance(draft, samples, target=teacher, engine=engine, steps=steps,
                                 scenario=scenario if scenario == "aux-off" else None,
                                 served_vocab=data is None, traffic="dump" if data is not None else
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

"""The setups the acceptance views run: the draft as trained, as an engine loads and wires it, each cause fixed alone,
and the checkpoint ``convert`` wrote (:class:`FixedDraft`, which the caller makes: the probe converts nothing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch

from ..checkpoint import Checkpoint
from ..draft import Eagle3Draft, FcGate, canonical_key
from ..engines import EngineProfile
from ..errors import CheckpointError, UsageError
from ..target_runtime import Teacher
from .engine_init import EmptyMemory, apply_engine_init


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


@dataclass(frozen=True)
class FixedDraft:
    """The checkpoint ``convert --to E`` wrote, scored as the fixed view: ``path`` (None: convert refused, nothing
    scored), how its weights are labelled, and the note the report prints."""

    path: Path | None
    weights: str
    note: str


# what makes the fixed checkpoint for a draft and a serving engine (``eagle3lens.convert.fixed_draft``), entered
# while the views are scored (its temporary folder lives that long)
Fixer = Callable[[Checkpoint, EngineProfile], AbstractContextManager[FixedDraft]]


def reference(ckpt: Checkpoint, keys: Iterable[str] | None, seed: int = 0) -> Eagle3Draft:
    """The reference draft with every key of ``ckpt`` (``keys`` None) or only ``keys``; the rest at init."""
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


def trained_setup(ckpt: Checkpoint, teacher: Teacher, L: int, dev: torch.device) -> Setup:
    """The draft as trained: every stored key, the target's tables where the layout keeps none, trained layers."""
    from ..aux_ids import trained_with

    module = reference(ckpt, None)
    _check_attention(module, ckpt)
    if not any(canonical_key(k) == "embed_tokens.weight" for k in ckpt.tensors):  # SpecForge: the target's table
        install(module, "embed_tokens.weight", teacher.embed())
    t2d_rows = draft_rows(module)
    V = int(teacher.lm_head.shape[0])
    if t2d_rows is not None and (int(t2d_rows.max()) >= V or int(t2d_rows.min()) < 0):
        raise CheckpointError(ckpt.path, f"d2t maps draft ids to target id {int(t2d_rows.max())}, outside the "
                                         f"target's vocabulary of {V}: repair d2t first (eagle3lens vocab)")
    if "lm_head.weight" not in {canonical_key(k) for k in ckpt.tensors} and t2d_rows is not None:
        install(module, "lm_head.weight", teacher.lm_head[t2d_rows.to(teacher.lm_head.device)].cpu())
    layers, _ = trained_with(ckpt.spec, L)
    return Setup(module.to(dev), tuple(sorted(set(layers))), "always", feed="stored")


def served_setup(ckpt: Checkpoint, profile: EngineProfile, teacher: Teacher, L: int, dev: torch.device,
                 aux_off: bool, empty: EmptyMemory) -> Setup:
    """The draft as :func:`~eagle3lens.served.serve_draft` says ``profile`` serves it: the keys it loads, the init
    of every parameter it never writes, the tables it shares from the target, the layers it captures, its fc gate."""
    from ..served import serve_draft

    served = serve_draft(ckpt, engine=profile, num_target_layers=L)
    module = reference(ckpt, served.loaded_keys)
    never_written = apply_engine_init(module, _written(module, ckpt, served.loaded_keys), profile, empty=empty)
    tables = {"embed": ("embed_tokens.weight", teacher.embed), "lm_head": ("lm_head.weight", lambda: teacher.lm_head.cpu())}
    for param in served.params:
        if param.source == "target" and param.role in tables:
            name, table = tables[param.role]
            if install(module, name, table()):
                never_written.pop(name, None)
    return Setup(module.to(dev), served.captured, profile.fc_gate, aux_off, f"as {profile.spec} loads them",
                 tuple(sorted(never_written.items())))


def fixed_setup(fixed: FixedDraft, profile: EngineProfile, teacher: Teacher, L: int, dev: torch.device,
                empty: EmptyMemory) -> Setup | None:
    """The converted checkpoint as ``profile`` serves it, aux capture on (None: convert wrote nothing)."""
    if fixed.path is None:
        return None
    setup = served_setup(Checkpoint.open(fixed.path), profile, teacher, L, dev, aux_off=False,
                         empty=empty)
    return replace(setup, weights=fixed.weights)


def given_fixed(path: str | Path, profile: EngineProfile) -> FixedDraft:
    """A checkpoint ``convert`` already wrote (``fixed=PATH``), labelled as the report names it."""
    converted = Checkpoint.open(path).require_draft()
    return FixedDraft(Path(converted.path), f"{converted.path} as {profile.spec} loads it",
                      f"fixed: {converted.path}, served by {profile.spec} with aux capture on")


def never_written_note(served: Setup, profile: EngineProfile, empty: EmptyMemory) -> list[str]:
    """The note naming the parameters the engine leaves as ``torch.empty`` memory, and how they were modelled."""
    empty_params = [name for name, init in served.never_written if init.startswith("torch.empty")]
    if not empty_params:
        return []
    names = ", ".join(empty_params[:3]) + (f" and {len(empty_params) - 3} more" if len(empty_params) > 3 else "")
    other = "zeros" if empty == "noise" else "noise"
    return [f"as served: {len(empty_params)} parameters {profile.spec} never writes hold torch.empty memory, "
            f"modelled as {empty} (--empty-memory {other} for the other reading): {names}"]


def eagle_mode(served: Setup, teacher: Teacher, profile: EngineProfile) -> Setup:
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
    install(module, "embed_tokens.weight", teacher.embed())
    install(module, "lm_head.weight", teacher.lm_head[:vocab].cpu())
    with torch.no_grad():
        d2t(module).zero_()
    rows = "the first N rows of" if vocab < cfg.vocab else "all of"
    weights = (f"{served.weights}; no aux capture is {profile.spec}'s EAGLE algorithm: the target's embed and "
               f"{rows} its head installed, draft ids proposed unmapped (d2t unused)")
    return replace(served, draft=module.eval().to(next(served.draft.parameters()).device), weights=weights)


def _written(module: Eagle3Draft, ckpt: Checkpoint, keys: Iterable[str]) -> set[str]:
    """The module's parameters the engine's load wrote (a key of the wrong shape writes nothing)."""
    own = module.state_dict()
    return {canonical_key(k) for k in keys
            if canonical_key(k) in own and tuple(ckpt.tensors[k].shape) == tuple(own[canonical_key(k)].shape)}


def toggle_setups(served: Setup, trained: Setup, ckpt: Checkpoint, profile: EngineProfile,
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


def _clone(module: Eagle3Draft) -> Eagle3Draft:
    copy = Eagle3Draft(module.cfg).to(next(module.parameters()).device)
    copy.load_state_dict(module.state_dict())
    return copy.eval()


def install(module: Eagle3Draft, name: str, table: torch.Tensor | None) -> bool:
    """Copy ``table`` into parameter ``name`` when it fits; whether it did."""
    own = module.state_dict()[name]
    if table is None or tuple(table.shape) != tuple(own.shape):
        return False
    with torch.no_grad():
        own.copy_(table.to(own.device, own.dtype))
    return True


def draft_rows(module: Eagle3Draft) -> torch.Tensor | None:
    """Target ids of the draft vocab (t2d rows of the verifier lm_head); None when N == V."""
    N, V = module.cfg.draft_vocab, module.cfg.vocab
    if N >= V:
        return None
    return torch.arange(N) + d2t(module).cpu()


def d2t(module: Eagle3Draft) -> torch.Tensor:
    """The module's d2t buffer (draft id -> target id offset)."""
    return cast(torch.Tensor, module.d2t)


def config_steps(ckpt: Checkpoint) -> int | None:
    """K from the draft's config (speculators' ``speculative_tokens``), None where it says nothing usable."""
    block = (ckpt.config or {}).get("speculators_config")
    methods = block.get("proposal_methods") if isinstance(block, dict) else None
    first = methods[0] if isinstance(methods, list) and methods and isinstance(methods[0], dict) else {}
    value = first.get("speculative_tokens")
    return value if isinstance(value, int) and value > 0 else None

"""Safe rewrite of a draft checkpoint for an engine: key renames, config rewrite, optional tensor overrides.

Never touches the source. Tensor bytes are streamed from the source files into new safetensors files
whose headers are built from the validated source entries (nothing is loaded whole); the result is
written into a temporary directory beside OUT, verified (the engine's simulated load drops nothing and
leaves nothing at init; a diff against the source shows renames only, bytes identical except the
overridden tensors), then renamed into place. ``in_place`` keeps the original as ``DIR.orig``.

A single-file source (``models/draft.safetensors``) shares its folder with unrelated files: only its
config.json and tokenizer / generation config files go with it into OUT, and ``in_place`` is refused for it
(the weights file and the config.json beside it cannot be swapped together atomically, so a crash between
the two renames would leave new weights under an old config). OUT may not be the source or lie inside it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .checkpoint import DECODER_KEY, INDEX_NAMES, Checkpoint, build_spec
from .engines.config_writer import convert_config, rewrite_aux_ids
from .engines import EngineProfile, resolve
from .errors import ConversionRefused, Eagle3LensError, UsageError, WriteVerifyError
from .findings import Finding, Severity, to_jsonable
from .progress import Counter, Progress
from .io.safetensors_header import read_header
from .io.safetensors_writer import tensor_nbytes, write_file
from .io.safewrite import copy_side_files, recover, replace_dir, sweep

if TYPE_CHECKING:
    from .probes.acceptance_result import AcceptanceResult
    from .probes.acceptance_setup import FixedDraft

# what goes with a single-file source into OUT (besides the config.json convert writes)
FILE_SIDE_FILES = frozenset({"generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                             "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
                             "chat_template.jinja", "chat_template.json"})


@dataclass(frozen=True)
class ConvertResult:
    """What convert wrote and the checks it passed."""

    source: str
    out: str
    engine: str | None
    renamed: dict[str, str]
    omitted: tuple[str, ...]
    overridden: tuple[str, ...]
    added: tuple[str, ...]
    config_changes: tuple[str, ...]
    forced: tuple[str, ...]
    backup: str | None
    load: Any = None  # LoadResult of the output under the engine
    diff: Any = None  # DiffResult source -> output
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable({
            "source": self.source, "out": self.out, "engine": self.engine, "renamed": self.renamed,
            "omitted": self.omitted, "overridden": self.overridden, "added": self.added,
            "config_changes": self.config_changes, "forced": self.forced, "backup": self.backup,
            "verified": {"load": self.load.to_dict()["counts"] if self.load else None,
                         "renames_only": self.diff.renames_only if self.diff else None},
            "notes": self.notes})


@dataclass
class _Plan:
    names: dict[str, str]  # source key -> output key (omitted keys absent)
    omitted: list[str]
    config: dict[str, Any]
    changes: list[str]
    refusals: list[str]
    notes: list[str]


def convert(ckpt_path: str | Path, to: str | None, out: str | Path | None, in_place: bool = False, force: bool = False,
            tensor_overrides: Mapping[str, Any] | None = None, progress: Progress | None = None,
            aux_layers: Sequence[int] | None = None) -> ConvertResult:
    """Rewrite ``ckpt_path`` so engine ``to`` loads every tensor (``to=None``: same layout, overrides only).

    ``aux_layers``: the HF ``hidden_states`` indices the draft was trained on, written as ids in ``to``'s convention
    (without ``to``: in every place and convention the config already writes them); default: the layers the source
    config's ids mean in its trainer's convention."""
    recovered = recover_source(Path(ckpt_path))
    ckpt = Checkpoint.open(ckpt_path)
    overrides = dict(tensor_overrides or {})
    if to is None and not overrides and aux_layers is None:
        raise UsageError("nothing to do: give --to ENGINE, --aux-layers and/or tensors to replace (--repair-d2t)")
    hf_ids = _checked_layers(aux_layers, ckpt) if aux_layers is not None else None
    if in_place == (out is not None):
        raise UsageError("give either OUT or --in-place (exactly one)")
    single_file = _single_file(ckpt)
    if in_place and single_file:
        raise UsageError(f"{ckpt.path}: --in-place needs a checkpoint directory (a single file and the config.json "
                         "beside it cannot be swapped together atomically); write a new OUT instead")
    if out is not None:
        _check_out(ckpt, Path(out), single_file)
    if not ckpt.spec.is_draft:
        raise ConversionRefused(f"{ckpt.path}: not an EAGLE-3 draft (layout {ckpt.layout}); nothing to convert")
    _output_names(ckpt)  # two shards that would be written as one file: refused before anything is written
    profile = resolve(to).for_config(ckpt.config) if to else None  # the draft class the engine picks (MLA, Qwen3...)
    plan = _plan(ckpt, profile, hf_ids) if profile else _same_layout(ckpt, hf_ids)
    engine = profile.spec if profile else None  # refusals come only from an engine's plan
    if plan.refusals and not force:
        raise ConversionRefused(f"{ckpt.path}: cannot convert faithfully to {engine}: " + "; ".join(plan.refusals)
                                + " (--force writes it anyway)")
    added = [n for n in overrides if n not in ckpt.tensors]
    for name in added:
        plan.names[name] = profile.native_name(name) if profile else name
    target = ckpt.root.resolve() if in_place or out is None else Path(out)  # resolved: "." keeps naming the old dir once swapped
    state: dict[str, Any] = {}

    side_notes: list[str] = recovered  # recovery of killed runs; side files (links leaving the checkpoint, FIFOs...) not copied

    def build(tmp: Path) -> None:
        try:
            _write(ckpt, plan, overrides, tmp, progress, side_notes)
        except WriteVerifyError as exc:  # the bytes are compared with their source as they are written
            raise Eagle3LensError(f"{ckpt.path}: conversion not written, verification failed: {exc.problem}") from None

    def verify(tmp: Path) -> None:
        state.update(_verify(ckpt, tmp, plan, profile, overrides, force))
        if hf_ids is not None and profile is not None:
            _verify_layers(tmp, profile, hf_ids)

    backup = replace_dir(target, build, verify, in_place=in_place, notes=side_notes)
    _name_final(state, Path(target), profile)
    forced = tuple(Finding("convert/forced", Severity.WARNING, f"written with --force: {why}",
                           f"{engine} will not use this draft as trained; convert refused it and --force wrote it "
                           "anyway, so the output is not verified for this item.",
                           evidence={"engine": engine, "reason": why, "out": str(target)})
                   for why in plan.refusals)
    return ConvertResult(str(ckpt.path), str(target), engine,
                         {a: b for a, b in plan.names.items() if a != b and a in ckpt.tensors}, tuple(plan.omitted),
                         tuple(n for n in overrides if n in ckpt.tensors), tuple(added), tuple(plan.changes),
                         tuple(plan.refusals), str(backup) if backup else None, state.get("load"), state.get("diff"),
                         findings=forced, notes=tuple(plan.notes) + tuple(side_notes))


def recover_source(path: Path) -> list[str]:
    """Finish what killed runs left beside the source, whatever this run is (an --in-place run killed between
    its renames left CKPT as CKPT.orig: rolled back first; their temporary directories and journals go). Runs
    before anything reads the source: a repair or data check of a half-swapped CKPT would judge the wrong copy."""
    src = path.expanduser().resolve()  # as replace_dir names an --in-place target (a link: its target)
    root = src.parent if src.name in INDEX_NAMES or src.is_file() or src.suffix == ".safetensors" else src
    notes = recover(root)
    if root.parent.is_dir():
        notes.extend(sweep(root.parent))
    return notes


def _name_final(state: dict[str, Any], target: Path, profile: EngineProfile | None) -> None:
    """Results computed on the temporary directory, redone (headers only) on ``target`` where it now is, so that
    their paths and fix commands name OUT and not a directory that no longer exists."""
    from .probes.keys import simulate_load

    if profile is not None and state.get("load") is not None:
        state["load"] = simulate_load(Checkpoint.open(target), profile)
    if state.get("diff") is not None:
        state["diff"] = replace(state["diff"], b=str(target))


def _output_names(ckpt: Checkpoint) -> dict[Path, str]:
    """Source weights file -> the ``.safetensors`` name it is written as in OUT; refuses two files that would get
    one name (``a/model.safetensors`` and ``b/model.safetensors``, ``model.bin`` and ``model.pt``)."""
    names: dict[Path, str] = {}
    seen: dict[str, Path] = {}
    for file in ckpt.files:
        name = file.stem + ".safetensors"
        if name in seen:
            raise ConversionRefused(f"{ckpt.path}: {_rel(ckpt, seen[name])} and {_rel(ckpt, file)} would both be "
                                    f"written as {name}; rename one shard (and its index entries) first")
        seen[name] = file
        names[file] = name
    return names


def _rel(ckpt: Checkpoint, file: Path) -> str:
    try:
        return file.relative_to(ckpt.root).as_posix()
    except ValueError:
        return str(file)


def _single_file(ckpt: Checkpoint) -> bool:
    """Opened from one weights file (not a directory, not an index naming the shards of its folder)."""
    return ckpt.path.is_file() and ckpt.path.name not in INDEX_NAMES


def _check_out(ckpt: Checkpoint, out: Path, single_file: bool) -> None:
    """OUT is neither the source nor inside its directory (writing there would change the source)."""
    src, dst = ckpt.root.resolve(), out.expanduser().resolve()
    if dst == src or dst == ckpt.path.resolve() or (not single_file and src in dst.parents):
        raise UsageError(f"{out}: OUT must be outside the source checkpoint {ckpt.root} (convert never writes into its source)")
    parent = next((p for p in dst.parents if p.exists()), None)  # the deepest folder OUT's parents already reach
    if parent is not None and not parent.is_dir():
        raise UsageError(f"{out}: OUT's parent {parent} is not a directory")


# -- planning ---------------------------------------------------------------------------------
def _verify_layers(tmp: Path, profile: EngineProfile, hf_ids: list[int]) -> None:
    """The written config makes the engine capture ``hf_ids`` (the served derivation, read from the output)."""
    from .served import serve_draft

    captured = serve_draft(tmp, engine=profile).captured
    if list(captured) != hf_ids:
        raise Eagle3LensError(f"conversion not written, verification failed: {profile.spec} would capture "
                              f"hidden_states {list(captured)} from the written config, not {hf_ids}")


def _checked_layers(layers: Sequence[int], ckpt: Checkpoint) -> list[int]:
    out = list(layers)
    if not out or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < 1 << 12 for k in out) \
            or len(set(out)) != len(out):
        raise UsageError(f"--aux-layers: distinct HF hidden_states indices (0 to 4095), got {out}")
    n = ckpt.spec.num_aux_declared.get("num_aux_hidden_states") or (
        ckpt.spec.fc_in_features // ckpt.spec.target_hidden_size
        if ckpt.spec.fc_in_features and ckpt.spec.target_hidden_size else None)
    if n is not None and len(out) != n:
        raise UsageError(f"--aux-layers: the draft's fc reads {n} aux states, got {len(out)} layers {out}")
    return sorted(out)


def _same_layout(ckpt: Checkpoint, hf_ids: list[int] | None) -> _Plan:
    config: dict[str, Any] = dict(ckpt.config or {})
    changes: list[str] = []
    if hf_ids is not None:
        config, changes = rewrite_aux_ids(config, ckpt.spec, hf_ids)
    return _Plan({n: n for n in ckpt.tensors}, [], config, changes, [], [])


def _plan(ckpt: Checkpoint, profile: EngineProfile, hf_ids: list[int] | None = None) -> _Plan:
    spec = ckpt.spec
    config, changes, refusals, notes = convert_config(ckpt.config or {}, spec, profile, hf_ids)
    if hf_ids is not None:
        from .served.aux_layers import resolve_aux_layers

        resolution = resolve_aux_layers(build_spec(config, dict(ckpt.tensors)), None, profile)
        if resolution.source in ("default", "disabled"):
            refusals.append(f"{profile.spec} captures its default layers 2, L//2, L-3 whatever the config says: "
                            f"--aux-layers {hf_ids} cannot be written for it")
    names = {k: profile.native_name(k) for k in ckpt.tensors}
    if len(set(names.values())) != len(names):
        raise ConversionRefused(f"{ckpt.path}: two tensors would get the same name under {profile.spec}")
    if profile.decoder == "midlayer" and any((m := DECODER_KEY.match(k)) and m.group("index") not in (None, "0") for k in ckpt.tensors):
        refusals.append(f"{profile.spec} has a single decoder layer (midlayer); this draft has more")
    infos = {names[k]: replace(info, name=names[k]) for k, info in ckpt.tensors.items()}
    new_spec = build_spec(config, infos)
    params = profile.parameters(new_spec, ckpt.path)
    omitted = []
    for key, new in list(names.items()):
        route = profile.route(new, params, new_spec)
        if route.fate in ("dropped", "raises"):
            leaf = key.split(".")[-1]
            if leaf in ("d2t", "t2d") and (new_spec.draft_vocab_size or new_spec.vocab_size) == new_spec.vocab_size:
                omitted.append(key)
                del names[key]
                notes.append(f"{key} omitted: N = V (full vocabulary), {profile.spec} has no mapping parameter")
            else:
                refusals.append(f"{key} would be {route.fate} by {profile.spec} ({route.reason[:160]})")
    return _Plan(names, omitted, config, changes, refusals, notes)


# -- writing ----------------------------------------------------------------------------------
def _write(ckpt: Checkpoint, plan: _Plan, overrides: Mapping[str, Any], tmp: Path, progress: Progress | None,
           side_notes: list[str]) -> None:
    files: dict[Path, list[str]] = {f: [] for f in ckpt.files}
    for key, info in sorted(ckpt.tensors.items(), key=lambda kv: (kv[1].begin or 0)):
        if key in plan.names:
            files[info.file].append(key)
    first = ckpt.files[0]
    files[first] += [n for n in overrides if n not in ckpt.tensors]
    total = sum(ckpt.tensors[k].nbytes for keys in files.values() for k in keys if k in ckpt.tensors)
    weight_map: dict[str, str] = {}
    out_names = _output_names(ckpt)
    written = Counter(progress, total, "writing")
    for src_file, keys in files.items():
        out_name = out_names[src_file]
        metadata = read_header(src_file).metadata if src_file.suffix == ".safetensors" else {"format": "pt"}
        write_file(ckpt, keys, plan.names, overrides, tmp / out_name, metadata, written)
        weight_map.update({plan.names[k]: out_name for k in keys})
    if ckpt.index is not None or len(ckpt.files) > 1:
        total_size = sum(tensor_nbytes(ckpt, overrides, k) for keys in files.values() for k in keys)
        index = {"metadata": {**index_metadata(ckpt), "total_size": total_size},
                 "weight_map": dict(sorted(weight_map.items()))}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (tmp / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n")
    skip = {_rel(ckpt, f) for f in ckpt.files} | set(INDEX_NAMES) | {"config.json"}
    copy_side_files(ckpt.root, tmp, skip, only=FILE_SIDE_FILES if _single_file(ckpt) else None, notes=side_notes)


def index_metadata(ckpt: Checkpoint) -> dict[str, Any]:
    """The source index's ``metadata`` object (checked when the index was opened), ``{}`` without one."""
    metadata = (ckpt.index or {}).get("metadata")
    return dict(metadata) if isinstance(metadata, dict) else {}


# -- verification -----------------------------------------------------------------------------
def _verify(ckpt: Checkpoint, tmp: Path, plan: _Plan, profile: EngineProfile | None, overrides: Mapping[str, Any],
            force: bool) -> dict[str, Any]:
    from .probes.diff import diff
    from .probes.keys import simulate_load, suppliable

    out = Checkpoint.open(tmp)
    problems: list[str] = []
    load = None
    if profile is not None:
        load = simulate_load(out, profile)
        if not load.recognised and not force:
            problems.append(f"{profile.spec} would not recognise the written config")
        bad = [f.key for f in load.fates if f.fate in ("dropped", "raises") or f.shape_mismatch]
        if bad and not force:
            problems.append(f"{profile.spec} would not load {bad}")
        # a parameter no source tensor can fill is the checkpoint's gap, not the conversion's (keys says so)
        unfilled = [p for p in load.left_at_init if p in suppliable(ckpt, profile, ckpt.spec)]
        if unfilled and not force:
            problems.append(f"{profile.spec} would leave {unfilled} at init")
    pairs = {k: plan.names[k] for k in ckpt.tensors if k in plan.names}
    # the bytes were compared with the source as they were written (safetensors_writer): the headers say the rest
    result = _as_verified(diff(ckpt, out, names_only=True, pairs=pairs), set(overrides))
    changed = {c.name for c in result.changed} | {c.name for c in result.layout_changes}
    unexpected = (changed - set(overrides)) | (set(result.only_in_a) - set(plan.omitted)) \
        | (set(result.only_in_b) - {plan.names[n] for n in overrides if n not in ckpt.tensors})
    if unexpected:
        problems.append(f"bytes differ from the source for {sorted(unexpected)}")
    if problems:
        raise Eagle3LensError(f"{ckpt.path}: conversion not written, verification failed: " + "; ".join(problems))
    return {"load": load, "diff": result}


def _as_verified(result: Any, overridden: set[str]) -> Any:
    """A header-only diff of source and output, completed by the writer's byte check: tensors of the same name,
    dtype and shape are identical (the writer compared every byte), replaced tensors are the changes asked for."""
    from .probes.diff import ValueChange

    same = [n for n in result.unchecked if n not in overridden]
    changed = [ValueChange(n, n, float("nan"), float("nan"), -1) for n in result.unchecked if n in overridden]
    changed += [ValueChange(a, b, float("nan"), float("nan"), -1) for a, b in result.renamed if a in overridden]
    return replace(result, identical=tuple(sorted(same)), unchecked=(), changed=tuple(changed),
                   renamed=tuple((a, b) for a, b in result.renamed if a not in overridden))


# -- the fixed view of the acceptance probe -----------------------------------------------------------
@contextmanager
def fixed_draft(ckpt: Checkpoint, profile: EngineProfile) -> Iterator[FixedDraft]:
    """What ``convert --to profile`` writes for ``ckpt``, in a temporary folder removed on exit, for the acceptance
    probe's fixed view (``estimate_acceptance(..., fixed=fixed_draft)``); a refused conversion is no path and the
    note saying why."""
    from .probes.acceptance_setup import FixedDraft

    with tempfile.TemporaryDirectory(prefix="eagle3lens-fixed-") as tmp:
        out = Path(tmp) / "converted"
        refused: str | None = None
        try:
            convert(ckpt.path, profile.spec, out)
        except (ConversionRefused, UsageError) as exc:
            refused = f"fixed: not scored, convert --to {profile.spec} refused ({str(exc)[:160]})"
        if refused is not None:
            yield FixedDraft(None, "", refused)
        else:
            yield FixedDraft(out, f"after convert --to {profile.spec}, as it loads them",
                             f"fixed: the checkpoint `eagle3lens convert --to {profile.spec}` writes, served with aux "
                             "capture on")

def estimate_acceptance(draft: Any, data: Any, *, fixed: Any = True, **kwargs: Any) -> AcceptanceResult:
    """:func:`eagle3lens.probes.acceptance.estimate_acceptance` with ``fixed=True`` scoring the checkpoint
    :func:`fixed_draft` writes (the probe itself converts nothing): what the ``acceptance`` command scores."""
    from .probes.acceptance import estimate_acceptance as probe

    return probe(draft, data, fixed=fixed_draft if fixed is True else fixed, **kwargs)

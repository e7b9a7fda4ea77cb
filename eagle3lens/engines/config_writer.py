"""The config.json ``convert`` writes, one writer per engine config style in a registry.

Each writer takes the source config and the draft's :class:`DraftSpec` (in a :class:`ConfigJob`) and returns the
new config, recording what it changed, what it refuses and what the user should know. Adding a config style is
adding a writer to :data:`CONFIG_WRITERS` (keyed by ``EngineProfile.config_style``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..aux_ids import trained_with
from ..checkpoint import FLAG_NAMES, Checkpoint, DraftSpec, build_spec
from ..findings import Finding, fix_command
from .construct import ROPE_INCOMPLETE, layers_error
from .profile import EngineProfile
from .registry import all_profiles

LAYER_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}  # transformer_layer_config's own
NOT_LLAMA = {"architectures", "draft_vocab_size", "eagle_config", "target_hidden_size", "eagle_aux_hidden_state_layer_ids",
             "speculators_model_type", "speculators_config", "transformer_layer_config", "speculators_version",
             "num_aux_hidden_states", "bias", *FLAG_NAMES}


@dataclass
class ConfigJob:
    """One config rewrite: the inputs every writer reads and the lists it appends to."""

    config: dict[str, Any]
    spec: DraftSpec
    profile: EngineProfile
    wanted: dict[str, bool]  # each flag's value the draft needs (config, or implied by its tensors)
    hf_ids: list[int] | None  # aux layers as HF hidden-state indices; None where the trainers' default applied
    n: int | None  # draft vocab size
    carried: dict[str, Any] | None  # a speculators source's speculators_config
    explicit: bool = False  # hf_ids were given (--aux-layers, provenance): written even where the source has ids
    changes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


ConfigWriter = Callable[[ConfigJob], dict[str, Any]]


def convert_config(config: dict[str, Any], spec: DraftSpec, profile: EngineProfile,
                   hf_ids: list[int] | None = None) -> tuple[dict[str, Any], list[str], list[str], list[str]]:
    """(new config, changes, refusals, notes) for ``profile``'s config style; ``hf_ids``: the aux layers (HF
    indices) to write, default the ones the source's ids mean in its trainer's convention."""
    implied = {"norm_before_fc": spec.has_input_norm, "fc_norm": spec.has_fc_norm}
    job = ConfigJob(config=config, spec=spec, profile=profile,
                    wanted={f: bool(spec.flag(f) or implied.get(f)) for f in FLAG_NAMES},
                    hf_ids=hf_ids if hf_ids is not None else list(trained_with(spec, None)[0]) or None,
                    n=spec.draft_vocab_size or spec.lm_head_rows,
                    carried=config.get("speculators_config") if isinstance(config.get("speculators_config"), dict)
                    else None, explicit=hf_ids is not None)
    for flag, on in job.wanted.items():
        if on and flag not in profile.honoured_flags:
            job.refusals.append(f"{flag} is used by this draft but {profile.spec} does not implement it")
    too_many = layers_error(profile, spec)
    if too_many is not None:
        job.refusals.append(f"{too_many}: no conversion removes a trained decoder layer")
    new = CONFIG_WRITERS[profile.config_style](job)
    _complete_rope(job, new)
    return new, job.changes, job.refusals, job.notes


def _complete_rope(job: ConfigJob, new: dict[str, Any]) -> None:
    """vLLM 0.18-0.27 MLA: a rope config without ``factor`` stops the constructor (engines/construct.py); a default
    rope is written as the equivalent factor-1.0 yarn, any other scaling is the trainer's to complete."""
    from .construct import config_rope_error, construct_error, neutral_rope

    if construct_error(job.profile.for_config(new), new) is None:
        return
    if config_rope_error(new) is not None:
        job.refusals.append(f"{ROPE_INCOMPLETE}: set the trained value in the source config.json")
        return
    rope = neutral_rope(new)
    if rope is None:
        job.refusals.append(f"{job.profile.spec} builds this MLA draft's rope as deepseek_yarn, which needs "
                            "rope_scaling.factor: set the trained factor in the source config.json")
        return
    inner = new.get("transformer_layer_config")
    layer: dict[str, Any] = inner if isinstance(inner, dict) else new
    text = layer.get("text_config")
    layer = text if isinstance(text, dict) else layer
    layer["rope_scaling"] = rope
    if isinstance(layer.get("rope_parameters"), dict):
        theta = layer["rope_parameters"].get("rope_theta", layer.get("rope_theta"))
        layer["rope_parameters"] = {**rope, **({"rope_theta": theta} if theta is not None else {})}
    job.changes.append(f"rope_scaling {rope} ({job.profile.spec} builds the MLA rope as deepseek_yarn and needs a "
                       "factor; factor 1.0 yarn is the default rope)")


def rewrite_aux_ids(config: dict[str, Any], spec: DraftSpec, hf_ids: list[int]) -> tuple[dict[str, Any], list[str]]:
    """``config`` with its aux ids meaning HF layers ``hf_ids`` wherever it writes ids, each in its readers'
    convention (``eagle_config``: output of layer, HF - 1; top-level: input of layer); a config without ids gets
    them where its flavour's trainer writes them."""
    new = json.loads(json.dumps(config))
    changes = []
    places = [s for s in ("eagle_config", "top-level") if s in spec.aux_ids_by_source] or \
        (["top-level"] if spec.flavour == "speculators" else ["eagle_config"])
    for place in places:
        ids = [k - 1 for k in hf_ids] if place == "eagle_config" else list(hf_ids)
        if place == "eagle_config":
            block = new.get("eagle_config") if isinstance(new.get("eagle_config"), dict) else {}
            new["eagle_config"] = {**block, "eagle_aux_hidden_state_layer_ids": ids}
        else:
            new["eagle_aux_hidden_state_layer_ids"] = ids
        changes.append(f"{'eagle_config.' if place == 'eagle_config' else ''}eagle_aux_hidden_state_layer_ids {ids} "
                       f"(HF hidden_states {hf_ids})")
    return new, changes


# -- the writers ------------------------------------------------------------------------------
def _vllm(job: ConfigJob) -> dict[str, Any]:
    """vLLM reads a speculators config as is, and a flat Llama config with its own architecture and ids."""
    if job.spec.flavour == "speculators" and job.profile.speculators_types:
        new = _keep_speculators(job)
    elif job.spec.flavour == "speculators":  # a release before vLLM read speculators configs: a flat one
        new = {**_flat_llama(job.config, job.spec), "architectures": [_vllm_architecture(job.profile)],
               "draft_vocab_size": job.n}
        if job.spec.target_hidden_size_declared:
            new["target_hidden_size"] = job.spec.target_hidden_size_declared
        if job.hf_ids is not None:
            new["eagle_aux_hidden_state_layer_ids"] = job.hf_ids
        job.changes.append(f"flat Llama config with architectures {new['architectures']} ({job.profile.spec} "
                           "reads no speculators config)")
        _carry(new, job.carried, job.changes)
    else:
        new = json.loads(json.dumps(job.config))
        if not job.profile.recognises(new):
            new["architectures"] = [_vllm_architecture(job.profile)]
            job.changes.append(f"architectures -> {new['architectures']}")
        if job.hf_ids is not None and (job.spec.aux_ids_source != "top-level" or job.explicit):
            new["eagle_aux_hidden_state_layer_ids"] = job.hf_ids
            job.changes.append(f"top-level eagle_aux_hidden_state_layer_ids {job.hf_ids} "
                               "(input-of-layer, read first by vLLM)")
        if job.n and "draft_vocab_size" not in new:
            new["draft_vocab_size"] = job.n
    return _honoured_flags(job, new)


def _vllm_architecture(profile: EngineProfile) -> str:
    """The architecture name this vLLM release maps to its Llama EAGLE-3 class (before 0.10.2 it prefixes
    'Eagle3' to the written name: ``LlamaForCausalLM``)."""
    names = ("LlamaForCausalLMEagle3", "LlamaForCausalLM")
    return next((n for n in names if profile.recognises({"architectures": [n]})), names[0])


def _speculators(job: ConfigJob) -> dict[str, Any]:
    """A speculators source is kept (flags made explicit); a flat source is rebuilt as a speculators config."""
    if job.spec.flavour == "speculators":
        return _keep_speculators(job)
    layer = _flat_llama(job.config, job.spec)
    if layer.get("model_type") in LAYER_ARCHITECTURES and "architectures" not in layer:
        layer["architectures"] = [LAYER_ARCHITECTURES[layer["model_type"]]]
    carried = job.carried
    block = json.loads(json.dumps(carried)) if carried else {
        "algorithm": "eagle3", "default_proposal_method": "greedy",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
        "verifier": {"name_or_path": None, "architectures": []}}
    new = {"architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3", "draft_vocab_size": job.n,
           "target_hidden_size": job.spec.target_hidden_size_declared,
           "eagle_aux_hidden_state_layer_ids": job.hf_ids,
           **{flag: on for flag, on in job.wanted.items()},  # explicit: see EngineProfile.flag_defaults
           "speculators_config": block, "transformer_layer_config": layer}
    if carried:
        job.changes.append("speculators config built from the flat Llama config; speculators_config (verifier, "
                           "speculative_tokens) kept from the source")
    else:
        job.changes.append("speculators config built from the flat Llama config; verifier unknown: set "
                           "speculators_config.verifier.name_or_path (vLLM requires it) and check speculative_tokens (3)")
    return _honoured_flags(job, new)


def _sglang(job: ConfigJob) -> dict[str, Any]:
    """A flat Llama config with SGLang's draft class; aux ids in SGLang's output-of-layer convention."""
    spec, hf_ids = job.spec, job.hf_ids
    new = {**_flat_llama(job.config, spec), "architectures": [job.profile.draft_class], "draft_vocab_size": job.n,
           "tie_word_embeddings": False}
    if spec.target_hidden_size_declared:
        new["target_hidden_size"] = spec.target_hidden_size_declared
    if hf_ids is not None:
        new["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in hf_ids],
                               "use_aux_hidden_state": spec.use_aux_hidden_state is not False}
        job.changes.append(f"eagle_config.eagle_aux_hidden_state_layer_ids {[i - 1 for i in hf_ids]} "
                           f"(SGLang output-of-layer convention for HF hidden_states {hf_ids})")
    job.changes.append(f"flat config with architectures ['{job.profile.draft_class}']")
    _carry(new, job.carried, job.changes)
    return _honoured_flags(job, new)


def _eagle(job: ConfigJob) -> dict[str, Any]:
    """The EAGLE reference's flat Llama config (it hard-codes the aux layers)."""
    new = {**_flat_llama(job.config, job.spec), "architectures": ["LlamaForCausalLM"], "draft_vocab_size": job.n}
    job.changes.append("flat Llama config with architectures ['LlamaForCausalLM'] (EAGLE reference)")
    _carry(new, job.carried, job.changes)
    if job.hf_ids is not None:
        job.notes.append(f"EAGLE hard-codes aux layers 2, L//2, L-3; this draft was trained on {job.hf_ids}")
    return _honoured_flags(job, new)


CONFIG_WRITERS: dict[str, ConfigWriter] = {"vllm": _vllm, "speculators": _speculators, "sglang": _sglang,
                                           "eagle": _eagle}


# -- shared steps -----------------------------------------------------------------------------
def _keep_speculators(job: ConfigJob) -> dict[str, Any]:
    """A speculators source as is, each absent flag written explicitly (engines read absent flags differently)."""
    new = json.loads(json.dumps(job.config))
    if job.explicit and job.hf_ids is not None and new.get("eagle_aux_hidden_state_layer_ids") != job.hf_ids:
        new["eagle_aux_hidden_state_layer_ids"] = job.hf_ids
        job.changes.append(f"eagle_aux_hidden_state_layer_ids {job.hf_ids} (speculators: HF hidden_states indices)")
    for flag in FLAG_NAMES:  # engines read some absent flags differently (EngineProfile.flag_defaults)
        if new.get(flag) is None:
            new[flag] = job.spec.flag(flag)
            readers = _other_defaults(flag, new[flag])
            job.changes.append(f"{flag}: {str(new[flag]).lower()} written explicitly (absent"
                               + (f"; {', '.join(readers)} would read it as {str(not new[flag]).lower()})" if readers
                                  else ")"))
    missing = job.profile.speculators_missing(new)
    if missing:
        job.refusals.append(f"{job.profile.spec} rejects a speculators config without {', '.join(missing)} "
                            "(set it in the source config.json first)")
    return new


def _honoured_flags(job: ConfigJob, new: dict[str, Any]) -> dict[str, Any]:
    """Write each flag the engine honours where the draft needs it on (or its config sets it)."""
    for flag, on in job.wanted.items():
        if flag in job.profile.honoured_flags and (on or job.spec.flags.get(flag) is not None):
            if new.get(flag) != on:
                new[flag] = on
                job.changes.append(f"{flag}: {str(on).lower()}")
    return new


def _other_defaults(flag: str, value: bool) -> list[str]:
    """Engine versions that read ``flag`` as something other than ``value`` when a speculators config omits it."""
    return [p.spec for p in all_profiles() if p.flag_defaults.get(flag, value) != value]


def _flat_llama(config: dict[str, Any], spec: DraftSpec) -> dict[str, Any]:
    layer = config.get("transformer_layer_config") if spec.flavour == "speculators" else config
    return {k: v for k, v in dict(layer or {}).items() if k not in NOT_LLAMA}


def _carry(new: dict[str, Any], carried: dict[str, Any] | None, changes: list[str]) -> None:
    """Keep a speculators source's ``speculators_config`` (verifier, speculative_tokens) in a flat config, which
    the engines ignore, so that converting back restores it. Only beside a ``model_type``: without one vLLM
    would take a config holding ``speculators_config`` for a speculators config."""
    if carried is not None and new.get("model_type"):
        new["speculators_config"] = json.loads(json.dumps(carried))
        changes.append("speculators_config kept (ignored by the engine; restored when converting back to speculators)")


# -- what `convert --to` can promise a release ---------------------------------------------------
def convert_blocker(ckpt: Checkpoint, profile: EngineProfile) -> str | None:
    """Why ``convert --to`` cannot write a checkpoint ``profile`` loads faithfully (None: it can), from the config
    it would write and the engine's route for every renamed key (what convert refuses, decided before writing)."""
    config, _, refusals, _ = convert_config(ckpt.config or {}, ckpt.spec, profile)
    if refusals:
        return refusals[0]
    names = {k: profile.native_name(k) for k in ckpt.tensors}
    spec = build_spec(config, {names[k]: replace(info, name=names[k]) for k, info in ckpt.tensors.items()})
    if not profile.recognises(config):
        return "it does not recognise any config convert writes"
    params = profile.parameters(spec, ckpt.path)
    for key, new in names.items():
        route = profile.route(new, params, spec)
        full_vocab = (spec.draft_vocab_size or spec.vocab_size) == spec.vocab_size
        if route.fate in ("dropped", "raises") and not (key.split(".")[-1] in ("d2t", "t2d") and full_vocab):
            return f"{key} would be {route.fate}: {route.reason[:120]}"
    return None


def convert_fix(ckpt: Checkpoint, profile: EngineProfile) -> str:
    """``convert --to`` when it can write a checkpoint the engine loads; else why not, and what serves the draft."""
    blocker = convert_blocker(ckpt, profile)
    if blocker is None:
        return fix_command("convert", ckpt.path, "--to", profile.spec, "OUT")
    if blocker.startswith(ROPE_INCOMPLETE):
        return f"no release loads this draft: {blocker}"
    return f"no conversion makes {profile.spec} load this draft ({blocker}): serve it with another release"


def with_convert_fix(findings: Iterable[Finding], ckpt: Checkpoint, profile: EngineProfile) -> tuple[Finding, ...]:
    """``findings`` whose fix is the plain ``convert --to`` given the fix that works (see :func:`convert_fix`)."""
    plain = fix_command("convert", ckpt.path, "--to", profile.spec, "OUT")
    fix = convert_fix(ckpt, profile) if any(f.fix == plain for f in findings) else plain
    return tuple(replace(f, fix=fix) if f.fix == plain else f for f in findings)

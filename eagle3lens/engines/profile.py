"""EngineProfile: what one engine version does with an EAGLE-3 draft, as data plus a tiny interpreter.

A profile names the parameters its draft class creates for a DraftSpec (``parameters``), the
key-to-parameter rule of its loader (``route``), what it does with unknown keys, which config it
recognises, where it reads aux layer ids and which option flags it honours. Adding an engine
version is adding a profile in ``sglang.py`` / ``vllm.py`` / ``training.py``, never a branch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from ..checkpoint import DraftSpec

Version = tuple[int, ...]
STACKED = ((".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", "gate"), (".up_proj", ".gate_up_proj", "up"))


@dataclass(frozen=True)
class ParamSpec:
    """One engine parameter: its name, shape, and what it holds if nothing writes it."""

    name: str
    shape: tuple[int, ...]
    init: str  # "empty" (torch.empty), "ones", "zeros", "nan", "kaiming-uniform", "normal(0, std)", "false"
    role: str = "other"  # decoder | fc | norm | lm_head | embed | vocab | aux-norm | verifier
    shards: dict[str, tuple[int, ...]] = field(default_factory=dict)  # shard -> shape, for stacked params
    dtype: str | None = None  # fixed dtype (I64 mapping) or None (model dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "init": self.init, "role": self.role,
                "shards": {k: list(v) for k, v in self.shards.items()}}


@dataclass(frozen=True)
class Route:
    """Where the loader sends one checkpoint key."""

    fate: str  # loaded | loaded-shard | converted | skipped | dropped | raises
    param: str | None = None
    shard: str | None = None
    reason: str = ""


@dataclass(frozen=True, eq=False)
class EngineProfile:
    """One engine (or training loader) over a version range; every behaviour is a field."""

    name: str
    label: str
    spec: str  # "sglang==0.5.11" as the user asked, else the canonical NAME==VERSION
    source: str  # the engine file(s) and version the rules were read from
    kind: Literal["serving", "training"]
    versions: tuple[Version, Version] | None  # inclusive; None: unversioned (EAGLE reference)
    # recognition
    architectures: frozenset[str] = frozenset()
    arch_prefix: str | None = None  # vLLM: eagle3 method prefixes "Eagle3" to any other architecture
    speculators_types: frozenset[str] = frozenset()
    needs_speculators_config: bool = False
    # vLLM: a speculators config must give proposal_methods[0].speculative_tokens and verifier.name_or_path
    needs_speculators_fields: bool = False
    unrecognized_effect: str = ""
    # aux ids
    aux_ids_sources: tuple[str, ...] = ()
    aux_id_convention: Literal["output", "input"] = "input"
    # options and gates
    honoured_flags: frozenset[str] = frozenset()
    flag_defaults: Mapping[str, bool] = field(default_factory=dict)  # value read when a speculators config omits a flag
    fc_gate: Literal["width-differs", "always-assert", "always"] = "always"
    d2t_handling: Literal["hot_token_id", "draft_id_to_target_id", "buffer"] = "buffer"
    missing_d2t: Literal["raw-index", "identity"] = "identity"
    d2t_use: str = ""  # what the engine does with a d2t at decode time, in words
    missing_d2t_use: str = ""  # what it does when the checkpoint has none, in words
    # parameter table
    param_prefix: str = ""  # "model." for the serving classes (lm_head stays outside)
    decoder: str = "layers.{i}"  # or "midlayer"
    max_layers: int | None = None
    too_many_layers: str = ""  # the engine's message when num_hidden_layers > max_layers
    fused: bool = True
    num_aux_rule: Literal["three", "eagle_config-or-3", "top-level-or-3"] = "three"
    fc_hidden: Literal["target", "draft"] = "target"
    fc_bias: Literal["config.bias", "never"] = "never"
    qkv_bias: bool = False  # honours attention_bias
    later_layers: Literal["eagle3", "plain"] = "eagle3"  # layers >= 1: hidden_norm kept (eagle3) or a plain Llama layer
    vocab_params: Literal["none", "mapping-if-reduced", "buffers-if-reduced", "buffers"] = "none"
    verifier_params: bool = False
    inits: dict[str, str] = field(default_factory=dict)  # role / "linear" / "norm" -> init
    lm_head_rows: Literal["draft_vocab_size-or-V", "draft_vocab_size"] = "draft_vocab_size-or-V"
    # loader rule
    renames: tuple[tuple[str, str], ...] = ()  # substring renames before anything else (SGLang era B legacy map)
    skip_substrings: tuple[str, ...] = ("t2d",)
    d2t_substring: str | None = "d2t"
    prefix_rule: Literal["if-not-param", "unless-lm_head", "none"] = "none"
    model_renames: tuple[tuple[str, str], ...] = ()  # substring renames after prefixing (vLLM WeightsMapper)
    flag_drops: tuple[tuple[str, str], ...] = ()  # (substring, flag): dropped by the loader unless flag is on
    unknown: Literal["drop", "raise", "warn"] = "drop"
    ignore_unknown_suffixes: tuple[str, ...] = ()
    raise_template: str = ""  # formatted with name, loader, base, cls, available
    loader_classes: tuple[tuple[str, str], ...] = (("", "Model"),)  # (key prefix, module whose loader runs)
    module_classes: tuple[tuple[str, str], ...] = ()  # (path suffix, class name) for raise messages
    shape_message: str = "shape {got} does not match parameter {want}"
    # sharing from the target after load: role -> condition
    shared_from_target: dict[str, str] = field(default_factory=dict)
    # role -> config condition under which the engine does NOT share it: "draft_vocab_size" (the config gives one),
    # "target_hidden_size-differs" (a declared target_hidden_size other than hidden_size)
    shared_unless: dict[str, Literal["draft_vocab_size", "target_hidden_size-differs"]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # conversion: preferred decoder key prefix and config flavour to write
    native_decoder: str = "layers.{i}."
    config_style: Literal["sglang", "vllm", "speculators", "eagle"] = "sglang"

    # -- versions -----------------------------------------------------------------------
    def contains(self, version: Version) -> bool:
        if self.versions is None:
            return False
        low, high = self.versions
        return _pad(low) <= _pad(version) <= _pad(high)

    # -- recognition --------------------------------------------------------------------
    def recognises(self, config: dict[str, Any] | None) -> bool:
        """Would this engine pick its EAGLE-3 draft class for ``config``?"""
        config = config or {}
        if config.get("speculators_model_type") is not None and isinstance(config.get("transformer_layer_config"), dict):
            return config["speculators_model_type"] in self.speculators_types and not self.speculators_missing(config)
        if self.needs_speculators_config:
            return False
        archs = [a for a in config.get("architectures") or () if isinstance(a, str)]
        if self.arch_prefix:
            archs = [a if a.startswith(self.arch_prefix) or a.endswith(self.arch_prefix) else self.arch_prefix + a
                     for a in archs]
        return any(a in self.architectures for a in archs)

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
        verifier = block.get("verifier") if isinstance(block.get("verifier"), dict) else {}
        missing = []
        if first.get("speculative_tokens") is None:
            missing.append("speculators_config.proposal_methods[0].speculative_tokens")
        if not isinstance(verifier.get("name_or_path"), str) or not verifier["name_or_path"]:
            missing.append("speculators_config.verifier.name_or_path")
        return tuple(missing)

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

    # -- the parameter table ------------------------------------------------------------
    def num_aux(self, spec: DraftSpec) -> int:
        if self.num_aux_rule == "eagle_config-or-3":
            ids = spec.aux_ids_by_source.get("eagle_config")
        elif self.num_aux_rule == "top-level-or-3":
            ids = spec.aux_ids_by_source.get("top-level")
        else:
            ids = None
        return len(ids) if ids else 3

    def num_layers(self, spec: DraftSpec) -> int:
        """Decoder layers the class builds: config num_hidden_layers, capped where the class has one layer."""
        n = spec.num_hidden_layers or max(spec.num_decoder_layers, 1)
        return min(n, self.max_layers) if self.max_layers else n

    def decoder_prefix(self, i: int) -> str:
        return self.decoder.format(i=i) + "."

    def _init(self, role: str, kind: str) -> str:
        return self.inits.get(role) or self.inits.get(kind) or ("ones" if kind == "norm" else "empty")

    def parameters(self, spec: DraftSpec, source: str | Path | None = None) -> dict[str, ParamSpec]:
        """The parameters this engine's draft class creates for ``spec`` (names, shapes, init values).

        ``source``: the checkpoint ``spec`` was read from, named in the error when the config lacks a size."""
        H = _need(spec.hidden_size, "hidden_size", source)
        V = _need(spec.vocab_size, "vocab_size", source)
        heads = _need(spec.num_attention_heads, "num_attention_heads", source)
        kv = spec.num_key_value_heads or heads
        d = spec.head_dim or H // heads
        inter = _need(spec.intermediate_size, "intermediate_size", source)
        N = spec.draft_vocab_size or V
        h_in = (spec.target_hidden_size_declared or H) if self.fc_hidden == "target" else H
        n_aux = self.num_aux(spec)
        P = self.param_prefix
        out: dict[str, ParamSpec] = {}

        def add(name: str, shape: tuple[int, ...], role: str, kind: str, shards: dict | None = None, dtype: str | None = None) -> None:
            out[name] = ParamSpec(name, tuple(shape), self._init(role, kind), role, dict(shards or {}), dtype)

        add(P + "embed_tokens.weight", (V, H), "embed", "embed")
        if spec.use_aux_hidden_state is not False:
            add(P + "fc.weight", (H, n_aux * h_in), "fc", "fc")
            if self.fc_bias == "config.bias" and spec.fc_bias_config:
                add(P + "fc.bias", (H,), "fc", "fc")
            if "norm_before_fc" in self.honoured_flags and spec.flag("norm_before_fc"):
                add(P + "input_norm.weight", (n_aux * h_in,), "aux-norm", "norm")
            if "fc_norm" in self.honoured_flags and spec.flag("fc_norm"):
                for j in range(n_aux):
                    add(f"{P}fc_norm.{j}.weight", (h_in,), "aux-norm", "norm")
        for i in range(self.num_layers(spec)):
            D = P + self.decoder_prefix(i)
            width = 2 * H if i == 0 else H
            q, k = (heads * d, width), (kv * d, width)
            if self.fused:
                add(D + "self_attn.qkv_proj.weight", ((heads + 2 * kv) * d, width), "decoder", "linear",
                    {"q": q, "k": k, "v": k})
                if self.qkv_bias and spec.attention_bias:
                    add(D + "self_attn.qkv_proj.bias", ((heads + 2 * kv) * d,), "decoder", "linear",
                        {"q": (heads * d,), "k": (kv * d,), "v": (kv * d,)})
                add(D + "self_attn.o_proj.weight", (H, heads * d), "decoder", "linear")
                add(D + "mlp.gate_up_proj.weight", (2 * inter, H), "decoder", "linear",
                    {"gate": (inter, H), "up": (inter, H)})
            else:
                add(D + "self_attn.q_proj.weight", q, "decoder", "linear")
                add(D + "self_attn.k_proj.weight", k, "decoder", "linear")
                add(D + "self_attn.v_proj.weight", k, "decoder", "linear")
                add(D + "self_attn.o_proj.weight", (H, heads * d), "decoder", "linear")
                add(D + "mlp.gate_proj.weight", (inter, H), "decoder", "linear")
                add(D + "mlp.up_proj.weight", (inter, H), "decoder", "linear")
            add(D + "mlp.down_proj.weight", (H, inter), "decoder", "linear")
            add(D + "input_layernorm.weight", (H,), "decoder", "norm")
            if i == 0 or self.later_layers == "eagle3":
                add(D + "hidden_norm.weight", (H,), "decoder", "norm")
            add(D + "post_attention_layernorm.weight", (H,), "decoder", "norm")
        add(P + "norm.weight", (H,), "norm", "norm")
        add("lm_head.weight", (N, H), "lm_head", "linear")
        reduced = N != V
        if self.vocab_params == "mapping-if-reduced" and reduced:
            add("draft_id_to_target_id", (N,), "vocab", "zeros", dtype="I64")
        elif self.vocab_params == "buffers" or self.vocab_params == "buffers-if-reduced" and reduced:
            add("d2t", (N,), "vocab", "zeros", dtype="I64")
            add("t2d", (V,), "vocab", "false", dtype="BOOL")
        if self.verifier_params:
            add("verifier_norm.weight", (H,), "verifier", "norm")
            add("verifier_lm_head.weight", (N, H), "verifier", "linear")
        return out

    # -- the loader rule ----------------------------------------------------------------
    def route(self, key: str, params: dict[str, ParamSpec], spec: DraftSpec) -> Route:
        """Where this engine's loader sends checkpoint tensor ``key``."""
        name = key
        for sub in self.skip_substrings:
            if sub in name:
                return Route("skipped", reason=f"the loader skips keys containing {sub!r} (not used by the engine)")
        mapped_vocab = False
        if self.d2t_substring and self.d2t_substring in name:
            if self.d2t_handling == "hot_token_id":
                return Route("converted", "hot_token_id", reason="hot_token_id = d2t + arange(N) (a plain attribute)")
            if self.d2t_handling == "draft_id_to_target_id":
                name = name.replace("d2t", "draft_id_to_target_id")
                mapped_vocab = True
        for old, new in self.renames:
            if old in name:
                name = name.replace(old, new)
        if self.prefix_rule == "unless-lm_head" and not mapped_vocab and "lm_head" not in name:
            name = self.param_prefix + name
        for sub, flag in self.flag_drops:
            if sub in name and not _flag_on(spec, flag):
                return Route("dropped", reason=f"the loader discards {sub!r} keys unless {flag} is set in the config")
        for old, new in self.model_renames:
            if old in name:
                name = name.replace(old, new)
        shard = None
        if self.fused:
            for weight, fused_name, shard_id in STACKED:
                if weight in name:
                    name, shard = name.replace(weight, fused_name), shard_id
                    break
        if self.prefix_rule == "if-not-param" and name not in params:
            name = self.param_prefix + name
        if name in params:
            return Route("loaded-shard" if shard else "loaded", name, shard)
        return self._unknown(name, params)

    def _unknown(self, name: str, params: dict[str, ParamSpec]) -> Route:
        if self.unknown == "drop":
            return Route("dropped", reason=f"no parameter {name}: skipped without a log")
        if self.unknown == "warn":
            return Route("dropped", reason=f"unexpected key {name!r}: a warning, then ignored")
        if any(name.endswith(s) for s in self.ignore_unknown_suffixes):
            return Route("dropped", reason=f"no parameter {name!r}: unexpected '.bias' keys are ignored (debug log only)")
        missing, base, loader, available = self._missing_module(name, params)
        if any(missing.endswith(s) for s in self.ignore_unknown_suffixes):
            return Route("dropped", reason=f"no module {missing!r}: unexpected '.bias' keys are ignored (debug log only)")
        cls = self._class_of(base, loader)
        shown = "{" + ", ".join(repr(n) for n in sorted(available)) + "}"
        return Route("raises", reason=self.raise_template.format(name=missing, loader=loader, base=base, cls=cls,
                                                                 available=shown))

    def _missing_module(self, name: str, params: dict[str, ParamSpec]) -> tuple[str, str, str, set[str]]:
        """Walk the module tree like a recursive loader: the first path component that does not exist."""
        loader_prefix, loader = next((p, c) for p, c in self.loader_classes if name.startswith(p))
        rel = name[len(loader_prefix):]
        names = [n[len(loader_prefix):] for n in params if n.startswith(loader_prefix)]
        modules = {".".join(n.split(".")[:k]) for n in names for k in range(1, n.count(".") + 1)}
        parts = rel.split(".")
        for k in range(1, len(parts) + 1):
            path = ".".join(parts[:k])
            if path not in modules and path not in names:
                base = ".".join(parts[:k - 1])
                available = {n for n in names if not base or n.startswith(base + ".")}
                return path, base, loader, available
        return rel, "", loader, set(names)

    def _class_of(self, base: str, loader: str) -> str:
        if not base:
            return loader
        last = base.split(".")[-1]
        for suffix, cls in self.module_classes:
            if last == suffix or (suffix == "#" and last.isdigit()):
                return cls
        return "Module"


def default_aux_ids(num_target_layers: int) -> tuple[int, ...]:
    """The default shared by EAGLE, speculators, vLLM and SGLang: HF ``hidden_states`` indices 2, L//2, L-3."""
    L = num_target_layers
    return (2, L // 2, L - 3)


def _pad(v: Version) -> Version:
    return tuple(v) + (0,) * (4 - len(v))


def _need(value: int | None, what: str, source: str | Path | None) -> int:
    if not value:
        from ..errors import CheckpointError, UsageError

        problem = f"the draft config does not give {what}: cannot build the engine's parameter table"
        raise CheckpointError(source, problem) if source is not None else UsageError(problem)
    return value


def _flag_on(spec: DraftSpec, flag: str) -> bool:
    if flag == "use_aux_hidden_state":
        return spec.use_aux_hidden_state is not False
    return spec.flag(flag)

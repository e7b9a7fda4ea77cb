"""vLLM 0.33.0 ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py).

Read from the 0.33.0 wheel: the causal-LM ``load_weights`` skips ``t2d``, renames ``d2t`` to
``draft_id_to_target_id``, prefixes every other non-``lm_head`` key with ``model.`` and discards
``input_norm.`` unless ``norm_before_fc``; the inner model maps ``midlayer.`` -> ``layers.0.`` and fuses
q/k/v and gate/up (WeightsMapper); ``AutoWeightsLoader`` (models/utils.py) raises on any key with no
module or parameter except keys ending in ``.bias``. Aux ids: top-level, then ``dflash_config`` (+1), then
the nested ``eagle_config`` read raw (v1/worker/gpu_model_runner.py), all as input-of-layer indices.
Speculators configs are read natively (transformers_utils/configs/speculators/algos.py).
"""

from __future__ import annotations

from .profile import EngineProfile

V0_33_0 = EngineProfile(
    name="vllm",
    label="vllm 0.33.0",
    spec="vllm==0.33.0",
    source=("vllm/model_executor/models/llama_eagle3.py, models/utils.py (AutoWeightsLoader), models/registry.py, "
            "transformers_utils/configs/speculators/algos.py, v1/worker/gpu_model_runner.py (vllm 0.33.0 wheel)"),
    kind="serving",
    versions=((0, 33, 0), (0, 33, 0)),
    architectures=frozenset({"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "PEagleDraftModel",
                             "PeagleLlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
                             "Eagle3Qwen3vlForCausalLM"}),
    arch_prefix="Eagle3",
    speculators_types=frozenset({"eagle3"}),
    needs_speculators_fields=True,
    unrecognized_effect=("vLLM maps config.architectures (with an 'Eagle3' prefix for method eagle3) to a model "
                         "class; an unknown one stops the server before any weight is read"),
    aux_ids_sources=("top-level", "dflash", "eagle_config"),
    aux_id_convention="input",
    honoured_flags=frozenset({"norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"}),
    flag_defaults={"norm_before_residual": True},
    fc_gate="always-assert",
    d2t_handling="draft_id_to_target_id",
    missing_d2t="identity",
    d2t_use="vLLM: the N draft logits are scattered into a -inf row of width V at arange(N) + d2t",
    missing_d2t_use="vLLM: draft_id_to_target_id keeps its zero init, so draft id i maps to target id i (identity)",
    param_prefix="model.",
    decoder="layers.{i}",
    num_aux_rule="eagle_config-or-3",
    fc_bias="never",
    qkv_bias=True,
    vocab_params="mapping-if-reduced",
    inits={"linear": "empty", "fc": "empty", "embed": "empty", "norm": "ones", "vocab": "zeros"},
    prefix_rule="unless-lm_head",
    model_renames=(("midlayer.", "layers.0."),),
    flag_drops=(("input_norm.", "norm_before_fc"), ("fc.", "use_aux_hidden_state")),
    unknown="raise",
    ignore_unknown_suffixes=(".bias",),
    raise_template=("ValueError: There is no module or parameter named {name!r} in {loader}. "
                    "The available parameters belonging to {base} ({cls}) are: {available}"),
    loader_classes=(("model.", "LlamaModel"), ("", "Eagle3LlamaForCausalLM")),
    module_classes=(("layers", "ModuleList"), ("#", "LlamaDecoderLayer"), ("self_attn", "LlamaAttention"),
                    ("mlp", "LlamaMLP"), ("qkv_proj", "QKVParallelLinear"), ("o_proj", "RowParallelLinear"),
                    ("gate_up_proj", "MergedColumnParallelLinear"), ("down_proj", "RowParallelLinear"),
                    ("fc", "ReplicatedLinear"), ("fc_norm", "ModuleList"), ("embed_tokens", "VocabParallelEmbedding"),
                    ("lm_head", "ParallelLMHead"), ("input_layernorm", "RMSNorm"), ("hidden_norm", "RMSNorm"),
                    ("post_attention_layernorm", "RMSNorm"), ("norm", "RMSNorm"), ("input_norm", "RMSNorm")),
    shape_message="AssertionError: shape mismatch loading a {got} tensor into parameter {want}",
    shared_from_target={"embed": "shared from the target when absent from the checkpoint (or equal to the target's)",
                        "lm_head": "shared from the target when absent from the checkpoint"},
    notes=("speculators configs without norm_before_residual are read as norm_before_residual=true",
           "the fc width comes from len(eagle_config ids) or 3, never from top-level ids"),
    native_decoder="layers.{i}.",
    config_style="vllm",
)

PROFILES = (V0_33_0,)

"""SGLang ``LlamaForCausalLMEagle3`` (python/sglang/srt/models/llama_eagle3.py), three eras.

Read from the 0.5.11, 0.5.12 and 0.5.23 wheels: era A (<= 0.5.11) names the decoder ``midlayer`` and
accepts one layer; era B (0.5.12-0.5.22) renames ``midlayer`` -> ``layers.0`` before lookup and adds
``fc_norm`` / ``norm_output``; 0.5.23 adds ``input_norm`` (``norm_before_fc``). Unknown keys vanish
silently in every era; aux ids come only from the nested ``eagle_config`` (model_runner.py), as
output-of-layer ids (``set_eagle3_layers_to_capture`` in llama.py captures id + 1).
"""

from __future__ import annotations

from dataclasses import replace

from .profile import EngineProfile

_COMMON = dict(
    name="sglang",
    kind="serving",
    architectures=frozenset({"LlamaForCausalLMEagle3"}),
    unrecognized_effect=("SGLang resolves the model class from config.architectures; without "
                         "'LlamaForCausalLMEagle3' it falls back to the Transformers backend or stops with "
                         "\"Model architectures [...] are not supported for now\"; the EAGLE-3 draft class never runs"),
    aux_ids_sources=("eagle_config",),
    aux_id_convention="output",
    fc_gate="width-differs",
    d2t_handling="hot_token_id",
    missing_d2t="raw-index",
    d2t_use="SGLang: hot_token_id = d2t + arange(N); a draft top-k id i is proposed as target id i + d2t[i]",
    missing_d2t_use=("SGLang: hot_token_id is None, so draft ids are used raw (draft id i proposed as target id i), "
                     "no vocab check"),
    param_prefix="model.",
    fc_bias="config.bias",
    inits={"fc": "kaiming-uniform", "linear": "empty", "embed": "empty", "norm": "ones"},
    prefix_rule="if-not-param",
    unknown="drop",
    shape_message="AssertionError: Attempted to load weight (torch.Size({got})) into parameter (torch.Size({want}))",
    shared_from_target={"embed": "the worker replaces the draft embedding with the target's (set_embed) "
                                 "unless target_hidden_size is set and differs from hidden_size",
                        "lm_head": "installed from the target when the config has no draft_vocab_size"},
    shared_unless={"lm_head": "draft_vocab_size", "embed": "target_hidden_size-differs"},
    config_style="sglang",
)

ERA_A = EngineProfile(
    label="sglang 0.4.0–0.5.11",
    spec="sglang==0.5.11",
    source="python/sglang/srt/models/llama_eagle3.py, model_executor/model_runner.py, models/llama.py (sglang 0.5.11 wheel)",
    versions=((0, 4, 0), (0, 5, 11)),
    honoured_flags=frozenset(),
    decoder="midlayer",
    max_layers=1,
    too_many_layers="ValueError: EAGLE3 currently only supports 1 layer",
    num_aux_rule="three",
    native_decoder="midlayer.",
    notes=("decoder parameters are model.midlayer.*: every layers.N.* key is skipped without a log",),
    **_COMMON,
)

ERA_B = replace(
    ERA_A,
    label="sglang 0.5.12–0.5.22",
    spec="sglang==0.5.22",
    source="python/sglang/srt/models/llama_eagle3.py (sglang 0.5.12 wheel; 0.5.13/0.5.15 from notes; 0.5.16-0.5.22 unchecked)",
    versions=((0, 5, 12), (0, 5, 22)),
    honoured_flags=frozenset({"fc_norm", "norm_output"}),
    decoder="layers.{i}",
    max_layers=None,
    too_many_layers="",
    num_aux_rule="eagle_config-or-3",
    renames=(("midlayer", "layers.0"), ("aux_norm_low", "fc_norm.0"), ("aux_norm_mid", "fc_norm.1"),
             ("aux_norm_high", "fc_norm.2")),
    native_decoder="layers.{i}.",
    notes=("legacy names are rewritten by substring before lookup: midlayer -> layers.0, aux_norm_* -> fc_norm.*",),
)

V0_5_23 = replace(
    ERA_B,
    label="sglang 0.5.23",
    spec="sglang==0.5.23",
    source="python/sglang/srt/models/llama_eagle3.py (sglang 0.5.23 wheel)",
    versions=((0, 5, 23), (0, 5, 23)),
    honoured_flags=frozenset({"fc_norm", "norm_output", "norm_before_fc"}),
)

PROFILES = (ERA_A, ERA_B, V0_5_23)

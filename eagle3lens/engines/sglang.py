"""SGLang EAGLE-3 draft classes by release (0.4.4.post2 -> 0.5.23), read from every wheel.

``LlamaForCausalLMEagle3`` (python/sglang/srt/models/llama_eagle3.py) and, from 0.5.12,
``Eagle3DeepseekV2ForCausalLM`` (kimi_k25_eagle3.py, MLA). Loader eras: 0.4.4.post2-0.4.8.post1
prefix every key with ``model.`` and delegate to ``LlamaForCausalLM.load_weights`` (llama.py:
KeyError on an unknown stacked key, a warning on any other); 0.4.9+ own loader, unknown keys
silently dropped; 0.5.12+ legacy renames ``midlayer -> layers.0``. Aux ids: hard-coded until
0.4.8.post1; 0.4.9-0.5.10.post1 CUDA-graph batches capture the defaults while eager batches read
``eagle_config`` (+1); fixed in 0.5.11. Hashes in ``SGLANG_FILES`` were computed from the wheels.
"""

from __future__ import annotations

from .groups import Aspect, FileHashes, build_groups
from .profile import DraftClass
from .steps import Convert, Drop, Lookup, Prefix, Rename, Skip, Stack

STACKED = ((".q_proj", ".qkv_proj", "q"), (".k_proj", ".qkv_proj", "k"), (".v_proj", ".qkv_proj", "v"),
           (".gate_proj", ".gate_up_proj", "gate"), (".up_proj", ".gate_up_proj", "up"))
HOT = Convert("d2t", "hot_token_id", reason="hot_token_id = d2t + arange(N) (a plain attribute)")
TIED = Drop("lm_head", if_flag="tie_word_embeddings")
LEGACY = (Rename("midlayer", "layers.0"), Rename("aux_norm_low", "fc_norm.0"), Rename("aux_norm_mid", "fc_norm.1"),
          Rename("aux_norm_high", "fc_norm.2"))
# 0.4.4.post2-0.4.8.post1: llama_eagle3.load_weights -> LlamaForCausalLM.load_weights (llama.py:516/534 in 0.4.5)
DELEGATING = (HOT, Skip("t2d"), Prefix("model.", unless=("lm_head",)), TIED,
              Skip("rotary_emb.inv_freq"), Skip("rotary_emb.cos_cached"), Skip("rotary_emb.sin_cached"),
              Stack(STACKED, missing="keyerror"),
              Lookup("warn", log="Parameter {name} not found in params_dict", ignore_suffixes=(".bias", ".kv_scale")))
OWN = (HOT, Skip("t2d"), TIED, Stack(STACKED), Prefix("model.", if_missing=True), Lookup("drop"))
MLA_STEPS = (Convert("d2t", "hot_token_id", how="leaf", reason="hot_token_id = d2t + arange(N) (a plain attribute)"),
             Skip("t2d", how="leaf"), Rename(r"^layers\.0\.", "midlayer.", how="regex"),
             Prefix("model.", unless=("lm_head.",)), TIED,
             Stack(((".gate_proj", ".gate_up_proj", "gate"), (".up_proj", ".gate_up_proj", "up"))),
             Stack(((".q_a_proj", ".fused_qkv_a_proj_with_mqa", "q_a"),
                    (".kv_a_proj_with_mqa", ".fused_qkv_a_proj_with_mqa", "kv_a"))),
             Lookup("warn", log="Eagle3 MLA: skipping unexpected weight {key}"))

MLA_COMMON = dict(
    table="mla", decoder="midlayer", max_layers=1, too_many_layers="ValueError: EAGLE3 currently only supports 1 layer",
    native_decoder="midlayer.", steps=MLA_STEPS, num_aux_sources=("eagle_config", "top-level"),
    requires=(("q_lora_rank", "ValueError: Eagle3 MLA layer requires q_lora_rank in the draft config"),),
    shared_unless={"lm_head": "draft_vocab_size", "embed": "target_hidden_size-differs"}, tie_word_embeddings=True,
    flag_sources={}, notes=("Eagle3DeepseekV2ForCausalLM (kimi_k25_eagle3.py): MLA attention, q_a_proj and "
                            "kv_a_proj_with_mqa fused into fused_qkv_a_proj_with_mqa; unknown keys logged and skipped",))
MLA_ARCHS = frozenset({"Eagle3DeepseekV2ForCausalLM"})
MLA_0_5_12 = DraftClass("Eagle3DeepseekV2ForCausalLM", MLA_ARCHS, {**MLA_COMMON, "honoured_flags": frozenset()})
MLA_0_5_13 = DraftClass("Eagle3DeepseekV2ForCausalLM", MLA_ARCHS,
                        {**MLA_COMMON, "honoured_flags": frozenset({"fc_norm", "norm_output"}),
                         "flag_aliases": {"fc_norm": ("use_aux_norm",)}})

BASE = dict(
    architectures=frozenset({"LlamaForCausalLMEagle3"}),
    draft_class="LlamaForCausalLMEagle3",
    unrecognized_effect=("SGLang resolves the model class from config.architectures; without an EAGLE-3 class "
                         "('LlamaForCausalLMEagle3', or 'Eagle3DeepseekV2ForCausalLM' from 0.5.12) it falls back to the "
                         "Transformers backend or stops with \"Model architectures [...] are not supported for now\"; "
                         "the EAGLE-3 draft class never runs"),
    aux_id_convention="output",
    fc_gate="width-differs",
    d2t_handling="hot_token_id",
    d2t_use="SGLang: hot_token_id = d2t + arange(N); a draft top-k id i is proposed as target id i + d2t[i]",
    # eagle_worker.py topk_index = hot_token_id[topk_index] (a gather from the N-long table, always in range); the
    # proposed id then embeds in the next draft step and in verification: VocabParallelEmbedding masks ids outside
    # its shard only at TP > 1 (read from 0.5.11, not run here: SGLang does not serve on CPU)
    d2t_range_use=("a proposal mapped past V is never accepted; at TP > 1 its embedding is masked to zero, at "
                   "TP 1 the first such proposal indexes past the embedding table (a CUDA device-side assert: the "
                   "server dies)"),
    param_prefix="model.",
    inits={"fc": "kaiming-uniform", "fc.bias": "uniform(±1/sqrt(fan_in))", "linear": "empty", "embed": "empty",
           "norm": "ones"},
    tie_word_embeddings=True,
    reads_use_aux=False,  # the draft class always builds fc; use_aux_hidden_state only switches capture off
    shape_message="AssertionError: Attempted to load weight (torch.Size({got})) into parameter (torch.Size({want}))",
    config_style="sglang",
)

ASPECTS = (
    # the model loader's weight files (loader.py DefaultModelLoader._prepare_weights, weight_utils.py iterators):
    # glob order until 0.5.11 sorts them; 0.4.4.post2-0.4.8.post1 read each file with load_file (stored order from
    # safetensors 0.6.1), later releases with safe_open(...).keys() (sorted names)
    Aspect("weight files", (
        ("0.4.4.post2", dict(shard_order="listing", tensor_order="storage")),
        ("0.4.9", dict(tensor_order="names")),
        ("0.5.11", dict(shard_order="sorted")),
    )),
    Aspect("loader", (
        ("0.4.4.post2", dict(steps=DELEGATING, decoder="midlayer", max_layers=1, native_decoder="midlayer.",
                             fc_bias="always", too_many_layers="ValueError: EAGLE3 currently only supports 1 layer")),
        ("0.4.9", dict(steps=OWN, decoder="midlayer", max_layers=1, native_decoder="midlayer.", fc_bias="config.bias",
                       too_many_layers="ValueError: EAGLE3 currently only supports 1 layer")),
        ("0.5.12", dict(steps=LEGACY + OWN, decoder="layers.{i}", max_layers=None, native_decoder="layers.{i}.",
                        fc_bias="config.bias", too_many_layers="")),
    )),
    Aspect("d2t", (
        ("0.4.4.post2", dict(missing_d2t="raises",
                             missing_d2t_error=("AttributeError: 'LlamaForCausalLMEagle3' object has no attribute "
                                                "'hot_token_id' (eagle_worker.py calls get_hot_token_id() and only a "
                                                "d2t key sets it)"),
                             missing_d2t_use="SGLang: the worker stops at start (hot_token_id is never set)")),
        ("0.4.9", dict(missing_d2t="raw-index", missing_d2t_error="",
                       missing_d2t_use=("SGLang: hot_token_id is None, so draft ids are used raw (draft id i proposed "
                                        "as target id i), no vocab check"))),
    )),
    Aspect("config", (
        ("0.4.4.post2", dict(honoured_flags=frozenset(), num_aux_sources=(),
                             requires=(("draft_vocab_size", "AttributeError: 'LlamaConfig' object has no attribute "
                                                            "'draft_vocab_size' (ParallelLMHead(config.draft_vocab_size))"),),
                             shared_from_target={"embed": "the worker replaces the draft embedding with the target's "
                                                          "(set_embed); EAGLE-3 never shares lm_head"},
                             shared_unless={"embed": "target_hidden_size-differs"})),
        ("0.5.2", dict(requires=(),
                       shared_from_target={"embed": "the worker replaces the draft embedding with the target's (set_embed) "
                                                    "unless target_hidden_size is set and differs from hidden_size",
                                           "lm_head": "installed from the target when the config has no draft_vocab_size"},
                       shared_unless={"lm_head": "draft_vocab_size", "embed": "target_hidden_size-differs"})),
        ("0.5.12", dict(honoured_flags=frozenset({"fc_norm", "norm_output"}), flag_aliases={"fc_norm": ("use_aux_norm",)},
                        num_aux_sources=("num_aux_hidden_states", "eagle_config"))),
        ("0.5.17", dict(honoured_flags=frozenset({"fc_norm", "norm_output", "norm_before_fc"}),
                        flag_sources={"norm_before_fc": ("eagle_config", "top-level")})),
    )),
    Aspect("aux ids", (
        ("0.4.4.post2", dict(aux_ids_sources=(), paths={}, default_path=None, path_notes={})),
        ("0.4.9", dict(aux_ids_sources=(), default_path="cuda-graph",
                       paths={"cuda-graph": dict(aux_ids_sources=()), "eager": dict(aux_ids_sources=("eagle_config",))},
                       path_notes={"cuda-graph": ("the default: CUDA-graph-replayed decode batches were captured before "
                                                  "the configured ids were set, so they capture 2, L//2, L-3"),
                                   "eager": ("--disable-cuda-graph (and eager batches): eagle_config ids, "
                                             "output-of-layer (+1)")})),
        ("0.5.11", dict(aux_ids_sources=("eagle_config",), paths={}, default_path=None, path_notes={})),
    )),
    Aspect("eagle mode", (  # eagle_worker.py: not is_eagle3() -> set_embed_and_head(target embed, target head)
        ("0.4.4.post2", dict(eagle_mode_vocab="full")),  # LogitsProcessor(config): config.vocab_size = V
        ("0.5.4.post2", dict(eagle_mode_vocab="first-n")),  # LogitsProcessor(config_), config_.vocab_size = draft_vocab_size
    )),
    Aspect("classes", (
        ("0.4.4.post2", dict(classes=())),
        ("0.5.12", dict(classes=(MLA_0_5_12,))),
        ("0.5.13", dict(classes=(MLA_0_5_13,))),
    )),
)

SGLANG_FILES = (
    FileHashes("sglang/srt/models/llama_eagle3.py", (("0.4.4.post2", 'bf76dfb41543'), ("0.4.6.post2", '282bd4ad69f5'), ("0.4.9", 'ef5e6ca32943'), ("0.5.2", '96eb724b851a'), ("0.5.4", 'c9ece39ee6b9'), ("0.5.4.post2", '9dab7cd55d88'), ("0.5.10", '2fee23a6f224'), ("0.5.12", '3ad47dd17aff'), ("0.5.13", 'b4586b9b0f90'), ("0.5.14", '9b28ad9029fa'), ("0.5.16", '0b198f993b3a'), ("0.5.17", '16ab0259f782'), ("0.5.21", '7b8e65698694'), ("0.5.22", '19281484cf98'), ("0.5.23", 'b25e5f839b08'),)),  # noqa: E501
    FileHashes("sglang/srt/models/kimi_k25_eagle3.py", (("0.4.4.post2", None), ("0.5.12", 'defd244c2013'), ("0.5.13", '33e6917060fd'), ("0.5.14", 'c3d674627cad'), ("0.5.15", 'a00cecd580d0'), ("0.5.17", '4717e7ced253'), ("0.5.21", 'e1515f6e1d62'), ("0.5.23", 'ff9823afca23'),)),  # noqa: E501
    FileHashes("sglang/srt/models/llama.py", (("0.4.4.post2", 'd230ffc5c0ae'), ("0.4.4.post4", '151743fa8090'), ("0.4.5", '81c97662d9cc'), ("0.4.5.post1", 'ef51a603effe'), ("0.4.5.post2", '63844e7bca21'), ("0.4.6.post2", 'e396ecfea569'), ("0.4.6.post3", '10b36afab85e'), ("0.4.6.post4", 'f8d0bd10bf51'), ("0.4.7", 'a8b05f2fbed7'), ("0.4.9", 'c54557a6db1e'), ("0.4.9.post2", '3a4d8e99b93c'), ("0.4.9.post3", '36cc6fdacd6c'), ("0.5.0rc1", '5f368588c9ea'), ("0.5.0rc2", 'b5dc94a27ea2'), ("0.5.3", '6507395e0900'), ("0.5.3.post2", '12dfe2e9ad40'), ("0.5.6.post1", 'ea0e44e8afb8'), ("0.5.8", 'fbcdbd89df68'), ("0.5.9", '387ed806e3f6'), ("0.5.10", 'd9619c21ce36'), ("0.5.11", '12f93fa8f7e5'), ("0.5.12", '9d7a4a5ddc5e'), ("0.5.13", 'a01b92e5b84e'), ("0.5.14", '39af0c619a70'), ("0.5.15", '52c4b0286164'), ("0.5.16", 'bb9dd155e811'), ("0.5.17", '843bc5f35649'), ("0.5.18", '1f70c2745c24'), ("0.5.20", 'a2447642ad63'), ("0.5.21", 'b54a27f32f0c'), ("0.5.22", '1fb809c1ba88'), ("0.5.23", '19a843fda901'),)),  # noqa: E501
    FileHashes("sglang/srt/model_executor/model_runner.py", (("0.4.4.post2", 'ffce82d9e410'), ("0.4.4.post3", '4cc71e8c19d0'), ("0.4.4.post4", '7f67b44ecede'), ("0.4.5", 'e178bed6ed6d'), ("0.4.5.post1", 'e6abcb96a97c'), ("0.4.5.post2", '9833e36b4b5c'), ("0.4.5.post3", '9cec94f01426'), ("0.4.6", '11e8bd246097'), ("0.4.6.post1", '3b8bca67873e'), ("0.4.6.post2", '158365013308'), ("0.4.6.post3", '2f2da64836c8'), ("0.4.6.post4", '27407a9d2b3c'), ("0.4.6.post5", '6d5ae35c3cc2'), ("0.4.7", '95f0ab630a1d'), ("0.4.7.post1", 'd53c84b92380'), ("0.4.8", '99b60171d772'), ("0.4.8.post1", 'f442074c3291'), ("0.4.9", '91f156587317'), ("0.4.9.post3", 'a32a87b78f25'), ("0.4.9.post4", 'c1544531d6bc'), ("0.4.9.post5", '52423b8bbdcd'), ("0.4.9.post6", '8c2d889edffe'), ("0.4.10", 'a11610a484d0'), ("0.4.10.post1", '0ad16fcb3994'), ("0.4.10.post2", 'e2d5818a54eb'), ("0.5.0rc0", '67a5971ff3da'), ("0.5.0rc1", 'c2041fc8ca25'), ("0.5.0rc2", '9b1a9d6421d1'), ("0.5.1", '149627c85b32'), ("0.5.1.post3", '5654a068a7c6'), ("0.5.2", '0f870608d86b'), ("0.5.3", 'b134427db9dd'), ("0.5.3.post1", '7c66ac508c45'), ("0.5.3.post2", 'd5e7b6a5ec3c'), ("0.5.3.post3", 'd7e9ebe27858'), ("0.5.4", 'a1c8e690adf2'), ("0.5.4.post1", 'f36480945a75'), ("0.5.4.post2", 'da595ffe989c'), ("0.5.4.post3", '814fe9a1c183'), ("0.5.5.post1", '21b60d9aba26'), ("0.5.5.post3", 'c16d0d2b133e'), ("0.5.6", '010d9ac02b08'), ("0.5.6.post1", '396063d4e069'), ("0.5.6.post2", 'a9d0dd392aa9'), ("0.5.7", 'dd34319a6f7b'), ("0.5.8", '9ad8f7c158de'), ("0.5.9", 'be071c1567de'), ("0.5.10", '58fb9250f588'), ("0.5.11", '8dc3d81b8ce7'), ("0.5.12", '84b3a701c1d5'), ("0.5.12.post1", '1bbf2a33466d'), ("0.5.13", 'f4dad073eb9f'), ("0.5.14", '7cf4ac968e9c'), ("0.5.15", '91fcb5873f26'), ("0.5.16", '1122748dcd07'), ("0.5.17", '221032bf7ae5'), ("0.5.18", '2bbe91845a94'), ("0.5.19", 'b40efe0c7fb8'), ("0.5.20", 'df38e26ace5d'), ("0.5.21", '36e7a69f345c'), ("0.5.22", '0192531598c0'), ("0.5.23", '2ef478a3c509'),)),  # noqa: E501
    FileHashes("sglang/srt/model_executor/cuda_graph_runner.py", (("0.4.4.post2", '1fddea10721b'), ("0.4.4.post3", 'ac8c50e18bed'), ("0.4.4.post4", '6c32ceaa5c5d'), ("0.4.5.post1", 'ba562616fd26'), ("0.4.5.post2", '65a375c8f8ee'), ("0.4.5.post3", '9469d5b91aa6'), ("0.4.6", '885af23bd760'), ("0.4.6.post2", '2120cbaa9259'), ("0.4.6.post4", 'b6867a3af35c'), ("0.4.6.post5", '43362b95392a'), ("0.4.7", '36935a65645f'), ("0.4.7.post1", '5e80a102b37b'), ("0.4.8", '3aa539118749'), ("0.4.8.post1", '332660f61c35'), ("0.4.9", 'de9735fd3a46'), ("0.4.9.post3", 'd1ffb9d1f908'), ("0.4.9.post4", 'ea78d11b2b2b'), ("0.4.10.post1", '562127a44b6a'), ("0.4.10.post2", '0c027045346a'), ("0.5.0rc0", 'e3ba69c04373'), ("0.5.0rc1", '740c0bb162ef'), ("0.5.0rc2", '25fc14581bb4'), ("0.5.1", 'bc5211f83315'), ("0.5.1.post2", '7d94ff090c21'), ("0.5.2", '68e0b8b0a663'), ("0.5.3", '19c0f6164586'), ("0.5.3.post1", '5832d92d4985'), ("0.5.3.post2", '9ce0e4c8ecce'), ("0.5.4", '873ef2deae49'), ("0.5.4.post2", '6418642d1819'), ("0.5.4.post3", '1b9833c17b32'), ("0.5.5.post1", 'dbd771cf1ac9'), ("0.5.5.post2", '5135cf646a53'), ("0.5.5.post3", 'b6435c9c6325'), ("0.5.6", '6afc41518513'), ("0.5.6.post1", 'e8c4d23bcfea'), ("0.5.6.post2", 'b812fc8e9188'), ("0.5.7", '777eb819ea03'), ("0.5.8", '06249221c5ff'), ("0.5.9", '34b3fbf87ee0'), ("0.5.10", '1c7006e3e270'), ("0.5.11", 'a686e17bf4af'), ("0.5.12", '838c29f81f2e'), ("0.5.13", '7d1898247e80'), ("0.5.14", None),)),  # noqa: E501
)
# the files `engines --detect` hashes to name the installed release (the loader files)
DETECT_FILES = ("sglang/srt/models/llama_eagle3.py", "sglang/srt/models/kimi_k25_eagle3.py")

PROFILES = build_groups("sglang", BASE, ASPECTS, SGLANG_FILES)

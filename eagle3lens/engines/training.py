"""Training-side loaders: speculators ``Eagle3DraftModel.from_pretrained`` and the EAGLE reference.

speculators (src/speculators/models/eagle3/core.py, model.py; 0.9.0 wheel): parameter names are the saved
names; HF ``from_pretrained`` warns about unexpected keys and ignores them, and suppresses missing-key
warnings for embed_tokens, verifier_*, d2t, t2d and input_norm; lm_head / embed_tokens start as NaN until
``load_verifier_weights``; d2t/t2d buffers exist only when N != V; fc is n_aux x hidden_size wide.
EAGLE reference (eagle/model/cnets.py, ea_model.py at cb7e0841, per FACTS.md §4.3: the repository is
not on PyPI): ``midlayer.*`` names, ``load_state_dict(strict=False)`` with the result ignored, ids
hard-coded 2, L//2, L-3, no option flag honoured.
"""

from __future__ import annotations

from packaging.version import Version

from .profile import EngineProfile
from .steps import Lookup

SPECULATORS = EngineProfile(
    name="speculators",
    label="speculators 0.9.x",
    spec="speculators",
    source="src/speculators/models/eagle3/core.py, src/speculators/model.py (speculators 0.9.0 wheel)",
    kind="training",
    versions=(Version("0.9.0"), Version("0.10.0")),
    draft_class="Eagle3DraftModel",
    speculators_types=frozenset({"eagle3"}),
    needs_speculators_config=True,
    unrecognized_effect="Eagle3DraftModel.from_pretrained needs a speculators config (speculators_model_type eagle3)",
    aux_ids_sources=("top-level",),
    aux_id_convention="input",
    honoured_flags=frozenset({"norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"}),
    fc_gate="always",
    d2t_handling="buffer",
    missing_d2t="identity",
    decoder="layers.{i}",
    fused=False,
    num_aux_sources=("top-level",),
    fc_hidden="draft",
    later_layers="plain",
    vocab_params="buffers-if-reduced",
    verifier_params=True,
    inits={"linear": "normal(0, initializer_range)", "fc": "normal(0, initializer_range)", "embed": "nan",
           "lm_head": "nan", "norm": "ones", "vocab": "zeros", "verifier": "nan"},
    steps=(Lookup("warn", log="Some weights of the checkpoint were not used when initializing Eagle3DraftModel: "
                               "['{name}']"),),
    shape_message="RuntimeError: size mismatch: copying a param with shape {got}, the shape in current model is {want}",
    shared_from_target={"embed": "copied from the verifier by load_verifier_weights",
                        "lm_head": "copied from the verifier's head rows by load_verifier_weights while NaN",
                        "verifier": "not saved by design; loaded from the verifier",
                        "vocab": "missing-key warning suppressed; the buffer keeps its init"},
    native_decoder="layers.{i}.",
    config_style="speculators",
)

EAGLE = EngineProfile(
    name="eagle",
    label="EAGLE reference (SafeAILab/EAGLE)",
    spec="eagle",
    source="eagle/model/cnets.py, eagle/model/ea_model.py (SafeAILab/EAGLE cb7e0841; not on PyPI, rules from the team's notes)",
    kind="training",
    versions=None,
    draft_class="Model (eagle/model/cnets.py)",
    architectures=frozenset({"LlamaForCausalLM"}),
    unrecognized_effect="EAGLE builds its draft from a flat Llama config",
    aux_ids_sources=(),
    aux_id_convention="input",
    honoured_flags=frozenset(),
    fc_gate="always",
    d2t_handling="buffer",
    missing_d2t="identity",
    d2t_use="EAGLE reference: decode maps topk + d2t[topk]",
    missing_d2t_use="EAGLE reference: identity, draft id i is target id i",
    decoder="midlayer",
    max_layers=1,
    fused=False,
    vocab_params="buffers-if-reduced",
    inits={"linear": "kaiming-uniform", "fc": "kaiming-uniform", "embed": "kaiming-uniform", "norm": "ones",
           "vocab": "zeros"},
    steps=(Lookup("drop"),),
    shape_message="RuntimeError: size mismatch: copying a param with shape {got}, the shape in current model is {want}",
    shared_from_target={"embed": "loaded from the target's embedding at start-up"},
    native_decoder="midlayer.",
    config_style="eagle",
)

PROFILES = (SPECULATORS, EAGLE)

"""The aux layers a draft was trained with, from the convention of the tool that wrote its config (model layer:
pure functions over a :class:`DraftSpec`; what an engine captures is ``served.aux_layers``)."""

from __future__ import annotations

from .draft_spec import DraftSpec


def default_aux_ids(num_target_layers: int) -> tuple[int, ...]:
    """The default shared by EAGLE, speculators, vLLM and SGLang: HF ``hidden_states`` indices 2, L//2, L-3."""
    L = num_target_layers
    return (2, L // 2, L - 3)


def trained_with(spec: DraftSpec, num_layers: int | None) -> tuple[tuple[int, ...], str]:
    """HF indices the draft was trained with, inferred from the convention of the tool that wrote its config.

    ``num_layers`` None (no target at hand): () where the trainers' default 2, L//2, L-3 applied.
    """
    ids = spec.aux_layer_ids
    if spec.flavour == "eagle" or ids is None:
        if num_layers is None:
            return (), "the trainers' default 2, L//2, L-3 (L unknown: no target given)"
        if spec.flavour == "eagle":
            return default_aux_ids(num_layers), "EAGLE reference: hard-coded 2, L//2, L-3"
        return default_aux_ids(num_layers), "no ids in the config: the trainers' shared default 2, L//2, L-3"
    if spec.aux_ids_source == "eagle_config":
        return tuple(i + 1 for i in ids), "eagle_config ids in SGLang/SpecForge convention (output of layer id, +1)"
    return tuple(ids), f"{spec.aux_ids_source} ids in speculators convention (input of layer id)"


__all__ = ["default_aux_ids", "trained_with"]

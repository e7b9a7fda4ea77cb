"""Moved: the aux-layer resolver is ``eagle3lens.served.aux_layers`` (what a release captures is a served fact) and
``trained_with`` is ``eagle3lens.aux_ids``; kept for one release."""

from ..aux_ids import trained_with
from ..served.aux_layers import SOURCE_CONVENTION, AuxResolution, describe_layer, resolve_aux_layers

__all__ = ["SOURCE_CONVENTION", "AuxResolution", "describe_layer", "resolve_aux_layers", "trained_with"]

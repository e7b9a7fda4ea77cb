"""The draft as an engine release serves it, derived once from headers and configs (no torch).

:func:`serve_draft` turns (draft checkpoint, target config, engine release and runtime path, launch) into one
frozen :class:`ServedDraft`: the class the release builds or why the server stops, each parameter's source, the
aux layers it captures (HF ``hidden_states`` indices), what fc does, the vocabulary mapping. ``keys``, ``wiring``,
``trace``, ``acceptance`` (as served), ``provenance`` (what the engine feeds), ``convert``'s verification and the
doctor read it; none of them derives any part of it again.
"""

from ..engines.stops import ServerStop
from .draft import ServedDraft, ServedParam, serve_draft

__all__ = ["ServedDraft", "ServedParam", "ServerStop", "serve_draft"]

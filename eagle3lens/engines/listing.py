"""Every version group of every engine as one table (data for the ``engines`` command's view and the README)."""

from __future__ import annotations

from typing import Any

from .registry import all_profiles


class EnginesTable:
    """Every version group of every engine (data for the table view and the README)."""

    findings: tuple[Any, ...] = ()

    def __init__(self) -> None:
        self.profiles = all_profiles()

    def to_dict(self) -> dict[str, Any]:
        return {"engines": [_row(p) for p in self.profiles]}


def _row(p: Any) -> dict[str, Any]:
    return {"spec": p.spec, "label": p.label, "kind": p.kind, "source": p.source, "releases": list(p.releases),
            "aux_ids_sources": list(p.aux_ids_sources), "aux_id_convention": p.aux_id_convention,
            "paths": {name: list(p.with_path(name).aux_ids_sources) for name in p.paths},
            "default_path": p.default_path, "honoured_flags": sorted(p.honoured_flags), "fc_gate": p.fc_gate,
            "unknown_keys": p.unknown, "missing_d2t": p.missing_d2t, "draft_classes": [p.draft_class] +
            [c.name for c in p.classes], "loader_steps": p.describe_steps(),
            "sources": [{"path": s.path, "hashes": [{"first": a, "last": b, "sha12": h} for a, b, h in s.hashes]}
                        for s in p.sources]}


__all__ = ["EnginesTable"]

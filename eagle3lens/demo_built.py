"""What ``demo`` built, as result data for its view (no torch: the view loads with every other view)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DemoBuilt:
    """What ``demo`` built and the findings each variant should give (its view: :mod:`eagle3lens.plots.demo`)."""

    paths: Any  # eagle3lens.demo.DemoPaths
    manifest: dict[str, Any]

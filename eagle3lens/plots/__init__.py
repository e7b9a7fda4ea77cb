"""Presentation: plotly figures, rich tables and HTML for probe results (no probe logic).

Importing this package registers every view (see :mod:`.registry`); new views register in their own
module and are listed here.
"""

from . import acceptance as _acceptance  # noqa: F401  (registers the offline-acceptance views)
from .registry import figures, html_view, rich_view

__all__ = ["figures", "html_view", "rich_view"]

"""Presentation: plotly figures, rich tables and HTML for probe results (no probe logic).

Importing this package registers every view (see :mod:`.registry`); new views register in their own
module and are listed here.
"""

from . import engines as _engines  # noqa: F401  (registers its views)
from .registry import figures, html_view, rich_view
from . import prediction  # noqa: F401  (registers its views)

__all__ = ["figures", "html_view", "rich_view"]

"""Presentation: plotly figures, rich tables and HTML for probe results (no probe logic).

Views register per result type with the singledispatch functions of :mod:`.registry`
(``@rich_view.register``, ``@html_view.register``, ``@figures.register``) in a module of this package named
for its area. A view module is loaded when a result of a type it draws is first shown: add
``"module.ResultType": "eagle3lens.plots.<area>"`` to :data:`.registry.VIEWS` (importing the module here would
work too, but would load its data module, and torch with it, on every render and every notebook start). Data in any view goes through :mod:`.style` (``markup``, ``plain``,
``html_text``) so control characters never reach a terminal or a page.
"""

from .registry import VIEWS, figures, html_view, rich_view

__all__ = ["VIEWS", "figures", "html_view", "rich_view"]

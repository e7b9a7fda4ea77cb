"""Presentation: plotly figures, rich tables and HTML for probe results (no probe logic).

Views register per result type with the singledispatch functions of :mod:`.registry`
(``@rich_view.register``, ``@html_view.register``, ``@figures.register``) in a module of this package named
for its area. A view module is loaded when a result from its data module is first shown: add the pair to
:data:`.registry.VIEW_MODULES` (importing the module here would work too, but would load its data module,
and torch with it, on every render). Data in any view goes through :mod:`.style` (``markup``, ``plain``,
``html_text``) so control characters never reach a terminal or a page.
"""

from .registry import VIEW_MODULES, figures, html_view, rich_view

__all__ = ["VIEW_MODULES", "figures", "html_view", "rich_view"]

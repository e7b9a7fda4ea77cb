"""The view registry: one ``functools.singledispatch`` function per medium.

Results are plain data; their views live in ``plots/`` and are registered per result type::

    from .registry import figures, html_view, rich_view

    @rich_view.register
    def _(result: LoadResult) -> RenderableType: ...

``render.py``, the CLI and the notebooks' display hook call these three functions and never a method
on the result. A type with no registered view has none in that medium (``None`` / ``[]``).

A view module is loaded when a result from the data module it draws is first shown (:data:`VIEW_MODULES`):
a result of ``eagle3lens.probes.wiring`` exists only once that module (and torch) is imported, so drawing it
costs nothing more, while ``eagle3lens logs`` never imports torch to draw a log summary.
"""

from __future__ import annotations

import importlib
from functools import singledispatch
from typing import Any

# data module (where a result type is defined) -> the plots modules that register its views
VIEW_MODULES: dict[str, tuple[str, ...]] = {
    "eagle3lens.probes.keys": ("eagle3lens.plots.keys",),
    "eagle3lens.probes.diff": ("eagle3lens.plots.keys",),
    "eagle3lens.probes.logs": ("eagle3lens.plots.logs",),
    "eagle3lens.probes.vocab": ("eagle3lens.plots.vocab",),
    "eagle3lens.probes.weights": ("eagle3lens.plots.weights",),
    "eagle3lens.probes.wiring": ("eagle3lens.plots.trace",),
    "eagle3lens.probes.aux_layers": ("eagle3lens.plots.trace",),
    "eagle3lens.probes.trace": ("eagle3lens.plots.trace",),
    "eagle3lens.doctor": ("eagle3lens.plots.doctor",),
    "eagle3lens.convert": ("eagle3lens.plots.convert",),
    "eagle3lens.commands.info": ("eagle3lens.plots.info",),
    "eagle3lens.commands.engines": ("eagle3lens.plots.engines",),
    "eagle3lens.remote": ("eagle3lens.plots.remote",),
    "eagle3lens.notebook_runner": ("eagle3lens.plots.notebook",),
}
_loaded: set[str] = set()


def _load(name: str) -> bool:
    if name in _loaded:
        return False
    _loaded.add(name)
    importlib.import_module(name)
    return True


def _load_views(result: object) -> bool:
    """Import the view modules for ``result``'s type (and its bases); True when one was newly loaded."""
    new = False
    for cls in type(result).__mro__:
        for name in VIEW_MODULES.get(cls.__module__, ()):
            new = _load(name) or new
    return new


def load_all_views() -> None:
    """Import every view module (a notebook kernel registers display formatters for all result types).

    A view whose data module needs an extra that is not installed (``[remote]``: paramiko) is skipped:
    no result of it can exist here.
    """
    for names in VIEW_MODULES.values():
        for name in names:
            try:
                _load(name)
            except ModuleNotFoundError as exc:
                if (exc.name or "").split(".")[0] == "eagle3lens":
                    raise


def registered_types() -> list[type]:
    """Every type with a view in some medium (``object``, the fallback, excluded)."""
    types = {*rich_view.registry, *html_view.registry, *figures.registry} - {object}
    return sorted(types, key=lambda cls: (cls.__module__, cls.__qualname__))


@singledispatch
def rich_view(result: object) -> Any | None:
    """A rich renderable for the terminal, or None when the result has no terminal section."""
    return rich_view(result) if _load_views(result) else None


@singledispatch
def html_view(result: object) -> str | None:
    """An HTML fragment for reports and notebooks, or None."""
    return html_view(result) if _load_views(result) else None


@singledispatch
def figures(result: object) -> list[Any]:
    """Plotly figures for the result (possibly none)."""
    return figures(result) if _load_views(result) else []

"""The view registry: one ``functools.singledispatch`` function per medium.

Results are plain data; their views live in ``plots/`` and are registered per result type::

    from .registry import figures, html_view, rich_view

    @rich_view.register
    def _(result: LoadResult) -> RenderableType: ...

``render.py``, the CLI and the notebooks' display hook call these three functions and never a method
on the result. A type with no registered view has none in that medium (``None`` / ``[]``).
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any


@singledispatch
def rich_view(result: object) -> Any | None:
    """A rich renderable for the terminal, or None when the result has no terminal section."""
    legacy = getattr(result, "__rich__", None)  # transitional: results that still draw themselves
    return legacy() if callable(legacy) else None


@singledispatch
def html_view(result: object) -> str | None:
    """An HTML fragment for reports and notebooks, or None."""
    legacy = getattr(result, "_repr_html_", None)  # transitional
    return legacy() if callable(legacy) else None


@singledispatch
def figures(result: object) -> list[Any]:
    """Plotly figures for the result (possibly none)."""
    legacy = getattr(result, "figures", None)  # transitional
    return list(legacy()) if callable(legacy) else []

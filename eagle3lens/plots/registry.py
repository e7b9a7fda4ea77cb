"""The view registry: one ``functools.singledispatch`` function per medium.

Results are plain data; their views live in ``plots/`` and are registered per result type::

    from .registry import figures, html_view, rich_view

    @rich_view.register
    def _(result: LoadResult) -> RenderableType: ...

``render.py``, the CLI and the notebooks' display hook call these three functions and never a method
on the result. A type with no registered view has none in that medium (``None`` / ``[]``).

A view module is loaded when a result of a type it draws is first shown (:data:`VIEWS`): a
``WiringResult`` exists only once ``eagle3lens.probes.wiring`` (and torch) is imported, so drawing it costs
nothing more, while ``eagle3lens logs`` never imports torch to draw a log summary. The notebook kernel
registers its display formatters from the same table, by name, without importing anything.
"""

from __future__ import annotations

import importlib
from functools import singledispatch
from typing import Any

# every result type with a view -> the plots module that registers it (loaded on first show)
VIEWS: dict[str, str] = {
    "eagle3lens.served.load.LoadResult": "eagle3lens.plots.keys",
    "eagle3lens.probes.diff.DiffResult": "eagle3lens.plots.keys",
    "eagle3lens.probes.log_result.LogResult": "eagle3lens.plots.logs",
    "eagle3lens.probes.vocab.VocabResult": "eagle3lens.plots.vocab",
    "eagle3lens.probes.weights.WeightsResult": "eagle3lens.plots.weights",
    "eagle3lens.probes.wiring.WiringResult": "eagle3lens.plots.trace",
    "eagle3lens.served.aux_layers.AuxResolution": "eagle3lens.plots.trace",
    "eagle3lens.doctor.Triage": "eagle3lens.plots.doctor",
    "eagle3lens.convert.ConvertResult": "eagle3lens.plots.convert",
    "eagle3lens.checkpoint.InfoResult": "eagle3lens.plots.info",
    "eagle3lens.engines.listing.EnginesTable": "eagle3lens.plots.engines",
    "eagle3lens.engines.detect.Detection": "eagle3lens.plots.engines",
    "eagle3lens.probes.prediction.WiringPrediction": "eagle3lens.plots.prediction",
    "eagle3lens.probes.acceptance_result.AcceptanceResult": "eagle3lens.plots.acceptance",
    "eagle3lens.probes.budget.Budget": "eagle3lens.plots.budget",
    "eagle3lens.probes.provenance.ProvenanceResult": "eagle3lens.plots.provenance",
    "eagle3lens.probes.chat.TemplateCheck": "eagle3lens.plots.template",
    "eagle3lens.probes.chain_break.ChainComparison": "eagle3lens.plots.traffic",
    "eagle3lens.demo_built.DemoBuilt": "eagle3lens.plots.demo",
    "eagle3lens.run_results.RemoteRun": "eagle3lens.plots.remote",
    "eagle3lens.run_results.NotebookRun": "eagle3lens.plots.notebook",
}
_loaded: set[str] = set()


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _load(name: str) -> bool:
    if name in _loaded:
        return False
    _loaded.add(name)
    importlib.import_module(name)
    return True


def _load_views(result: object) -> bool:
    """Import the view module for ``result``'s type (or a base); True when one was newly loaded."""
    new = False
    for cls in type(result).__mro__:
        module = VIEWS.get(qualified_name(cls))
        if module is not None:
            new = _load(module) or new
    return new


def load_all_views() -> None:
    """Import every view module (tests check :data:`VIEWS` against what the modules register).

    A view whose data module needs an extra that is not installed (``[remote]``: paramiko) is skipped:
    no result of it can exist here.
    """
    for module in sorted(set(VIEWS.values())):
        try:
            _load(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "eagle3lens":
                raise


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

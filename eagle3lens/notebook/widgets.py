"""ipywidgets front-ends for the walkthroughs: controls that re-run a probe and redraw (no probe logic).

Widget callbacks only fire with a live front end (JupyterLab); under papermill they never do, so
every notebook cell that shows a panel also shows the probe's result statically from its parameters.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any, Callable, Mapping, Sequence

import ipywidgets as widgets

from ..errors import Eagle3LensError
from .kernel import show
from ..io.textsafe import printable

_WIDE = widgets.Layout(width="60%")


def checkpoint_path(value: str | Path = "", description: str = "checkpoint") -> widgets.Text:
    """A path box that updates on Enter / focus loss (not on every keystroke)."""
    return widgets.Text(value=str(value), description=description, continuous_update=False, layout=_WIDE,
                        style={"description_width": "initial"})


def log_file(value: str | Path = "") -> widgets.Text:
    """A server log path box."""
    return checkpoint_path(value, description="log file")


def engine_dropdown(value: str | None = None, options: Sequence[str] | None = None) -> widgets.Dropdown:
    """Engine and version (``sglang==0.5.11``...); options default to every known engine profile."""
    if options is None:
        from ..engines import all_profiles

        options = [p.spec for p in all_profiles()]
    options = list(options)
    if value and value not in options:
        options.insert(0, value)
    return widgets.Dropdown(options=options, value=value or options[0], description="engine")


def tensor_names(checkpoint: str | Path) -> list[str]:
    """Tensor names of a checkpoint, from its headers (empty when it cannot be opened)."""
    from ..checkpoint import Checkpoint

    try:
        return list(Checkpoint.open(checkpoint).tensors)
    except Eagle3LensError:
        return []


def tensor_picker(checkpoint: str | Path, value: str | None = None,
                  follow: widgets.Text | None = None) -> widgets.Dropdown:
    """A tensor name dropdown; with ``follow``, its options track that checkpoint path box."""
    names = tensor_names(checkpoint)
    picker = widgets.Dropdown(options=names, value=value if value in names else (names[0] if names else None),
                              description="tensor", layout=_WIDE)
    if follow is not None:
        def refresh(change: Mapping[str, Any]) -> None:
            picker.options = tensor_names(change["new"])
        follow.observe(refresh, names="value")
    return picker


def scenario_toggles(options: Sequence[str], value: str | None = None, description: str = "scenario") -> widgets.ToggleButtons:
    """Mutually exclusive scenario buttons (e.g. broken vs fixed wiring). Paths are labelled by their file or
    folder name (the parent folders added only where two names agree); the value stays the full path."""
    options = list(options)
    return widgets.ToggleButtons(options=list(zip(short_labels(options), options, strict=True)),
                                 value=value if value in options else options[0], description=description,
                                 tooltips=options)


def short_labels(paths: Sequence[str]) -> list[str]:
    """The shortest trailing part of each path that tells it from the others (``sglang.log``, ``eagle``)."""
    parts = [PurePath(p).parts or (p,) for p in paths]
    depth = 1
    while True:
        labels = [printable("/".join(q[-depth:])) for q in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(q) for q in parts):
            return labels
        depth += 1


def probe_panel(probe: Callable[..., Any], controls: Mapping[str, widgets.ValueWidget],
                title: str = "") -> widgets.VBox:
    """Controls plus an output area: any control change calls ``probe(**values)`` and redraws its result.

    ``probe`` receives one keyword per control (the control's current value). An eagle3lens error is
    shown as its one-line message; the panel stays usable.
    """
    out = widgets.Output()
    hint = widgets.HTML(f"<b>{title}</b> " if title else "")
    hint.value += "<i>change a control to re-run the probe here</i>"

    def rerun(_: Any = None) -> None:
        values = {name: control.value for name, control in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                show(probe(**values))
            except Eagle3LensError as exc:
                print(f"eagle3lens: error: {printable(exc)}")

    for control in controls.values():
        control.observe(rerun, names="value")
    return widgets.VBox([hint, *controls.values(), out])


def acceptance_toggles(result: Any) -> widgets.VBox:
    """Buttons over the causes of an acceptance gap: the chosen cause, fixed alone, against as served and as trained.

    Its static twin (for headless runs) is ``plots.acceptance.toggles_figure(result)``.
    """
    from .kernel import show_figure
    from ..plots.acceptance import toggles_figure
    from ..probes.acceptance_result import CAUSE_LABELS

    causes = list(result.toggles)
    out = widgets.Output()
    buttons = widgets.ToggleButtons(options=[(CAUSE_LABELS.get(c, c), c) for c in causes] or [("no cause", None)],
                                    value=None, description="fix alone")

    def redraw(_: Any = None) -> None:
        with out:
            out.clear_output(wait=True)
            show_figure(toggles_figure(result, selected=buttons.value))

    buttons.observe(redraw, names="value")
    # nothing is drawn until a cause is chosen (like probe_panel): the static twin in the next cell shows the
    # first view, and a headless run never routes a figure through an Output widget's captured stream
    hint = widgets.HTML("<i>choose a cause to see it fixed alone against as served and as trained</i>")
    return widgets.VBox([hint, buttons, out])


def temperature_slider(sweep: Any, value: float) -> widgets.VBox:
    """A slider over the temperatures ``sweep`` scored (``pages.temperature_sweep``): moving it redraws the
    sampled figure at that temperature. Its static twin (for headless runs) is ``temperature_figure`` at ``value``."""
    from .kernel import show_figure
    from ..plots.traffic import temperature_figure

    out = widgets.Output()
    slider = widgets.SelectionSlider(options=list(sweep.temperatures), value=value, description="temperature",
                                     continuous_update=False)

    def redraw(_: Any = None) -> None:
        with out:
            out.clear_output(wait=True)
            show_figure(temperature_figure(sweep.temperatures, sweep.accept_len, sweep.full_acc, slider.value,
                                           sweep.measured_accept_len()))

    slider.observe(redraw, names="value")
    hint = widgets.HTML("<i>move the slider to see the same draft and traffic at another temperature</i>")
    return widgets.VBox([hint, slider, out])


def template_toggle(dump: Any, served: Any, cost: float | None) -> widgets.VBox:
    """Buttons between the draft on its dump and on the served-template traffic: the template's cost drawn.
    Its static twin is ``plots.traffic.template_cost_figure(dump, served, "served", cost)``."""
    from .kernel import show_figure
    from ..plots.traffic import template_cost_figure

    out = widgets.Output()
    buttons = widgets.ToggleButtons(options=[("the dump (training data)", "dump"), ("served-template traffic", "served")],
                                    value=None, description="traffic")

    def redraw(_: Any = None) -> None:
        with out:
            out.clear_output(wait=True)
            show_figure(template_cost_figure(dump, served, buttons.value, cost))

    buttons.observe(redraw, names="value")
    hint = widgets.HTML("<i>choose the traffic: the same draft on the data it was trained on, and as served</i>")
    return widgets.VBox([hint, buttons, out])

"""Kernel side of the walkthroughs: what a notebook imports (``from eagle3lens.notebook import kernel as nb``).

:func:`init` makes eagle3lens errors show as their one-line message and registers IPython display
formatters, so a cell ending in a probe result or a :class:`Report` shows it as HTML with its figures
(results carry no ``_repr_html_``: their views are registered in :mod:`eagle3lens.plots`);
:func:`show` displays a result or report with its figures (plotly.js inlined once so exported HTML draws
offline); :func:`show_table` shows summary rows; :func:`codes` lists finding codes; :func:`record_findings` stores the findings as a JSON output with the mimetype
:data:`FINDINGS_MIME`; :func:`demo` builds the demo incident on first use. Running notebooks headless is
:mod:`eagle3lens.notebook.runner`.
"""

from __future__ import annotations

import html
import io
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import Eagle3LensError
from ..findings import Report
from .runner import FINDINGS_MIME, findings_of
from ..plots.registry import VIEWS, html_view, rich_view
from ..plots.registry import figures as figures_of
from ..io.textsafe import printable

__all__ = ["FINDINGS_MIME", "codes", "demo", "default_demo_dir", "file_parameters", "findings_of", "init",
           "record_findings", "show", "show_figure"]


def file_parameters(path: str | Path) -> dict[str, Any]:
    """The parameters a headless run passed by file (values too large to inline in the notebook's JSON)."""
    from ..io.jsonio import read_json

    data = read_json(path, "parameters file")
    if not isinstance(data, dict):
        from ..errors import UsageError

        raise UsageError(f"{path}: parameters file must hold a JSON object of name -> value")
    return data


def init() -> None:
    """One-line eagle3lens errors in cells, and HTML display (with figures) of results and reports."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return

    # IPython's set_custom_exc calls handler(shell, etype, value, tb, tb_offset=...): the signature is IPython's
    def one_line(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:  # noqa: ARG001
        line = f"eagle3lens: error: {printable(value)}"
        shell._showtraceback(etype, value, [line])
        return [line]

    shell.set_custom_exc((Eagle3LensError,), one_line)
    formatter = shell.display_formatter.formatters["text/html"]
    formatter.for_type(Report, to_html)
    for name in VIEWS:  # by name: nothing is imported until a result of the type is displayed
        module, _, cls = name.rpartition(".")
        formatter.for_type_by_name(module, cls, to_html)


_plotlyjs_shown = False


def _figure_html(fig: Any) -> str:
    """A figure's HTML, with plotly.js inlined the first time (exported notebooks draw offline)."""
    global _plotlyjs_shown
    out = fig.to_html(full_html=False, include_plotlyjs=not _plotlyjs_shown, include_mathjax=False,
                      default_width="100%", default_height=450)
    _plotlyjs_shown = True
    return str(out)


def _rich_html(view: Any) -> str:
    """A rich renderable as an HTML ``<pre>`` (inline styles, no stylesheet)."""
    from rich.console import Console

    console = Console(record=True, file=io.StringIO(), width=120, color_system="truecolor")
    console.print(view)
    return str(console.export_html(inline_styles=True, code_format="<pre style='font-family:monospace'>{code}</pre>"))


def _result_html(obj: Any) -> str | None:
    fragment = html_view(obj)
    if fragment is None:
        view = rich_view(obj)
        fragment = _rich_html(view) if view is not None else None
    figs = figures_of(obj)
    if fragment is None and not figs:
        return None
    return (fragment or "") + "".join(_figure_html(fig) for fig in figs)


def to_html(obj: Any) -> str | None:
    """What a cell ending in ``obj`` displays: its HTML view (else its rich view) and figures; for a
    :class:`Report`, the verdict and findings, then each probe's result under a heading."""
    if not isinstance(obj, Report):
        return _result_html(obj)
    from ..render import render_report_fragment

    parts = [render_report_fragment(obj)]
    for name, result in obj.results.items():
        parts.append(f"<h3>{html.escape(printable(name))}</h3>{_result_html(result) or ''}")
    return "".join(parts)


def show_figure(fig: Any) -> None:
    """Display a plotly figure for JupyterLab (plotly mimetype) and for exported HTML (plotly.js inlined once)."""
    from IPython.display import display

    display({"application/vnd.plotly.v1+json": json.loads(fig.to_json()), "text/html": _figure_html(fig),
             "text/plain": f"<plotly figure: {fig.layout.title.text or 'untitled'}>"}, raw=True)


def show(obj: Any, figures: bool = True) -> None:
    """Display a probe result (its HTML view, else its rich view) and, unless ``figures=False`` (a page that draws
    the figures it wants itself, each once), its plotly figures.

    A :class:`Report` shows its verdict and findings, then each probe's result under a heading; a string (a
    page's note where it has no result) is printed.
    """
    from IPython.display import HTML, display

    if isinstance(obj, str):
        print(printable(obj))
        return
    if isinstance(obj, Report):
        from ..render import render_report_fragment

        display(HTML(render_report_fragment(obj)))
        for name, result in obj.results.items():
            display(HTML(f"<h3>{html.escape(printable(name))}</h3>"))
            show(result, figures)
        return
    fragment = html_view(obj)
    view = rich_view(obj) if fragment is None else None
    if fragment is not None:
        display(HTML(fragment))
    elif view is not None:
        from rich.console import Console

        Console(force_jupyter=True, width=120).print(view)
    else:
        display(obj)
    for fig in figures_of(obj) if figures else []:
        show_figure(fig)


def record_findings(*objs: Any) -> None:
    """Store the findings of ``objs`` in the notebook as a JSON output eagle3lens reads back."""
    from IPython.display import display

    from ..render import verdict

    findings = findings_of(*objs)
    summary = verdict(Report(checkpoint={}, findings=findings))
    display({FINDINGS_MIME: {"findings": [f.to_dict() for f in findings]},
             "text/plain": f"eagle3lens findings: {printable(summary)}"}, raw=True)


def codes(*objs: Any) -> list[str]:
    """The finding codes of reports, results or findings (as :func:`findings_of` collects them), in order."""
    return [f.code for f in findings_of(*objs)]


def _cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def show_table(rows: Sequence[Mapping[str, Any]]) -> None:
    """Display summary rows (e.g. ``compare_engines(...)``) as a table: lists joined, None as ``-``."""
    from IPython.display import display

    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_cell_text(row.get(c)) for c in columns] for row in rows]
    head = "".join(f"<th>{html.escape(printable(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(printable(v))}</td>" for v in row) + "</tr>" for row in cells)
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    text = "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in [columns, *cells])
    display({"text/html": f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
             "text/plain": text}, raw=True)


def default_demo_dir() -> Path:
    """Where walkthroughs find or build the demo incident when no ``demo_dir`` is given: ``$EAGLE3LENS_DEMO_DIR``,
    else the checkout's ``demo/`` when ``make demo`` built it there, else the user's cache."""
    from ..demo import is_demo

    if os.environ.get("EAGLE3LENS_DEMO_DIR"):
        return Path(os.environ["EAGLE3LENS_DEMO_DIR"])
    checkout_demo = Path(__file__).resolve().parents[2] / "demo"
    if is_demo(checkout_demo / "manifest.json"):
        return checkout_demo
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "eagle3lens" / "demo"


def demo(demo_dir: str | Path = "") -> Any:
    """The demo incident's paths, building it on first use (into :func:`default_demo_dir` by default)."""
    from ..demo import build_demo

    return build_demo(Path(demo_dir) if demo_dir else default_demo_dir())

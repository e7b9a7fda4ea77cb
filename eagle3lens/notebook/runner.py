"""Runner side of the walkthroughs: headless papermill runs, offline HTML export and findings read-back.

:func:`run_notebook` executes a walkthrough with papermill and writes the executed ``.ipynb``, a
self-contained ``.html`` and ``<name>.findings.json``; :func:`collect_findings` reads the findings back
from an executed notebook (:mod:`eagle3lens.notebook.kernel` is the kernel side the notebooks themselves import).
Nothing here draws: a :class:`NotebookRun` is data, its view is in :mod:`eagle3lens.plots.notebook`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..errors import NotebookCellError, UsageError
from ..findings import Finding, to_jsonable
from ..io.safewrite import check_destination, write_text_atomic
from ..io.textsafe import clip
from ..run_results import NotebookRun

FINDINGS_MIME = "application/vnd.eagle3lens.findings+json"
"""Mimetype of the display output that carries a walkthrough's findings."""

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

# nbconvert's lab template loads require.js and MathJax from CDNs; the report needs neither
# (and require.js would capture plotly.js as an anonymous AMD module), so the export drops both.
_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
"""


def findings_of(*objs: Any) -> list[Finding]:
    """Findings of reports, probe results, findings or iterables of them, de-duplicated by code + title."""
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()

    def visit(obj: Any) -> None:
        if isinstance(obj, Finding):
            if (obj.code, obj.title) not in seen:
                seen.add((obj.code, obj.title))
                out.append(obj)
        elif hasattr(obj, "findings"):
            for f in obj.findings:
                visit(f)
        elif isinstance(obj, Mapping):
            for v in obj.values():
                visit(v)
        elif isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
            for v in obj:
                visit(v)
        else:
            raise TypeError(f"cannot take findings from {type(obj).__name__}")

    for obj in objs:
        visit(obj)
    return out



def _nbformat() -> Any:
    """nbformat, imported without the ``iri`` grammars of ``rfc3987_syntax``.

    nbformat imports jsonschema, whose format checker compiles ~40 lark grammars of rfc3987_syntax at
    import (1.5 s of every runner start) for ``iri`` formats that the notebook schema never uses. The import
    is refused only while jsonschema loads; later imports of rfc3987_syntax work as usual.
    """
    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        import nbformat

        return nbformat
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # makes `import rfc3987_syntax` fail
    try:
        import nbformat
    finally:
        if sys.modules.get("rfc3987_syntax", False) is None:
            del sys.modules["rfc3987_syntax"]
    return nbformat


def notebooks_dir() -> Path:
    """The walkthroughs: ``notebooks/`` of a source checkout, or ``share/eagle3lens/notebooks`` when installed."""
    candidates = [Path(__file__).resolve().parents[2] / "notebooks",
                  Path(sys.prefix) / "share" / "eagle3lens" / "notebooks"]
    for candidate in candidates:
        if any(candidate.glob("[0-9][0-9]_*.ipynb")):
            return candidate
    raise UsageError("walkthrough notebooks not found (looked in " + ", ".join(map(str, candidates)) + ")")


def walkthroughs() -> dict[str, Path]:
    """Short name (``00_triage``) -> path of every packaged walkthrough."""
    return {p.stem: p for p in sorted(notebooks_dir().glob("[0-9][0-9]_*.ipynb"))}


MAX_NOTEBOOK_BYTES = 200_000_000


def read_notebook(path: str | Path) -> Any:
    """A notebook file as nbformat v4; a FIFO or device, a file over :data:`MAX_NOTEBOOK_BYTES`, not JSON or not a
    notebook is a one-line :class:`UsageError` naming the file."""
    import stat

    nbformat = _nbformat()
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{clip(str(path))}: cannot read the notebook ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{clip(str(path))}: not a regular file")
    if info.st_size > MAX_NOTEBOOK_BYTES:
        raise UsageError(f"{clip(str(path))}: {info.st_size} bytes, more than the {MAX_NOTEBOOK_BYTES}-byte cap for a notebook")
    try:
        return nbformat.read(str(path), as_version=4)
    except OSError as exc:
        raise UsageError(f"{clip(str(path))}: cannot read the notebook ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:  # NotJSONError...
        raise UsageError(f"{clip(str(path))}: not a readable notebook ({type(exc).__name__}: "
                         f"{clip(str(exc), 160)})") from None


def walkthrough_title(path: Path) -> str:
    """The first heading of a notebook's first markdown cell."""
    nb = read_notebook(path)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("# ").strip()
    return path.stem


def resolve(name_or_path: str | Path) -> Path:
    """A walkthrough's path from its short name (``00_triage`` or ``triage``) or a notebook path."""
    path = Path(name_or_path)
    if path.suffix == ".ipynb" or os.path.exists(path):  # os.path: a name too long for the OS is just absent
        if not os.path.isfile(path):
            raise UsageError(f"{clip(str(path))}: " + ("not a regular file" if os.path.exists(path) else "notebook not found"))
        return path
    known = walkthroughs()
    name = str(name_or_path)
    matches = [p for stem, p in known.items() if stem == name or stem.split("_", 1)[1] == name]
    if not matches:
        raise UsageError(f"unknown walkthrough {clip(repr(name), 120)}: choose one of {', '.join(known)} or give a .ipynb path")
    return matches[0]


def notebook_parameters(path: str | Path) -> tuple[str, ...] | None:
    """Names assigned in a notebook's ``parameters`` cell (None when it has no such cell)."""
    import ast

    nb = read_notebook(path)
    cell = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        return None
    try:
        body = ast.parse(cell.source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f"line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
        message = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise UsageError(f"{clip(str(path))}: its parameters cell is not valid Python ({where}{clip(message, 120)})") from None
    return tuple(t.id for node in body if isinstance(node, (ast.Assign, ast.AnnAssign))
                 for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name))


@contextmanager
def _quiet_papermill() -> Iterator[None]:
    """papermill's own parameter inference cannot parse values holding '=' (``"sglang==0.5.11"``) and then
    warns that such parameters are unknown (:func:`run_notebook` checks parameter names itself); nbclient logs
    a cell timeout through papermill's logger before raising it (:func:`run_notebook` reports it in one line)."""
    import logging

    loggers = [logging.getLogger("papermill"), logging.getLogger("papermill.translators")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


KERNEL_ARGUMENTS = ("--IPKernelApp.log_level=CRITICAL",)
"""Extra kernel command-line arguments: the kernel app's own log (``Kernel is running over TCP without
encryption`` at start, a reply it cannot send after a cell timeout) would land on the runner's stderr and break
the one-line error contract. Cell output, errors included, travels over the kernel protocol and is unaffected."""


@contextmanager
def _writing(out: Path) -> Iterator[None]:
    """Turn a failed write under ``out`` into a one-line :class:`UsageError` naming the path."""
    try:
        yield
    except OSError as exc:
        target = Path(exc.filename) if exc.filename else None
        if target is None or not (target == out or out in target.parents or target in out.parents):
            raise
        raise UsageError(f"{target}: cannot write output ({exc.strerror or exc})") from None


def _check_kernel(kernel_name: str) -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if kernel_name not in specs:
        raise UsageError(f"no Jupyter kernel named {kernel_name!r} (available: {', '.join(sorted(specs)) or 'none'})")


# Cell helpers over plain dicts (a NotebookNode is one), shared with eagle3lens.notebook.remote_run which reads JSON.
def code_cells(nb: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The code cells of an executed notebook, papermill's injected parameters cell included."""
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def papermill_state(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    """What papermill recorded about a cell (status, exception, start_time...)."""
    return cell.get("metadata", {}).get("papermill", {})


def cell_failed(cell: Mapping[str, Any]) -> bool:
    state = papermill_state(cell)
    return bool(state.get("exception")) or state.get("status") == "failed"


def first_line(cell: Mapping[str, Any]) -> str:
    """The cell's first non-blank source line, stripped ("" for an empty cell)."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    return next((line.strip() for line in source.splitlines() if line.strip()), "")


def is_injected(cell: Mapping[str, Any]) -> bool:
    """Papermill's injected parameters cell (not part of the source notebook)."""
    return "injected-parameters" in cell.get("metadata", {}).get("tags", [])


def cell_label(cells: list[Mapping[str, Any]], cell: Mapping[str, Any]) -> str:
    """``code cell n of N`` for ``cell`` among ``cells`` (from :func:`code_cells`): 1-based over the source
    notebook's code cells, so papermill's injected parameters cell is not counted."""
    counted = [c for c in cells if not is_injected(c)]
    number = next((n for n, c in enumerate(counted, 1) if c is cell), None)
    return f"code cell {number} of {len(counted)}" if number else "the injected parameters cell"


def failed_cell(executed: Any) -> tuple[str, str, Any] | None:
    """``("code cell n of N", first source line, cell)`` of the cell that failed or was running last.

    Numbered as :func:`cell_label`. The failed cell is the one papermill marked as failed, else the
    last one that started (a cell timeout or a dead kernel leaves no mark). None when no cell ran.
    """
    cells = code_cells(_read(executed))
    failed = [c for c in cells if cell_failed(c)]
    started = [c for c in cells if papermill_state(c).get("start_time")]
    cell = failed[0] if failed else started[-1] if started else None
    if cell is None:
        return None
    return cell_label(cells, cell), first_line(cell), cell


def _mark_failed(nb: Any, cell: Any, ename: str, evalue: str) -> None:
    """Record an error the kernel could not report (timeout, dead kernel) in ``cell`` of the partial notebook."""
    nbformat = _nbformat()

    cell.outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                               traceback=[f"eagle3lens: error: {evalue}"]))
    cell.metadata.setdefault("papermill", {}).update(exception=True, status="failed")
    nb.metadata.setdefault("papermill", {})["exception"] = True


def run_notebook(name_or_path: str | Path, parameters: Mapping[str, Any] | None, out_dir: str | Path,
                 progress: bool = True, kernel_name: str = "python3", timeout: float | None = None) -> NotebookRun:
    """Execute a walkthrough headless and write ``<name>.ipynb``, ``<name>.html``, ``<name>.findings.json``.

    The executed notebook is saved after every cell, so a run that is killed still leaves what it did.

    Raises :class:`NotebookCellError` naming the failing cell when a cell raises, exceeds ``timeout``
    seconds or kills the kernel (the partial notebook and its HTML are still written);
    :class:`UsageError` for an unknown parameter or kernel, or an output that cannot be written.
    """
    _nbformat()
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    source = resolve(name_or_path)
    parameters = dict(parameters or {})
    known = notebook_parameters(source)
    unknown = sorted(set(parameters) - set(known)) if known is not None else []
    if known is not None and unknown:
        raise UsageError(f"{clip(str(source))}: unknown parameter{'s' if len(unknown) > 1 else ''} "
                         f"{clip(', '.join(unknown), 200)} (this notebook takes: {clip(', '.join(known), 300)})")
    out = Path(out_dir).absolute()
    executed = out / f"{source.stem}.ipynb"
    html = out / f"{source.stem}.html"
    findings_json = out / f"{source.stem}.findings.json"
    inline, by_file = split_parameters(parameters)
    params_file = out / f"{source.stem}.parameters.json"
    for output in (executed, html, findings_json, *([params_file] if by_file else [])):
        check_destination(output)  # papermill writes the .ipynb itself, not through safewrite
    _check_kernel(kernel_name)
    start = time.perf_counter()
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        notebook: Any = str(source)
        if by_file:
            write_text_atomic(params_file, json.dumps(by_file))
            notebook = with_file_parameters(read_notebook(source), params_file, by_file)
        try:
            # The kernel inherits this environment: plotly emits text/html with plotly.js inlined, and
            # no progress-bar widgets (transformers' weight loading) clutter the report.
            with _environ(PLOTLY_RENDERER="notebook", HF_HUB_DISABLE_PROGRESS_BARS="1"), _quiet_papermill():
                papermill.execute_notebook(notebook, str(executed), parameters=inline,
                                           kernel_name=kernel_name, progress_bar=progress,
                                           cwd=str(source.parent), execution_timeout=timeout,
                                           extra_arguments=list(KERNEL_ARGUMENTS), shutdown_kernel="immediate")
        except (PapermillExecutionError, CellTimeoutError, DeadKernelError) as exc:
            raise _cell_error(source, executed, html, exc, timeout) from None
        executed_nb = _read(executed)
        export_html(executed_nb, html)
        findings = tuple(collect_findings(executed_nb))
        write_text_atomic(findings_json, json.dumps({"notebook": str(source), "parameters": to_jsonable(parameters),
                                                     "findings": [f.to_dict() for f in findings]}, indent=2) + "\n")
    return NotebookRun(source, executed, html, findings_json, parameters, findings,
                       time.perf_counter() - start)


INLINE_PARAMETER_CHARS = 4096
"""A parameter whose JSON text is longer is passed by file: papermill would embed it in the notebook's JSON (twice:
the injected cell and its metadata), which every per-cell save, the HTML export and its highlighter then carry
(a 1.5 MB value cost 116 s of CPU and 1.9 GB)."""

FILE_PARAMETERS_TAG = "eagle3lens-file-parameters"


def split_parameters(parameters: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inline, by file): the parameters papermill injects as literals, and the large ones read from a file."""
    inline: dict[str, Any] = {}
    by_file: dict[str, Any] = {}
    for name, value in parameters.items():
        large = name.isidentifier() and len(json.dumps(to_jsonable(value))) > INLINE_PARAMETER_CHARS
        (by_file if large else inline)[name] = value
    return inline, by_file


def with_file_parameters(nb: Any, params_file: Path, names: Iterable[str]) -> Any:
    """``nb`` with a cell, right after its ``parameters`` cell (papermill puts its injected cell between them),
    that reads the named parameters from ``params_file`` through the library: the notebook's JSON holds the
    file's path, not the values."""
    nbformat = _nbformat()
    lines = ["from eagle3lens.notebook.kernel import file_parameters",
             f"_file_parameters = file_parameters({str(params_file)!r})  # too large to inline: passed by file"]
    lines += [f"{name} = _file_parameters[{name!r}]" for name in names]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.metadata["tags"] = [FILE_PARAMETERS_TAG]
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) < (4, 5):
        cell.pop("id", None)  # cell ids came with nbformat 4.5
    at = next((i + 1 for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), 0)
    nb.cells.insert(at, cell)
    return nb


def _cell_error(source: Path, executed: Path, html: Path, exc: Exception, timeout: float | None) -> NotebookCellError:
    """The :class:`NotebookCellError` for a failed run; completes the partial notebook and exports its HTML."""
    from nbclient.exceptions import CellTimeoutError

    if isinstance(exc, CellTimeoutError):
        limit = f"within {timeout:g} s " if timeout else ""
        ename, evalue = "CellTimeoutError", f"the cell did not finish {limit}(cell timeout)"
    elif hasattr(exc, "ename") and hasattr(exc, "evalue"):  # nbclient's and papermill's cell errors
        ename, evalue = exc.ename, exc.evalue
    else:
        ename, evalue = type(exc).__name__, "the kernel died while running the cell"
    nbformat = _nbformat()

    nb = _read(executed) if executed.is_file() else None
    where = failed_cell(nb) if nb is not None else None
    if where is None:
        return NotebookCellError(source, "a cell", "", f"{ename}: {evalue}", executed)
    label, first, cell = where
    if not hasattr(exc, "ename"):
        _mark_failed(nb, cell, ename, evalue)
        nbformat.write(nb, str(executed))
    export_html(nb, html)
    return NotebookCellError(source, label, first, f"{ename}: {evalue}", executed)


def _read(notebook: Any) -> Any:
    nbformat = _nbformat()

    return notebook if isinstance(notebook, nbformat.NotebookNode) else read_notebook(notebook)


def export_html(executed: Any, html_path: str | Path) -> Path:
    """A self-contained offline HTML page of an executed notebook (no CDN scripts).

    Widget views and widget state are left out: they need the widget manager from a CDN, and every
    widget cell also renders its output statically.
    """
    import jinja2
    from nbconvert import HTMLExporter

    nbformat = _nbformat()
    source = _read(executed)
    # A shallow view (nbconvert deep-copies what it is given; the outputs hold megabytes of plotly.js).
    nb = nbformat.NotebookNode({**source, "metadata": nbformat.NotebookNode(
        {k: v for k, v in source.metadata.items() if k != "widgets"})})
    nb.cells = [nbformat.NotebookNode({**cell, "outputs": [o for o in cell.outputs
                                                           if WIDGET_VIEW_MIME not in o.get("data", {})]})
                if cell.cell_type == "code" else cell for cell in source.cells]
    exporter = HTMLExporter(extra_loaders=[jinja2.DictLoader({"eagle3lens_offline.html.j2": _OFFLINE_TEMPLATE})],
                            template_file="eagle3lens_offline.html.j2")
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": Path(html_path).stem}})
    return write_text_atomic(Path(html_path), body)


def collect_findings(executed_ipynb: Any) -> list[Finding]:
    """The findings a walkthrough recorded (every :data:`FINDINGS_MIME` output), in recorded order.

    ``executed_ipynb``: a path or a ``NotebookNode``.
    """
    nb = _read(executed_ipynb)
    recorded: list[Finding] = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get(FINDINGS_MIME)
            if data is not None:
                recorded.extend(Finding.from_dict(f) for f in data["findings"])
    return findings_of(recorded)

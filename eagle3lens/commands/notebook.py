"""``eagle3lens notebook NAME``: run a walkthrough headless (papermill) and write .ipynb, .html, findings JSON."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

from ..errors import CheckpointError, UsageError
from ..findings import Report, Severity
from ..io.inputs import MiB, open_regular
from ..io.jsonio import read_json
from ..io.textsafe import clip, is_printable, printable
from . import add_output_options, example_epilog, finish

MAX_PARAMS_BYTES = 16 * MiB  # a parameters file is a small JSON object


def parse_value(text: str) -> Any:
    """papermill's ``-p`` typing: True/False/None, int, float, else the string itself."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_params_file(path: str) -> dict[str, Any]:
    """Parameters from a JSON object file (the remote runner passes them this way, never on a command line)."""
    if Path(path).exists():  # a FIFO or device would block or never end: type and size checked on an O_NONBLOCK fd
        try:
            with open_regular(path, MAX_PARAMS_BYTES, "parameters file"):
                pass
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
    data = read_json(path, "parameters file")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: parameters file must hold a JSON object of name -> value")
    return data


PATH_PARAMETERS = frozenset({"checkpoint", "target", "draft", "log", "data", "token_counts", "tokenizer", "demo_dir",
                             "chat", "templated"})
"""Parameters of the walkthroughs that name a file or directory (tests/e2e/test_notebooks_static.py holds every
walkthrough parameter filled from the demo's paths to this set). In a user's notebook also any name that is or
ends in ``path``, ``file``, ``dir``, ``log``, ``data``, ``checkpoint``, ``ckpt``, ``target`` or ``draft`` (as a
word: ``path``, ``log_file``, ``out_dir``). Only these are resolved against the working directory."""
PATH_WORDS = re.compile(r"(?:^|_)(?:path|file|dir|folder|log|data|checkpoint|ckpt|target|draft)s?$")
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: a longer value is no path anywhere
MAX_NAME_CHARS = 255  # NAME_MAX: a longer component is no file name anywhere


def is_path_parameter(name: str) -> bool:
    return name in PATH_PARAMETERS or PATH_WORDS.search(name) is not None


def _could_be_path(value: str) -> bool:
    return (bool(value) and len(value) <= MAX_PATH_CHARS and "\0" not in value
            and all(len(part) <= MAX_NAME_CHARS for part in value.split(os.sep)))


def absolute_paths(parameters: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative path parameters become absolute against ``base`` (where the command runs), present or not: the
    kernel runs in the notebook's folder, and an error about a missing file then names the path that was tried.
    Only path parameters are touched (an engine spec or a scenario is never taken for a file), and a value the OS
    cannot take as a name (too long, a NUL byte) is left as it is."""
    def resolved(key: str, value: Any) -> Any:
        if not (is_path_parameter(key) and isinstance(value, str) and _could_be_path(value)
                and not os.path.isabs(value)):
            return value
        return os.path.abspath(os.path.join(base, os.path.expanduser(value)))

    return {key: resolved(key, value) for key, value in parameters.items()}


def parameter_defaults(notebook: Path) -> dict[str, Any]:
    """The literal defaults a notebook's ``parameters`` cell assigns (names assigned anything else are left out)."""
    import ast

    from ..notebook.runner import read_notebook

    cell = next((c for c in read_notebook(notebook).cells if "parameters" in c.metadata.get("tags", [])), None)
    try:
        body = ast.parse(cell.source).body if cell is not None else []
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}  # the runner names what is wrong with the cell
    defaults: dict[str, Any] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                defaults[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                continue
    return defaults


def check_parameters(notebook: Path, parameters: Mapping[str, Any]) -> None:
    """Refuse in one line, before a kernel starts or a host is reached, a value the notebook cannot take: text
    where its default is a number, or a path holding a control character (a newline, ...)."""
    defaults = parameter_defaults(notebook)
    for name, value in parameters.items():
        default = defaults.get(name)
        if isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(value, str):
            raise UsageError(f"-p {name}: {notebook.stem} takes a number there (default {default!r}), not "
                             f"{clip(repr(value), 80)}")
        if is_path_parameter(name) and isinstance(value, str) and not is_printable(value):
            raise UsageError(f"-p {name}: the path {clip(repr(value), 120)} holds a control character (a newline, "
                             "a tab, ...): refused")


def list_walkthroughs(as_json: bool = False) -> int:
    """The walkthroughs, one per line, or (``as_json``) the report schema with ``results.walkthroughs``."""
    from ..notebook.runner import walkthrough_title, walkthroughs

    found = [{"name": name, "title": walkthrough_title(path), "path": str(path)}
             for name, path in walkthroughs().items()]
    if as_json:
        report = Report(checkpoint={})
        report.results["walkthroughs"] = found
        sys.stdout.write(report.to_json() + "\n")
        return 0
    for item in found:
        print(printable(f"{item['name']:20s} {item['title']}"))
    return 0


def add_remote_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host`` and the remote-run options (``eagle3lens.notebook.remote_run.run_from_args`` reads them; paramiko loads only then)."""
    group = parser.add_argument_group("remote run (over SSH, honouring ~/.ssh/config)")
    options: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--host",), dict(action="append", dest="host", metavar="HOST",
                           help="run on this SSH host ([user@]host[:port] or a ~/.ssh/config alias); "
                                "repeat to run on several hosts in parallel")),
        (("--remote-python",), dict(default="python3", metavar="PATH",
                                    help="interpreter on the host (a venv's bin/python; default: python3)")),
        (("--remote-workdir",), dict(default=None, metavar="DIR",
                                     help="directory on the host for the private run dir (default: its temp dir)")),
        (("--timeout",), dict(type=float, default=None, metavar="SECONDS",
                              help="wall-clock limit for the run; the remote process group is killed after it")),
        (("--ssh-config",), dict(default=None, metavar="FILE", help="ssh config file (default: ~/.ssh/config)")),
        (("--known-hosts",), dict(default=None, metavar="FILE",
                                  help="known_hosts file (default: UserKnownHostsFile or ~/.ssh/known_hosts)")),
        (("--accept-new-host-key",), dict(action="store_true",
                                          help="trust and record a host key seen for the first time "
                                               "(a changed key is always refused)")),
    ]
    for flags, kwargs in options:
        group.add_argument(*flags, **kwargs)


def host_failure(host: str, error: str, parameters: Mapping[str, Any]) -> str:
    """The one line a host's failure is told in: the host, the path parameter whose value the error quotes (the
    longest, so ``-p chat`` and not a shorter value inside it), then the host's error, escaped."""
    error = error.removeprefix(f"{host}: ")
    quoted = [(len(value), name) for name, value in parameters.items()
              if is_path_parameter(name) and isinstance(value, str) and value and value in error]
    blamed = f"-p {max(quoted)[1]}: " if quoted else ""
    return printable(f"{host}: {blamed}{error}")


def run_from_args(args: argparse.Namespace, notebook_name: str | Path, parameters: Mapping[str, Any]) -> int:
    """Run ``notebook_name`` on every ``--host`` with the remote options. The hosts' progress lines reach stderr
    escaped, on a terminal only (as progress bars do); each failed host is one ``eagle3lens: error:`` line there."""
    from ..notebook.remote_run import run_remote
    from ..render import print_renderable

    lock = threading.Lock()

    def show(host: str, line: str) -> None:
        with lock:
            print(printable(f"[{host}] {line}"), file=sys.stderr, flush=True)

    progress = sys.stderr.isatty() and not getattr(args, "no_progress", False)

    out = Path(getattr(args, "out", None) or f"{Path(notebook_name).stem}-remote")
    result = run_remote(
        notebook_name, parameters, args.host, out, timeout=getattr(args, "timeout", None),
        remote_python=args.remote_python, remote_workdir=args.remote_workdir, known_hosts=args.known_hosts,
        ssh_config=args.ssh_config, accept_new_host_key=args.accept_new_host_key, progress=show if progress else None)
    for host_run in result.hosts:
        if host_run.error:
            print(f"eagle3lens: error: {host_failure(host_run.host, host_run.error, parameters)}", file=sys.stderr)
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        print_renderable(result)
    return result.exit_code(getattr(args, "fail_on", Severity.CRITICAL))


def run(args: argparse.Namespace) -> int:
    from ..notebook.runner import run_notebook

    if args.list:
        return list_walkthroughs(args.json)
    if not args.name:
        raise UsageError("give a walkthrough NAME or path (see `eagle3lens notebook --list`)")
    parameters = read_params_file(args.params_file) if args.params_file else {}
    parameters.update({key: parse_value(value) for key, value in args.parameter})
    from ..notebook.runner import resolve

    check_parameters(resolve(args.name), parameters)
    if args.host:
        return run_from_args(args, args.name, parameters)
    if args.timeout is not None:
        raise UsageError("--timeout is the wall-clock limit of a --host run; use --cell-timeout for a local run")
    parameters = absolute_paths(parameters, Path.cwd())
    result = run_notebook(args.name, parameters, args.out, progress=not args.no_progress,
                          kernel_name=args.kernel, timeout=args.cell_timeout)
    report = Report(checkpoint={}, findings=list(result.findings))
    report.results["notebook"] = result
    return finish(report, args)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "notebook", help="run a walkthrough notebook headless and write .ipynb, .html and findings JSON",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=example_epilog(
            "eagle3lens notebook --list",
            "eagle3lens notebook 00_triage --out reports/                  # the demo incident",
            "eagle3lens notebook triage -p checkpoint my-draft/ -p engine sglang==0.5.11",
            "eagle3lens notebook 03_vocab --params-file params.json --out reports/",
            "eagle3lens notebook my_copy.ipynb -p log server.log",
            "eagle3lens notebook 00_triage --host gpu-node --remote-python ~/venv/bin/python --out reports/",
            "eagle3lens notebook 00_triage --host node-a --host node-b --timeout 1800   # side by side per host"))
    p.add_argument("name", metavar="NAME", nargs="?",
                   help="walkthrough short name (00_triage or triage) or a .ipynb path")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help="set a parameter (typed like papermill: True/False/None, int, float, else string)")
    p.add_argument("--params-file", metavar="FILE", help="JSON object of parameters (applied before -p)")
    p.add_argument("--out", default="eagle3lens-notebooks", metavar="DIR",
                   help="output directory (default: ./eagle3lens-notebooks)")
    p.add_argument("--list", action="store_true", help="list the walkthroughs and exit")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel name (default: python3)")
    p.add_argument("--cell-timeout", type=float, default=None, metavar="S", help="per-cell timeout in seconds (local runs)")
    p.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    add_remote_arguments(p)
    add_output_options(p)
    p.set_defaults(func=run)

"""The ``--execute`` options ``keys`` and ``doctor`` share, and the executed load they run (here or on ``--host``)."""

from __future__ import annotations

import argparse
from typing import Any

from ..checkpoint import Checkpoint
from ..errors import UsageError
from . import positive_float
from ._measure import add_engine_python_option

SHOWN_LINES = 40  # lines of the engine's output and log -v shows (all of them are in --json)


def add_execute_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--execute", action="store_true",
                   help=f"with --engine installed: {what} from the engine's own load_weights run on meta tensors (no "
                        "GPU, no weights read) instead of the simulation; differences are engine/simulation-disagrees")
    p.add_argument("--engine-root", metavar="DIR", default=None,
                   help="with --execute: the engine package in DIR (an unpacked wheel) instead of the installed one")
    p.add_argument("--host", metavar="H", help="with --execute: run the engine installed on GPU host H over SSH (only "
                                               "the headers travel; --engine-root is then a directory there); with "
                                               "--measure: serve there (--engine-python is then a Python there)")
    add_engine_python_option(p)
    p.add_argument("--python", default="python3", help="the Python on --host (with eagle3lens and the engine)")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh config file for --host (default ~/.ssh/config)")
    p.add_argument("--execute-timeout", type=positive_float, metavar="S", default=None,
                   help="with --execute: stop the engine's process after S seconds (default: $EAGLE3LENS_EXECUTE_TIMEOUT, "
                        "else 300); it is then engine/not-executed")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="with --execute: show what the engine printed and logged (escaped; always in --json)")


def executing(args: argparse.Namespace) -> bool:
    """Whether the command runs the engine's own loader; the option combinations that cannot work are refused."""
    if args.host and not args.execute and not getattr(args, "measure", False):
        raise UsageError("--host runs the host's engine: add --execute or --measure (the simulation needs no host)")
    execute = bool(args.execute or args.engine_root)
    if execute and args.engine_python and (args.engine_root or args.host):
        raise UsageError("--engine-python runs the engine installed for that Python: leave out "
                         + ("--engine-root" if args.engine_root else "--host (its --python names the host's)"))
    if execute and (args.engine or "installed").strip().lower() != "installed":
        raise UsageError(f"--execute runs the installed engine's own loader: write --engine installed, not "
                         f"--engine {args.engine}")
    return execute


def host_execution(ckpt: Checkpoint, args: argparse.Namespace) -> Any:
    """With ``--host``: the record of the host's engine run on ``ckpt``'s headers there (None without it)."""
    if not args.host:
        return None
    from ..engines.execute_remote import execute_on_host

    return execute_on_host(ckpt, args.host, fallback_class=None, python=args.python, ssh_config=args.ssh_config,
                           engine_root=args.engine_root)


def local_root(args: argparse.Namespace) -> str | None:
    """``--engine-root`` when it is a directory here (with ``--host`` it names one there)."""
    return None if args.host else args.engine_root


def executed_load(ckpt: Checkpoint, args: argparse.Namespace, num_target_layers: int | None) -> Any:
    """The executed LoadResult: the engine here (or in ``--engine-root``), or the one installed on ``--host``."""
    from ..probes.executed import execute_load

    return execute_load(ckpt, root=local_root(args), num_target_layers=num_target_layers,
                        execution=host_execution(ckpt, args), timeout=args.execute_timeout,
                        python=engine_python(args))


def engine_python(args: argparse.Namespace) -> str | None:
    """The Python the installed engine runs under (``--engine-python``, else ``$EAGLE3LENS_ENGINE_PYTHON``, else
    this one: None); not with ``--engine-root`` or ``--host``, which name their own."""
    if args.engine_root or args.host:
        return None
    from ..engines.measure import engine_python as resolved

    return resolved(args.engine_python)


def engine_output_notes(result: Any, verbose: bool) -> list[str]:
    """The engine's own output and warnings as report notes: each line with ``verbose`` (up to
    :data:`SHOWN_LINES`), else one line saying how many there are and that ``-v`` shows them."""
    execution = result.execution or {}
    logs = [f"engine log ({e.get('level')}, {e.get('logger')}): {e.get('message')}" for e in execution.get("logs", ())]
    printed = [f"engine output: {line}" for line in str(execution.get("output") or "").splitlines() if line.strip()]
    lines = logs + printed
    if not lines:
        return []
    if not verbose:
        return [f"the engine logged {len(logs)} warning(s) and printed {len(printed)} line(s): -v shows them"]
    more = len(lines) - SHOWN_LINES
    return lines[:SHOWN_LINES] + ([f"... {more} more lines of the engine's output in --json "
                                   "(results.keys.execution)"] if more > 0 else [])

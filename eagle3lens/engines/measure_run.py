"""What one ``--measure`` run is made of, here and on a host: the child program, its files and their bounds."""

from __future__ import annotations

from pathlib import Path

CHILD = Path(__file__).with_name("measure_child.py")
REQUEST, RECORD, LOG = "request.json", "record.json", "engine.log"  # the files of one run, here and on a host
MAX_RECORD_BYTES = 64 << 20


def too_long(timeout_s: float) -> str:
    """What a run past its time limit says."""
    return (f"the engine did not finish within {timeout_s:g} s (EAGLE3LENS_MEASURE_TIMEOUT or --measure-timeout "
            f"raise the limit)")

"""Runs on the remote host (standard library only; sent by ``eagle3lens.notebook.remote_run`` as ``PY -c SOURCE``).

``python -c SOURCE WORKDIR MIN_FREE_BYTES`` prints one JSON line: the interpreter's version and path, the
installed eagle3lens and papermill versions, the GPUs (``nvidia-smi -L``, else ``torch.cuda`` where a GPU device
node exists), the free bytes in WORKDIR (the system temp dir when WORKDIR is empty), and, when eagle3lens and
papermill are installed and at least MIN_FREE_BYTES are free, ``run_dir``: a private directory made there for
the run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from typing import Any


def version(name: str) -> str | None:
    """The installed distribution's version, None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gpus(out: dict[str, Any]) -> None:
    """Fill ``gpu`` (device names) and ``gpu_source``; both stay None when no GPU is found."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            lines = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout.splitlines()
            out["gpu"], out["gpu_source"] = [line.strip() for line in lines if line.startswith("GPU ")], "nvidia-smi"
        except (OSError, subprocess.SubprocessError):
            pass
    elif version("torch") and any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/kfd")):
        import torch

        out["gpu"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        out["gpu_source"] = "torch.cuda"


def preflight(workdir: str, min_free: int) -> dict[str, Any]:
    """What this interpreter offers, and a private run dir when the run can go ahead."""
    workdir = workdir or tempfile.gettempdir()
    out: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable, "workdir": workdir,
                           "eagle3lens": version("eagle3lens"), "papermill": version("papermill"), "gpu": None,
                           "gpu_source": None}
    try:
        out["free_bytes"] = shutil.disk_usage(workdir).free
    except OSError as exc:
        out["free_bytes"] = None
        out["workdir_error"] = exc.strerror or str(exc)
    gpus(out)
    if out["eagle3lens"] and out["papermill"] and (out["free_bytes"] or 0) >= min_free:
        out["run_dir"] = tempfile.mkdtemp(prefix="eagle3lens-run-", dir=workdir)
    return out


if __name__ == "__main__":
    print(json.dumps(preflight(sys.argv[1], int(sys.argv[2]))))

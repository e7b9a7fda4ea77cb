"""The one-line refusal of a command that runs the target's weights when the target directory holds only its config."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..io.textsafe import clean_text

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def require_target_weights(target: str | None, command: str, notebook: str) -> None:
    """UsageError when ``target`` is a directory with a config.json and no weight files: ``command`` runs the
    target's weights, so it has to run where they live (``--host`` runs the walkthrough there)."""
    if target is None:
        return
    path = Path(target)
    if not (path.is_dir() and (path / "config.json").is_file()):
        return
    if any(p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json") for p in path.iterdir()):
        return
    raise UsageError(f"{clean_text(str(path))}: holds only config.json, and {command} runs the target's weights: run "
                     f"it where the target lives (eagle3lens notebook {notebook} --host HOST -p target PATH, or "
                     f"eagle3lens {command} on that host)")

"""What serving depends on in a target's config.json: architecture, model_type, text widths, layer count.

Read as transformers reads it (``attribute_map``: a GPT-2 config's ``n_embd`` / ``n_layer``), from the text
config of a multimodal wrapper (``text_config``, ...) where there is one. No weights, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checkpoint import Checkpoint
from ..io.inputs import inside
from ..errors import UsageError
from ..hf_config import canonical
from ..io.jsonio import read_json

TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")


@dataclass(frozen=True)
class TargetShape:
    """What the served draft depends on in a target's config.json."""

    path: str
    architecture: str
    hidden_size: int
    num_hidden_layers: int
    model_type: str | None = None  # of the text config (vLLM's EAGLE-3 target gate reads it)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "architecture": self.architecture, "hidden_size": self.hidden_size,
                "num_hidden_layers": self.num_hidden_layers, "model_type": self.model_type}


def read_target_shape(target: str | Path | Checkpoint) -> TargetShape:
    """Architecture, model_type, hidden size and layer count from a target's config.json (a directory or the file)."""
    path = target.root if isinstance(target, Checkpoint) else Path(target)
    config_path = inside(path, path / "config.json", what="config.json") if path.is_dir() else path
    config = read_json(config_path, "target config")
    if not isinstance(config, dict):
        raise UsageError(f"{config_path}: the target config is not a JSON object")
    config = canonical(config)
    archs = config.get("architectures")
    if not (isinstance(archs, list) and archs and isinstance(archs[0], str)):
        raise UsageError(f"{config_path}: the target config names no architectures (a list of class names)")
    text = next((config[k] for k in TEXT_CONFIG_KEYS if isinstance(config.get(k), dict)), config)
    sizes = {}
    for key in ("hidden_size", "num_hidden_layers"):
        value = text.get(key, config.get(key))
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 24:
            raise UsageError(f"{config_path}: the target config's {key} is not a positive integer")
        sizes[key] = value
    model_type = text.get("model_type", config.get("model_type"))
    return TargetShape(str(config_path), archs[0], sizes["hidden_size"], sizes["num_hidden_layers"],
                       model_type if isinstance(model_type, str) else None)

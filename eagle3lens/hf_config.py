"""Config keys as transformers reads them: each architecture's ``attribute_map`` (``n_embd`` -> ``hidden_size``).

A GPT-2 style config says ``n_embd`` / ``n_layer`` / ``n_head`` where a Llama config says ``hidden_size`` /
``num_hidden_layers`` / ``num_attention_heads``; transformers' config class for the ``model_type`` maps one onto
the other. The maps are read from the installed transformers' own configuration modules as source (``ast``, never
executed): importing a transformers config class imports torch, and the served-draft derivation reads configs
without torch. An unknown ``model_type`` (or no transformers) leaves the raw keys as they are.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

NESTED = ("text_config", "transformer_layer_config", "language_config", "llm_config")
MAX_SOURCE = 1 << 20  # a configuration module is a few kB; anything larger is not read


def canonical(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every canonical key its architecture aliases filled from the alias (nested configs too).

    A key the config sets itself wins over its alias; the input is not modified."""
    out = dict(config)
    model_type = out.get("model_type")
    for name, alias in (attribute_map(model_type) if isinstance(model_type, str) else {}).items():
        if name not in out and alias in out:
            out[name] = out[alias]
    for key in NESTED:
        if isinstance(out.get(key), dict):
            out[key] = canonical(out[key])
    return out


@lru_cache(maxsize=None)
def attribute_map(model_type: str) -> dict[str, str]:
    """transformers' ``attribute_map`` of the config class registered for ``model_type`` ({} when unknown)."""
    root = _transformers_root()
    if root is None or not model_type.replace("_", "").isalnum():
        return {}
    auto = root / "models" / "auto"
    class_name = _registered(auto, "CONFIG_MAPPING_NAMES", model_type)  # auto_mappings.py from transformers 5
    if not isinstance(class_name, str):
        return {}
    package = _registered(auto, "SPECIAL_MODEL_TYPE_TO_MODULE_NAME", model_type) or model_type.replace("-", "_")
    module = root / "models" / package / f"configuration_{package}.py"
    found = _class_attribute(module, class_name, "attribute_map")
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(found, dict) else {}


@lru_cache(maxsize=1)
def _transformers_root() -> Path | None:
    spec = importlib.util.find_spec("transformers")  # locates the package without importing it
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(locations[0]) if locations else None


def _registered(auto: Path, table: str, model_type: str) -> Any:
    """``model_type``'s entry in one of transformers' auto tables (wherever this release defines it)."""
    for name in ("auto_mappings.py", "configuration_auto.py"):
        pairs = _literal_assignment(auto / name, table)
        if isinstance(pairs, list):
            return dict(p for p in pairs if isinstance(p, tuple) and len(p) == 2).get(model_type)
    return None


def _tree(path: Path) -> ast.Module | None:
    if not path.is_file() or path.stat().st_size > MAX_SOURCE:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _literal_assignment(path: Path, name: str) -> Any:
    """The literal value assigned to module-level ``name`` (``OrderedDict([...])`` read as its list of pairs)."""
    tree = _tree(path)
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # OrderedDict([...])
                value = value.args[0]
            try:
                return ast.literal_eval(value)
            except ValueError:
                return None
    return None


def _class_attribute(path: Path, class_name: str, attribute: str) -> Any:
    tree = _tree(path)
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.Assign):
                    targets, value = item.targets, item.value
                elif isinstance(item, ast.AnnAssign) and item.value is not None:
                    targets, value = [item.target], item.value
                else:
                    continue
                if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
                    try:
                        return ast.literal_eval(value)
                    except ValueError:
                        return None
    return None

"""The house in layers: every import of every module stays in its own layer or goes to a lower one.

The order, lowest first (docs/development.md states it for readers; this table is the rule):

1. ``base``: errors, findings, the finding catalogue, progress, ``io/`` (files, JSON, headers, safe writes), SSH
   transport (``remote/``);
2. ``model``: the checkpoint and its draft spec, configs, aux-layer conventions, the reference draft, the target
   runtime, transformers loading and chat templates;
3. ``engines``: release data, the profile interpreter, ``--execute``'s harness, launches, the config writer;
4. ``served``: what a release runs: the load walk, aux layers, stops, fc, vocab mapping;
5. ``probes``: judgments (findings) over served facts and data, the executed load held against the walk;
6. ``workflows``: doctor, convert, demo, the release audit (``release_audit``: it runs engines and judges their
   loads), and the result data of notebook runs (``run_results``), which the views draw;
7. ``views``: ``plots/``;
8. ``front``: the renderer, ``notebook/`` (the kernel, widgets, the runs local and over SSH);
9. ``glue``: the CLI, ``commands/`` and the package facade.

Every ``import`` counts: top level, inside a function, under ``TYPE_CHECKING``, absolute or relative, and
``importlib.import_module`` with a literal name. There is no allow-list.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _paths import ROOT

PACKAGE = ROOT / "eagle3lens"
LAYERS = ("base", "model", "engines", "served", "probes", "workflows", "views", "front", "glue")

# the longest matching prefix decides (module names relative to the package; "" is the package facade)
LAYER_OF: dict[str, str] = {
    "errors": "base", "findings": "base", "catalogue": "base", "progress": "base", "_version": "base",
    "tensor_info": "base", "io": "base", "remote": "base",
    "checkpoint": "model", "draft_spec": "model", "hf_config": "model", "mla_config": "model", "hf_load": "model",
    "chat_template": "model", "draft": "model", "aux_ids": "model", "target_runtime": "model",
    "engines": "engines", "launch": "engines", "convert_config": "engines",
    "served": "served",
    "probes": "probes",
    "doctor": "workflows", "convert": "workflows", "demo": "workflows", "demo_chat": "workflows", "demo_built": "workflows",
    "demo_real": "workflows", "demo_real_model": "workflows", "demo_real_data": "workflows", "demo_real_train": "workflows",
    "release_audit": "workflows", "run_results": "workflows",
    "plots": "views",
    "render": "front", "notebook": "front", "demo_readme": "front",
    "": "glue", "cli": "glue", "__main__": "glue", "commands": "glue",
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """The layer of ``eagle3lens.X.Y``: the entry of the longest prefix of ``X.Y`` in LAYER_OF."""
    rel = module.partition(".")[2]
    parts = rel.split(".") if rel else []
    for n in range(len(parts), -1, -1):
        key = ".".join(parts[:n])
        if key in LAYER_OF:
            return LAYER_OF[key]
    raise KeyError(module)


def imports_of(path: Path, module: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every eagle3lens module ``path`` imports, wherever the import statement is."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            names_only = len(submodules) < len(node.names)  # ``from . import __version__`` imports the package
            found += [(node.lineno, m) for m in submodules] + ([(node.lineno, target)] if names_only else [])
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, m) for line, m in found if m == "eagle3lens" or m.startswith("eagle3lens.")]


def upward_imports(root: Path = PACKAGE) -> list[str]:
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    bad = []
    for module, path in files.items():
        mine = LAYERS.index(layer_of(module))
        for line, target in imports_of(path, module, set(files)):
            theirs = LAYERS.index(layer_of(target))
            if theirs > mine:
                bad.append(f"{path.relative_to(root.parent)}:{line}: {module} ({LAYERS[mine]}) imports {target} "
                           f"({LAYERS[theirs]})")
    return bad


def test_every_module_has_a_layer() -> None:
    unplaced = []
    for p in PACKAGE.rglob("*.py"):
        try:
            layer_of(module_name(p))
        except KeyError:
            unplaced.append(module_name(p))
    assert not unplaced, f"modules with no layer (add them to LAYER_OF): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    bad = upward_imports()
    assert not bad, "imports from a lower layer to a higher one:\n" + "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["top", "function", "import_module"])
def test_a_planted_upward_import_fails(tmp_path: Path, where: str) -> None:
    """A copy of the package with one upward import planted (at top level, inside a function, through
    importlib) is caught, naming the file, the line and both layers."""
    import shutil

    copy = tmp_path / "eagle3lens"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    planted = {"top": "from ..probes.keys import simulate_load\n",
               "function": "def _late():\n    from ..doctor import diagnose\n    return diagnose\n",
               "import_module": "import importlib\n_PLOTS = importlib.import_module('eagle3lens.plots.keys')\n"}[where]
    target = copy / "served" / "load.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n" + planted, encoding="utf-8")
    new = sorted(set(upward_imports(copy)) - set(upward_imports()))
    assert len(new) == 1 and new[0].startswith("eagle3lens/served/load.py:"), new
    assert "eagle3lens.served.load (served) imports" in new[0]

"""The house is one-way: data (read -> probe -> result) never imports its views, and no module imports itself back.

Every module under ``eagle3lens/`` is parsed with ``ast``; every ``import`` counts, at top level, inside a
function or under ``TYPE_CHECKING``, absolute or relative.

* **view side**: ``eagle3lens.plots.*``, ``render``, ``widgets``, the notebook kernel module ``notebook`` and the
  walkthroughs' page helpers ``notebook.pages`` (with rich, plotly, ipywidgets and IPython);
* **glue**: ``cli``, ``__main__`` and ``commands.*`` (they compose data and views);
* **data side**: everything else (probes, engines, findings, doctor, checkpoint, convert, errors, a new
  catalogue...): it imports no view module nor view library, directly or through another module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _paths import ROOT

PACKAGE = ROOT / "eagle3lens"
VIEW_MODULES = ("eagle3lens.plots", "eagle3lens.render", "eagle3lens.notebook.widgets", "eagle3lens.notebook.kernel",
                "eagle3lens.notebook.pages")
VIEW_LIBRARIES = ("rich", "plotly", "ipywidgets", "IPython")
GLUE = ("eagle3lens.cli", "eagle3lens.__main__", "eagle3lens.commands")


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(module: str) -> set[str]:
    """Every module ``module`` imports (absolute names; for ``from X import y``, ``X.y`` too when it is a module)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _side(name: str) -> str:
    if _within(name, VIEW_MODULES):
        return "view"
    return "glue" if _within(name, GLUE) else "data"


def test_every_module_is_parsed() -> None:
    assert {"eagle3lens.findings", "eagle3lens.probes.keys", "eagle3lens.plots.registry", "eagle3lens.render"} <= set(MODULES)
    assert "eagle3lens.plots.registry" in GRAPH["eagle3lens.render"]  # relative imports resolve


def test_data_side_never_imports_the_view_side() -> None:
    """No data module imports a view module or a view library, directly or through the modules it imports."""
    bad = []
    for module in MODULES:
        if _side(module) != "data":
            continue
        seen, todo = {module}, [module]
        while todo:
            current = todo.pop()
            for target in GRAPH.get(current, ()):
                if _within(target, VIEW_MODULES) or target.split(".")[0] in VIEW_LIBRARIES:
                    via = "" if current == module else f" (through {current})"
                    bad.append(f"{module} imports {target}{via}")
                elif target in MODULES and target not in seen:
                    seen.add(target)
                    todo.append(target)
    assert not bad, "data side reaches the view side:\n" + "\n".join(sorted(set(bad)))


def test_results_carry_no_view_methods() -> None:
    """No class outside the view side defines ``__rich__``, ``_repr_html_`` or ``figures``: views are registered."""
    bad = []
    for module, path in MODULES.items():
        if _side(module) == "view":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bad += [f"{module}.{node.name}.{f.name}" for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name in ("__rich__", "_repr_html_", "figures", "figure")]
    assert not bad, bad


def test_no_import_cycles() -> None:
    """The import graph among eagle3lens modules (function-level imports included) is acyclic."""
    internal = {m: sorted(t for t in targets if t in MODULES and t != m) for m, targets in GRAPH.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in internal[node]:
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in internal:
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_exception_type_lives_in_errors() -> None:
    """Exception classes are defined in eagle3lens/errors.py only (private helpers excepted)."""
    bad = []
    for module, path in MODULES.items():
        if module == "eagle3lens.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases}
                if any(b.endswith(("Error", "Exception", "Refused", "Unsupported")) for b in bases):
                    bad.append(f"{module}.{node.name}")
    assert not bad, bad


def test_views_table_matches_what_the_view_modules_register() -> None:
    """VIEWS names every result type a plots module registers a view for, and the module that does."""
    from eagle3lens.plots.registry import VIEWS, figures, html_view, load_all_views, qualified_name, rich_view

    load_all_views()
    registered: dict[str, set[str]] = {}
    for dispatcher in (rich_view, html_view, figures):
        for cls, func in dispatcher.registry.items():
            if cls is not object:
                registered.setdefault(qualified_name(cls), set()).add(func.__module__)
    assert set(registered) == set(VIEWS)
    assert all(modules == {VIEWS[name]} for name, modules in registered.items()), registered
    registering = {m for m, p in MODULES.items() if m.startswith("eagle3lens.plots.")
                   and ".register" in p.read_text(encoding="utf-8") and m != "eagle3lens.plots.registry"}
    assert registering == set(VIEWS.values())

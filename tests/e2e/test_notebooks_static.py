"""The walkthroughs hold no logic: every code cell only calls the library and displays (fast, no kernel)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from _paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LOGIC = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
         ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def code_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def logic_in(source: str) -> list[str]:
    """``line: NodeType`` for each loop, definition or comprehension in a cell's source."""
    return [f"{node.lineno}: {type(node).__name__}" for node in ast.walk(ast.parse(source)) if isinstance(node, LOGIC)]


def test_the_walkthroughs_are_found() -> None:
    assert len(NOTEBOOKS) >= 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_are_calls_and_displays_only(path: Path) -> None:
    found = [f"cell {i} line {hit}" for i, source in code_cells(path) for hit in logic_in(source)]
    assert not found, f"{path.name}: move this logic into eagle3lens: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs_and_with_a_parameters_cell(path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert not [c for c in code if c.get("outputs") or c.get("execution_count") is not None]
    assert sum("parameters" in c.get("metadata", {}).get("tags", []) for c in code) == 1


def test_the_check_sees_each_kind_of_logic() -> None:
    source = ("for x in y:\n    pass\nwhile 0:\n    pass\ndef f():\n    pass\nclass C:\n    pass\n"
              "[a for a in b]\n{a for a in b}\n{a: a for a in b}\nsum(a for a in b)\n")
    kinds = {hit.split(": ")[1] for hit in logic_in(source)}
    assert kinds == {"For", "While", "FunctionDef", "ClassDef", "ListComp", "SetComp", "DictComp", "GeneratorExp"}
    assert logic_in("nb.show(simulate_load(checkpoint, engine))\nwidgets.probe_panel(lambda x: f(x), {})") == []


PAGE_PATHS = {"demo_dir", "real_dir", "checkpoint", "target", "chat", "data", "templated", "log"}  # pages' path arguments


def demo_filled(path: Path) -> set[str]:
    """The parameters a walkthrough fills from the demo's paths (``chat = chat or str(demo.chat)``, ``nb.demo(demo_dir)``,
    or handed to a page resolver that does: ``pages.low_acceptance(demo_dir, real_dir, chat=chat, ...)``)."""
    def reads_demo(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "demo"
                   for n in ast.walk(node))

    found: set[str] = set()
    for _, source in code_cells(path):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    pairs = (zip(target.elts, node.value.elts, strict=True)
                             if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                             else [(target, node.value)])
                    found |= {t.id for t, v in pairs if isinstance(t, ast.Name) and reads_demo(v)}
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "demo"):
                found |= {a.id for a in node.args if isinstance(a, ast.Name)}
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "pages"):
                found |= {a.id for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Name)
                          and a.id in PAGE_PATHS}
    return found


def test_every_parameter_filled_from_the_demo_is_resolved_as_a_path() -> None:
    """`notebook NAME -p chat demo/chat.jsonl` failed: the kernel runs in the notebook's folder and `chat` was not made
    absolute like `checkpoint`. Every walkthrough parameter that defaults to one of the demo's files is a path."""
    from eagle3lens.commands.notebook import is_path_parameter
    from eagle3lens.notebook.runner import notebook_parameters

    filled = {path.stem: demo_filled(path) & set(notebook_parameters(path) or ()) for path in NOTEBOOKS}
    assert {"chat", "templated", "data", "checkpoint", "log", "demo_dir"} <= filled["08_low_acceptance"]
    missing = {stem: sorted(n for n in names if not is_path_parameter(n)) for stem, names in filled.items()}
    assert not {stem: names for stem, names in missing.items() if names}


def test_triage_points_to_every_other_walkthrough() -> None:
    """00_triage's "Where to go next" listed 01-05 only after 06-08 were added."""
    cells = json.loads(NOTEBOOKS[0].read_text())["cells"]
    where = next("".join(c["source"]) for c in cells
                 if c["cell_type"] == "markdown" and "Where to go next" in "".join(c["source"]))
    assert NOTEBOOKS[0].stem == "00_triage"
    missing = [p.stem for p in NOTEBOOKS[1:] if f"`{p.stem}`" not in where]
    assert not missing, f"00_triage's 'Where to go next' does not name {missing}"


def test_readme_lists_every_walkthrough_and_where_the_demo_lives() -> None:
    section = (ROOT / "docs" / "notebooks.md").read_text()
    assert not [p.stem for p in NOTEBOOKS if f"| `{p.stem}` |" not in section]
    assert "EAGLE3LENS_DEMO_DIR" in section and "~/.cache/eagle3lens/demo" in section

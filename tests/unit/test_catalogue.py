"""The finding catalogue: Finding validation, probe ownership of codes, the doctor's causal order."""

from __future__ import annotations

import ast

import pytest

from _paths import ROOT
from eagle3lens import catalogue
from eagle3lens.doctor import causal_rank, rank_findings
from eagle3lens.findings import Finding, Severity

PACKAGE = ROOT / "eagle3lens"


def _codes_constructed(tree: ast.Module) -> list[tuple[int, str | None]]:
    """(line, code) for every ``Finding(...)`` call. The code is a literal, a conditional of literals, or a local
    name assigned only literals in the enclosing function; anything else gives code None."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def scope_of(node: ast.AST) -> ast.AST:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return tree

    def codes(arg: ast.expr | None, scope: ast.AST) -> set[str] | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return {arg.value}
        if isinstance(arg, ast.IfExp):
            body, orelse = codes(arg.body, scope), codes(arg.orelse, scope)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(arg, ast.Name):
            values = [n.value for n in ast.walk(scope) if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)]
            if values and all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values):
                return {v.value for v in values}  # type: ignore[attr-defined]
        return None

    found: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
            got = codes(arg, scope_of(node))
            found += [(node.lineno, None)] if got is None else [(node.lineno, code) for code in sorted(got)]
    return found


def _emitting_modules() -> dict[str, str]:
    return {module: probe for probe, modules in catalogue.PROBES.items() for module in modules}


def test_each_module_constructs_only_the_codes_its_probe_owns() -> None:
    owners = _emitting_modules()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("findings.py", "catalogue.py"):
            continue
        for line, code in _codes_constructed(ast.parse(path.read_text(), str(path))):
            if code is None:
                wrong.append(f"{rel}:{line}: Finding code is not a literal (write the code string at the call)")
            elif code not in catalogue.BY_CODE:
                wrong.append(f"{rel}:{line}: {code} is not in the catalogue")
            elif owners.get(rel) != catalogue.BY_CODE[code].owner:
                wrong.append(f"{rel}:{line}: {code} belongs to {catalogue.BY_CODE[code].owner}, "
                             f"this module to {owners.get(rel) or 'no probe'}")
    assert not wrong, "\n".join(wrong)


def test_every_catalogued_code_is_constructed_by_its_owner() -> None:
    """No dead rows: each code has a Finding(...) in one of its owner's modules."""
    constructed: dict[str, set[str]] = {}
    for probe, modules in catalogue.PROBES.items():
        for module in modules:
            for _, code in _codes_constructed(ast.parse((PACKAGE / module).read_text())):
                if code is not None:
                    constructed.setdefault(probe, set()).add(code)
    missing = [c.code for c in catalogue.CODES if c.code not in constructed.get(c.owner, set())]
    assert not missing, missing


def test_the_ast_scan_sees_literals_conditionals_and_local_variables() -> None:
    source = (
        "def f(x):\n"
        "    a = Finding('keys/dropped', 'critical', 't')\n"
        "    b = Finding('weights/nan' if x else 'weights/inf', 'critical', 't')\n"
        "    code = 'vocab/bad-shape'\n"
        "    if x:\n"
        "        code = 'vocab/d2t-invalid'\n"
        "    c = Finding(code, 'critical', 't')\n"
        "    d = Finding(pick(x), 'critical', 't')\n")
    found = set(_codes_constructed(ast.parse(source)))
    assert found == {(2, "keys/dropped"), (3, "weights/inf"), (3, "weights/nan"), (7, "vocab/bad-shape"),
                     (7, "vocab/d2t-invalid"), (8, None)}


def test_an_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown finding code 'keys/no-such-thing'"):
        Finding("keys/no-such-thing", Severity.WARNING, "t")
    with pytest.raises(ValueError, match="unknown finding code"):
        Finding("noslash", Severity.WARNING, "t")
    with pytest.raises(ValueError, match="unknown finding code"):
        Finding.from_dict({"code": "made/up", "severity": "info", "title": "t"})
    assert Finding("keys/dropped", "critical", "t").severity is Severity.CRITICAL


def test_catalogue_rows_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown owner probe"):
        catalogue.Code("keys/x", owner="nobody", severity="info", rank=1, meaning="m")
    with pytest.raises(ValueError, match="area/slug"):
        catalogue.Code("keys", owner="keys", severity="info", rank=1, meaning="m")
    with pytest.raises(ValueError, match="unknown severity"):
        catalogue.Code("keys/x", owner="keys", severity="fatal", rank=1, meaning="m")  # type: ignore[arg-type]


def test_doctor_order_comes_from_the_catalogue_ranks() -> None:
    for code in catalogue.CODES:
        assert causal_rank(code.code) == code.rank
    # the incident's silent causes lead, the log's symptom comes last among causes
    order = ["keys/dropped", "trace/fc-bypassed", "keys/shape-mismatch", "config/unrecognized", "weights/nan",
             "vocab/d2t-missing", "keys/left-at-init", "config/aux-ids-shifted", "config/flag-ignored",
             "logs/zero-acceptance"]
    assert [causal_rank(c) for c in order] == sorted(causal_rank(c) for c in order)
    findings = [Finding(c, Severity.CRITICAL, c) for c in reversed(order)]
    assert [f.code for f in rank_findings(findings)] == order
    # codes sharing a rank keep the order they were reported in
    same = [Finding("vocab/d2t-invalid", "critical", "a"), Finding("vocab/bad-shape", "critical", "b")]
    assert [f.title for f in rank_findings(same)] == ["a", "b"]


def test_owned_by_and_lookup() -> None:
    assert "vocab/d2t-missing" in catalogue.owned_by("vocab")
    assert not any(code.startswith("vocab/") for code in catalogue.owned_by("keys"))
    assert catalogue.lookup("trace/fc-bypassed").owner == "wiring"

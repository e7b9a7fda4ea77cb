"""The README (a front door) and the docs/ pages stay true: finding codes, generated tables, demo figures, the JSON
schema, command lines and links (codes are a stable contract)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from _paths import ROOT
DOCS = ROOT / "docs"
CODE = re.compile(r'"((?:keys|config|vocab|weights|trace|logs)/[a-z0-9-]+)"')
ENGINE_PYTHON = os.environ.get("EAGLE3LENS_ENGINE_PYTHON")
ENGINE_VENV = ".engine-venv/bin/python"  # where `make engine` puts the engine's Python (the README's lines name it)


def _page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _pages() -> dict[Path, str]:
    from eagle3lens import demo_readme

    return demo_readme.pages(ROOT)


def test_the_pages_are_the_readme_and_every_docs_page() -> None:
    names = [p.relative_to(ROOT).as_posix() for p in _pages()]
    assert names[0] == "README.md" and {"docs/commands.md", "docs/engines.md", "docs/finding-codes.md",
                                        "docs/acceptance.md", "docs/notebooks.md", "docs/remote.md",
                                        "docs/development.md"} <= set(names[1:]), names


def test_every_emitted_finding_code_is_in_the_finding_codes_page() -> None:
    emitted = {m for path in (ROOT / "eagle3lens").rglob("*.py") for m in CODE.findall(path.read_text())}
    page = _page("docs/finding-codes.md")
    documented = set(re.findall(r"`((?:keys|config|vocab|weights|trace|logs)/[a-z0-9-]+)`", page))
    assert len(emitted) >= 24
    assert emitted <= documented, sorted(emitted - documented)


def test_design_core_codes_are_all_emitted() -> None:
    design_core = {
        "keys/dropped", "keys/left-at-init", "keys/raises", "keys/shape-mismatch", "config/unrecognized",
        "config/aux-ids-ignored", "config/aux-ids-shifted", "config/flag-ignored", "vocab/d2t-missing",
        "vocab/d2t-double-subtracted", "vocab/d2t-absolute-ids", "vocab/t2d-inconsistent", "vocab/identity-default",
        "weights/nan", "weights/inf", "weights/all-zero", "weights/norm-at-init", "weights/init-like",
        "weights/target-copy-mismatch", "trace/fc-bypassed", "trace/aux-width-mismatch", "trace/aux-layers-mismatch",
        "logs/zero-acceptance", "logs/low-acceptance",
    }
    emitted = {m for path in (ROOT / "eagle3lens").rglob("*.py") for m in CODE.findall(path.read_text())}
    assert design_core <= emitted, sorted(design_core - emitted)


def _code_table() -> str:
    """The table lines of docs/finding-codes.md (the page holds one table: the catalogue's)."""
    return "".join(line + "\n" for line in _page("docs/finding-codes.md").splitlines() if line.startswith("|"))


def test_finding_codes_page_table_is_the_catalogue() -> None:
    from eagle3lens import catalogue

    assert _code_table() == catalogue.markdown_table(), (
        "regenerate the table of docs/finding-codes.md with eagle3lens.catalogue.markdown_table()")


def test_catalogue_lists_every_code_the_sources_name() -> None:
    from eagle3lens import catalogue

    named = {m for path in (ROOT / "eagle3lens").rglob("*.py") if path.name != "catalogue.py"
             for m in CODE.findall(path.read_text())}
    assert named <= set(catalogue.BY_CODE), sorted(named - set(catalogue.BY_CODE))


def test_engine_table_is_in_the_engines_page_only() -> None:
    """`python -m eagle3lens.engines.readme --write` rewrites the page that holds the table."""
    from eagle3lens.engines import readme

    assert readme.PAGE == "docs/engines.md"
    holding = [p.relative_to(ROOT).as_posix() for p, text in _pages().items() if readme.START in text]
    assert holding == [readme.PAGE]
    assert readme.splice(_page(readme.PAGE)) == _page(readme.PAGE), "python -m eagle3lens.engines.readme --write"


def _joined(text: str) -> str:
    return re.sub(r"\\\n\s*", " ", text)


def test_notebook_example_runs_on_the_inputs_of_make_demo() -> None:
    """The notebooks page's headless triage sees what `make demo`'s doctor sees, so both give the same verdict."""
    make = _joined(_page("Makefile")).replace("$(DEMO_DIR)", "demo").replace("$(BIN)/", "")
    doctor = shlex.split(re.search(r"^\s*eagle3lens doctor (.*?);", make, re.MULTILINE).group(1))
    demo = {"checkpoint": doctor[0], **{k.lstrip("-"): v for k, v in zip(doctor[1::2], doctor[2::2], strict=True)}}
    page = _joined(_page("docs/notebooks.md"))
    notebook = shlex.split(re.search(r"^\.venv/bin/eagle3lens notebook 00_triage (.*)$", page, re.MULTILINE).group(1))
    params = {notebook[i + 1]: notebook[i + 2] for i, word in enumerate(notebook) if word == "-p"}
    assert params == {k: demo[k] for k in ("checkpoint", "engine", "target", "log")}


def test_readme_setup_commands_are_the_makefiles_targets() -> None:
    """The two set-up commands the README gives are make targets, and make demo runs the README's doctor line."""
    readme, make = _page("README.md"), _joined(_page("Makefile"))
    setup = readme.split("\n## Set-up: two commands\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in setup.splitlines()] == ["make demo", "make test"]
    assert re.search(r"^demo: ", make, re.MULTILINE) and re.search(r"^test: ", make, re.MULTILINE)
    first = _symptom_rows()[0][1]
    made = re.search(r"^\s*(\$\(BIN\)/eagle3lens doctor .*?) --html", make, re.MULTILINE).group(1)
    assert shlex.split(made.replace("$(BIN)/", "").replace("$(DEMO_DIR)", "demo")) == shlex.split(first)


def test_readme_says_how_to_reach_the_command_and_notebooks_page_how_to_run_jupyter_as_root() -> None:
    readme = _page("README.md")
    assert ". .venv/bin/activate" in readme and ".venv/bin/eagle3lens doctor" in readme
    assert "jupyter lab --allow-root" in _page("docs/notebooks.md")


def test_pages_quote_each_demo_figure_once() -> None:
    """Each demo phrase the generator rewrites is in the pages exactly once (so none is left stale beside it)."""
    from eagle3lens import demo_readme

    text = demo_readme.joined(_pages())
    assert all(len(hits) == 1 for hits in demo_readme.found(text).values()), demo_readme.found(text)


@pytest.mark.slow
def test_pages_demo_figures_match_a_fresh_demo_run(demo_dir) -> None:
    """The accept lengths the pages quote for the demo are what the demo's commands print on a fresh build
    (regenerate with ``python -m eagle3lens.demo_readme --write``)."""
    from eagle3lens import demo_readme

    expected = demo_readme.phrases(demo_readme.demo_figures(demo_dir))
    pages = _pages()
    text = demo_readme.joined(pages)
    assert demo_readme.agrees(text, expected), (
        f"regenerate the demo figures: python -m eagle3lens.demo_readme --write ({expected})")
    spliced = demo_readme.joined({path: demo_readme.splice(page, expected) for path, page in pages.items()})
    assert demo_readme.found(spliced) == {name: [text] for name, text in expected.items()}
    assert demo_readme.agrees(spliced, expected)


def test_pages_figures_outside_the_machine_spread_disagree() -> None:
    from eagle3lens import demo_readme

    text = demo_readme.joined(_pages())
    hit = demo_readme.found(text)["acceptance"][0]
    figures = demo_readme.numbers(hit)
    texts = {name: demo_readme.found(text)[name][0] for name in demo_readme.PATTERNS}
    assert demo_readme.agrees(text, texts)
    off = hit.replace(f"as trained {figures[2]:.2f}", f"as trained {figures[2] + 0.05:.2f}")
    assert off != hit and not demo_readme.agrees(text.replace(hit, off), texts)


def test_demo_readme_write_rewrites_the_page_that_holds_each_phrase(tmp_path: Path, monkeypatch) -> None:
    """`--write`'s splice, page by page, moves each phrase's numbers in whichever page holds it."""
    from eagle3lens import demo_readme

    (tmp_path / "docs").mkdir()
    for path, text in _pages().items():
        (tmp_path / path.relative_to(ROOT)).write_text(text, encoding="utf-8")
    current = {name: hits[0] for name, hits in demo_readme.found(demo_readme.joined(_pages())).items()}
    moved = {name: re.sub(r"(?<![0-9.])[0-9]+\.[0-9]{2}(?![0-9.])", "9.99", text) for name, text in current.items()}
    monkeypatch.chdir(tmp_path)
    for path, text in demo_readme.pages().items():
        path.write_text(demo_readme.splice(text, moved), encoding="utf-8")
    after = demo_readme.pages(tmp_path)
    assert demo_readme.found(demo_readme.joined(after)) == {name: [text] for name, text in moved.items()}
    changed = {p.relative_to(tmp_path).as_posix() for p, text in after.items()
               if text != _page(p.relative_to(tmp_path).as_posix())}
    holders = {p.relative_to(ROOT).as_posix() for p, text in _pages().items()
               if any(pattern.search(text) for pattern in demo_readme.PATTERNS.values())}
    assert changed == holders and holders


def test_json_schema_names_every_key_a_report_always_writes() -> None:
    """`notes` appeared only when non-empty and was missing from the documented schema: it is always written."""
    import json

    from eagle3lens.findings import Report

    block = _page("docs/commands.md").split("\n## JSON\n", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    documented = json.loads(block)
    written = Report(checkpoint={}).to_dict()
    assert written["notes"] == [] and set(written) == set(documented), sorted(set(written) ^ set(documented))


def test_readme_is_a_front_door() -> None:
    """At most 160 lines, and it links every docs page."""
    readme = _page("README.md")
    assert len(readme.splitlines()) <= 160, len(readme.splitlines())
    linked = {target.split("#", 1)[0] for _, target in _links(readme)}
    pages = {p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md")}
    assert pages <= linked, sorted(pages - linked)


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of each markdown link outside code blocks and inline code."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [(number, target) for target in _LINK.findall(re.sub(r"`[^`]*`", "", line))]
    return out


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    headings = [m.group(1) for m in re.finditer(r"^#+ (.*)$", text, re.MULTILINE)]
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_resolves() -> None:
    """Each relative link in the README and docs/ names a file of the checkout, and its #anchor a heading there."""
    broken = []
    for path, text in _pages().items():
        for number, target in _links(text):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not dest.is_file() or ROOT not in dest.parents:
                broken.append(where)
            elif anchor and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(where + " (no such heading)")
    assert not broken, broken
    assert sum(len(_links(text)) for text in _pages().values()) >= 10


def _command_lines() -> list[tuple[str, list[str]]]:
    """Every `eagle3lens` command in the pages' shell code blocks: (page:line, its words after the program)."""
    out = []
    for path, text in _pages().items():
        for block in re.finditer(r"^```(?:bash|console|sh|shell)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            start = text[:block.start()].count("\n") + 2
            for offset, line in enumerate(_joined(block.group(1)).splitlines()):
                words = shlex.split(line.removeprefix("$ "), comments=True)
                if words and words[0].endswith("eagle3lens"):
                    out.append((f"{path.relative_to(ROOT)}:{start + offset}", words[1:]))
    return out


def test_every_command_line_in_a_code_block_parses() -> None:
    """Each `eagle3lens ...` line of a shell block in the README or docs/, and of the README's symptom table, is one
    the CLI's own parser accepts."""
    from eagle3lens.cli import build_parser

    lines = _command_lines() + [(f"README.md symptom table: {symptom}", shlex.split(command)[1:])
                                for symptom, command in _symptom_rows()]
    assert len(lines) >= 5 and {page.split(":")[0] for page, _ in lines} >= {"README.md", "docs/notebooks.md"}
    refused = []
    for where, words in lines:
        try:
            build_parser().parse_args(words)
        except SystemExit:
            refused.append(f"{where}: eagle3lens {shlex.join(words)}")
    assert not refused, refused


def _symptom_rows() -> list[tuple[str, str]]:
    """(symptom, command) for each row of the README's symptom table, a blank symptom carrying the one above."""
    section = _page("README.md").split("\n## Which command for my symptom\n", 1)[1].split("\n## ", 1)[0]
    rows, symptom = [], ""
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 3 and cells[1].startswith("`eagle3lens "):
            symptom = cells[0] or symptom
            rows.append((symptom, cells[1].strip("`")))
    return rows


def test_readme_symptom_table_covers_the_four_symptoms() -> None:
    symptoms = {symptom for symptom, _ in _symptom_rows()}
    assert len(symptoms) == 4 and any("accept len: 1.00" in s for s in symptoms), symptoms
    assert all(any(word in s for s in symptoms) for word in ("not zero", "engine upgrade", "shipping")), symptoms
    commands = " ".join(command for _, command in _symptom_rows())
    assert all(option in commands for option in ("--chat", "--temperature", "--log", "--measure", "--execute",
                                                 "--data", "convert "))


def _symptom_params() -> list:
    """The symptom rows as test cases; those that serve or execute the real engine are marked ``engine``."""
    return [pytest.param(row, id=f"{row[1].split(' ', 2)[1]}:{row[0][:24]}",
                         marks=[pytest.mark.engine, pytest.mark.slow] if ENGINE_VENV in row[1] else [])
            for row in _symptom_rows()]


@pytest.mark.slow
@pytest.mark.parametrize("row", _symptom_params())
def test_readme_symptom_command_runs_on_the_demo(row: tuple[str, str], demo_dir: Path, tmp_path: Path, capsys) -> None:
    """Each symptom's command runs on a freshly built demo and reports (exit 0 or 1: never a usage or input error).
    The lines that run the real engine need one (`make engine`, then EAGLE3LENS_ENGINE_PYTHON)."""
    from eagle3lens.cli import main

    words = shlex.split(row[1])[1:]
    if ENGINE_VENV in words:
        if not ENGINE_PYTHON:
            pytest.skip("no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")
        words = [ENGINE_PYTHON if word == ENGINE_VENV else word for word in words]
    words = [str(demo_dir / word.removeprefix("demo/")) if word.startswith("demo/") else
             str(tmp_path / word) if word.startswith("out/") else word for word in words]
    code = main(words)
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "internal error" not in err and "Traceback" not in err, err

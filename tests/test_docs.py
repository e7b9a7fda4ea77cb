"""The README documents every finding code the probes can emit (codes are a stable contract)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = re.compile(r'"((?:keys|config|vocab|weights|trace|logs)/[a-z0-9-]+)"')


def test_every_emitted_finding_code_is_in_the_readme() -> None:
    emitted = {m for path in (ROOT / "eagle3lens").rglob("*.py") for m in CODE.findall(path.read_text())}
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`((?:keys|config|vocab|weights|trace|logs)/[a-z0-9-]+)`", readme))
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


def _readme_code_table() -> str:
    section = (ROOT / "README.md").read_text().split("\n## Finding codes\n", 1)[1].split("\n## ", 1)[0]
    return "".join(line + "\n" for line in section.splitlines() if line.startswith("|"))


def test_readme_code_table_is_the_catalogue() -> None:
    from eagle3lens import catalogue

    assert _readme_code_table() == catalogue.markdown_table(), (
        "regenerate README's 'Finding codes' table with eagle3lens.catalogue.markdown_table()")


def test_catalogue_lists_every_code_the_sources_name() -> None:
    from eagle3lens import catalogue

    named = {m for path in (ROOT / "eagle3lens").rglob("*.py") if path.name != "catalogue.py"
             for m in CODE.findall(path.read_text())}
    assert named <= set(catalogue.BY_CODE), sorted(named - set(catalogue.BY_CODE))


def _joined(text: str) -> str:
    return re.sub(r"\\\n\s*", " ", text)


def test_readme_notebook_example_runs_on_the_inputs_of_make_demo() -> None:
    """The README's headless triage sees what `make demo`'s doctor sees, so both give the same verdict."""
    import shlex

    make = _joined((ROOT / "Makefile").read_text()).replace("$(DEMO_DIR)", "demo").replace("$(BIN)/", "")
    doctor = shlex.split(re.search(r"^\s*eagle3lens doctor (.*?);", make, re.MULTILINE).group(1))
    demo = {"checkpoint": doctor[0], **{k.lstrip("-"): v for k, v in zip(doctor[1::2], doctor[2::2], strict=True)}}
    readme = _joined((ROOT / "README.md").read_text())
    notebook = shlex.split(re.search(r"^\.venv/bin/eagle3lens notebook 00_triage (.*)$", readme, re.MULTILINE).group(1))
    params = {notebook[i + 1]: notebook[i + 2] for i, word in enumerate(notebook) if word == "-p"}
    assert params == {k: demo[k] for k in ("checkpoint", "engine", "target", "log")}


def test_readme_says_how_to_reach_the_command_and_run_jupyter_as_root() -> None:
    readme = (ROOT / "README.md").read_text()
    assert ". .venv/bin/activate" in readme and ".venv/bin/eagle3lens doctor" in readme
    assert "jupyter lab --allow-root" in readme


def test_readme_quotes_each_demo_figure_once() -> None:
    """Each demo phrase the generator rewrites is in the README exactly once (so none is left stale beside it)."""
    from eagle3lens import demo_readme

    readme = (ROOT / "README.md").read_text()
    assert all(len(hits) == 1 for hits in demo_readme.found(readme).values()), demo_readme.found(readme)


def test_readme_demo_figures_match_a_fresh_demo_run(demo_dir) -> None:
    """The accept lengths the README quotes for the demo are what the demo's commands print on a fresh build
    (regenerate with ``python -m eagle3lens.demo_readme --write``)."""
    from eagle3lens import demo_readme

    expected = demo_readme.phrases(demo_readme.demo_figures(demo_dir))
    readme = (ROOT / "README.md").read_text()
    assert demo_readme.agrees(readme, expected), (
        f"regenerate the README's demo figures: python -m eagle3lens.demo_readme --write ({expected})")
    spliced = demo_readme.splice(readme, expected)
    assert demo_readme.found(spliced) == {name: [text] for name, text in expected.items()}
    assert demo_readme.agrees(spliced, expected)


def test_readme_figures_outside_the_machine_spread_disagree() -> None:
    from eagle3lens import demo_readme

    readme = (ROOT / "README.md").read_text()
    hit = demo_readme.found(readme)["acceptance"][0]
    figures = demo_readme.numbers(hit)
    texts = {name: demo_readme.found(readme)[name][0] for name in demo_readme.PATTERNS}
    assert demo_readme.agrees(readme, texts)
    off = hit.replace(f"as trained {figures[2]:.2f}", f"as trained {figures[2] + 0.05:.2f}")
    assert off != hit and not demo_readme.agrees(readme.replace(hit, off), texts)


def test_readme_json_schema_names_every_key_a_report_always_writes() -> None:
    """`notes` appeared only when non-empty and was missing from the README's schema: it is always written."""
    import json

    from eagle3lens.findings import Report

    block = (ROOT / "README.md").read_text().split("\n### JSON\n", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    documented = json.loads(block)
    written = Report(checkpoint={}).to_dict()
    assert written["notes"] == [] and set(written) == set(documented), sorted(set(written) ^ set(documented))

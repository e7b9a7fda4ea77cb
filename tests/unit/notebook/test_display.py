"""Notebook display: a cell ending in a result or a Report shows HTML with its figures (no _repr_html_ on results)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _builders import draft_tensors, speculators_config, write

from eagle3lens.checkpoint import Checkpoint
from eagle3lens.findings import Report
from eagle3lens.probes.keys import simulate_load

IPython = pytest.importorskip("IPython")


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    from eagle3lens.notebook import kernel as nb

    sh = InteractiveShell.instance()
    nb.init()
    yield sh
    InteractiveShell.clear_instance()


def test_a_result_displays_as_html_with_its_figures(shell, tmp_path: Path) -> None:
    ckpt = Checkpoint.open(write(tmp_path / "d", draft_tensors(extra={"evil\x1b[2J": draft_tensors()["d2t"]}),
                                 speculators_config()))
    result = simulate_load(ckpt, "sglang==0.5.11")
    assert not hasattr(result, "_repr_html_")
    data, _ = shell.display_formatter.format(result)
    page = data["text/html"]
    assert "<table>" in page and "dropped" in page  # the load table
    assert "plotly" in page.lower() and "Tensor fates under" in page  # and its figure
    assert "\x1b" not in page and "evil\\x1b[2J" in page

    report = Report(checkpoint=ckpt.summary(), engine="sglang==0.5.11")
    report.add("keys", result)
    data, _ = shell.display_formatter.format(report)
    assert data["text/html"].index("CRITICAL") < data["text/html"].index("<h3>keys</h3>")


def test_a_result_with_only_a_terminal_view_displays_it_as_html(shell) -> None:
    from eagle3lens.checkpoint import build_spec
    from eagle3lens.probes.aux_layers import resolve_aux_layers

    spec = build_spec(speculators_config(), {})
    data, _ = shell.display_formatter.format(resolve_aux_layers(spec, 10, "sglang==0.5.11"))
    assert "<pre" in data["text/html"] and "aux layers under" in data["text/html"]

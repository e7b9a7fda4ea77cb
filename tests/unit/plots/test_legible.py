"""Views say what they draw (issue 25.18): the provenance heatmap's words match its colours, the walkthroughs' toggle
buttons are labelled by file or variant name, and the triage panel's fix column is never cut off."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle3lens.doctor import diagnose


def _luminance(color: str) -> float:
    from plotly.colors import hex_to_rgb, unlabel_rgb

    r, g, b = hex_to_rgb(color) if color.startswith("#") else unlabel_rgb(color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_provenance_heatmap_title_names_the_colour_a_match_is_drawn_in(demo_dir: Path) -> None:
    from plotly.colors import sample_colorscale

    from eagle3lens.plots.registry import figures
    from eagle3lens.probes.provenance import trace_provenance

    result = trace_provenance(demo_dir / "hidden-states-sglang", demo_dir / "target", samples=16)
    heatmap = figures(result)[0]
    trace = heatmap.data[0]
    scale = [list(stop) for stop in trace.colorscale]
    match, far = sample_colorscale(scale, [0.0, 1.0])  # z = relative error: 0 is a match (zmin 0, zmax 1)
    assert (trace.zmin, trace.zmax) == (0, 1)
    title = heatmap.layout.title.text
    bright_is_match = _luminance(match) > _luminance(far)
    assert ("bright = match" in title) == bright_is_match and ("dark = match" in title) == (not bright_is_match)


def test_scenario_toggles_are_labelled_by_name_and_keep_the_path() -> None:
    pytest.importorskip("ipywidgets")
    from eagle3lens.notebook.widgets import scenario_toggles, short_labels

    logs = ["/home/me/long/prefix/demo/sglang.log", "/home/me/long/prefix/demo/vllm.log"]
    toggles = scenario_toggles(logs, description="log")
    assert list(toggles._options_labels) == ["sglang.log", "vllm.log"]
    assert toggles.value == logs[0] and list(toggles._options_values) == logs
    assert short_labels(["/a/run1/eagle", "/a/run2/eagle", "/a/run2/mismatched-ids"]) == [
        "run1/eagle", "run2/eagle", "run2/mismatched-ids"]  # parents only where two names agree
    assert short_labels(["/x/demo/mismatched-ids", "/x/demo/eagle"]) == ["mismatched-ids", "eagle"]


def test_triage_fix_column_wraps_a_long_path_instead_of_widening_the_table(demo_dir: Path, tmp_path: Path) -> None:
    import shutil

    from eagle3lens.plots.registry import html_view

    long = tmp_path / ("a-rather-long-folder-name-for-checkpoints-" * 3) / "speculators"
    shutil.copytree(demo_dir / "speculators", long)
    html = html_view(diagnose(long, engine="sglang==0.5.11", weights=False).results["doctor"])
    assert str(long) in html  # the fix names the checkpoint in full, wrapped inside its column (e2e/test_browser.py)
    assert html.count("<div class='fix' style='min-width:16em'><code class='cmd' "
                      "style='white-space:break-spaces;overflow-wrap:anywhere'>eagle3lens convert") >= 1

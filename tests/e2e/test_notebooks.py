"""Notebook runner, findings read-back, offline HTML export, widgets and the walkthroughs (papermill, real kernel)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import torch
from _builders import write
from _paths import ROOT
from safetensors.torch import save_file

from eagle3lens import cli
from eagle3lens.commands.notebook import parse_value, read_params_file
from eagle3lens.errors import Eagle3LensError, NotebookCellError, UsageError
from eagle3lens.findings import Finding
from eagle3lens.notebook.runner import (FINDINGS_MIME, collect_findings, export_html, findings_of, resolve,
                                        run_notebook, walkthroughs)


SCRIPT_SRC = re.compile(r"<script[^>]*\bsrc\s*=", re.I)


def code(source: str, **metadata) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def new_notebook(cells: list) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = cells
    return nb


@pytest.fixture(scope="module")
def probe_notebook(tmp_path_factory) -> Path:
    """A small notebook in walkthrough style: opens a checkpoint given as a parameter, plots, records findings."""
    root = tmp_path_factory.mktemp("nb")
    torch.manual_seed(0)
    write(root, {"fc.weight": torch.randn(4, 12)})
    nb = new_notebook([
        code("from eagle3lens.notebook import kernel as nb\nnb.init()"),
        code(f"checkpoint = {str(root / 'model.safetensors')!r}\nseverity = 'warning'", tags=["parameters"]),
        code("from eagle3lens.checkpoint import Checkpoint\nckpt = Checkpoint.open(checkpoint)\nckpt.summary()"),
        code("import plotly.graph_objects as go\n"
             "nb.show_figure(go.Figure(go.Bar(y=[t.numel for t in ckpt.tensors.values()]), layout_title_text='sizes'))\n"
             "nb.show_figure(go.Figure(go.Scatter(y=[1, 2, 3])))"),
        code("import ipywidgets as w\nw.IntSlider(3)"),
        code("from eagle3lens.findings import Finding\n"
             "found = Finding('weights/init-like', severity, 'fc looks untrained', evidence={'tensors': list(ckpt.tensors)})\n"
             "nb.record_findings([found])"),
    ])
    path = root / "probe.ipynb"
    nbformat.write(nb, path)
    return path


# ------------------------------------------------------------ pure functions


def test_parse_value_types_like_papermill():
    assert [parse_value(v) for v in ("True", "False", "None", "3", "-2", "0.5", "sglang==0.5.11", "demo/x")] == \
        [True, False, None, 3, -2, 0.5, "sglang==0.5.11", "demo/x"]


def test_params_file_errors_are_one_line(tmp_path):
    good = tmp_path / "p.json"
    good.write_text('{"checkpoint": "x", "k": 5}')
    assert read_params_file(str(good)) == {"checkpoint": "x", "k": 5}
    for text, problem in (("[1, 2]", "JSON object"), ("{nope", "not valid JSON")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(UsageError, match=problem) as info:
            read_params_file(str(bad))
        assert "\n" not in str(info.value) and str(bad) in str(info.value)
    with pytest.raises(UsageError, match="cannot read"):
        read_params_file(str(tmp_path / "missing.json"))


def test_resolve_short_names_and_paths(probe_notebook):
    known = walkthroughs()
    assert "00_triage" in known and all(p.suffix == ".ipynb" for p in known.values())
    assert resolve("00_triage") == known["00_triage"] == resolve("triage")
    assert resolve("serving_logs") == known["05_serving_logs"]
    assert resolve(probe_notebook) == probe_notebook
    with pytest.raises(UsageError, match="unknown walkthrough 'nope'"):
        resolve("nope")
    with pytest.raises(UsageError, match="not found"):
        resolve(probe_notebook.parent / "absent.ipynb")


def _strip_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("strip_notebooks", ROOT / ".ci" / "strip_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_walkthroughs_are_clean_and_use_the_registered_kernel(tmp_path, capsys):
    """No outputs or run state in git, and the kernelspec the install registers, so opening a walkthrough in
    JupyterLab (or running it) does not leave the checkout dirty."""
    strip = _strip_tool()
    assert strip.main(["--check"]) == 0, capsys.readouterr().err
    registered = re.search(r'ipykernel install .*--name (\S+) --display-name "([^"]+)"', (ROOT / "Makefile").read_text())
    assert registered.groups() == (strip.KERNELSPEC["name"], strip.KERNELSPEC["display_name"])
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()
    # the check catches what a Run All in JupyterLab leaves behind; the rewrite undoes it
    original = (ROOT / "notebooks" / "00_triage.ipynb").read_text()
    nb = json.loads(original)
    code_cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code_cell.update(outputs=[{"output_type": "stream", "name": "stdout", "text": ["x\n"]}], execution_count=3)
    nb["metadata"]["kernelspec"] = {"name": "eagle3lens", "display_name": "Python 3 (eagle3lens)", "language": "python"}
    (tmp_path / "00_triage.ipynb").write_text(json.dumps(nb))
    assert strip.main(["--check"], folder=tmp_path) == 1
    assert "00_triage.ipynb" in capsys.readouterr().err
    assert strip.main([], folder=tmp_path) == 0
    assert (tmp_path / "00_triage.ipynb").read_text() == original


def test_walkthroughs_are_papermill_ready():
    for name, path in walkthroughs().items():
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3" and nb.metadata.language_info.name == "python", name
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{name}: needs exactly one cell tagged 'parameters'"
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{name}: commit without outputs"
        assert any("record_findings" in c.source for c in nb.cells), name


def test_findings_of_deduplicates_and_refuses_unknown_things():
    a = Finding("vocab/d2t-missing", "critical", "no d2t")
    b = Finding("weights/nan", "critical", "nan")

    class Result:
        findings = (a, b)

    assert findings_of(Result(), [a], {"x": [b]}) == [a, b]
    with pytest.raises(TypeError):
        findings_of(3)


def test_collect_findings_reads_every_recorded_output(tmp_path):
    a = Finding("keys/dropped", "critical", "decoder skipped", evidence={"tensors": ["layers.0.mlp.up_proj.weight"]},
                fix="eagle3lens convert x --to sglang==0.5.11 y")
    b = Finding("logs/zero-acceptance", "warning", "accept len 1.00")
    cell1 = code("")
    cell1.outputs = [nbformat.v4.new_output("display_data", data={FINDINGS_MIME: {"findings": [a.to_dict()]},
                                                                  "text/plain": "x"})]
    cell2 = code("")
    cell2.outputs = [nbformat.v4.new_output("stream", text="hello\n"),
                     nbformat.v4.new_output("display_data", data={FINDINGS_MIME: {"findings": [a.to_dict(), b.to_dict()]}})]
    path = tmp_path / "x.ipynb"
    nbformat.write(new_notebook([cell1, cell2]), path)
    assert collect_findings(path) == [a, b]


def test_export_html_is_offline_and_drops_widget_views(tmp_path):
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(y=[1, 2]))
    cell = code("")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": fig.to_html(full_html=False, include_plotlyjs=True)}),
        nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {
            "model_id": "abc", "version_major": 2, "version_minor": 0}, "text/plain": "IntSlider(value=3)"}),
    ]
    nb = new_notebook([cell])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                            "version_minor": 0}}
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    given = nbformat.read(path, as_version=4)
    html = export_html(given, tmp_path / "x.html").read_text()
    assert "Plotly.newPlot" in html and "IntSlider" not in html
    assert given == nbformat.read(path, as_version=4), "the notebook given is left as it was"
    assert not SCRIPT_SRC.search(html), "no script may load from a URL (require.js, MathJax, widget manager, CDN)"


# ------------------------------------------------------------ real kernel


def test_run_notebook_writes_outputs_and_reads_findings_back(probe_notebook, tmp_path):
    run = run_notebook(probe_notebook, {"severity": "critical"}, tmp_path / "out", progress=False)
    assert run.executed.is_file() and run.html.is_file() and run.findings_json.is_file()
    assert [(f.code, f.severity.value) for f in run.findings] == [("weights/init-like", "critical")]
    assert run.findings[0].evidence == {"tensors": ["fc.weight"]}
    assert json.loads(run.findings_json.read_text())["findings"] == [f.to_dict() for f in run.findings]
    executed = nbformat.read(run.executed, as_version=4)
    assert executed.metadata.papermill.parameters == {"severity": "critical"}
    html = run.html.read_text()
    assert html.count("/** plotly.js") <= 1 and html.count("Plotly.newPlot") == 2, "plotly.js inlined once, two figures"
    assert not SCRIPT_SRC.search(html)
    assert "jp-RenderedText" in html and 'data-mime-type="application/vnd.jupyter.stderr"' not in html


def test_failing_cell_is_named_with_the_one_line_error(probe_notebook, tmp_path):
    missing = tmp_path / "no-such-draft"
    with pytest.raises(NotebookCellError) as info:
        run_notebook(probe_notebook, {"checkpoint": str(missing)}, tmp_path / "out", progress=False)
    err = info.value
    assert err.cell == "code cell 3 of 6" and err.first_line == "from eagle3lens.checkpoint import Checkpoint"
    assert str(missing) in err.error and "\n" not in str(err)
    executed = nbformat.read(err.executed, as_version=4)  # the partial notebook is kept
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].traceback == [f"eagle3lens: error: {errors[0].evalue}"]
    assert str(missing) in errors[0].evalue
    assert (tmp_path / "out" / "probe.html").is_file()


@pytest.mark.slow
def test_cli_exit_codes_and_params_file(probe_notebook, tmp_path, capsys):
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"severity": "critical"}))
    out = tmp_path / "cli"
    assert cli.main(["notebook", str(probe_notebook), "--params-file", str(params), "--out", str(out),
                     "--no-progress", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in data["findings"]] == ["weights/init-like"]
    assert data["results"]["notebook"]["executed"] == str(out / "probe.ipynb")
    # -p wins over the file; a warning is below the default --fail-on
    assert cli.main(["notebook", str(probe_notebook), "--params-file", str(params), "-p", "severity", "warning",
                     "--out", str(out), "--no-progress"]) == 0
    assert "fc looks untrained" in capsys.readouterr().out
    missing = tmp_path / "gone"
    assert cli.main(["notebook", str(probe_notebook), "-p", "checkpoint", str(missing), "--out", str(out),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": code cell 3 of 6 `from eagle3lens.checkpoint import Checkpoint`" in err
    assert str(missing) in err


def test_cli_list(capsys):
    assert cli.main(["notebook", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in walkthroughs())


# ------------------------------------------------------------ widgets (no front end: callbacks driven directly)


def test_probe_panel_reruns_the_probe_with_control_values(tmp_path, capsys):
    from eagle3lens.notebook import widgets

    torch.manual_seed(0)
    save_file({"a": torch.zeros(2), "b": torch.ones(3)}, str(tmp_path / "m.safetensors"))
    calls = []

    def probe(checkpoint: str, engine: str):
        calls.append((checkpoint, engine))
        if not Path(checkpoint).exists():
            raise Eagle3LensError(f"{checkpoint}: no such file or directory")
        return Finding("keys/dropped", "critical", f"probe ran on {engine}")

    path = widgets.checkpoint_path(tmp_path / "m.safetensors")
    engine = widgets.engine_dropdown("vllm==0.33.0", ["sglang==0.5.11", "vllm==0.33.0"])
    picker = widgets.tensor_picker(path.value, follow=path)
    assert list(picker.options) == ["a", "b"] and engine.value == "vllm==0.33.0"
    panel = widgets.probe_panel(probe, {"checkpoint": path, "engine": engine}, title="keys")
    assert path in panel.children and engine in panel.children
    assert "sglang==0.5.11" in widgets.engine_dropdown().options  # default: every known engine profile
    engine.value = "sglang==0.5.11"
    path.value = str(tmp_path / "missing")
    assert calls == [(str(tmp_path / "m.safetensors"), "sglang==0.5.11"), (str(tmp_path / "missing"), "sglang==0.5.11")]
    out = capsys.readouterr().out  # without a front end the Output area passes its content to stdout
    assert "probe ran on sglang==0.5.11" in out
    assert f"eagle3lens: error: {tmp_path / 'missing'}: no such file or directory" in out
    assert list(picker.options) == []  # the picker followed the path box


# ------------------------------------------------------------ the walkthroughs on the demo

# walkthrough -> (parameters beyond demo_dir, the CLI probe that must report the same findings)
WALKTHROUGHS = {
    "00_triage": ({}, lambda d: ["doctor", f"{d}/speculators", "--engine", "sglang==0.5.11", "--target", f"{d}/target",
                                 "--log", f"{d}/sglang.log"]),
    "01_keys": ({}, lambda d: ["keys", f"{d}/speculators", "--engine", "sglang==0.5.11"]),
    "02_weights": ({"checkpoint": "{d}/broken-untrained"},
                   lambda d: ["weights", f"{d}/broken-untrained", "--target", f"{d}/target"]),
    "03_vocab": ({"checkpoint": "{d}/broken-d2t-double-subtracted"},
                 lambda d: ["vocab", f"{d}/broken-d2t-double-subtracted", "--target", f"{d}/target",
                            "--counts", f"{d}/token_counts.json"]),
    "04_hidden_states": ({"scenario": "aux-off"},
                         lambda d: ["trace", "--target", f"{d}/target", "--draft", f"{d}/eagle", "--engine",
                                    "sglang==0.5.11", "--scenario", "aux-off"]),
    "05_serving_logs": ({}, lambda d: ["logs", f"{d}/sglang.log"]),
    "06_acceptance": ({}, lambda d: ["acceptance", f"{d}/speculators", "--data", f"{d}/hidden-states", "--target",
                                     f"{d}/target", "--engine", "sglang==0.5.11"]),
    "07_provenance": ({}, lambda d: ["provenance", "--data", f"{d}/hidden-states", "--target", f"{d}/target",
                                     "--draft", f"{d}/mismatched-ids", "--engine", "sglang==0.5.11"]),
    "08_low_acceptance": ({}, lambda d: ["provenance", "--data", f"{d}/hidden-states-raw", "--target", f"{d}/target",
                                         "--chat", f"{d}/chat.jsonl"]),
}


def test_every_walkthrough_is_covered():
    assert set(walkthroughs()) == set(WALKTHROUGHS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WALKTHROUGHS))
def test_walkthrough_runs_headless_and_matches_its_cli_probe(name, demo_dir, tmp_path, capsys):
    extra, cli_args = WALKTHROUGHS[name]
    params = {"demo_dir": str(demo_dir), **{k: v.format(d=demo_dir) for k, v in extra.items()}}
    run = run_notebook(name, params, tmp_path, progress=False)

    executed = nbformat.read(run.executed, as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    figures = sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)
    assert figures >= 1, "every walkthrough draws at least one figure"
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), "a widget panel"

    html = run.html.read_text()
    assert html.count("/** plotly.js") <= 1 and "Plotly.newPlot" in html
    assert html.count("Plotly.newPlot") == figures, "every figure is drawn in the exported HTML"
    assert not SCRIPT_SRC.search(html)
    assert "jp-OutputArea-output jp-RenderedText\" data-mime-type=\"application/vnd.jupyter.stderr" not in html

    assert cli.main([*cli_args(demo_dir), "--json"]) in (0, 1)
    expected = json.loads(capsys.readouterr().out)["findings"]
    assert [f.to_dict() for f in run.findings] == json.loads(json.dumps(expected))
    assert json.loads(run.findings_json.read_text())["findings"] == expected


def test_missing_checkpoint_fails_with_the_one_line_message(demo_dir, tmp_path, capsys):
    missing = tmp_path / "no-such-draft"
    code_ = cli.main(["notebook", "03_vocab", "-p", "demo_dir", str(demo_dir), "-p", "checkpoint", str(missing),
                      "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code_ == 2 and err.count("\n") == 1
    assert re.search(r"03_vocab\.ipynb: code cell \d+ of \d+ `", err) and f"CheckpointError: {missing}: " in err
    executed = nbformat.read(tmp_path / "out" / "03_vocab.ipynb", as_version=4)
    failing = [c for c in executed.cells if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)]
    assert len(failing) == 1 and "Checkpoint.open(checkpoint)" in failing[0].source
    (error,) = [o for o in failing[0].outputs if o.output_type == "error"]
    assert error.traceback == [f"eagle3lens: error: {error.evalue}"] and str(missing) in error.evalue
    assert error.evalue in err  # the CLI shows the very message the cell shows


def test_unknown_parameter_is_refused_before_running(probe_notebook, tmp_path):
    with pytest.raises(UsageError, match=r"unknown parameter chekpoint .*takes: checkpoint, severity"):
        run_notebook(probe_notebook, {"chekpoint": "x"}, tmp_path, progress=False)
    assert not (tmp_path / "probe.ipynb").exists()


# ------------------------------------------------------------ failures outside the cell's own code


@pytest.fixture(scope="module")
def failing_notebook(tmp_path_factory) -> Path:
    """Markdown between code cells (so papermill's indices differ from code-cell numbers); fails on request."""
    nb = new_notebook([
        nbformat.v4.new_markdown_cell("# A notebook that fails on request"),
        code("from eagle3lens.notebook import kernel as nb\nnb.init()"),
        code("seconds = 0\nmode = 'ok'", tags=["parameters"]),
        nbformat.v4.new_markdown_cell("## The slow cell"),
        code("import time\ntime.sleep(seconds)"),
        code("import os  # fails on request\nif mode == 'die':\n    os._exit(1)\n"
             "if mode == 'raise':\n    raise ValueError('boom')\nprint('done')"),
    ])
    path = tmp_path_factory.mktemp("failing") / "failing.ipynb"
    nbformat.write(nb, path)
    return path


def _failed_outputs(executed: Path) -> list:
    nb = nbformat.read(executed, as_version=4)
    return [(c.source.splitlines()[0], o) for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


def test_cells_are_numbered_among_the_source_notebooks_code_cells(failing_notebook, tmp_path):
    with pytest.raises(NotebookCellError) as info:
        run_notebook(failing_notebook, {"mode": "raise"}, tmp_path, progress=False)
    assert info.value.cell == "code cell 4 of 4" and info.value.first_line == "import os  # fails on request"
    assert f"{failing_notebook}: code cell 4 of 4 `import os  # fails on request` failed: ValueError: boom" \
        in str(info.value)


def test_cell_timeout_names_the_cell_and_keeps_the_partial_notebook(failing_notebook, tmp_path):
    with pytest.raises(NotebookCellError) as info:
        run_notebook(failing_notebook, {"seconds": 30}, tmp_path, progress=False, timeout=1)
    err = info.value
    assert err.cell == "code cell 3 of 4" and err.first_line == "import time"
    assert err.error == "CellTimeoutError: the cell did not finish within 1 s (cell timeout)"
    (source, output), = _failed_outputs(err.executed)
    assert source == "import time" and output.traceback == [f"eagle3lens: error: {output.evalue}"]
    assert "did not finish within 1 s" in (tmp_path / "failing.html").read_text()


def test_dead_kernel_names_the_cell(failing_notebook, tmp_path):
    with pytest.raises(NotebookCellError) as info:
        run_notebook(failing_notebook, {"mode": "die"}, tmp_path, progress=False)
    assert info.value.cell == "code cell 4 of 4" and info.value.error.startswith("DeadKernelError: ")
    (source, _), = _failed_outputs(info.value.executed)
    assert source == "import os  # fails on request" and (tmp_path / "failing.html").is_file()


def test_unknown_kernel_is_a_usage_error_listing_the_kernels(failing_notebook, tmp_path):
    with pytest.raises(UsageError, match=r"no Jupyter kernel named 'nokernel' \(available: .*python3") as info:
        run_notebook(failing_notebook, {}, tmp_path / "out", progress=False, kernel_name="nokernel")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_unwritable_output_is_a_usage_error_naming_the_path(failing_notebook, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert cli.main(["notebook", str(failing_notebook), "--out", str(blocker / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"eagle3lens: error: {blocker / 'out'}: cannot write output")


@pytest.mark.slow
def test_cli_stderr_holds_only_the_one_line_error(failing_notebook, tmp_path):
    """A real CLI process: the kernel's own log (TCP warning at start, a reply it cannot send after a
    timeout) and nbclient's timeout log must not reach stderr."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "eagle3lens", "notebook", str(failing_notebook), "--no-progress"]
    ok = subprocess.run([*cmd, "--out", str(tmp_path / "ok")], capture_output=True, text=True)
    assert (ok.returncode, ok.stderr) == (0, "")
    slow = subprocess.run([*cmd, "-p", "seconds", "30", "--cell-timeout", "1", "--out", str(tmp_path / "slow")],
                          capture_output=True, text=True)
    assert slow.returncode == 2 and slow.stderr.count("\n") == 1
    assert slow.stderr.startswith(f"eagle3lens: error: {failing_notebook}: code cell 3 of 4 `import time` failed: "
                                  "CellTimeoutError")


def test_runner_imports_nbformat_without_the_iri_grammars(probe_notebook):
    """jsonschema (via nbformat) would compile rfc3987_syntax's grammars at import: 1.5 s of every run."""
    import subprocess
    import sys

    code_ = (f"import sys\nfrom eagle3lens.notebook.runner import notebook_parameters\n"
             f"assert notebook_parameters({str(probe_notebook)!r}) == ('checkpoint', 'severity')\n"
             "assert 'jsonschema' in sys.modules and 'rfc3987_syntax' not in sys.modules\n"
             "import rfc3987_syntax  # still importable afterwards")
    subprocess.run([sys.executable, "-c", code_], check=True)


def test_relative_path_parameters_are_read_from_where_the_command_runs(tmp_path, monkeypatch, capsys):
    """The kernel runs in the notebook's own folder; `-p checkpoint demo/x` means ./demo/x of the caller."""
    nb_dir, work = tmp_path / "nbs", tmp_path / "work"
    nb_dir.mkdir()
    (work / "data").mkdir(parents=True)
    (work / "data" / "hello.txt").write_text("hello from the caller's folder")
    nbformat.write(new_notebook([code("path = ''", tags=["parameters"]), code("print(open(path).read())")]),
                   nb_dir / "read.ipynb")
    monkeypatch.chdir(work)
    assert cli.main(["notebook", str(nb_dir / "read.ipynb"), "-p", "path", "data/hello.txt", "--out", "out",
                     "--no-progress"]) == 0
    executed = nbformat.read(work / "out" / "read.ipynb", as_version=4)
    assert "hello from the caller's folder" in executed.cells[-1].outputs[0]["text"]


def test_a_missing_relative_path_parameter_is_named_absolute(tmp_path, monkeypatch, capsys):
    """`notebook 08_low_acceptance -p chat demo/chat.jsonl` said `no such chat file` about a path the kernel looked
    up from the notebook's folder: every path parameter is made absolute where the command runs, so the error names
    the file that was tried."""
    nb_dir, work = tmp_path / "nbs", tmp_path / "work"
    nb_dir.mkdir()
    work.mkdir()
    nbformat.write(new_notebook([code("chat = ''\ntemplated = ''", tags=["parameters"]),
                                 code("from eagle3lens.probes.chat import read_chat\nread_chat(chat)")]),
                   nb_dir / "chat.ipynb")
    monkeypatch.chdir(work)
    assert cli.main(["notebook", str(nb_dir / "chat.ipynb"), "-p", "chat", "demo/chat.jsonl", "--out", "out",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{work / 'demo' / 'chat.jsonl'}: no such chat file" in err and len(err.strip().splitlines()) == 1


def test_walkthroughs_use_the_checkouts_demo_when_make_demo_built_it(monkeypatch, tmp_path):
    import eagle3lens.notebook.kernel as notebook_module

    monkeypatch.delenv("EAGLE3LENS_DEMO_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    checkout = tmp_path / "checkout"
    monkeypatch.setattr(notebook_module, "__file__", str(checkout / "eagle3lens" / "notebook" / "kernel.py"))
    assert notebook_module.default_demo_dir() == tmp_path / "cache" / "eagle3lens" / "demo"  # no demo/ there
    (checkout / "demo").mkdir(parents=True)
    (checkout / "demo" / "manifest.json").write_text('{"name": "something else"}')
    assert notebook_module.default_demo_dir() == tmp_path / "cache" / "eagle3lens" / "demo"  # not a demo
    (checkout / "demo" / "manifest.json").write_text('{"tool": "eagle3lens demo"}')
    assert notebook_module.default_demo_dir() == checkout / "demo"


def test_large_parameter_is_passed_by_file_not_embedded(tmp_path):
    """A 1.5 MB parameter used to be embedded in the notebook JSON (the injected cell and its metadata), which every
    per-cell save and the HTML export carried: it now travels in a parameters file the notebook reads."""
    nb = new_notebook([
        code("blob = ''\nsmall = 0", tags=["parameters"]),
        code("print(len(blob), blob[:3], blob[-3:], small)"),
    ])
    path = tmp_path / "big.ipynb"
    nbformat.write(nb, path)
    blob = "abc" + "x" * 1_500_000 + "xyz"
    run = run_notebook(path, {"blob": blob, "small": 7}, tmp_path / "out", progress=False)
    executed = nbformat.read(run.executed, as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert printed.strip() == f"{len(blob)} abc xyz 7"  # the kernel saw the whole value and the inline one
    assert run.executed.stat().st_size < 100_000 and run.html.stat().st_size < 20_000_000
    assert blob not in run.executed.read_text() and blob not in run.html.read_text()
    params_file = tmp_path / "out" / "big.parameters.json"
    assert json.loads(params_file.read_text()) == {"blob": blob}
    assert executed.metadata.papermill.parameters == {"small": 7}  # papermill injects only the small one
    from eagle3lens.notebook.runner import split_parameters

    assert split_parameters({"blob": blob, "small": 7}) == ({"small": 7}, {"blob": blob})


@pytest.mark.parametrize("host", [[], ["--host", "e3l-nowhere.invalid"]], ids=["local", "host"])
@pytest.mark.parametrize("name,value,problem", [
    ("chat", "it's \"quoted\"\n$(touch {mark})", "holds a control character (a newline, a tab, ...): refused"),
    ("temperature", "__import__('os').system('touch {mark}')", "08_low_acceptance takes a number there (default 0.7)"),
])
def test_a_value_the_notebook_cannot_take_is_one_line_before_any_kernel_or_host(tmp_path, capsys, host, name, value,
                                                                                problem):
    from eagle3lens.commands.notebook import check_parameters

    mark = tmp_path / "ran"
    code_ = cli.main(["notebook", "08_low_acceptance", "-p", name, value.format(mark=mark), *host,
                      "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code_ == 2 and err.count("\n") == 1 and err.startswith(f"eagle3lens: error: -p {name}: ") and problem in err
    assert not mark.exists() and not (tmp_path / "out").exists()
    check_parameters(resolve("08_low_acceptance"), {"temperature": 0.5, "chat": "it's \"quoted\" $(x)", "top_p": 1})

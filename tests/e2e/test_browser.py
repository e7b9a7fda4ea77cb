"""A real browser: JupyterLab on loopback runs 00_triage (widgets + plotly render); exported HTML draws offline."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eagle3lens.notebook.runner import run_notebook, walkthroughs

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed at /usr/bin/chromium "
                                                     "(apt-get install chromium)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python package) not installed")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def jupyterlab(tmp_path, demo_dir):
    """JupyterLab on 127.0.0.1 with a token, serving a copy of the walkthroughs; the demo pre-built for its kernels."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(walkthroughs()["00_triage"], root)
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # render every cell, not only those scrolled into view, so the page holds every output
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "EAGLE3LENS_DEMO_DIR": str(demo_dir), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    log = open(tmp_path / "lab.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


# every cell of each findings table: its text-align; each fix command: white-space, whether its box scrolls
# sideways (scrollWidth past clientWidth: what shows is half a command) and whether the code sits inside its cell;
# each severity cell: how many lines its word takes
FINDINGS_LAYOUT_JS = """() => [...document.querySelectorAll('table.findings')].map(t => ({
    cells: [...t.querySelectorAll('td, th')].map(c => getComputedStyle(c).textAlign),
    fixes: [...t.querySelectorAll('tbody tr td:last-child code')].filter(c => c.textContent).map(c => {
        const cell = c.closest('td').getBoundingClientRect(), code = c.getBoundingClientRect();
        return {whiteSpace: getComputedStyle(c).whiteSpace, text: c.textContent,
                boxes: [c, c.parentElement, c.closest('td')].map(e => [e.scrollWidth, e.clientWidth]),
                inside: code.left >= cell.left - 0.5 && code.right <= cell.right + 0.5}}),
    severities: [...t.querySelectorAll('tbody tr td:nth-child(2)')].map(c => {
        const range = document.createRange();
        range.selectNodeContents(c);
        return {text: c.textContent, lines: new Set([...range.getClientRects()].map(r => Math.round(r.top))).size}})}))"""


def assert_findings_layout(page) -> None:
    """Findings tables as in the HTML report: every cell left-aligned, each fix command shown whole (wrapped in its
    cell, nothing to scroll to), each severity on one line."""
    tables = page.evaluate(FINDINGS_LAYOUT_JS)
    assert tables, "no findings table on the page"
    for table in tables:
        assert table["cells"] and set(table["cells"]) <= {"left", "start"}, table["cells"]
        assert table["fixes"], "no fix command in the findings table"
        for fix in table["fixes"]:
            assert fix["whiteSpace"] == "break-spaces" and fix["inside"], fix
            assert all(scroll <= client for scroll, client in fix["boxes"] if client), fix
        assert table["severities"], "no severity cell"
        for severity in table["severities"]:
            assert severity["text"] in ("critical", "warning", "info") and severity["lines"] == 1, severity


def test_findings_table_in_exported_notebook_matches_the_report_layout(demo_dir, tmp_path, browser):
    """nbconvert's lab template carries JupyterLab's output CSS (cells right-aligned, text wrapping)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "from eagle3lens.notebook import kernel as nb\nfrom eagle3lens.doctor import diagnose\n"
        f"nb.show(diagnose({str(demo_dir / 'speculators')!r}, engine='sglang==0.5.11', weights=False))")]
    nbformat.write(nb, tmp_path / "findings.ipynb")
    run = run_notebook(tmp_path / "findings.ipynb", {}, tmp_path / "out", progress=False)
    page = browser.new_page(viewport={"width": 1000, "height": 900})  # narrow enough that wrapping would happen
    page.goto(run.html.as_uri())
    page.wait_for_selector("table.findings")
    assert "jp-RenderedHTMLCommon" in run.html.read_text()  # the JupyterLab CSS that right-aligns cells is there
    assert_findings_layout(page)
    page.close()
    report = browser.new_page(viewport={"width": 1000, "height": 900})  # the standalone report: the same layout
    from eagle3lens.doctor import diagnose
    from eagle3lens.render import render_report_html

    (tmp_path / "report.html").write_text(
        render_report_html(diagnose(demo_dir / "speculators", engine="sglang==0.5.11", weights=False)))
    report.goto((tmp_path / "report.html").as_uri())
    assert_findings_layout(report)
    report.close()


def test_triage_renders_widgets_and_plotly_in_jupyterlab(jupyterlab, browser):
    url, token = jupyterlab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/lab/tree/00_triage.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')",
                           timeout=60_000)
    # wait for the kernel to be ready, then Run All
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
                           " return k && k.status === 'idle'; }", timeout=90_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_selector(".jp-Notebook .js-plotly-plot .main-svg", timeout=180_000)
    page.wait_for_selector(".jp-Notebook .widget-text input", timeout=180_000)  # the checkpoint path box
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')].some("
                           "c => c.textContent.includes('eagle3lens findings:'))", timeout=180_000)
    assert page.locator(".jp-Notebook .widget-dropdown select").count() >= 1  # the engine dropdown
    assert page.locator(".jp-Notebook .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
    errors = page.locator(".jp-Notebook .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()
    page.wait_for_selector(".jp-Notebook table.findings", timeout=60_000)
    assert_findings_layout(page)
    page.close()


def test_exported_html_draws_its_figures_offline(demo_dir, tmp_path, browser):
    run = run_notebook("05_serving_logs", {"demo_dir": str(demo_dir)}, tmp_path, progress=False)
    figures = run.html.read_text().count("Plotly.newPlot")
    context = browser.new_context()
    requested: list[str] = []

    def offline(route):
        requested.append(route.request.url)
        route.abort()

    context.route("http*://**", offline)  # no network: anything fetched from a URL fails
    page = context.new_page()
    page.goto(run.html.as_uri())
    page.wait_for_function(f"() => {{ const plots = [...document.querySelectorAll('.js-plotly-plot')];"
                           f" return plots.length === {figures} && plots.every(p => p.querySelector('.main-svg')); }}",
                           timeout=60_000)
    assert page.evaluate("() => typeof window.Plotly") == "object"
    assert requested == []
    context.close()


def test_fix_commands_are_shown_whole_in_a_narrow_panel(browser, demo_dir, tmp_path):
    """An 800 px output area that clips what overflows, as the 00_triage panel's output does: every fix command of
    the report (the triage and the findings table), a long checkpoint path in it, wraps inside the panel and shows
    whole; it used to sit in a narrow box that scrolled sideways, showing `eagle3lens convert demo/speculators --to`."""
    from eagle3lens.doctor import diagnose
    from eagle3lens.notebook.kernel import to_html

    long = tmp_path / ("a-rather-long-folder-name-for-checkpoints-" * 3) / "speculators"
    shutil.copytree(demo_dir / "speculators", long)
    html = to_html(diagnose(long, engine="sglang==0.5.11", weights=False, log=demo_dir / "sglang.log"))
    page = browser.new_page(viewport={"width": 900, "height": 900})
    page.set_content(f"<div id='panel' style='width:800px;overflow:hidden'>{html}</div>")
    panel = page.locator("#panel").bounding_box()
    boxes = page.evaluate("""() => [...document.querySelectorAll('code.cmd')].filter(c => c.textContent).map(c => {
        const box = c.getBoundingClientRect(), range = document.createRange();
        range.selectNodeContents(c);
        return {left: box.left, right: box.right, text: c.textContent, shown: range.toString(),
                lines: new Set([...range.getClientRects()].map(r => Math.round(r.top))).size,
                scroll: [c, c.parentElement, c.closest('td')].map(e => [e.scrollWidth, e.clientWidth])}})""")
    assert len(boxes) >= 4 and all(str(long) in b["text"] for b in boxes)
    for box in boxes:
        assert panel["x"] - 0.5 <= box["left"] and box["right"] <= panel["x"] + panel["width"] + 0.5, box
        assert all(scroll <= client for scroll, client in box["scroll"] if client), box  # nothing to scroll to
        assert box["shown"] == box["text"] and box["lines"] > 1, box  # wrapped, whole
    page.close()

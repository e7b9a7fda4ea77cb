"""Reading an executed walkthrough back: its outputs, their text, 08's estimate table and temperature figure."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat


def outputs(path: Path) -> list[nbformat.NotebookNode]:
    executed = nbformat.read(path, as_version=4)
    return [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]


def text_of(outs: list[nbformat.NotebookNode]) -> str:
    return "\n".join(o.text if o.output_type == "stream" else o.get("data", {}).get("text/plain", "") + "\n" +
                     o.get("data", {}).get("text/html", "") for o in outs)


def estimate_cells(outs: list[nbformat.NotebookNode]) -> dict[str, list[str]]:
    """Walkthrough 08's estimate table: traffic -> [estimated accept len, measured by the engine]."""
    html = "".join(o.get("data", {}).get("text/html", "") for o in outs)
    table = html[html.index("measured by the engine"):]
    rows = re.findall(r"<tr>.*?</tr>", table, flags=re.S)
    return {re.sub(r"<.*?>", "", r.split("</td>")[0]).strip(): [re.sub(r"<.*?>", "", c).strip()
                                                             for c in r.split("</td>")[1:-1]] for r in rows[1:]}


def sampling_figure(outs: list[nbformat.NotebookNode]) -> dict:
    """Walkthrough 08's temperature figure (plotly JSON)."""
    return next(o["data"]["application/vnd.plotly.v1+json"] for o in outs
                if o.get("data", {}).get("application/vnd.plotly.v1+json", {}).get("layout", {}).get(
                    "title", {}).get("text", "").startswith("Sampling as served"))


def low_acceptance_measured(real_dir: Path, out: Path, limit: int, new_tokens: int) -> list[nbformat.NotebookNode]:
    """Walkthrough 08 on ``real_dir`` with the installed engine serving each estimate's samples (no cell fails)."""
    from eagle3lens.notebook.runner import run_notebook

    run = run_notebook("08_low_acceptance", {"real_dir": str(real_dir), "engine": "vllm", "limit": limit,
                                             "new_tokens": new_tokens}, out, progress=False)
    outs = outputs(run.executed)
    assert not [o for o in outs if o.output_type == "error"]
    return outs


def check_counts_beside_estimates(outs: list[nbformat.NotebookNode], spec: str, build: str | None) -> None:
    """08's engine counts sit beside its estimates: greedy ones agree within the greedy tolerance (and the rounding
    of both) and are drawn; a sampled count from a build known to verify sampling wrong is said to be that and not
    drawn as the temperature's, any other sampled count is a figure and drawn."""
    from eagle3lens.engines.versions import spec_parts
    from eagle3lens.probes.measured import GREEDY_TOLERANCE
    from eagle3lens.probes.served_sampling import verify_defect

    cells = estimate_cells(outs)
    for traffic in ("served conversations, greedy", *(t for t in cells if t.startswith("the dump"))):
        estimated, measured = cells[traffic]
        assert re.fullmatch(r"\d\.\d\d", estimated) and re.fullmatch(r"\d\.\d\d", measured), cells
        assert abs(float(estimated) - float(measured)) <= GREEDY_TOLERANCE + 0.01, (traffic, cells)
    sampled = cells["served conversations, T = 0.7"][1]
    drawn = [t for t in sampling_figure(outs)["data"] if t.get("name") == "measured by the engine"]
    assert drawn and 0.0 in drawn[0]["x"], drawn
    name, release, _ = spec_parts(spec)
    if verify_defect(name, release, build) is not None:  # engine/sampled-verify-broken: not the temperature's cost
        assert "engine/sampled-verify-broken" in sampled and 0.7 not in drawn[0]["x"], (sampled, drawn)
    else:
        assert re.fullmatch(r"\d\.\d\d", sampled) and 0.7 in drawn[0]["x"], (sampled, drawn)

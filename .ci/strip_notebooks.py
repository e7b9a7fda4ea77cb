"""Keep the committed walkthroughs clean: no outputs, no execution counts, the kernel the install registers.

    python .ci/strip_notebooks.py           # rewrite notebooks/*.ipynb in place (after a Run All in JupyterLab)
    python .ci/strip_notebooks.py --check   # exit 1 naming each notebook not clean (tests/e2e/test_notebooks.py)

The kernelspec is the one ``make install`` registers and ipykernel's own wheel installs: ``python3``,
"Python 3 (ipykernel)", so opening a notebook in JupyterLab does not rewrite it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# what JupyterLab itself writes once a python3 kernel has run (the version it adds varies by machine: dropped)
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3"}
RUN_STATE_KEYS = ("execution", "papermill", "scrolled", "collapsed", "jupyter")  # cell metadata a run adds


def clean(nb: dict) -> dict:
    """``nb`` without outputs, execution counts and run state, with the canonical kernel metadata."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in RUN_STATE_KEYS:
            cell.get("metadata", {}).pop(key, None)
    nb["metadata"] = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO)}
    return nb


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"  # as nbformat writes it


def main(argv: list[str], folder: Path = NOTEBOOKS) -> int:
    check = "--check" in argv
    dirty = []
    for path in sorted(folder.glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        wanted = dump(clean(json.loads(text)))
        if text != wanted:
            dirty.append(path.name)
            if not check:
                path.write_text(wanted, encoding="utf-8")
    if check and dirty:
        print(f"not clean (outputs, run state or kernel metadata): {', '.join(dirty)}; "
              "run: python .ci/strip_notebooks.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

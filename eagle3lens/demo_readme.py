"""The demo figures the README and docs/ pages quote, generated from a demo run (a test asserts the pages hold them).

Each phrase (:func:`phrases`) is found in the pages (:func:`pages`, read as one text) by its pattern
(:data:`PATTERNS`, the words fixed, the numbers free), once, so a table cell or a comment in a code block keeps its
place, in whichever page holds it, while its numbers are rewritten::

    python -m eagle3lens.demo_readme --write      # builds the demo in a temporary folder, rewrites the pages
"""

from __future__ import annotations

import re
from pathlib import Path

ENGINE = "sglang==0.5.11"


def demo_figures(root: str | Path) -> dict[str, float]:
    """Accept lengths the pages quote, computed on the demo at ``root`` exactly as the commands it shows run."""
    from .convert import estimate_acceptance  # the probe, its fixed view on what convert writes
    from .probes.logs import parse_log

    demo = Path(root)
    data, target = demo / "hidden-states", demo / "target"
    speculators = estimate_acceptance(demo / "speculators", data, target=target, engine=ENGINE)
    eagle_off = estimate_acceptance(demo / "eagle", data, target=target, engine=ENGINE, scenario="aux-off",
                                    fixed=False)
    figures = {"served": speculators.accept_len("as_served"), "trained": speculators.accept_len("as_trained"),
               "fixed": speculators.accept_len("fixed"), "aux_off": eagle_off.accept_len("as_served"),
               "log": parse_log(demo / "sglang.log", engine=ENGINE).summary.mean_accept_len,
               "eagle_log": parse_log(demo / "sglang-eagle.log", engine=ENGINE).summary.mean_accept_len}
    missing = [name for name, value in figures.items() if value is None]
    if missing:
        raise ValueError(f"the demo at {demo} gave no figure for {missing}")
    return {name: float(value) for name, value in figures.items() if value is not None}


def phrases(figures: dict[str, float]) -> dict[str, str]:
    """The pages' text for each marker."""
    f = {name: f"{value:.2f}" for name, value in figures.items()}
    return {
        "acceptance": (f"`acceptance` on it: as served by `{ENGINE}` accept len {f['served']} (the log's {f['log']}), "
                       f"as trained {f['trained']}, after `convert` {f['fixed']}; `eagle/` under `--scenario aux-off` "
                       f"{f['aux_off']}"),
        "doctor-eagle": f"as served {f['aux_off']} (the log: {f['eagle_log']})",
    }


_NUMBER = r"[0-9]+\.[0-9]{2}"
PATTERNS = {
    "acceptance": re.compile(rf"`acceptance` on it: as served by `{re.escape(ENGINE)}` accept len {_NUMBER} \(the "
                             rf"log's {_NUMBER}\), as trained {_NUMBER}, after `convert` {_NUMBER}; `eagle/` under "
                             rf"`--scenario aux-off` {_NUMBER}"),
    "doctor-eagle": re.compile(rf"as served {_NUMBER} \(the log: {_NUMBER}\)"),
}


def pages(root: str | Path = ".") -> dict[Path, str]:
    """The checkout's ``README.md`` and ``docs/*.md`` under ``root``, each with its text, in a fixed order."""
    base = Path(root)
    return {path: path.read_text(encoding="utf-8") for path in [base / "README.md", *sorted(base.glob("docs/*.md"))]}


def joined(texts: dict[Path, str]) -> str:
    """The pages as one text, so a phrase is counted once across all of them."""
    return "\n".join(texts.values())


def found(readme: str) -> dict[str, list[str]]:
    """Each phrase's occurrences in ``readme`` (the pages, joined, must hold each exactly once)."""
    return {name: pattern.findall(readme) for name, pattern in PATTERNS.items()}


# The demo is built deterministically on one thread, but its brief training runs through the CPU's own float
# kernels (AVX2 or AVX-512 sum in another order), so another machine's demo accepts a few hundredths otherwise.
MACHINE_SPREAD = 0.03


def numbers(text: str) -> list[float]:
    """The two-decimal figures of a phrase, in order."""
    return [float(x) for x in re.findall(rf"(?<![0-9.]){_NUMBER}(?![0-9.])", text)]


def agrees(readme: str, texts: dict[str, str]) -> bool:
    """``readme`` holds each phrase once, with figures within :data:`MACHINE_SPREAD` of this machine's."""
    for name, pattern in PATTERNS.items():
        hits = pattern.findall(readme)
        if len(hits) != 1:
            return False
        ours, theirs = numbers(hits[0]), numbers(texts[name])
        if len(ours) != len(theirs) or any(abs(a - b) > MACHINE_SPREAD + 1e-9 for a, b in zip(ours, theirs, strict=True)):
            return False
    return True


def splice(readme: str, texts: dict[str, str]) -> str:
    """``readme`` with each phrase's numbers replaced by those of ``texts``."""
    for name, pattern in PATTERNS.items():
        readme = "".join(_pieces(pattern, readme, texts[name]))
    return readme


def _pieces(pattern: re.Pattern[str], readme: str, text: str) -> list[str]:
    """``readme`` cut at each match of ``pattern``, the matches replaced by ``text`` (taken literally)."""
    out, at = [], 0
    for m in pattern.finditer(readme):
        out += [readme[at:m.start()], text]
        at = m.end()
    return [*out, readme[at:]]


if __name__ == "__main__":
    import sys
    import tempfile

    from .demo import build_demo

    with tempfile.TemporaryDirectory(prefix="eagle3lens-demo-") as tmp:
        texts = phrases(demo_figures(build_demo(Path(tmp) / "demo").root))
    if sys.argv[1:] == ["--write"]:  # rewrites ./README.md and ./docs/*.md where a phrase's numbers changed
        for path, text in pages().items():
            if (new := splice(text, texts)) != text:
                path.write_text(new, encoding="utf-8")
    else:
        print("\n".join(f"{name}: {text}" for name, text in texts.items()))

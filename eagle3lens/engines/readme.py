"""The engine table of docs/engines.md, generated from the profiles (a test asserts the page contains it)."""

from __future__ import annotations

from .profile import EngineProfile
from .registry import DETECT_FILES, all_profiles


def _ids(p: EngineProfile) -> str:
    paths = [p.with_path(name) for name in p.paths] or [p]
    out = []
    for q in paths:
        ids = " → ".join(q.aux_ids_sources) or "defaults 2, L//2, L-3"
        default = " (default)" if q.path and q.path == p.default_path else ""
        out.append((f"`:{q.path}`{default}: " if q.path else "") + ids)
    return "; ".join(out)


def _sources(p: EngineProfile) -> str:
    """Loader files with their hashes per release run; the other cited files by name (hashes: engines --json)."""
    parts, others = [], []
    for s in p.sources:
        leaf = s.path.rsplit("/", 1)[-1]
        if s.path not in DETECT_FILES.get(p.name, ()):
            others.append(leaf)
            continue
        runs = ", ".join(f"{h} ({a}" + (f"–{b})" if b != a else ")") for a, b, h in s.hashes if h)
        if runs:
            parts.append(f"{leaf} {runs}")
    if others:
        parts.append("also " + ", ".join(others))
    return "<br>".join(parts)


def _without_aux(p: EngineProfile) -> str:
    """What the engine does with a draft when no aux states are captured."""
    if p.eagle_mode_vocab == "full":
        return "EAGLE algorithm: fc skipped, target embed + head, all V rows, ids unmapped"
    if p.eagle_mode_vocab == "first-n":
        return "EAGLE algorithm: fc skipped, target embed + head, first N rows, ids unmapped"
    return {"always-assert": "fc asserts the width", "width-differs": "fc skipped"}.get(p.fc_gate, p.fc_gate)


def _from_target(p: EngineProfile) -> str:
    """Which parameters the proposer takes from the target after load, and when."""
    when = {"absent": "when absent", "same-shape": "when its shape is the target's, trained or not",
            "always": "always"}
    unless = {"draft_vocab_size": " (not with a draft_vocab_size)",
              "target_hidden_size-differs": " (not when the target's width differs)"}
    rows = [f"{role} {when[p.share_when.get(role, 'always' if role == 'embed' else 'absent')]}"
            + unless.get(p.shared_unless.get(role, ""), "")
            for role in ("embed", "lm_head") if role in p.shared_from_target]
    return "; ".join(rows) or "nothing"


def engine_table() -> str:
    """Markdown: one row per serving version group (release range, spec, classes, key and config rules, hashes)."""
    head = ("| releases | `--engine` | draft classes | unknown keys | aux ids read from | flags honoured | "
            "without aux capture | from the target | read from (sha256[:12]) |\n|---|---|---|---|---|---|---|---|---|")
    rows = []
    for p in all_profiles():
        if p.kind != "serving":
            continue
        classes = ", ".join(f"`{c}`" for c in [p.draft_class, *(c.name for c in p.classes)])
        flags = ", ".join(sorted(p.honoured_flags)) or "none"
        rows.append(f"| {p.label} | `{p.spec}` | {classes} | {p.unknown} | {_ids(p)} ({p.aux_id_convention} "
                    f"convention) | {flags} | {_without_aux(p)} | {_from_target(p)} | {_sources(p)} |")
    return head + "\n" + "\n".join(rows)


START, END = "<!-- engine-table:start -->", "<!-- engine-table:end -->"
PAGE = "docs/engines.md"  # the page that holds the table, relative to the checkout


def splice(readme: str) -> str:
    """``readme`` with the text between the engine-table markers replaced by :func:`engine_table`."""
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{engine_table()}\n{END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--write"]:  # python -m eagle3lens.engines.readme --write  (rewrites ./docs/engines.md)
        Path(PAGE).write_text(splice(Path(PAGE).read_text()))
    else:
        print(engine_table())

"""Maintainer tool (a workflow: it runs engines and judges their loads): one release's own loader on the built-in
drafts, held against the simulation, or one release of every group as a table.

    python -m eagle3lens.release_audit --release sglang==0.5.24 [--cache DIR] [--draft NAME ...]
    python -m eagle3lens.release_audit --root DIR            (an engine directory already there)
    python -m eagle3lens.release_audit --execute [--engine E] [--cached-only]

The release's wheel is fetched into the cache (``pip download --no-deps``) and unpacked without its compiled
extensions (:mod:`eagle3lens.engines.wheels`); every built-in draft (:mod:`eagle3lens.engines.audit_drafts`) goes through its own ``load_weights``
(:mod:`eagle3lens.engines.execute`, one worker process for all of them) and is held against the simulation of the same release
(:mod:`eagle3lens.probes.executed`). Each ``engine/simulation-disagrees`` is printed; the exit status is 1 when any is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .checkpoint import Checkpoint
from .errors import UsageError
from .io.textsafe import clip, printable
from .engines.audit_drafts import DRAFTS, build_drafts
from .engines.execute import Execution, engine_at, release_profile, simulated_class
from .engines.execute_child import execute_isolated, execute_many_isolated
from .probes.execute_verdict import BEFORE_LOAD, judged
from .probes.executed import executed_result
from .engines.versions import is_release, parse_version, spec_parts


@dataclass(frozen=True)
class Disagreement:
    release: str
    draft: str
    what: str
    simulated: str
    executed: str

    def line(self) -> str:
        return (f"{self.release:16} {self.draft:19} {printable(clip(self.what, 120))}\n"
                f"{'':36} simulated: {printable(clip(self.simulated, 200))}\n"
                f"{'':36} executed:  {printable(clip(self.executed, 200))}")


@dataclass(frozen=True)
class Cell:
    """One (release, draft) of the audit: the executed outcome against the simulated one."""

    release: str
    draft: str
    outcome: str  # agree | disagree | not executed
    executed: str  # where the engine's own code stopped: "loaded", "load: KeyError", ... ("-" when not executed)
    simulated: str  # where the simulation stops: "loaded", "construct", "load: raises"
    why: str = ""  # disagree: what differs; not executed: why

    def row(self) -> str:
        return (f"| {self.release} | {self.draft} | {self.outcome} | {self.executed} | {self.simulated} | "
                f"{printable(clip(self.why, 300)).replace('|', '/')} |")


@dataclass(frozen=True)
class ReleaseAudit:
    release: str  # NAME==VERSION as the engine's dist-info says
    drafts: tuple[str, ...]
    disagreements: tuple[Disagreement, ...]
    notes: tuple[str, ...]
    known: bool  # already in the release list (versions.py)
    cells: tuple[Cell, ...] = ()


def engine_root(release: str, cache: Path) -> Path:
    """The unpacked wheel of ``NAME==VERSION`` (fetched into ``cache`` on first use)."""
    from .engines.wheels import unpacked

    name, version, _ = spec_parts(release)
    if name not in ("sglang", "vllm") or version is None:
        raise UsageError(f"--release {release!r}: write sglang==X or vllm==X")
    return unpacked(name, str(parse_version(version)), cache)


def audit_release(root: Path, drafts: Sequence[str] | None = None) -> ReleaseAudit:
    """The built-in drafts (all, or ``drafts``) through the engine at ``root``; where it and the profile differ."""
    name, version = engine_at(root)
    release = f"{name}=={version}" if version else name
    rows: list[Disagreement] = []
    notes: list[str] = []
    cells: list[Cell] = []
    controls: dict[str, Execution] = {}  # class -> the known-good control's execution (the same for every draft)

    def control(path: Path, cls: str) -> Execution:
        if cls not in controls:
            controls[cls] = execute_isolated(path, root, fallback_class=cls)
        return controls[cls]

    with tempfile.TemporaryDirectory(prefix="eagle3lens-audit-") as tmp:
        built = build_drafts(Path(tmp), list(drafts) if drafts else None)
        ckpts = {n: Checkpoint.open(p) for n, p in built.items()}
        runs = execute_many_isolated([(p, simulated_class(ckpts[n], root)) for n, p in built.items()], root)
        for index, ((draft, ckpt), ex) in enumerate(zip(ckpts.items(), runs, strict=True)):
            if index and ex.error is not None and ex.phase in BEFORE_LOAD and not ex.not_executed:
                # a stop before the load after an earlier draft in the same process: the engine is judged on a
                # fresh import, as the control is (a half-imported engine stops elsewhere)
                ex = execute_isolated(built[draft], root, fallback_class=simulated_class(ckpt, root))
            ex = judged(ckpt, ex, control)
            if ex.not_executed:
                notes.append(f"{draft}: not executed: the engine {ex.not_executed}")
            result = executed_result(ckpt, ex)
            found = [Disagreement(release, draft, f.evidence["what"], str(f.evidence["simulated"]),
                                  str(f.evidence["executed"]))
                     for f in result.findings if f.code == "engine/simulation-disagrees"]
            rows += found
            cells.append(_cell(release, draft, ckpt, ex, found))
            notes += [n for n in result.notes if "newer than the newest release read" in n and n not in notes]
        used = _transformers_note(runs[0]) if runs else ""
    known = version is not None and is_release(name, parse_version(version))
    return ReleaseAudit(release, tuple(built), tuple(rows), tuple(notes + ([used] if used else [])), known,
                        tuple(cells))


def _cell(release: str, draft: str, ckpt: Checkpoint, ex: Execution, found: Sequence[Disagreement]) -> Cell:
    from .probes.keys import simulate_load

    sim = simulate_load(ckpt, release_profile(ex.engine, ex.version, ckpt.config))
    raising = any(f.fate == "raises" for f in sim.fates)
    simulated = sim.refused_at or ("load: raises" if raising else "loaded")
    if ex.not_executed:
        return Cell(release, draft, "not executed", "-", simulated, ex.not_executed)
    err = ex.error
    executed = "loaded" if err is None else f"{ex.phase}: {err.get('type')}"
    if found:
        return Cell(release, draft, "disagree", executed, simulated, "; ".join(d.what for d in found))
    return Cell(release, draft, "agree", executed, simulated)


def _transformers_note(ex: Execution) -> str:
    """Which transformers read the configs and ran the engine's code, and what the release requires."""
    used = ex.transformers
    if not used:
        return ""
    where = f"from {used['path']}" if used.get("path") else "installed here"
    pin = used.get("pin")
    return (f"configs read with transformers {used.get('version') or '?'} {where} "
            + (f"(the release requires {pin})" if pin else "(the release pins none)"))


def report(audit: ReleaseAudit) -> str:
    """What ``--release`` prints: each disagreement, then what accepting the release takes."""
    lines = [d.line() for d in audit.disagreements]
    lines += [f"note: {printable(n)}" for n in audit.notes]
    name = audit.release.split("==")[0]
    if audit.disagreements:
        drafts = len({d.draft for d in audit.disagreements})
        lines.append(f"{audit.release}: the engine's own loader disagrees with the simulation on {drafts} of "
                     f"{len(audit.drafts)} built-in drafts. To accept the release, correct its profile in "
                     f"eagle3lens/engines/{name}.py from the release's source until this prints no disagreement.")
    elif any(c.outcome == "not executed" for c in audit.cells):
        missing = sum(c.outcome == "not executed" for c in audit.cells)
        lines.append(f"{audit.release}: {missing} of {len(audit.drafts)} built-in drafts were not executed (the notes "
                     f"say why); the engine's own loader agrees with the simulation on the other "
                     f"{len(audit.drafts) - missing}.")
    else:
        lines.append(f"{audit.release}: the engine's own loader agrees with the simulation on all "
                     f"{len(audit.drafts)} built-in drafts.")
        if not audit.known:
            lines.append(f"To accept the release: add it to {name.upper()}_RELEASES in eagle3lens/engines/versions.py "
                         "(and run --engine/--versions for the source hashes).")
    return "\n".join(lines)


def run(release: str | None, root: Path | None, cache: Path, drafts: Sequence[str] | None) -> int:
    """``--release`` / ``--root``: print the audit; 1 when the engine and the profile disagree."""
    where = root if root is not None else engine_root(release or "", cache)
    if release and root is not None:
        name, version = engine_at(root)
        want_name, want_version, _ = spec_parts(release)
        if (name, version) != (want_name, want_version):
            raise UsageError(f"--root {root} holds {name}=={version}, not {release}")
    audit = audit_release(where, drafts)
    print(report(audit))
    return 1 if audit.disagreements or any(c.outcome == "not executed" for c in audit.cells) else 0


# -- every release group ----------------------------------------------------------------------
HEADER = ("| release | draft | outcome | executed | simulated | why |\n"
          "|---|---|---|---|---|---|")


def representatives(name: str, cache: Path) -> list[tuple[str, str]]:
    """One release of each of ``name``'s groups: (group label, version), the newest already unpacked in ``cache``,
    else the group's newest."""
    from .engines import sglang, vllm

    out = []
    for profile in {"sglang": sglang.PROFILES, "vllm": vllm.PROFILES}[name]:
        cached = [v for v in profile.releases if (cache / "unpacked" / f"{name}-{v}" / ".eagle3lens-unpacked").is_file()]
        out.append((profile.label, cached[-1] if cached else profile.releases[-1]))
    return out


def audit_groups(engines: Sequence[str], cache: Path, drafts: Sequence[str] | None = None, *,
                 cached_only: bool = False, on_release: Callable[[ReleaseAudit], None] | None = None,
                 ) -> list[ReleaseAudit]:
    """The built-in drafts through one release of every group of ``engines`` (fetched into ``cache``, or with
    ``cached_only`` only those already there: the rest are cells not executed, saying so)."""
    from .engines.wheels import unpacked

    out = []
    names = list(drafts) if drafts else list(DRAFTS)
    for name in engines:
        for _label, version in representatives(name, cache):
            release = f"{name}=={version}"
            done = (cache / "unpacked" / f"{name}-{version}" / ".eagle3lens-unpacked").is_file()
            try:
                if cached_only and not done:
                    raise FileNotFoundError("its wheel is not in the cache (run without --cached-only to fetch it)")
                one = audit_release(unpacked(name, version, cache), names)
            except (OSError, subprocess.SubprocessError, UsageError) as exc:
                why = f"{type(exc).__name__}: {clip(str(exc), 200)}"
                one = ReleaseAudit(release, tuple(names), (), (), True,
                                   tuple(Cell(release, d, "not executed", "-", "-", why) for d in names))
            out.append(one)
            if on_release is not None:
                on_release(one)
    return out


def table(audits: Sequence[ReleaseAudit]) -> str:
    """The audit as a Markdown table, then the count of each outcome."""
    cells = [c for a in audits for c in a.cells]
    counts = {k: sum(c.outcome == k for c in cells) for k in ("agree", "disagree", "not executed")}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    return "\n".join([HEADER, *(c.row() for c in cells), "", f"{len(cells)} cells: {summary}"])


def main(argv: Sequence[str] | None = None) -> int:
    from .engines import RELEASES
    from .engines.wheels import CACHE

    parser = argparse.ArgumentParser(prog="python -m eagle3lens.release_audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", metavar="NAME==VERSION",
                        help="run this release's own loader on the built-in drafts; exit 1 where it and the "
                             "simulation disagree")
    parser.add_argument("--root", type=Path, help="an engine directory to run instead of the fetched wheel")
    parser.add_argument("--draft", action="append", help="only this built-in draft (repeatable)")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--execute", action="store_true",
                        help="run one release of every group (of --engine, else both engines) on the built-in "
                             "drafts: a table of executed vs simulated outcomes; exit 1 where any disagrees")
    parser.add_argument("--engine", choices=sorted(RELEASES), help="with --execute: only this engine's groups")
    parser.add_argument("--cached-only", action="store_true",
                        help="with --execute: fetch nothing; a group whose wheel is not in the cache is not executed")
    args = parser.parse_args(argv)
    if args.execute:
        if args.release or args.root:
            parser.error("--execute runs one release of every group: no --release or --root")
        audits = audit_groups([args.engine] if args.engine else sorted(RELEASES), args.cache, args.draft,
                              cached_only=args.cached_only,
                              on_release=lambda a: print(f"{a.release}: " + ", ".join(
                                  f"{c.draft} {c.outcome}" for c in a.cells), file=sys.stderr, flush=True))
        print(table(audits))
        return 1 if any(c.outcome == "disagree" for a in audits for c in a.cells) else 0
    if not (args.release or args.root):
        parser.error("give --release NAME==VERSION, --root DIR or --execute")
    if args.engine:
        parser.error("--engine goes with --execute")
    try:
        return run(args.release, args.root, args.cache, args.draft)
    except (UsageError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

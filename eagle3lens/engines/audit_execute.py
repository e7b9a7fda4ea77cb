"""Maintainer tool: run one release's own loader on the built-in drafts and print where the profile disagrees.

    python -m eagle3lens.engines.audit --release sglang==0.5.24 [--cache DIR] [--draft NAME ...]
    python -m eagle3lens.engines.audit --root DIR            (an engine directory already there)

The release's wheel is fetched into the cache (``pip download --no-deps``) and unpacked without its compiled
extensions (:mod:`.wheels`); every built-in draft (:mod:`.audit_drafts`) goes through its own ``load_weights``
(:mod:`.execute`, one worker process for all of them) and is held against the simulation of the same release
(:mod:`eagle3lens.probes.executed`). Each ``engine/simulation-disagrees`` is printed; the exit status is 1 when any is.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..checkpoint import Checkpoint
from ..errors import UsageError
from ..io.textsafe import clip, printable
from .audit_drafts import build_drafts
from .execute import engine_at, simulated_class
from .execute_child import execute_isolated, execute_many_isolated
from ..probes.execute_verdict import judged
from ..probes.executed import executed_result
from .versions import is_release, parse_version, spec_parts


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
class ReleaseAudit:
    release: str  # NAME==VERSION as the engine's dist-info says
    drafts: tuple[str, ...]
    disagreements: tuple[Disagreement, ...]
    notes: tuple[str, ...]
    known: bool  # already in the release list (versions.py)


def engine_root(release: str, cache: Path) -> Path:
    """The unpacked wheel of ``NAME==VERSION`` (fetched into ``cache`` on first use)."""
    from .wheels import unpacked

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
    with tempfile.TemporaryDirectory(prefix="eagle3lens-audit-") as tmp:
        built = build_drafts(Path(tmp), list(drafts) if drafts else None)
        ckpts = {n: Checkpoint.open(p) for n, p in built.items()}
        runs = execute_many_isolated([(p, simulated_class(ckpts[n], root)) for n, p in built.items()], root)
        for (draft, ckpt), ex in zip(ckpts.items(), runs, strict=True):
            ex = judged(ckpt, ex, lambda path, cls: execute_isolated(path, root, fallback_class=cls))
            if ex.not_executed:
                notes.append(f"{draft}: not executed: the engine {ex.not_executed}")
            result = executed_result(ckpt, ex)
            rows += [Disagreement(release, draft, f.evidence["what"], str(f.evidence["simulated"]),
                                  str(f.evidence["executed"]))
                     for f in result.findings if f.code == "engine/simulation-disagrees"]
            notes += [n for n in result.notes if "newer than the newest release read" in n and n not in notes]
    known = version is not None and is_release(name, parse_version(version))
    return ReleaseAudit(release, tuple(built), tuple(rows), tuple(notes + [_transformers_note(root, name)]), known)


def _transformers_note(root: Path, name: str) -> str:
    """Configs are read by the transformers installed here, not necessarily the release's pin: say which."""
    from importlib import metadata

    import transformers

    dist = next(iter(metadata.distributions(name=name, path=[str(root)])), None)
    pins = [r for r in (dist.requires or []) if dist is not None and r.lower().startswith("transformers")
            and "extra ==" not in r] if dist is not None else []
    pin = pins[0].split(";")[0].strip() if pins else "no transformers pin"
    return f"configs read with transformers {transformers.__version__} installed here (the release requires {pin})"


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
    return 1 if audit.disagreements else 0

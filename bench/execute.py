"""Benchmark: ``keys --execute`` on the demo's eagle draft with a real SGLang release unpacked ``--no-deps``.

    .venv/bin/python bench/execute.py [--release 0.5.11] [--demo DIR] [--no-fullsize]
    .venv/bin/python bench/execute.py --audit [--cached-only] [--engine E] [--draft NAME]

Cold: a fresh interpreter imports the engine and runs its loader (the ``--execute`` worker), budget 20 s; its peak
RSS is the child's own ``VmHWM`` (``/proc/self/status``, read by the child as it ends; ``ru_maxrss`` of children
would report this parent's peak, which survives exec), budget 1 GB. Warm: the same execution again in this process
once the engine is imported, budget 2 s. Full size: the Kimi-K2.5-sized sparse draft (headers real, data holes),
cold, within 2x of the demo's cold time. Baseline (named "simulated"): ``simulate_load`` of the same draft and
release, measured in the same run; the ratios executed / simulated are printed beside the budgets.

``--audit``: one release of every group (``engines/groups.py``) x the built-in drafts, each cell a fresh worker with
the release's own transformers first on its path, fed the draft twice: cold is the worker's wall time less the
second record's, warm the second record's own seconds (the engine already imported), peak RSS the worker's VmHWM;
budgets 20 s cold, 2 s warm, 1 GB. The per-release transformers (``release_env``: a pip download the first time,
a directory check after) is timed on its own line, not in the cells.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import PEAK_RSS_KB  # noqa: E402
from eagle3lens.engines.execute import record_execution  # noqa: E402
from eagle3lens.engines.wheels import unpacked  # noqa: E402
from eagle3lens.probes.keys import simulate_load  # noqa: E402

CHILD = """
import sys
from eagle3lens.engines.execute import main
main(sys.argv[1:])
print('eagle3lens-bench-vmhwm-kb', PEAK_RSS_KB)
""".replace("PEAK_RSS_KB", PEAK_RSS_KB)


def cold(draft: Path, root: Path) -> tuple[float, float, dict]:
    """Seconds, peak RSS (GB) of a fresh worker that imports the engine and runs its loader on ``draft``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "--root", str(root), str(draft)], capture_output=True,
                          text=True, check=True, env=env, timeout=600)
    seconds = time.perf_counter() - t
    record = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("eagle3lens-execution "))
                        .split(" ", 1)[1])
    kb = int(next(ln for ln in done.stdout.splitlines() if ln.startswith("eagle3lens-bench-vmhwm-kb")).split()[1])
    return seconds, kb / (1 << 20), record


def audit_cell(draft: Path, root: Path, site: str) -> tuple[float, float, float, str]:
    """Cold seconds, warm seconds, peak RSS (GB) and the phase reached, of one (release, draft) cell."""
    first = [site] if site else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(first + [str(Path(__file__).resolve().parents[1]),
                                                                 os.environ.get("PYTHONPATH", "")])}
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "--root", str(root), str(draft), str(draft)],
                          capture_output=True, text=True, check=False, env=env, timeout=600)
    wall = time.perf_counter() - t
    records = [json.loads(ln.split(" ", 1)[1]) for ln in done.stdout.splitlines()
               if ln.startswith("eagle3lens-execution ")]
    kb = next((int(ln.split()[1]) for ln in done.stdout.splitlines() if ln.startswith("eagle3lens-bench-vmhwm-kb")), 0)
    if len(records) < 2:
        return wall, float("nan"), kb / (1 << 20), f"no record (exit {done.returncode})"
    warm = float(records[1]["seconds"])
    phase = records[0]["phase"] + (f" {records[0]['error']['type']}" if records[0]["error"] else "")
    return wall - warm, warm, kb / (1 << 20), phase


def audit(cached_only: bool, engines: list[str], only: list[str] | None = None) -> None:
    from eagle3lens.engines.audit_drafts import build_drafts
    from eagle3lens.release_audit import representatives
    from eagle3lens.engines.release_env import release_env
    from eagle3lens.engines.wheels import CACHE

    drafts = {name: path for name, path in build_drafts(Path(tempfile.mkdtemp())).items() if not only or name in only}
    print("release            draft               cold s  warm s  RSS GB  phase  (budgets 20 s / 2 s / 1 GB)")
    worst = [0.0, 0.0, 0.0]
    for name in engines:
        for _label, version in representatives(name, CACHE):
            if cached_only and not (CACHE / "unpacked" / f"{name}-{version}" / ".eagle3lens-unpacked").is_file():
                print(f"{name}=={version:12} not in the cache: not measured")
                continue
            root = unpacked(name, version)
            t = time.perf_counter()
            env = release_env(root, name)
            print(f"{name}=={version:12} transformers {env.version or '?'} "
                  f"({'cache ' + Path(env.path).name if env.path else 'installed'}) ready in "
                  f"{time.perf_counter() - t:.2f} s (not counted in the cells)")
            for draft, path in drafts.items():
                cold_s, warm_s, gb, phase = audit_cell(path, root, env.path)
                worst = [max(worst[0], cold_s), max(worst[1], warm_s), max(worst[2], gb)]
                print(f"{name}=={version:12} {draft:19} {cold_s:6.2f}  {warm_s:6.2f}  {gb:6.2f}  {phase}")
    print(f"worst cell: cold {worst[0]:.2f} s ({worst[0] / 20:.2f} of budget), warm {worst[1]:.2f} s "
          f"({worst[1] / 2:.2f} of budget), peak RSS {worst[2]:.2f} GB ({worst[2]:.2f} of budget)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", default="0.5.11")
    parser.add_argument("--demo", type=Path, default=None, help="a built demo (default: build one)")
    parser.add_argument("--no-fullsize", action="store_true")
    parser.add_argument("--audit", action="store_true", help="every release group x the built-in drafts")
    parser.add_argument("--cached-only", action="store_true", help="with --audit: only releases already cached")
    parser.add_argument("--engine", action="append", choices=("sglang", "vllm"), help="with --audit (repeatable)")
    parser.add_argument("--draft", action="append", help="with --audit: only this built-in draft (repeatable)")
    args = parser.parse_args()
    if args.audit:
        audit(args.cached_only, args.engine or ["sglang", "vllm"], args.draft)
        return
    root = unpacked("sglang", args.release)
    tmp = Path(tempfile.mkdtemp())
    demo = args.demo
    if demo is None:
        from eagle3lens.demo import build_demo

        demo = build_demo(tmp / "demo").root
    draft = demo / "eagle"
    t = time.perf_counter()
    simulate_load(draft, f"sglang=={args.release}")
    simulated = time.perf_counter() - t
    cold_s, rss_gb, record = cold(draft, root)
    assert record["phase"] == "done", record["error"]
    record_execution(draft, root)  # imports the engine into this process
    t = time.perf_counter()
    again = record_execution(draft, root)
    warm = time.perf_counter() - t
    assert again.phase == "done", again.error
    print(f"sglang=={args.release}, demo eagle draft; worker's own loader phase {record['seconds']:.2f} s")
    print(f"simulated (baseline) {simulated:.3f} s")
    print(f"cold  {cold_s:7.2f} s  budget 20 s  ({cold_s / 20:.2f} of budget, {cold_s / simulated:.0f}x simulated)")
    print(f"warm  {warm:7.2f} s  budget  2 s  ({warm / 2:.2f} of budget, {warm / simulated:.1f}x simulated)")
    print(f"peak RSS (cold worker, VmHWM) {rss_gb:.2f} GB  budget 1 GB  ({rss_gb:.2f} of budget)")
    if not args.no_fullsize:
        from _fullsize import make_sparse_draft

        big = make_sparse_draft(tmp / "fullsize", layout="eagle")
        big_s, big_gb, big_record = cold(big, root)
        assert big_record["phase"] == "done", big_record["error"]
        print(f"full-size sparse draft cold {big_s:7.2f} s  budget 2x demo  ({big_s / cold_s:.2f}x demo), "
              f"peak RSS {big_gb:.2f} GB")


if __name__ == "__main__":
    main()

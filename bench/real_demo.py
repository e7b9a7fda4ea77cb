"""Benchmark: ``eagle3lens demo --real`` built from nothing (the content cache bypassed), against its floor.

    .venv/bin/python bench/real_demo.py [--out DIR | --dir DIR] [--measure] [--engine-python PY] [--log L]

Runs the build in a child process (a fresh cache folder, so nothing is reused but the downloaded wheel) and prints
its wall time, CPU time and peak RSS (the child's own VmHWM) against the floor: <= 15 min and <= 6 GB on this
2-core machine. On a shared machine the wall time depends on what runs beside it: the CPU time over two cores is
the build's own share. With ``--measure``, the real engine (vLLM's CPU build) then serves the held-out chat with
each drafter and variant at K = 3 and prints the accept length it counts, with its standard error over rounds.

Then the budget's cost (``--dir DIR`` times an existing build without building): ``acceptance --chat C
--temperature 0.7`` alone, then ``doctor`` on the same inputs (which adds the budget and the other probes), each once
as a user runs it; floor: the doctor <= 2x acceptance. Both read the server log ``--log L``, else the log the real
engine writes serving the chat at T = 0.7 with the healthy drafter (``measure(log_to=...)``, not timed), else none.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _rss import PEAK_RSS_KB  # noqa: E402

FLOOR_S, FLOOR_GB = 15 * 60, 6.0
FLOOR_BUDGET = 2.0  # doctor with the budget / acceptance --chat alone, same inputs
CHILD = f"""
import resource, sys, time
from pathlib import Path
from eagle3lens.demo_real import build_real
t = time.monotonic()
build_real(Path(sys.argv[1]), cache=Path(sys.argv[2]), progress=lambda m: print(f"{{time.monotonic() - t:7.1f}} s  {{m}}", flush=True))
usage = resource.getrusage(resource.RUSAGE_SELF)
print("RESULT", time.monotonic() - t, usage.ru_utime + usage.ru_stime, {PEAK_RSS_KB})
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the demo goes (default: a temporary folder)")
    parser.add_argument("--dir", type=Path, help="a built real demo: time the budget on it, build nothing")
    parser.add_argument("--measure", action="store_true", help="serve the drafters with the real engine afterwards")
    parser.add_argument("--engine-python", default=os.environ.get("EAGLE3LENS_ENGINE_PYTHON", ".engine-venv/bin/python"))
    parser.add_argument("--log", type=Path, help="the server log both commands read (default: the engine's own)")
    args = parser.parse_args()
    engine_python = str(Path(args.engine_python).absolute())
    if args.dir is not None:
        from eagle3lens.errors import Eagle3LensError
        from eagle3lens.notebook.pages import real_demo

        try:
            real_demo(args.dir)  # one line where DIR is not a built real demo
        except Eagle3LensError as exc:
            raise SystemExit(f"bench/real_demo.py: {exc}") from None
        if args.measure:
            measure_all(args.dir, engine_python)
        return 0 if time_budget(args.dir, engine_python, args.log) else 1
    with tempfile.TemporaryDirectory(prefix="eagle3lens-real-") as work:
        out = args.out or Path(work) / "real"
        done = subprocess.run([sys.executable, "-c", CHILD, str(out), str(Path(work) / "cache")], text=True,
                              stdout=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "2"})
        lines = done.stdout.splitlines()
        print("\n".join(line for line in lines if not line.startswith("RESULT")))
        result = [line for line in lines if line.startswith("RESULT")]
        if done.returncode or not result:
            print(f"build failed (exit {done.returncode})", file=sys.stderr)
            return 1
        wall, cpu, rss_kb = (float(v) for v in result[0].split()[1:])
        rss_gb = rss_kb / (1 << 20)
        print(f"build: {wall / 60:.1f} min wall (floor {FLOOR_S // 60} min: {'ok' if wall <= FLOOR_S else 'OVER'}), "
              f"{cpu / 60:.1f} min CPU ({cpu / 2 / 60:.1f} min over 2 cores), peak RSS {rss_gb:.2f} GB "
              f"(floor {FLOOR_GB:g} GB: {'ok' if rss_gb <= FLOOR_GB else 'OVER'})")
        if args.measure:
            measure_all(out, engine_python)
        ok = wall <= FLOOR_S and rss_gb <= FLOOR_GB
        ok = time_budget(out, engine_python, args.log) and ok
    return 0 if ok else 1


def _timed(words: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one CLI run (the CPU time of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "eagle3lens", *words, "--json"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{words[0]} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def time_budget(root: Path, engine_python: str, log: Path | None) -> bool:
    """``acceptance --chat --temperature 0.7`` alone, then ``doctor`` with the budget on the same inputs."""
    real = json.loads((root / "manifest.json").read_text(encoding="utf-8"))["real"]
    with tempfile.TemporaryDirectory(prefix="eagle3lens-budget-") as work:
        if log is None and Path(engine_python).is_file():
            log = Path(work) / "engine.log"
            figure = _serve_chat(root, real, engine_python, log)
            print(f"served at T=0.7 by the real engine: accept length {figure} (its log: what both commands read)")
        inputs = [str(root / real["draft"]), "--target", str(root / real["target"]), "--chat",
                  str(root / real["chat"]), "--temperature", "0.7", "--engine", "vllm==0.32.0",
                  *(["--log", str(log)] if log is not None else [])]
        print(f"inputs: DRAFT --target T --chat C --temperature 0.7 --engine vllm==0.32.0"
              f"{' --log L' if log is not None else ' (no log)'}", flush=True)
        alone = _timed(["acceptance", *inputs])
        print(f"acceptance --chat alone:  {alone[0]:6.1f} s wall, {alone[1]:6.1f} s CPU", flush=True)
        doctor = _timed(["doctor", *inputs])
        ratio = doctor[0] / alone[0]
        print(f"doctor with the budget:   {doctor[0]:6.1f} s wall, {doctor[1]:6.1f} s CPU: {ratio:.2f}x wall, "
              f"{doctor[1] / alone[1]:.2f}x CPU (floor {FLOOR_BUDGET:g}x: {'ok' if ratio <= FLOOR_BUDGET else 'OVER'})")
    return ratio <= FLOOR_BUDGET


def _served_prompts(root: Path, real: dict) -> list[list[int]]:
    """The held-out chat as the server renders it: the target's chat template, generation prompt on."""
    from eagle3lens.demo_real_data import rendered
    from eagle3lens.hf_load import load_tokenizer

    tokenizer = load_tokenizer(root / real["target"])
    return [rendered(tokenizer, json.loads(line), True)
            for line in (root / real["chat"]).read_text(encoding="utf-8").splitlines()]


def _serve_chat(root: Path, real: dict, engine_python: str, log: Path) -> str:
    from eagle3lens.engines.measure import measure

    launch = real["launch"]
    m = measure(root / real["target"], root / real["draft"], _served_prompts(root, real),
                k=launch["num_speculative_tokens"], max_tokens=launch["max_tokens"],
                stop_token_ids=launch["stop_token_ids"], temperature=0.7, python=engine_python, log_to=log)
    return f"{m.accept_len:.2f}" if m.accept_len is not None else f"stopped: {m.stop.text() if m.stop else '?'}"


def measure_all(root: Path, engine_python: str) -> None:
    """Accept length the real engine counts for each drafter and variant on the held-out chat (K = 3)."""
    real = json.loads((root / "manifest.json").read_text(encoding="utf-8"))["real"]
    prompts = _served_prompts(root, real)
    served = {"draft (healthy)": (real["draft"], 0.0), "draft-specforge": (real["draft_specforge"], 0.0),
              **{name: (v["draft"], v["temperature"]) for name, v in real["variants"].items()}}
    for name, (draft, temperature) in served.items():
        _measure_one(name, root, real, draft, prompts, temperature, engine_python)


def _measure_one(name: str, root: Path, real: dict, draft: str, prompts: list[list[int]], temperature: float,
                 engine_python: str) -> None:
    from eagle3lens.engines.measure import measure

    launch = real["launch"]
    started = time.monotonic()
    m = measure(root / real["target"], root / draft, prompts, k=launch["num_speculative_tokens"],
                max_tokens=launch["max_tokens"], stop_token_ids=launch["stop_token_ids"], temperature=temperature,
                python=engine_python)
    error = m.counts.standard_error if m.counts else None
    figure = (f"{m.accept_len:.4f}" + (f" +- {error:.3f}" if error is not None else "") if m.accept_len is not None
              else f"stopped: {m.stop.text() if m.stop else '?'}")
    rates = ", ".join(f"{r:.2f}" for r in (m.counts.per_position if m.counts else ()))
    rounds = f"{m.counts.drafts} rounds; " if m.counts else ""
    print(f"{name:22} T={temperature:<4} accept length {figure} (per position {rates}; {rounds}"
          f"{m.engine} {m.build}, {time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())

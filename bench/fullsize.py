"""Full-size drill: every command on a Kimi-K2.5-width drafter (sparse, real byte size) and the target's config.

    .venv/bin/python bench/fullsize.py            # or: make bench-fullsize
    .venv/bin/python bench/fullsize.py --only 405B    # the lines whose command names it

Writes, as sparse files (real headers, holes for the data: no disk), a Kimi-K2.5-width drafter (hidden 7168,
target vocabulary 163840, draft vocabulary 32000, fc 21504 -> 7168) in each layout the project knows (speculators
``layers.0.*``, EAGLE/SpecForge ``midlayer.*``, the MLA class) plus the target's ``config.json`` as Kimi-K2.5 ships it
(``KimiK25ForConditionalGeneration`` with its DeepSeek-V3 ``text_config``: 61 layers, MLA, 384 experts) and a 405B
Llama config, then runs every command on them, each in its own subprocess (its peak RSS, VmHWM, is its own), and prints one
line per command: wall, peak RSS, the ratio to its baseline, the budget, PASS/FAIL.

Each timed command and its baseline run twice, alternately, and the fastest of each counts (load on a shared machine
only adds time; peak RSS: the larger). Baselines, measured in the same run:
- headers and meta paths: the same command on a tiny draft, times 1.5, plus the time to read the full-size headers;
  RSS <= 1 GB; no tensor byte read (counted through the page cache);
- ``vocab`` and ``doctor`` (no data) read the vocabulary map and the tables it indexes (d2t, t2d, lm_head, embed),
  never a decoder weight: the same plus a raw read of the file;
- ``weights`` (streaming) and ``diff``: a raw sequential read of the file(s): >= 25 % of its throughput; RSS <= 300 MB
  (``weights`` also on an EAGLE-layout draft written with real, weight-like bytes: a hole reads at memory speed);
- ``convert``: a plain copy of the checkpoint, measured just before and just after: <= 2x their mean; RSS <= 300 MB;
- the 405B meta trace: a plain meta forward of the same target with bare hooks: <= 1.2x;
- ``acceptance`` / ``provenance`` need the target's weights: they must stop with one line that points to ``--host``.
The drill with ``measure=False`` (tests/e2e/test_fullsize.py, at reduced width) runs the same commands in process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import PEAK_RSS_KB  # noqa: E402
from _fullsize import (  # noqa: E402
    KIMI,
    KIMI_K25,
    LAYOUTS,
    LLAMA_405B,
    config_only_target,
    evict,
    make_sparse_draft,
    tensors_read,
)

ROOT = Path(__file__).resolve().parents[1]
GB, MB = 1 << 30, 1 << 20
TINY = dict(hidden=64, vocab=2048, draft_vocab=512, heads=4, kv_heads=2, head_dim=16, intermediate=128)
TINY_MLA = dict(mla_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)
LAUNCH = "python -m sglang.launch_server --model-path kimi-k2.5 --speculative-algorithm EAGLE3 --speculative-draft-model-path D"

# runs eagle3lens commands in one process; prints {"rcs", "wall", "peak_rss_kb", "stderr"} as its last stdout line
# (peak RSS: the child's own VmHWM, see _rss.PEAK_RSS_KB; getrusage's ru_maxrss would include this process's)
# (both children start their clock before their first import: the lazy imports of torch and transformers count alike)
_CHILD = r"""
import time
t0 = time.perf_counter()
import contextlib, io, json, sys
from eagle3lens.cli import main
argvs = json.loads(sys.argv[1])
rcs, err = [], io.StringIO()
for argv in argvs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rcs.append(main(argv))
wall = time.perf_counter() - t0
print(json.dumps({"rcs": rcs, "wall": wall, "peak_rss_kb": PEAK_RSS_KB,
                  "stderr": err.getvalue()[-2000:]}))
"""

_BARE_META = r"""
import time
t0 = time.perf_counter()
import json, sys
import torch
from transformers import AutoConfig
from eagle3lens.probes.wiring import build_on_meta
model = build_on_meta(AutoConfig.from_pretrained(sys.argv[1]))
hooks = [m.register_forward_hook(lambda *a: None) for m in model.model.layers]
ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
mask = torch.ones(1, 1, 16, 16, dtype=torch.bool, device="meta").tril()
with torch.no_grad():
    model(input_ids=ids, attention_mask=mask, use_cache=False)
print(json.dumps({"rcs": [0], "wall": time.perf_counter() - t0,
                  "peak_rss_kb": PEAK_RSS_KB, "stderr": ""}))
"""
_CHILD, _BARE_META = (code.replace("PEAK_RSS_KB", PEAK_RSS_KB) for code in (_CHILD, _BARE_META))


@dataclass
class Run:
    rcs: list[int]
    wall: float
    rss_mb: float
    stderr: str
    read: dict[str, set[str]]  # safetensors file -> names of the tensors whose bytes were read


def run_cli(argvs: list[list[str]], watch: tuple[Path, ...] = (), measure: bool = True,
            child: str = _CHILD) -> Run:
    """The commands, one after the other in one fresh subprocess (``measure``) or in this process; the watched
    files' pages are evicted first and the tensors read are reported after."""
    for path in watch:
        evict(path)
    if measure:
        out = subprocess.run([sys.executable, "-c", child, *([json.dumps(argvs)] if child is _CHILD else argvs)],
                             capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"drill child failed: {out.stderr[-2000:]}")
        data = json.loads(out.stdout.strip().splitlines()[-1])
        run = Run(data["rcs"], data["wall"], data["peak_rss_kb"] / 1024, data["stderr"], {})
    else:
        import contextlib
        import io

        from eagle3lens.cli import main

        err = io.StringIO()
        t0 = time.perf_counter()
        rcs = []
        for argv in argvs:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                rcs.append(main(argv))
        run = Run(rcs, time.perf_counter() - t0, 0.0, err.getvalue(), {})
    run.read = {str(p): tensors_read(p) for p in watch}
    return run


@dataclass
class Line:
    """One drill line: a command, what it cost, its budget and whether it kept it."""

    command: str
    run: Run
    ratio: float | None
    budget: str
    ok: bool
    why: str = ""

    def __str__(self) -> str:
        ratio = f"{self.ratio:5.2f}x" if self.ratio is not None else "   -  "
        return (f"{self.command:<44} {self.run.wall:7.2f} s {self.run.rss_mb:7.0f} MB  {ratio}  {self.budget:<38} "
                f"{'PASS' if self.ok else 'FAIL'}{'  ' + self.why if self.why else ''}")


ROUNDS = 2  # a timed command and its baseline run this many times, alternately; the fastest of each is kept


def fastest(runs: list[Run]) -> Run:
    """The quickest of the same command's runs (load on a shared machine only ever adds time), with the largest peak
    RSS and every tensor any of them read."""
    best = min(runs, key=lambda r: r.wall)
    read = {f: set().union(*(r.read.get(f, set()) for r in runs)) for f in {f for r in runs for f in r.read}}
    return replace(best, rss_mb=max(r.rss_mb for r in runs), read=read)


def _baseline(kind: str, tiny_argvs: list[list[str]], watch: tuple[Path, ...],
              p: dict[str, Path]) -> Callable[[], float] | None:
    """Seconds of the baseline a ``kind`` of command is held against, measured anew at each call (None: no timing
    budget): the tiny draft's run of the same command, the bare meta forward, or a raw read of the file."""
    if kind in ("headers", "meta", "vocab"):
        return lambda: run_cli(tiny_argvs, (), True).wall
    if kind == "meta405":
        return lambda: run_cli([str(p["405b"])], (), True, child=_BARE_META).wall
    if kind == "stream":
        return lambda: raw_read(list(watch))
    return None


def raw_read(paths: list[Path]) -> float:
    """Seconds to read the files sequentially in 16 MiB reads (their pages evicted first)."""
    for p in paths:
        evict(p)
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while fh.read(16 * MB):
                pass
    return time.perf_counter() - t0


def plain_copy(src: Path, dst: Path) -> float:
    """Seconds to copy the checkpoint directory and fsync its weights (the source's pages evicted first); the copy
    is deleted after."""
    evict(src)
    t0 = time.perf_counter()
    shutil.copytree(src, dst)
    with open(dst / "model.safetensors", "rb") as fh:
        os.fsync(fh.fileno())
    elapsed = time.perf_counter() - t0
    shutil.rmtree(dst)
    return elapsed


def header_time(paths: list[Path]) -> float:
    from eagle3lens.checkpoint import Checkpoint

    for p in paths:
        evict(p / "model.safetensors")
    t0 = time.perf_counter()
    for p in paths:
        Checkpoint.open(p)
    return time.perf_counter() - t0


def write_inputs(root: Path, dims: dict, mla: dict | None = None) -> dict[str, Path]:
    """The drafts (one per layout), the Kimi-K2.5 and 405B target configs, and a placeholder data directory."""
    paths = {layout: make_sparse_draft(root / layout, layout=layout, mla=mla, **dims) for layout in LAYOUTS}
    # real bytes on disk (weight-like bf16 values): a hole reads as fast as memory is zeroed, a disk does not
    paths["eagle-filled"] = make_sparse_draft(root / "eagle-filled", layout="eagle", fill="normal", **dims)
    paths["kimi"] = config_only_target(root / "kimi-k2.5", KIMI_K25)
    paths["405b"] = config_only_target(root / "llama-405b", LLAMA_405B)
    (root / "hidden-states").mkdir(exist_ok=True)
    paths["data"] = root / "hidden-states"
    (root / "prompts.txt").write_text("Hello\n")
    paths["prompts"] = root / "prompts.txt"
    return paths


def commands(p: dict[str, Path], engines: list[str]) -> list[tuple[str, str, list[list[str]], tuple[Path, ...]]]:
    """(name, budget class, argv lists, files watched) for every command of the drill."""
    out = []
    w = {layout: p[layout] / "model.safetensors" for layout in LAYOUTS}
    for layout in LAYOUTS:
        d = str(p[layout])
        out += [
            (f"info {layout}", "headers", [["info", d]], (w[layout],)),
            (f"keys {layout} ({len(engines)} engine groups)", "headers",
             [["keys", d, "--engine", e] for e in engines], (w[layout],)),
            (f"vocab {layout}", "vocab", [["vocab", d]], (w[layout],)),
            (f"trace --device meta {layout} (Kimi-K2.5)", "meta",
             [["trace", "--target", str(p["kimi"]), "--draft", d, "--device", "meta", "--engine", "sglang==0.5.23"]],
             (w[layout],)),
            (f"wiring {layout} (Kimi-K2.5)", "meta",
             [["wiring", "--target", str(p["kimi"]), "--draft", d, "--engine", "sglang==0.5.23", "--launch", LAUNCH]],
             (w[layout],)),
            (f"doctor {layout} (no data)", "vocab",
             [["doctor", d, "--engine", "sglang==0.5.23", "--target", str(p["kimi"]), "--no-weights"]], (w[layout],)),
            (f"weights {layout} (streaming)", "stream", [["weights", d]], (w[layout],)),
        ]
    filled = p["eagle-filled"] / "model.safetensors"
    out.append(("weights eagle (real bytes, streaming)", "stream", [["weights", str(p["eagle-filled"])]], (filled,)))
    out.append(("diff speculators eagle", "stream", [["diff", str(p["speculators"]), str(p["eagle"])]],
                (w["speculators"], w["eagle"])))
    out.append(("trace --device meta speculators (405B)", "meta405",
                [["trace", "--target", str(p["405b"]), "--draft", str(p["speculators"]), "--device", "meta",
                  "--engine", "sglang==0.5.23"]], (w["speculators"],)))
    out.append(("acceptance (needs the target's weights)", "host",
                [["acceptance", str(p["speculators"]), "--data", str(p["data"]), "--target", str(p["kimi"])]], ()))
    out.append(("provenance (needs the target's weights)", "host",
                [["provenance", "--data", str(p["data"]), "--target", str(p["kimi"])]], ()))
    return out


EXPECTED_RC = {"host": {2}}  # every other command runs (0) or reports findings (1)
META_ZERO_READ = ("meta", "meta405")  # no tensor byte may be read
# the vocabulary map and the tables it indexes: what vocab (and the doctor's vocab pass) read; no decoder weight
VOCAB_READS = {"d2t", "t2d", "lm_head.weight", "embed_tokens.weight"}


def functional_problem(kind: str, run: Run) -> str:
    """Why a run is wrong whatever its cost: an unexpected exit code, a weight read on a shape-only path."""
    if any(rc not in EXPECTED_RC.get(kind, {0, 1}) for rc in run.rcs):
        return f"exit codes {run.rcs}: {run.stderr.strip().splitlines()[-1][:160] if run.stderr.strip() else ''}"
    if kind == "host" and ("--host" not in run.stderr or len(run.stderr.strip().splitlines()) != 1):
        return f"expected one line pointing to --host, got {run.stderr.strip()[:200]!r}"
    read = set().union(*run.read.values()) if run.read else set()
    if kind in META_ZERO_READ and read:
        return f"read tensor data on a shape-only path: {sorted(read)[:4]}"
    if kind == "headers" and read:
        return f"read tensor data on a headers path: {sorted(read)[:4]}"
    if kind == "vocab" and read - VOCAB_READS:
        return f"read decoder weights on a vocabulary path: {sorted(read - VOCAB_READS)[:4]}"
    return ""


def drill(root: Path, dims: dict, mla: dict | None = None, measure: bool = True, convert: bool = True,
          report: Callable[[Line], None] = lambda _line: None, only: str | None = None) -> list[Line]:
    """Write the inputs under ``root`` and run every command (``only``: those whose name holds it); with ``measure``
    each against its budget. ``report`` sees each line as soon as it is measured."""
    from eagle3lens.engines.registry import all_profiles

    engines = [p.spec for p in all_profiles() if p.name in ("sglang", "vllm")]
    p = write_inputs(root / "full", dims, mla)
    tiny = write_inputs(root / "tiny", TINY, TINY_MLA) if measure else None
    headers = header_time([p[layout] for layout in LAYOUTS]) if measure else 0.0
    lines = []
    tiny_cmds = {name: argvs for name, _, argvs, _ in commands(tiny, engines)} if tiny else {}
    for name, kind, argvs, watch in commands(p, engines):
        if only is not None and only not in name:
            continue
        baseline = _baseline(kind, tiny_cmds[name], watch, p) if measure else None
        runs, bases = [], []
        for _ in range(ROUNDS if baseline is not None else 1):  # alternately: a burst of load hits both
            runs.append(run_cli(argvs, watch, measure))
            if baseline is not None:
                bases.append(baseline())
        run = fastest(runs)
        base_s = min(bases) if bases else 0.0
        problem = functional_problem(kind, run)
        ratio, budget, ok = None, "runs", not problem
        if measure and kind in ("headers", "meta"):
            limit = 1.5 * base_s + headers
            ratio, budget = run.wall / max(limit, 1e-9), f"<= 1.5x tiny ({base_s:.2f} s) + headers, <= 1 GB"
            ok = ok and run.wall <= limit and run.rss_mb <= 1024
        elif measure and kind == "vocab":
            limit = 1.5 * base_s + headers + raw_read(list(watch))
            ratio, budget = run.wall / max(limit, 1e-9), f"<= 1.5x tiny ({base_s:.2f} s) + headers + raw read, <= 1 GB"
            ok = ok and run.wall <= limit and run.rss_mb <= 1024
        elif measure and kind == "meta405":
            ratio, budget = run.wall / base_s, f"<= 1.2x bare meta forward ({base_s:.2f} s), <= 1 GB"
            ok = ok and ratio <= 1.2 and run.rss_mb <= 1024
        elif measure and kind == "stream":
            ratio, budget = base_s / run.wall, f">= 25% of raw read ({base_s:.2f} s), <= 300 MB"
            ok = ok and ratio >= 0.25 and run.rss_mb <= 300
        elif measure and kind == "host":
            budget = "one line pointing to --host"
        lines.append(Line(name, run, ratio, budget, ok, problem))
        report(lines[-1])
    if convert and (only is None or only in "convert"):
        for line in convert_lines(root, p["speculators"], measure):
            lines.append(line)
            report(line)
    return lines


def convert_lines(root: Path, src: Path, measure: bool) -> list[Line]:
    """``convert`` to a new directory and ``--in-place`` (on that output), each against a plain copy measured just
    before and just after it (their mean: this VM's disk writes the first GB fast, then slows down for minutes, so a
    copy measured only before would be the faster of the two by its place alone)."""
    copies = [plain_copy(src, root / "copy")] if measure else []
    out = root / "converted"
    lines = []
    for name, argv in (("convert --to sglang==0.5.11 OUT", ["convert", str(src), "--to", "sglang==0.5.11", str(out)]),
                       ("convert --in-place --to sglang==0.5.23", ["convert", str(out), "--to", "sglang==0.5.23",
                                                                   "--in-place"])):
        run = run_cli([argv], (), measure)
        problem = functional_problem("convert", run)
        if measure:
            copies.append(plain_copy(src, root / "copy"))
        copy = (copies[-2] + copies[-1]) / 2 if measure else 0.0
        ratio = run.wall / copy if measure else None
        ok = not problem and (not measure or (ratio is not None and ratio <= 2.0 and run.rss_mb <= 300))
        budget = f"<= 2x plain copy ({copies[-2]:.2f}/{copies[-1]:.2f} s before/after), <= 300 MB" if measure else \
            "<= 2x plain copy, <= 300 MB"
        lines.append(Line(name, run, ratio, budget, ok, problem))
    return lines


def main() -> int:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv[:-1] else None  # e.g. --only 405B
    with tempfile.TemporaryDirectory(prefix="e3l-fullsize-", dir=os.environ.get("E3L_BENCH_DIR")) as tmp:
        print(f"{'command':<44} {'wall':>9} {'peak RSS':>10}  ratio  {'budget':<38} result", flush=True)
        lines = drill(Path(tmp), KIMI, report=lambda line: print(line, flush=True), only=only)
        failed = [line.command for line in lines if not line.ok]
        print(f"{len(lines) - len(failed)}/{len(lines)} PASS" + (f"; FAIL: {', '.join(failed)}" if failed else ""))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

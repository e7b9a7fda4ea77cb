"""Benchmark: ``eagle3lens wiring`` from the full-size Kimi-K2.5 target config + a server log vs ``info`` on the same draft.

    .venv/bin/python bench/wiring.py

Baseline (named "info"): ``eagle3lens info`` on the same full-size sparse draft, in fresh interpreters in the same run
(each command pays its own imports, as a user's shell does). The prediction reads config.json, the draft's headers and
the log's start-up line only, and imports no torch: wiring / info <= 1.5x. Each process also reports whether torch
was imported.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fullsize import KIMI, make_sparse_draft  # noqa: E402

TARGET_RATIO = 1.5
KIMI_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": {"model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61,
                               "vocab_size": 163840, "num_attention_heads": 64}}
LOG = ("[2026-05-04 09:12:01] server_args=ServerArgs(model_path='kimi', speculative_algorithm='EAGLE', "
       "speculative_draft_model_path='draft', speculative_num_steps=3, speculative_eagle_topk=1, "
       "speculative_num_draft_tokens=4)\n" + "[2026-05-04 09:13:00] Decode batch, #running-req: 8, accept len: 1.00, "
       "accept rate: 0.00, gen throughput (token/s): 20.1\n" * 200)
PROBE = ("import sys; import eagle3lens.cli as c; rc = c.main(sys.argv[1:]); "
         "print('TORCH', 'torch' in sys.modules, file=sys.stderr); sys.exit(rc)")


def timed(args: list[str], runs: int = 9) -> tuple[float, bool]:
    times, torch_seen = [], False
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        assert out.returncode in (0, 1), out.stderr
        torch_seen |= "TORCH True" in out.stderr
    return statistics.median(times), torch_seen


def run() -> float:
    with tempfile.TemporaryDirectory(prefix="e3l-bench-wiring-") as tmp:
        root = Path(tmp)
        draft = make_sparse_draft(root / "draft", with_embed=False, **{k: v for k, v in KIMI.items()})
        (root / "target").mkdir()
        (root / "target" / "config.json").write_text(json.dumps(KIMI_TARGET))
        (root / "server.log").write_text(LOG)
        info_args = ["info", str(draft), "--json"]
        wiring_args = ["wiring", "--target", str(root / "target"), "--draft", str(draft), "--engine", "sglang==0.5.23",
                       "--log", str(root / "server.log"), "--json"]
        timed(info_args, runs=2)  # warm the file cache
        t_info, torch_info = timed(info_args)
        t_wiring, torch_wiring = timed(wiring_args)
    ratio = t_wiring / t_info
    print(f"wiring (Kimi-K2.5 config + log): {t_wiring * 1e3:.0f} ms, torch imported: {torch_wiring}")
    print(f"baseline info (same draft):      {t_info * 1e3:.0f} ms, torch imported: {torch_info}")
    print(f"ratio wiring/info = {ratio:.2f}x (target <= {TARGET_RATIO}x) {'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
    return ratio


if __name__ == "__main__":
    run()

"""Benchmark: ``parse_log`` on a 3 M-line server log and on one 5 MB line, each vs a plain read of the same file.

    .venv/bin/python bench/logs.py

Baseline (named "plain read"): ``for line in open(path): pass`` over the same file, in the same run, in its own
subprocess. Each run is a fresh subprocess that reports its own peak RSS (``VmHWM``, bench/_rss.py). Targets: parse time <= 20x the plain read, peak RSS <= 200 MB.

The 1 M-line log mimics a busy SGLang server: a decode line every fourth line (accept len, accept rate and
throughput varying), between prefill lines, HTTP access lines and a colour-coded warning. The 5 MB line is
a ``Decode batch`` line padded with 5 MB of repeated labels and spaces (the shape that made 0.1.0 quadratic);
it is over the line cap, so it is counted and skipped without being held.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import PEAK_RSS_KB  # noqa: E402

TARGET_RATIO = 20.0
TARGET_RSS_MB = 200.0
LINES = 3_000_000  # the trials: a 3 M-line (560 MB) log took over 60 s

_CHILD = r"""
import json, sys, time
mode, path = sys.argv[1], sys.argv[2]
if mode == "parse":
    from eagle3lens.probes.logs import parse_log
    t0 = time.process_time()
    r = parse_log(path)
    seconds = time.process_time() - t0
    extra = {"total": r.total_lines, "parsed": r.parsed_lines, "overlong": r.overlong_lines,
             "mean_accept_len": r.summary.mean_accept_len, "series": len(r.samples)}
else:
    t0 = time.process_time()
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            n += 1
    seconds = time.process_time() - t0
    extra = {"total": n}
rss_kb = PEAK_RSS_KB
print(json.dumps({"seconds": seconds, "rss_mb": rss_kb / 1024, **extra}))
"""


def write_big_log(path: Path, lines: int = LINES) -> None:
    with path.open("w") as f:
        for i in range(lines // 4):
            s, ms = divmod(i, 1000)
            hh, mm, ss = (s // 3600) % 24, (s // 60) % 60, s % 60
            stamp = f"[2026-03-10 {hh:02d}:{mm:02d}:{ss:02d}.{ms:03d} TP0]"
            length = 1 + (i % 300) / 100
            f.write(f"{stamp} Decode batch, #running-req: {8 + i % 5}, #token: {5000 + i % 977}, token usage: 0.02, "
                    f"accept len: {length:.2f}, accept rate: {(length - 1) / 4:.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {24 + i % 50:.2f}, #queue-req: 0\n")
            f.write(f"{stamp} Prefill batch, #new-seq: 1, #new-token: {i % 4096}, #cached-token: 0, "
                    "token usage: 0.02, #running-req: 8, #queue-req: 0\n")
            f.write(f'{stamp} INFO:     10.0.0.7:{40000 + i % 9999} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')
            f.write(f"\x1b[33m{stamp} WARNING\x1b[0m scheduler.py:1234: request {i} waited {i % 17} ms in queue\n")


def write_long_line(path: Path, size: int = 5 * 1024 * 1024) -> None:
    head = "[2026-03-10 08:01:12 TP0] Decode batch, #running-req: 8, "
    unit = "block accept len" + " " * 48 + "accept len x "
    body = unit * ((size - len(head)) // len(unit))
    path.write_text(head + body + "accept len: 1.00, accept rate: 0.00\n")


def measure(mode: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD.replace("PEAK_RSS_KB", PEAK_RSS_KB), mode, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def compare(name: str, path: Path) -> tuple[float, float]:
    plain = measure("plain", path)
    parsed = measure("parse", path)
    ratio = parsed["seconds"] / max(plain["seconds"], 1e-6)
    size = path.stat().st_size / 1e6
    print(f"{name} ({size:.1f} MB, {plain['total']} lines):")
    print(f"  plain read: {plain['seconds']:.3f} s, peak RSS {plain['rss_mb']:.0f} MB")
    print(f"  parse_log:  {parsed['seconds']:.3f} s, peak RSS {parsed['rss_mb']:.0f} MB "
          f"({parsed['parsed']} parsed, {parsed['overlong']} over the line cap, {parsed['series']} kept in the series)")
    ok = ratio <= TARGET_RATIO and parsed["rss_mb"] <= TARGET_RSS_MB
    print(f"  ratio parse/plain = {ratio:.1f}x (target <= {TARGET_RATIO:.0f}x), peak RSS target <= "
          f"{TARGET_RSS_MB:.0f} MB: {'OK' if ok else 'MISSED'}")
    return ratio, parsed["rss_mb"]


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="e3l-bench-logs-") as tmp:
        big, long_line = Path(tmp) / "server.log", Path(tmp) / "long-line.log"
        write_big_log(big)
        write_long_line(long_line)
        compare("3 M-line server log", big)
        compare("one 5 MB line", long_line)


if __name__ == "__main__":
    run()

"""Remote-run overhead: ``eagle3lens notebook 00_triage --host`` over a loopback sshd vs the same run locally.

Baseline: ``python -m eagle3lens notebook 00_triage --params-file P --out DIR --json`` run locally.
Remote: the same walkthrough on a real OpenSSH server on 127.0.0.1 (this machine as the "GPU host"):
connect, pre-flight, upload, the same command on the host, fetch, clean up. Both use one prebuilt
demo incident. Prints both times and the overhead; target overhead <= 2 s.
Needs Debian openssh-server (/usr/sbin/sshd) and root (the loopback sshd logs in as root).

    .venv/bin/python bench/remote.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _sshd import make_sshd, sshd_missing_reason, write_ed25519_key  # noqa: E402

NOTEBOOK = "00_triage"
TARGET_OVERHEAD_S = 2.0


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv[:6])} ... exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (the minimum is reported)")
    args = parser.parse_args()
    if (reason := sshd_missing_reason()) is not None:
        print(f"skipped: {reason}")
        return 0
    from eagle3lens.demo import build_demo

    with tempfile.TemporaryDirectory(prefix="e3l-bench-remote-") as tmp:
        root = Path(tmp)
        demo = build_demo(root / "demo").root
        params = root / "params.json"
        params.write_text(json.dumps({"demo_dir": str(demo)}))
        key = root / "id_bench"
        server = make_sshd(root / "sshd", [write_ed25519_key(key)]).start()
        try:
            known = root / "known_hosts"
            known.write_text(server.host_key_line())
            config = root / "ssh_config"
            config.write_text(f"Host bench-gpu\n    HostName 127.0.0.1\n    Port {server.port}\n    User root\n"
                              f"    IdentityFile {key}\n    IdentitiesOnly yes\n")
            base = [sys.executable, "-m", "eagle3lens", "notebook", NOTEBOOK, "--params-file", str(params), "--json"]
            remote_opts = ["--host", "bench-gpu", "--remote-python", sys.executable, "--ssh-config", str(config),
                           "--known-hosts", str(known)]
            remote_argv = [*base, "--out", str(root / "remote"), *remote_opts]
            local_s, remote_s = [], []
            for _ in range(args.repeat):
                local_s.append(timed([*base, "--out", str(root / "local")]))
                remote_s.append(timed(remote_argv))
        finally:
            server.stop()
    local, remote = min(local_s), min(remote_s)
    overhead = remote - local
    print(f"{NOTEBOOK}: local {local:.2f} s (baseline), over ssh on loopback {remote:.2f} s, "
          f"ratio {remote / local:.2f}x")
    print(f"remote overhead {overhead:+.2f} s (target <= {TARGET_OVERHEAD_S:.1f} s): "
          f"{'OK' if overhead <= TARGET_OVERHEAD_S else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

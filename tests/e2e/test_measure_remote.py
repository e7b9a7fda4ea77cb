"""``--measure --host H``: the engine on a GPU host serves the draft over SSH (a real sshd on 127.0.0.1 stands in for
the host). The ``engine`` test serves the demo through vLLM's CPU build in $EAGLE3LENS_ENGINE_PYTHON there and holds
its counters against a local ``--measure`` of the same prompts; the rest need only the sshd."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _paths import ROOT
from _sshd import make_sshd, ssh_host, sshd_missing_reason, write_ed25519_key

from eagle3lens.engines.measure import installed_engine, measure
from eagle3lens.errors import MeasureFailed
from eagle3lens.errors import UsageError

pytestmark = pytest.mark.ssh

ENGINE_PYTHON = os.environ.get("EAGLE3LENS_ENGINE_PYTHON")
CLI = [sys.executable, "-m", "eagle3lens"]
HOST = "e3l-gpu"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An ssh config naming ``e3l-gpu``: root on a loopback sshd, its host key known."""
    if sshd_missing_reason():
        pytest.skip(sshd_missing_reason())
    root = tmp_path_factory.mktemp("measure-sshd")
    key = root / "id"
    server = make_sshd(root / "sshd", [write_ed25519_key(key)]).start()
    try:
        known = root / "known_hosts"
        known.write_text(server.host_key_line())
        config = root / "ssh_config"
        config.write_text(ssh_host(HOST, server.port, key, f"UserKnownHostsFile {known}"))
        yield config
    finally:
        server.stop()


def _host_dirs() -> set[Path]:
    """The host's run directories in its /tmp (the loopback host's /tmp is this one's: a local run's directories,
    also ``eagle3lens-measure-*``, hold no child)."""
    return {d for d in Path("/tmp").glob("eagle3lens-measure-*") if (d / "measure_child.py").exists()}


def _prompts(path: Path, n: int = 6, length: int = 8) -> Path:
    rng = random.Random(11)
    path.write_text("\n".join(" ".join(str(rng.randrange(3, 2048)) for _ in range(length)) for _ in range(n)) + "\n")
    return path


def test_a_host_python_without_an_engine_is_one_line(demo_dir: Path, ssh_config: Path, tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "prompts.txt", n=2)
    common = [*CLI, "acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--prompts",
              str(prompts), "--engine", "installed", "--measure", "--host", HOST, "--ssh-config", str(ssh_config)]
    for python, expected in ((sys.executable, f"no sglang or vllm is installed for {sys.executable} on {HOST}"),
                             (str(tmp_path / "no-python"), "cannot list its installed packages (exit 127")):
        done = subprocess.run([*common, "--engine-python", python], capture_output=True, text=True, env=ENV,
                              timeout=300)
        assert done.returncode == 2, done.stderr
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    with pytest.raises(UsageError, match=f"no sglang or vllm is installed for {sys.executable} on {HOST}"):
        installed_engine(sys.executable, host=HOST, ssh_config=ssh_config)
    # the doctor shares --host and --ssh-config with --execute; with --measure they serve on the host
    done = subprocess.run([*CLI, "doctor", str(demo_dir / "eagle"), "--engine", "installed", "--measure", "--target",
                           str(demo_dir / "target"), "--prompts", str(prompts), "--no-weights", "--host", HOST,
                           "--ssh-config", str(ssh_config), "--engine-python", sys.executable],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 2 and f"installed for {sys.executable} on {HOST}" in done.stderr, done.stderr


def test_host_options_go_with_measure(demo_dir: Path, tmp_path: Path) -> None:
    base = [*CLI, "acceptance", str(demo_dir / "speculators"), "--target", str(demo_dir / "target"), "--prompts",
            str(_prompts(tmp_path / "p.txt", n=1))]
    for extra, expected in ((["--host", HOST], "add --measure"),
                            (["--measure", "--host-target", "/x"], "go with --measure --host H")):
        done = subprocess.run([*base, *extra], capture_output=True, text=True, env=ENV, timeout=120)
        assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_the_hosts_record_comes_back_and_its_directory_goes(ssh_config: Path, tmp_path: Path) -> None:
    """The child and request travel, the host's Python runs the child and its record is read here: an engine that
    does not import there is the harness's failure; a target that is no directory there is one line naming it."""
    model = tmp_path / "model"
    model.mkdir()
    before = _host_dirs()
    with pytest.raises(MeasureFailed, match="does not import in that Python: ModuleNotFoundError"):
        measure(model, model, [[1, 2]], k=3, max_tokens=4, python=sys.executable, timeout_s=120, host=HOST,
                ssh_config=ssh_config)
    absent = tmp_path / "not-on-the-host"
    with pytest.raises(UsageError, match=f"^{HOST}: {absent}: no such model directory$"):
        measure(absent, model, [[1, 2]], k=3, max_tokens=4, python=sys.executable, timeout_s=120, host=HOST,
                ssh_config=ssh_config)
    assert _host_dirs() == before


def test_the_hosts_time_limit_kills_the_engine_and_its_children(ssh_config: Path, tmp_path: Path) -> None:
    """A host Python whose engine child hangs (and starts a worker): the host's supervisor stops the run at the
    limit and kills the child's process group, the report says so, and the host's directory is removed."""
    marker = tmp_path / "worker.pid"
    python = tmp_path / "host-python"
    python.write_text(f"#!/bin/sh\ncase \"$2\" in\n  *measure_child.py) sleep 300 &\n    echo $! > {marker}\n"
                      f"    wait ;;\n  *) exec {sys.executable} \"$@\" ;;\nesac\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    before = _host_dirs()
    with pytest.raises(MeasureFailed, match="did not finish within 2 s"):
        measure(tmp_path, tmp_path, [[1, 2]], k=3, max_tokens=4, python=str(python), timeout_s=2, host=HOST,
                ssh_config=ssh_config)
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert _host_dirs() == before


def _acceptance(demo: Path, prompts: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "acceptance", str(demo / "speculators"), "--target", str(demo / "target"),
                           "--prompts", str(prompts), "--engine", "installed", "--measure", "--new-tokens", "16",
                           "--steps", "3", "--json", *extra], capture_output=True, text=True, env=ENV, timeout=1200)


@pytest.mark.engine
@pytest.mark.skipif(not ENGINE_PYTHON, reason="no engine: make engine, then EAGLE3LENS_ENGINE_PYTHON")
def test_measure_on_the_host_counts_what_a_local_measure_counts(demo_dir: Path, ssh_config: Path,
                                                                tmp_path: Path) -> None:
    """The same prompts served greedily by the same engine, here and on the host (its own copies of the target and
    draft, named by --host-target / --host-draft): the same counters, the host named in the JSON."""
    assert ENGINE_PYTHON is not None
    prompts = _prompts(tmp_path / "prompts.txt")
    copies = tmp_path / "on-the-host"
    for name in ("target", "speculators"):
        shutil.copytree(demo_dir / name, copies / name)
    local = _acceptance(demo_dir, prompts)
    assert local.returncode in (0, 1), local.stderr
    before = _host_dirs()
    remote = _acceptance(demo_dir, prompts, "--host", HOST, "--ssh-config", str(ssh_config), "--engine-python",
                         ENGINE_PYTHON, "--host-target", str(copies / "target"), "--host-draft",
                         str(copies / "speculators"))
    assert remote.returncode == local.returncode, remote.stderr
    assert _host_dirs() == before
    here, there = (json.loads(done.stdout) for done in (local, remote))
    assert here["engine"] == there["engine"] == "vllm==0.32.0+cpu"
    measured_here, measured_there = (out["results"]["acceptance"]["measured"] for out in (here, there))
    assert measured_here["host"] is None and measured_there["host"] == HOST
    assert measured_there["drafts"] > 0 and "stop" not in measured_there
    for key in ("engine", "build", "k", "prompts", "max_tokens", "drafts", "draft_tokens", "accepted",
                "accepted_per_pos", "accept_len", "per_position"):
        assert measured_there[key] == measured_here[key], key
    # the host serves the paths given for it: one that is not there is one line naming it, after the estimate
    absent = copies / "absent-target"
    done = _acceptance(demo_dir, prompts, "--host", HOST, "--ssh-config", str(ssh_config), "--engine-python",
                       ENGINE_PYTHON, "--host-target", str(absent), "--limit", "1")
    assert done.returncode == 2 and f"{HOST}: {absent}: no such model directory" in done.stderr, done.stderr

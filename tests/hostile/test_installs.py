"""engines --detect on hostile installs (FIFOs, devices, binary metadata in every input position) and on installs
that are not what their metadata says (an editable checkout, a file of another release, a loader file missing)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from _paths import ROOT
from eagle3lens.engines import FILES
from eagle3lens.engines.detect import default_table, detect, judge
from eagle3lens.engines.groups import FileHashes

LOADER = "sglang/srt/models/llama_eagle3.py"
KIMI = "sglang/srt/models/kimi_k25_eagle3.py"
FIXTURE = b'"""llama_eagle3.py as released (test fixture)."""\n'
OTHER = b'"""llama_eagle3.py of a later release (test fixture)."""\n'

# runs the CLI once its imports are done: the test then gives the command itself 2 s (a hang or a read of
# /dev/zero until memory runs out never answers in time)
READY_THEN_MAIN = ("import sys; from eagle3lens.cli import main; import eagle3lens.engines.detect; "
                   "print('ready', flush=True); sys.exit(main(sys.argv[1:]))")


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:12]


def site(root: Path, version: str = "0.5.23", body: bytes | None = FIXTURE, metadata: bytes | None = None) -> Path:
    sp = root / "site-packages"
    info = sp / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    if metadata is None:
        metadata = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nlong description\n".encode()
    (info / "METADATA").write_bytes(metadata)
    (info / "RECORD").write_text("")
    if body is not None:
        (sp / LOADER).parent.mkdir(parents=True)
        (sp / LOADER).write_bytes(body)
    return sp


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-c", READY_THEN_MAIN, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environ)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        out, err = proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"engines {' '.join(args)} did not return within 2 s")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def metadata_of(sp: Path) -> Path:
    return next(sp.glob("*.dist-info")) / "METADATA"


def fifo_metadata(tmp_path: Path) -> Path:
    sp = site(tmp_path)
    metadata_of(sp).unlink()
    os.mkfifo(metadata_of_path := sp / "sglang-0.5.23.dist-info" / "METADATA")
    assert metadata_of_path.exists()
    return sp


def device_metadata(tmp_path: Path) -> Path:
    sp = site(tmp_path)
    metadata_of(sp).unlink()
    (sp / "sglang-0.5.23.dist-info" / "METADATA").symlink_to("/dev/zero")
    return sp


def binary_metadata(tmp_path: Path) -> Path:
    return site(tmp_path, metadata=b"Metadata-Version: 2.1\nName: sglang\nVersion: \xff\xfe\x00\x81\n")


def fifo_direct_url(tmp_path: Path) -> Path:
    sp = site(tmp_path)
    os.mkfifo(sp / "sglang-0.5.23.dist-info" / "direct_url.json")
    return sp


@pytest.mark.parametrize("build, problem", [(fifo_metadata, "FIFO"), (device_metadata, "character device"),
                                            (binary_metadata, "not UTF-8"), (fifo_direct_url, "FIFO")])
def test_unreadable_metadata_is_one_line_naming_the_file(tmp_path, build, problem):
    sp = build(tmp_path)
    done = run_cli(["engines", "--detect", "--path", str(sp)])
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"eagle3lens: error: {sp}/sglang-0.5.23.dist-info/") and problem in line
    assert "internal error" not in line and done.stdout == ""


def test_a_fifo_or_device_as_path_entry_is_skipped(tmp_path):
    os.mkfifo(fifo := tmp_path / "fifo")
    for entry in (fifo, Path("/dev/zero")):
        done = run_cli(["engines", "--detect", "--path", str(entry), "--json"])
        assert done.returncode == 0 and done.stderr == "", done
        assert json.loads(done.stdout)["results"]["engines_detect"]["engines"] == []


def test_a_fifo_on_pythonpath_does_not_block_the_scan_of_sys_path(tmp_path):
    os.mkfifo(fifo := tmp_path / "fifo")
    sp = site(tmp_path)
    done = run_cli(["engines", "--detect", "--json"], env={"PYTHONPATH": f"{ROOT}:{fifo}:/dev/zero:{sp}"})
    assert done.returncode == 0 and done.stderr == "", done
    (engine,) = json.loads(done.stdout)["results"]["engines_detect"]["engines"]
    assert engine["version"] == "0.5.23" and engine["imports_from"] == str(sp / "sglang")


def test_a_fifo_loader_file_is_said_not_read(tmp_path):
    sp = site(tmp_path, body=None)
    (sp / LOADER).parent.mkdir(parents=True)
    os.mkfifo(sp / LOADER)
    done = run_cli(["engines", "--detect", "--path", str(sp), "--json"])
    assert done.returncode == 0 and done.stderr == "", done
    data = json.loads(done.stdout)
    absent = [f for f in data["findings"] if f["code"] == "engine/loader-absent"]
    assert any(f["evidence"]["file"] == LOADER and "FIFO" in f["title"] for f in absent)


def test_the_remote_probe_program_is_bounded_too(tmp_path):
    """--host runs detect_probe.py as ``python3 -c PROGRAM``: the stdlib copy of the checks refuses the FIFO."""
    from eagle3lens.engines.detect import judge
    from eagle3lens.errors import CheckpointError

    sp = fifo_metadata(tmp_path)
    program = (ROOT / "eagle3lens" / "engines" / "detect_probe.py").read_text()
    files = json.dumps({"sglang": [LOADER]})
    done = subprocess.run([sys.executable, "-I", "-c", program, files, str(sp)], capture_output=True, text=True,
                          timeout=10, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    raw = json.loads(done.stdout)
    assert "FIFO" in raw["sglang"]["error"]["problem"]
    with pytest.raises(CheckpointError, match=r"^gpu1:.*METADATA: is a FIFO"):
        judge(raw, default_table(), host="gpu1")


def fixture_table(*rows: tuple[str, str | None]) -> dict:
    return {"sglang": (FileHashes(LOADER, rows),)}


def test_editable_install_is_hashed_where_it_imports_from(tmp_path):
    """A PEP 660 editable install of a patched checkout: the dist-info has no package beside it, direct_url.json
    names the checkout, whose python/sglang/ is what runs."""
    sp = site(tmp_path, body=None)
    checkout = tmp_path / "src" / "sglang" / "python"
    (checkout / LOADER).parent.mkdir(parents=True)
    (checkout / LOADER).write_bytes(FIXTURE + b"# local patch\n")
    (sp / "sglang-0.5.23.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}))
    (sp / "__editable__.sglang-0.5.23.pth").write_text(str(checkout) + "\n")
    found = detect([sp], fixture_table(("0.4.4.post2", sha(FIXTURE))))
    (engine,) = found.engines
    assert engine.imports_from == str(checkout / "sglang")
    assert [f.code for f in found.findings] == ["engine/patched-source"]
    assert found.findings[0].evidence["location"] == str(checkout / "sglang")


def test_package_on_another_path_entry_is_found_by_find_spec(tmp_path):
    sp = site(tmp_path, body=None)
    checkout = tmp_path / "checkout"
    (checkout / LOADER).parent.mkdir(parents=True)
    (checkout / LOADER).write_bytes(FIXTURE)
    found = detect([sp, checkout], fixture_table(("0.4.4.post2", sha(FIXTURE))))
    (engine,) = found.engines
    assert engine.files[0].sha12 == sha(FIXTURE) and not found.findings
    assert engine.imports_from == str(checkout / "sglang")


def test_a_loader_file_of_another_release_is_mixed_release_with_the_real_table():
    """Metadata 0.5.11, llama_eagle3.py with the bytes sglang 0.5.23 shipped (its hash from the engines table)."""
    llama = next(f for f in FILES["sglang"] if f.path == LOADER)
    real = llama.at(Version("0.5.23"))
    assert real is not None and real != llama.at(Version("0.5.11"))
    raw = {"sglang": {"version": "0.5.11", "location": "/site", "imports_from": "/site/sglang",
                      "files": {LOADER: real, KIMI: None}, "problems": {}}}
    found = judge(raw, default_table(), host=None)
    (engine,) = found.engines
    (finding,) = found.findings
    assert finding.code == "engine/mixed-release" and finding.evidence["file"] == LOADER
    assert finding.evidence["file_release"] == "0.5.23" and "0.5.23" in finding.title and LOADER in finding.title
    assert engine.profile == "sglang==0.5.23" and engine.mixed_from == "0.5.23"


def test_mixed_release_install_simulates_the_file_release(tmp_path, monkeypatch, capsys):
    """End to end: a fake 0.5.11 install whose loader file has the (fixture) bytes of 0.5.23; --engine installed
    simulates 0.5.23, which loads the speculators layout that 0.5.11 drops."""
    from _builders import draft_tensors, speculators_config, write

    from eagle3lens.cli import main

    table = fixture_table(("0.4.4.post2", sha(FIXTURE)), ("0.5.23", sha(OTHER)))
    monkeypatch.setattr("eagle3lens.engines.detect.default_table", lambda: table)
    sp = site(tmp_path, version="0.5.11", body=OTHER)
    monkeypatch.syspath_prepend(str(sp))
    assert main(["engines", "--detect", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in data["findings"]] == ["engine/mixed-release"]
    assert data["results"]["engines_detect"]["engines"][0]["profile"] == "sglang==0.5.23"
    ckpt = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    main(["keys", str(ckpt), "--engine", "installed", "--json"])
    keys = json.loads(capsys.readouterr().out)
    assert keys["engine"] == "sglang==0.5.23" and keys["results"]["keys"]["counts"]["dropped"] == 0
    assert any("0.5.23's" in n for n in keys["results"]["keys"]["notes"])


def test_a_loader_file_the_release_ships_but_absent_is_said(tmp_path):
    sp = site(tmp_path, version="0.5.23")
    table = {"sglang": (FileHashes(LOADER, (("0.4.4.post2", sha(FIXTURE)),)),
                        FileHashes(KIMI, (("0.4.4.post2", None), ("0.5.12", "0" * 12))))}
    found = detect([sp], table)
    (finding,) = found.findings
    assert finding.code == "engine/loader-absent" and finding.evidence["file"] == KIMI
    assert "not there" in finding.title and str(sp / "sglang") in finding.detail
    old = detect([site(tmp_path / "old", version="0.5.11")], table)  # 0.5.11 never shipped it
    assert not old.findings

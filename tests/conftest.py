"""Shared fixtures: the demo incident, built once per test session.

The helpers beside this file (``_builders``, ``_sshd``, ...) are imported by bare name from every test directory
(``tests/unit/...``, ``tests/e2e``, ``tests/hostile``): this folder goes on ``sys.path`` here, whatever the import mode.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built demo (``eagle3lens.demo.build_demo``): target/, speculators/, eagle/, broken-*/, logs, manifest."""
    from eagle3lens.demo import build_demo

    return build_demo(tmp_path_factory.mktemp("demo") / "demo").root


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is fastest, and much faster on a shared, loaded CPU (``pytestmark =
    pytest.mark.usefixtures("one_thread")`` in a module that wants it for every test)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)

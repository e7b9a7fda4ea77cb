"""The hostile tests' shared draft: a tiny speculators checkpoint each test may spoil."""

from __future__ import annotations

from pathlib import Path

import pytest
from _builders import draft_tensors, speculators_config, write


@pytest.fixture()
def draft(tmp_path: Path) -> Path:
    return write(tmp_path / "draft", draft_tensors("layers.0."), speculators_config())

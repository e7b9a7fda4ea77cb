"""Where the checkout and the tests' own files are, for a test file at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

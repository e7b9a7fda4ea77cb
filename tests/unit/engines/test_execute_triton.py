"""The triton stand-in of an SGLang execution holds what SGLang checks at import: ``@triton.jit`` gives a triton
``JITFunction`` (its kernel's function in ``fn``), as SGLang 0.5.3's ``CachedKernel`` asserts; launching it fails; and
a harness without that stand-in (``$EAGLE3LENS_EXECUTE_WITHOUT``) stops where the release would stop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from _builders import draft_tensors, sglang_config, write
from _mini_engine import DRAFT, write_engine
from eagle3lens.engines.execute import record_execution
from eagle3lens.engines.standins import WITHOUT_ENV, forget_modules
from eagle3lens.errors import StandInCalled

# as sglang/srt/utils/common.py of 0.5.3 wraps its LoRA kernels, and a module on the draft's import path uses it
CACHED = '''
import inspect
import triton


class CachedKernel:
    def __init__(self, fn, key_fn=None):
        self.fn = fn
        assert isinstance(fn, triton.runtime.jit.JITFunction)
        self.signature = inspect.signature(fn.fn)


def cached_triton_kernel(key_fn=None):
    return lambda fn: CachedKernel(fn, key_fn)
'''
KERNELS = '''
import triton
import triton.language as tl
from sglang.srt.utils import cached_triton_kernel


@cached_triton_kernel(lambda _, kwargs: kwargs["BLOCK_M"])
@triton.jit
def expand(x_ptr, BLOCK_M: tl.constexpr):
    pass


@triton.jit(do_not_specialize=["n"])
def plain(x_ptr, n):
    pass
'''


@pytest.fixture
def engine(tmp_path: Path):
    yield write_engine(tmp_path / "site", {
        "sglang/srt/utils.py": CACHED, "sglang/srt/kernels.py": KERNELS,
        "sglang/srt/models/llama_eagle3.py": "import sglang.srt.kernels\n" + DRAFT})
    forget_modules(("sglang", "sgl_kernel", "triton"))


def _draft(tmp_path: Path) -> Path:
    tensors = {k: v for k, v in draft_tensors("midlayer.").items() if not k.startswith("embed_tokens")}
    return write(tmp_path / "draft", tensors, sglang_config())


def test_jit_gives_a_jit_function_the_engine_accepts(engine: Path, tmp_path: Path) -> None:
    ex = record_execution(_draft(tmp_path), engine)
    assert ex.phase == "done" and ex.error is None
    used = {s.target: s for s in ex.stand_ins}
    assert used["triton"].kind == "module" and "JITFunction" in used["triton.jit"].why
    kernels = sys.modules["sglang.srt.kernels"]
    assert kernels.expand.signature.parameters.keys() == {"x_ptr", "BLOCK_M"}  # read from the kernel's function
    assert kernels.plain.fn.__name__ == "plain"  # @triton.jit(options) too


def test_launching_a_stood_in_kernel_fails_loudly(engine: Path, tmp_path: Path) -> None:
    record_execution(_draft(tmp_path), engine)
    with pytest.raises(StandInCalled, match="plain"):
        sys.modules["sglang.srt.kernels"].plain[(1,)](0, 1)


def test_without_the_stand_in_the_release_stops_at_the_check(engine: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WITHOUT_ENV, "triton, triton.runtime, triton.runtime.jit")
    ex = record_execution(_draft(tmp_path), engine)
    assert ex.phase == "construct" and ex.error is not None and ex.error["type"] == "AssertionError"
    assert ex.error["file"].endswith("srt/utils.py")
    assert "triton.jit" not in {s.target for s in ex.stand_ins}

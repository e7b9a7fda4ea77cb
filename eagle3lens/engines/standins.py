"""Stand-ins for what an engine's import chain needs and this machine cannot load.

``--execute`` imports an installed engine's own draft class and runs its own ``load_weights``. Its
import chain reaches compiled extensions (``sgl_kernel``, ``vllm._C``, flash-attention, triton, CUDA
libraries) and server-side dependencies (HTTP, ZMQ, image libraries) that are absent here or cannot
load without a GPU. :class:`StandIns` replaces exactly those, and records each one:

- a *module* stand-in answers an import that comes from the engine's own files and that nothing on
  ``sys.path`` provides (or that names a compiled extension): every attribute of it is an inert
  placeholder class, so ``from sgl_kernel import fused_op`` and ``class X(flash_attn.Base)`` succeed,
  and anything that would *run* one of them fails loudly instead of computing;
- an *attribute* stand-in replaces one function or object where the engine reads state that only
  exists in a running server (the tensor-parallel group, the global server arguments), with what a
  single-process, world-size-1 server would hold.

Nothing else is touched: the engine's own Python runs verbatim, and the result lists every stand-in.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import StandInCalled

# compiled extensions and GPU-only packages: always stood in for imports from the engine's files
COMPILED = ("sgl_kernel", "flashinfer", "triton", "flash_attn", "flash_mla", "deep_gemm", "deep_ep", "xformers",
            "vllm._C", "vllm._C_stable_libtorch", "vllm._moe_C", "vllm._rocm_C", "vllm._flashmla_C",
            "vllm._flashmla_extension_C", "vllm.vllm_flash_attn", "vllm.cumem_allocator", "cuda", "cupy", "nvidia", "torchada")
# packages an engine imports to *detect* hardware (TPU, ROCm, NPU, HPU, XPU plugins): never stood in, so the
# engine finds this machine's hardware (none) and picks its CPU path
PROBED = ("libtpu", "tpu_inference", "amdsmi", "torch_npu", "vllm_ascend", "habana_frameworks", "vllm_gaudi",
          "intel_extension_for_pytorch", "pynvml", "vllm_tpu", "vllm_spyre", "neuronx_distributed",
          "zentorch")  # vLLM 0.33 picks ZenCpuPlatform on an AMD CPU with AVX-512 when zentorch imports


# pure-Python dependencies an engine calls at import time, answered by the standard library module that does the
# same job for what the import needs (dill pickles a class by reference exactly as pickle does)
EQUIVALENTS = {"dill": "pickle"}
WITHOUT_ENV = "EAGLE3LENS_EXECUTE_WITHOUT"


@dataclass(frozen=True)
class StandIn:
    """One thing the execution replaced: a module (``kind="module"``) or one attribute of a module."""

    target: str
    kind: str  # module | attribute
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"target": self.target, "kind": self.kind, "why": self.why}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StandIn":
        return cls(str(d["target"]), str(d["kind"]), str(d["why"]))


class _Placeholder(type):
    """The type of every attribute of a stand-in module: a class that can be subclassed, decorated with and
    asked for attributes, but is falsy and empty, so capability checks (``if sgl_kernel.has_x``) say no."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}", cls.__module__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if "_standin" not in cls.__dict__:  # a class the engine derived from a stand-in: built normally
            return type.__call__(cls, *args, **kwargs)
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _Placeholder):
            return args[0]  # used as a decorator (@triton.jit): the function itself
        if not args and not kwargs and cls.__name__[:1].islower():
            # a function asked a question of the hardware (get_current_target(), is_available()): none here
            raise StandInCalled(f"{cls.__module__}.{cls.__qualname__}() is a stand-in: this machine has no such "
                                "extension")
        return type.__call__(cls)

    def __bool__(cls) -> bool:
        return False

    def __iter__(cls) -> Any:
        return iter(())

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__


def is_placeholder(obj: Any) -> bool:
    """Whether ``obj`` is a stand-in's attribute (a name this machine cannot provide), not the engine's own."""
    return isinstance(obj, _Placeholder)


def placeholder(qualname: str, module: str) -> Any:
    return _Placeholder(qualname.rpartition(".")[2], (Inert,), {"__module__": module, "__qualname__": qualname,
                                                              "_standin": True})


class Inert(metaclass=_Placeholder):
    """An instance of a placeholder: accepts any arguments and attribute reads, holds nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{type(self).__qualname__}.{name}", type(self).__module__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _Placeholder):
            return args[0]  # a decorator factory's result (@triton.autotune(...)): the function itself
        return Inert()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __init_subclass__(cls, **kwargs: Any) -> None:  # class options (msgspec.Struct, omit_defaults=True)
        super().__init_subclass__()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:  # noqa: ARG003 (pydantic's hook)
        from pydantic_core import core_schema  # a stand-in type in an engine's request model accepts anything

        return core_schema.any_schema()


class StandInModule(types.ModuleType):
    """A module that stands in for one that cannot load here."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(name, self.__name__)


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:  # noqa: ARG002 (a stand-in runs nothing)
        return None


class _PatchingLoader(importlib.abc.Loader):
    """Runs a module's real loader, then applies attribute stand-ins to it."""

    def __init__(self, real: importlib.abc.Loader, after: Callable[[types.ModuleType], None]) -> None:
        self.real, self.after = real, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.real.exec_module(module)  # type: ignore[attr-defined]  # every file loader has it
        self.after(module)


def _matches(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class StandIns(importlib.abc.MetaPathFinder):
    """Context manager: while active, imports from ``engine_dirs`` of a compiled extension or of a package nothing
    provides get a stand-in module; ``after_import`` patches run when their module is first imported (a compiled
    extension's: on its stand-in, to hold a type the engine checks against); ``patch``
    replaces one attribute until exit. ``used`` lists every stand-in, in the order it was needed."""

    def __init__(self, engine_packages: Sequence[str], engine_dirs: Sequence[str],
                 after_import: dict[str, Callable[["StandIns", types.ModuleType], None]] | None = None,
                 required: Iterable[str] | None = None) -> None:
        self.packages = tuple(engine_packages)
        # the top-level import names of the release's requirements (None: unknown, every missing import is stood
        # in); a missing package it does not require, imported under ``except ImportError``, is absent on its
        # server too: the import fails as there and the engine's own fallback runs
        self.required = frozenset(required) if required is not None else None
        self.dirs = tuple(engine_dirs)
        # tests only: $EAGLE3LENS_EXECUTE_WITHOUT names after-import stand-ins (by module, comma-separated) left out,
        # to show that a harness missing one the release needs gives no verdict
        left_out = {n.strip() for n in os.environ.get(WITHOUT_ENV, "").split(",")}
        self.after_import = {k: v for k, v in (after_import or {}).items() if k not in left_out}
        self.used: list[StandIn] = []
        self._made: set[str] = set()
        self._env: list[tuple[str, str | None]] = []
        self._restore: list[tuple[Any, str, Any]] = []
        self._undo: list[Callable[[], Any]] = []

    # -- the import hook --------------------------------------------------------------------
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        compiled = _matches(fullname, COMPILED)
        if fullname in self.after_import and not compiled:
            return self._patched_spec(fullname, path, target)
        if _matches(fullname, PROBED) or not compiled and _matches(fullname, self.packages):
            return None
        caller, where = self._caller()
        if caller == "library":
            self._hide()  # a library importing: it must see this machine as it is, not the engine's stand-ins
        if caller != "engine":
            return None  # (an engine's importlib.util.find_spec probe gets this machine's answer too)
        parent = fullname.rpartition(".")[0]
        if not compiled and not isinstance(sys.modules.get(parent), StandInModule):
            if self._found_elsewhere(fullname, path, target):
                return None
        top = fullname.split(".")[0] if not compiled else next(p for p in COMPILED if _matches(fullname, (p,)))
        if not compiled and self.required is not None and top not in self.required and fullname not in EQUIVALENTS \
                and where is not None and guarded(*where):
            return None
        if fullname in EQUIVALENTS:
            self.used.append(StandIn(fullname, "module", f"not installed here: answered by the standard library's "
                                                         f"{EQUIVALENTS[fullname]}"))
            return importlib.util.find_spec(EQUIVALENTS[fullname])
        if not any(s.target == top for s in self.used):
            why = ("compiled extension / GPU library: cannot load without its hardware" if compiled
                   else "not installed here (the engine's dependency, outside the loader)")
            self.used.append(StandIn(top, "module", why))
        self._made.add(fullname)
        loader: importlib.abc.Loader = _StandInLoader()
        if fullname in self.after_import:  # what the engine reads from the stand-in as a real type, filled in
            loader = _PatchingLoader(loader, functools.partial(self.after_import[fullname], self))
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)

    def _hide(self) -> None:
        """Take the stand-in modules out of ``sys.modules`` (the engine's modules keep their references): a
        library that then probes for triton or PIL gets the ImportError it would get on this machine."""
        for name in self._made:
            if isinstance(sys.modules.get(name), StandInModule):
                del sys.modules[name]
        self._made.clear()

    def _found_elsewhere(self, fullname: str, path: Any, target: Any) -> bool:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            try:
                if finder.find_spec(fullname, path, target) is not None:
                    return True
            except (ImportError, ValueError, AttributeError):
                continue
        return False

    def _patched_spec(self, fullname: str, path: Any, target: Any) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, functools.partial(self.after_import[fullname], self))
                return spec
        return None

    def _caller(self) -> tuple[str, tuple[str, int] | None]:
        """engine: an import statement in one of the engine's files; probe: the engine asking
        ``importlib.util.find_spec`` whether a package exists; library: anything else. With the file and line of
        the import."""
        frame = sys._getframe(2)
        probe = False
        while frame is not None:
            name = frame.f_code.co_filename
            if "importlib" in name and frame.f_code.co_name == "find_spec" and "util" in name:
                probe = True
            if not name.startswith("<frozen") and "importlib" not in name and name != __file__:
                inside = any(name.startswith(d) for d in self.dirs)
                return ("library" if not inside else "probe" if probe else "engine"), (name, frame.f_lineno)
            frame = frame.f_back  # type: ignore[assignment]
        return "library", None

    # -- attribute stand-ins ------------------------------------------------------------------
    def patch(self, owner: Any, attr: str, value: Any, why: str) -> None:
        """Replace ``owner.attr`` with ``value`` until exit (recorded once per target)."""
        self._restore.append((owner, attr, owner.__dict__.get(attr, _ABSENT) if hasattr(owner, "__dict__")
                              else getattr(owner, attr, _ABSENT)))
        setattr(owner, attr, value)
        target = f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
        if not any(s.target == target for s in self.used):
            self.used.append(StandIn(target, "attribute", why))

    def replace_item(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        """Set ``table[key]`` until exit (the caller lists the stand-in when it is used)."""
        old = table.get(key, _ABSENT)
        table[key] = value
        self._undo.append(lambda: table.pop(key, None) if old is _ABSENT else table.__setitem__(key, old))

    def setenv(self, name: str, value: str, why: str) -> None:
        """Set environment variable ``name`` until exit."""
        self._env.append((name, os.environ.get(name)))
        os.environ[name] = value
        self.used.append(StandIn(f"${name}={value}", "attribute", why))

    def replace_everywhere(self, original: Any, value: Any, packages: Sequence[str], target: str, why: str) -> None:
        """Point every loaded module of ``packages`` that imported ``original`` by name at ``value``."""
        for name, module in list(sys.modules.items()):
            if not _matches(name, packages) or module is None or isinstance(module, StandInModule):
                continue
            for attr, held in list(vars(module).items()):
                if held is original:
                    self._restore.append((module, attr, held))
                    setattr(module, attr, value)
        if not any(s.target == target for s in self.used):
            self.used.append(StandIn(target, "attribute", why))

    def on_exit(self, undo: Callable[[], Any]) -> None:
        """Call ``undo`` at exit (process-wide state the execution set through the engine's own functions)."""
        self._undo.append(undo)

    def __enter__(self) -> "StandIns":
        sys.meta_path.insert(0, self)
        for name, after in self.after_import.items():  # imported by an earlier execution in this process
            module = sys.modules.get(name)
            if module is not None and not isinstance(module, StandInModule):
                after(self, module)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self._hide()
        while self._undo:
            self._undo.pop()()
        for owner, attr, old in reversed(self._restore):
            if old is _ABSENT:
                try:
                    delattr(owner, attr)
                except AttributeError:
                    pass
            else:
                setattr(owner, attr, old)
        self._restore.clear()
        for name, old in reversed(self._env):
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        self._env.clear()


_ABSENT = object()
_CATCHES_IMPORT = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


def guarded(filename: str, line: int) -> bool:
    """Whether ``line`` of the engine's file ``filename`` lies in a ``try`` body whose handler catches ImportError
    (an optional import: the file runs on without it)."""
    return any(low <= line <= high for low, high in _guarded_lines(filename))


@functools.lru_cache(maxsize=256)
def _guarded_lines(filename: str) -> tuple[tuple[int, int], ...]:
    import ast

    try:
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try) or not node.body:
            continue
        caught = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught |= {"BaseException" if k is None else getattr(k, "id", getattr(k, "attr", "")) for k in kinds}
        if caught & set(_CATCHES_IMPORT):
            spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    return tuple(spans)


def forget_modules(packages: Sequence[str]) -> None:
    """Drop an engine's modules (and every stand-in module) from ``sys.modules``, so another copy can be imported."""
    for name in list(sys.modules):
        if _matches(name, packages) or isinstance(sys.modules.get(name), StandInModule):
            del sys.modules[name]

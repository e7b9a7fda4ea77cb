"""Watch an engine's own ``load_weights`` run on meta tensors: what it wrote where, what it skipped, what it logged.

The checkpoint's tensors are given as meta tensors built from the headers (shape and dtype, no bytes).
Each carries the checkpoint keys it came from; a :class:`~torch.overrides.TorchFunctionMode` passes that
provenance on through every torch operation the loader applies (``narrow``, ``cat``, ``+ arange``, ``.to``),
and records every in-place write (``copy_``, ``fill_``, ``__setitem__``…) whose destination shares storage with
one of the model's parameters: that parameter was written from those keys, at that offset. Tensors the loader
keeps as plain attributes (SGLang's ``hot_token_id``) are found on the modules after the load.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ..io.safetensors_header import torch_dtype
from ..tensor_info import TensorInfo

TAG = "_eagle3lens_keys"
_WRITES = frozenset({"copy_", "fill_", "__setitem__", "index_copy_", "index_fill_", "masked_fill_", "zero_",
                     "normal_", "uniform_", "set_", "add_", "mul_"})


@dataclass
class Write:
    """One write into a parameter: the checkpoint keys its value came from and the region written."""

    param: str
    keys: tuple[str, ...]
    offset: int  # element offset into the parameter's storage
    numel: int


@dataclass
class Record:
    """Everything the loader did, gathered while it ran."""

    processed: list[str] = field(default_factory=list)  # keys the loader pulled, in order
    writes: list[Write] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)  # level, logger, message, key in flight
    converted: dict[str, list[str]] = field(default_factory=dict)  # key -> module attributes holding its value
    error: dict[str, Any] | None = None
    touched: set[str] = field(default_factory=set)  # keys whose tensors a torch operation has used
    since_pull: set[str] = field(default_factory=set)  # ... since the last key was pulled

    @property
    def current(self) -> str | None:
        return self.processed[-1] if self.processed else None

    def failing_key(self) -> str | None:
        """The key the loader was on when it raised. A loader that streams is on the last key it pulled; one that
        gathered every weight first (vLLM's EAGLE-3) went back to earlier keys after the last pull, and was on the
        first key, in the order pulled, that it had not used yet."""
        if self.current is None or not self.since_pull - {self.current}:
            return self.current
        return next((k for k in self.processed if k not in self.touched), self.current)


def meta_tensor(info: TensorInfo) -> torch.Tensor:
    """A meta tensor with the header's shape and dtype, tagged with its key."""
    dtype = torch_dtype(info.dtype) or torch.uint8
    t = torch.empty(info.shape, dtype=dtype, device="meta")
    setattr(t, TAG, (info.name,))
    return t


def weights(order: Iterable[TensorInfo], record: Record) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint as the engine's model loader yields it (``order``: shard_order.loader_order), as meta tensors."""
    for info in order:
        record.processed.append(info.name)
        record.since_pull = set()
        yield info.name, meta_tensor(info)


def keys_of(value: Any) -> tuple[str, ...]:
    leaves, _ = tree_flatten(value)
    out: list[str] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out += [k for k in getattr(leaf, TAG, ()) if k not in out]
    return tuple(out)


class Provenance(TorchFunctionMode):
    """Carries checkpoint keys through torch operations and records writes into the model's parameters."""

    def __init__(self, params: dict[int, str], record: Record) -> None:
        super().__init__()
        self.params, self.record = params, record

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        keys = keys_of((args, kwargs))
        if not keys:
            return out
        self.record.touched.update(keys)
        self.record.since_pull.update(keys)
        name = getattr(func, "__name__", "")
        if name in _WRITES and args and isinstance(args[0], torch.Tensor):
            dest = args[0]
            param = self.params.get(_storage(dest))
            if param is not None:
                sources = keys_of((args[1:], kwargs))
                if sources:
                    self.record.writes.append(Write(param, sources, int(dest.storage_offset()), int(dest.numel())))
                return out
        for leaf in tree_flatten(out)[0]:
            if isinstance(leaf, torch.Tensor) and not isinstance(leaf, torch.nn.Parameter) \
                    and _storage(leaf) not in self.params:
                try:
                    setattr(leaf, TAG, keys)
                except (AttributeError, RuntimeError):
                    pass
        return out


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):
        return -1


def parameter_storages(model: torch.nn.Module) -> dict[int, str]:
    """Storage -> the parameter's name as ``named_parameters()`` gives it (the first of its aliases: vLLM's MLA
    layer registers the same projections again under ``mla_attn``)."""
    out: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(_storage(p), name)
    return out


def converted_attributes(model: torch.nn.Module) -> dict[str, list[str]]:
    """Tensors holding checkpoint values as plain module attributes (not parameters), by key."""
    out: dict[str, list[str]] = {}
    for mod_name, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                for key in getattr(value, TAG, ()):
                    out.setdefault(key, []).append(f"{mod_name}.{attr}" if mod_name else attr)
    return out


class LogTap(logging.Handler):
    """Collects WARNING-and-above records from the engine's loggers, with the key in flight."""

    def __init__(self, record: Record, loggers: tuple[str, ...]) -> None:
        super().__init__(logging.WARNING)
        self.record, self.names = record, loggers
        self._saved: list[tuple[logging.Logger, int]] = []
        self._seen: set[tuple[str, str, str, str | None]] = set()

    def emit(self, rec: logging.LogRecord) -> None:
        try:
            message = rec.getMessage()
        except (TypeError, ValueError):
            message = str(rec.msg)
        entry = {"level": rec.levelname.lower(), "logger": rec.name, "message": message, "key": self.record.current}
        seen = (rec.levelname, rec.name, message, self.record.current)  # tapped on two loggers: each record once
        if seen not in self._seen:
            self._seen.add(seen)
            self.record.logs.append(entry)

    def __enter__(self) -> "LogTap":
        for name in ("",) + self.names:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.level))
            logger.addHandler(self)
            if logger.level > logging.WARNING or logger.level == logging.NOTSET and name:
                logger.setLevel(logging.WARNING)
        return self

    def __exit__(self, *exc: Any) -> None:
        for logger, level in self._saved:
            logger.removeHandler(self)
            logger.setLevel(level)
        self._saved.clear()


def key_in_flight(exc: BaseException, roots: tuple[str, ...]) -> str | None:
    """The checkpoint key whose tensor the engine's innermost frame (where its code raised) held, when it held
    exactly one: a loader that first gathers every weight into a dict, as vLLM 0.10's EAGLE-3 does, raises long
    after the last key was pulled. Only that frame: an outer one may still hold a stale loop variable."""
    tb, inner = exc.__traceback__, None
    while tb is not None:
        if any(tb.tb_frame.f_code.co_filename.startswith(r) for r in roots):
            inner = tb.tb_frame
        tb = tb.tb_next
    if inner is None:
        return None
    held = {k for v in inner.f_locals.values() if isinstance(v, torch.Tensor) for k in getattr(v, TAG, ())}
    return next(iter(held)) if len(held) == 1 else None


def error_of(exc: BaseException, roots: tuple[str, ...], key: str | None = None) -> dict[str, Any]:
    """The exception and where it was raised: the innermost frame in the engine's files (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if any(f.filename.startswith(r) for r in roots)]
    chosen = inside or list(frames)
    where = chosen[-1] if chosen else None
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:2000], "key": key}
    if where is not None:
        file = where.filename
        for root in roots:
            if file.startswith(root):
                file = file[len(root):].lstrip("/")
        out.update({"file": file, "line": where.lineno, "function": where.name, "code": (where.line or "")[:300]})
    return out

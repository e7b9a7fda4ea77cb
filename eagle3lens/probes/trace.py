"""Forward-hook tracer: which module saw which shapes, on CPU, CUDA, accelerate-dispatched or meta models.

>>> with Tracer(model, include=["model.layers.*", "lm_head"]) as tr:
...     model(input_ids)
>>> tr.table()[0]["output"]
'f32[1, 8, 64]@cpu'

Hooks only read metadata (shape, dtype, device). Statistics (``stats=True``) are computed as
device tensors and turned into numbers when read, after the forward (no host sync inside it).
Tensors are kept only with ``keep=True``. Every hook is removed on exit, also when the forward raises.
``findings`` (read from the records, after the forward): modules a raise went through, and modules whose
output dtype or device changed from one call to the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from ..findings import Finding, Severity
from ..io.safetensors_header import st_dtype
from ..target_runtime.load import input_embeddings  # moved to eagle3lens.target_runtime.load; kept for one release

Include = str | type | Callable[[str, nn.Module], bool]


@dataclass(frozen=True)
class TensorMeta:
    """What a hook saw of one tensor."""

    shape: tuple[int, ...]
    dtype: str
    device: str

    def __str__(self) -> str:
        return f"{_short_dtype(self.dtype)}{list(self.shape)}@{self.device}"

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "device": self.device}


@dataclass
class TraceRecord:
    """One call of one module: shapes in and out, and (when asked) stats and tensors."""

    path: str
    call: int  # 0 for the first call of this module in the trace
    module_type: str
    inputs: Any  # nested tuples/dicts of TensorMeta (positional args)
    kwargs: Any  # dict of name -> nested TensorMeta (tensor-bearing kwargs only)
    output: Any = None
    raised: bool = False  # the forward did not return (an exception went through it)
    stats_raw: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    tensors: dict[str, Any] = field(default_factory=dict, repr=False)  # with keep=True: "inputs", "kwargs", "output"

    @property
    def first_input(self) -> TensorMeta | None:
        return first_tensor_meta((self.inputs, self.kwargs))

    @property
    def first_output(self) -> TensorMeta | None:
        return first_tensor_meta(self.output)

    def stats(self) -> dict[str, float]:
        """Output statistics as floats (this is where the host sync happens)."""
        return {k: float(v) for k, v in self.stats_raw.items()}

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "call": self.call, "module_type": self.module_type,
               "inputs": describe(self.inputs), "kwargs": describe(self.kwargs),
               "output": describe(self.output), "raised": self.raised}
        if self.stats_raw:
            out["stats"] = self.stats()
        return out


class Tracer:
    """Context manager registering forward pre/post hooks on the selected modules of ``model``.

    ``include``: glob patterns over module paths (``"model.layers.*"``: ``*`` stays within one dotted
    component, ``**`` crosses them; ``"re:..."`` for a regex),
    module types, predicates ``(path, module) -> bool``, or a sequence of these; None = every module.
    """

    def __init__(self, model: nn.Module, include: Include | Sequence[Include] | None = None,
                 keep: bool = False, stats: bool = False) -> None:
        self.model = model
        self.include = _matcher(include)
        self.keep = keep
        self.stats = stats
        self.records: list[TraceRecord] = []
        self._handles: list[Any] = []
        self._pending: dict[int, list[TraceRecord]] = {}
        self._calls: dict[str, int] = {}

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        try:
            for path, module in self.model.named_modules():
                if self.include(path, module):
                    self._handles.append(module.register_forward_pre_hook(self._pre(path), with_kwargs=True))
                    self._handles.append(module.register_forward_hook(self._post()))
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
        for stack in self._pending.values():
            for record in stack:
                record.raised = True
        self._pending.clear()

    def remove(self) -> None:
        """Remove every hook this tracer registered (idempotent)."""
        while self._handles:
            self._handles.pop().remove()

    @property
    def active(self) -> bool:
        return bool(self._handles)

    # -- hooks -----------------------------------------------------------------------------
    def _pre(self, path: str) -> Callable:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            call = self._calls.get(path, 0)
            self._calls[path] = call + 1
            tensor_kwargs = {k: v for k, v in kwargs.items() if _has_tensor(v)}
            record = TraceRecord(path, call, type(module).__name__, meta_of(args), meta_of(tensor_kwargs))
            if self.keep:
                record.tensors["inputs"] = _detach(args)
                record.tensors["kwargs"] = _detach(tensor_kwargs)
            self.records.append(record)
            self._pending.setdefault(id(module), []).append(record)
        return hook

    def _post(self) -> Callable:
        def hook(module: nn.Module, _args: tuple, output: Any) -> None:
            stack = self._pending.get(id(module))
            if not stack:
                return
            record = stack.pop()
            record.output = meta_of(output)
            if self.keep:
                record.tensors["output"] = _detach(output)
            if self.stats:
                record.stats_raw = _stats(output)
        return hook

    # -- results ---------------------------------------------------------------------------
    def find(self, pattern: str) -> list[TraceRecord]:
        """Records whose path matches a glob pattern."""
        rx = glob_regex(pattern)
        return [r for r in self.records if rx.fullmatch(r.path)]

    def table(self) -> list[dict[str, Any]]:
        """One flat row per call (strings for shapes): easy to print, to JSON or to a DataFrame."""
        rows = []
        for r in self.records:
            row = {"path": r.path or "<root>", "call": r.call, "type": r.module_type,
                   "input": _brief(r.first_input), "output": _brief(r.first_output),
                   "all_inputs": describe(r.inputs), "all_outputs": describe(r.output), "raised": r.raised}
            if r.stats_raw:
                row.update(r.stats())
            rows.append(row)
        return rows

    @property
    def findings(self) -> tuple[Finding, ...]:
        """``trace/module-raised`` for calls that never returned, ``trace/output-varies`` for modules whose
        output dtype/device differs across calls (a cast or a device hop between calls)."""
        found: list[Finding] = []
        raised = [r for r in self.records if r.raised]
        if raised:
            deepest = max(raised, key=lambda r: r.path.count(".") + bool(r.path))  # where the raise started
            found.append(Finding(
                "trace/module-raised", Severity.WARNING,
                f"the forward raised inside {deepest.path or '<root>'} (call {deepest.call})",
                f"{len(raised)} traced call(s) never returned; their outputs are missing from the trace.",
                evidence={"raised": [f"{r.path or '<root>'}#{r.call}" for r in raised]}))
        seen: dict[str, set[tuple[str, str]]] = {}
        for r in self.records:
            out = r.first_output
            if out is not None:
                seen.setdefault(r.path, set()).add((out.dtype, out.device))
        varies = {path or "<root>": sorted(f"{d}@{dev}" for d, dev in kinds)
                  for path, kinds in seen.items() if len(kinds) > 1}
        if varies:
            found.append(Finding(
                "trace/output-varies", Severity.INFO,
                f"{len(varies)} module(s) returned different dtypes/devices across calls",
                "The same module's output changed dtype or device between calls.",
                evidence={"outputs": varies}))
        return tuple(found)


def trace_forward(model: nn.Module, *, include: Include | Sequence[Include] | None = None, seq_len: int = 8,
                  seed: int = 0) -> Tracer:
    """One forward of ``model`` (a causal LM) on ``seq_len`` seeded random token ids under a :class:`Tracer`.

    Returns the tracer, its hooks removed and its records filled (``table()``, ``findings``).
    """
    embed = input_embeddings(model)
    ids = torch.randint(0, embed.num_embeddings, (1, seq_len), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(embed.weight.device)
    with Tracer(model, include=include) as tracer, torch.no_grad():
        model(ids)
    return tracer


# -- describing values ----------------------------------------------------------------------
def meta_of(value: Any) -> Any:
    """Replace every tensor in a nested value by its TensorMeta; other leaves by their type name."""
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(value.shape), str(value.dtype).removeprefix("torch."), str(value.device))
    if isinstance(value, dict):  # includes HF ModelOutput
        return {str(k): meta_of(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(meta_of(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"<{type(value).__name__}>"


def describe(value: Any) -> Any:
    """JSON-able form of a nested meta value."""
    if isinstance(value, TensorMeta):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [describe(v) for v in value]
    return value


def first_tensor_meta(value: Any) -> TensorMeta | None:
    """The first TensorMeta in a nested value (depth first), or None."""
    if isinstance(value, TensorMeta):
        return value
    items: Iterable[Any] = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else ()
    for item in items:
        found = first_tensor_meta(item)
        if found is not None:
            return found
    return None


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in a nested value (depth first), or None."""
    if isinstance(value, torch.Tensor):
        return value
    items: Iterable[Any] = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


# -- helpers ----------------------------------------------------------------------------------
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Module-path glob: ``*`` matches within one dotted component, ``**`` across components, ``?`` one char."""
    parts = re.split(r"(\*\*|\*|\?)", pattern)
    table = {"**": ".*", "*": "[^.]*", "?": "[^.]"}
    return re.compile("".join(table.get(part, re.escape(part)) for part in parts))


Test = Callable[[str, nn.Module], bool]


def _matcher(include: Include | Sequence[Include] | None) -> Test:
    if include is None:
        return _always
    items = [include] if isinstance(include, (str, type)) or callable(include) and not isinstance(include, Sequence) else list(include)
    tests: list[Test] = []
    for item in items:
        if isinstance(item, type):
            tests.append(_of_type(item))
        elif isinstance(item, str) and item.startswith("re:"):
            tests.append(_path_matches(re.compile(item[3:])))
        elif isinstance(item, str):
            tests.append(_path_matches(glob_regex(item)))
        elif callable(item):
            tests.append(item)
        else:
            raise TypeError(f"include: expected a glob, a module type or a predicate, got {item!r}")
    return lambda path, module: any(t(path, module) for t in tests)


def _always(_path: str, _module: nn.Module) -> bool:
    return True


def _of_type(cls: type) -> Test:
    return lambda _path, module: isinstance(module, cls)


def _path_matches(rx: re.Pattern[str]) -> Test:
    return lambda path, _module: rx.fullmatch(path) is not None


def _has_tensor(value: Any) -> bool:
    return first_tensor(value) is not None


def _detach(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_detach(v) for v in value)
    return value


def _stats(output: Any) -> dict[str, torch.Tensor]:
    t = first_tensor(output)
    if t is None or t.device.type == "meta" or not (t.is_floating_point() or t.is_complex()):
        return {}
    with torch.no_grad():
        t32 = t.detach().float()
        return {"norm": torch.linalg.vector_norm(t32), "mean": t32.mean()}


def _short_dtype(dtype: str) -> str:
    """``float32`` -> ``f32``: the safetensors name in lower case (the torch name when the format has none)."""
    try:
        return st_dtype(dtype).lower()
    except ValueError:
        return dtype


def _brief(meta: TensorMeta | None) -> str:
    return str(meta) if meta is not None else ""

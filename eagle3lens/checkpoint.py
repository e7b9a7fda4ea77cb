"""Checkpoint: a headers-only view of a draft or target: its files, headers, tensor table, config and containment,
and the reading of tensor bytes. What the config and tensors mean for EAGLE-3 (flavour, DraftSpec) is in
``draft_spec``; ``Checkpoint.spec`` builds it, and this module re-exports its names for existing callers.

Nothing here reads tensor bytes until asked (`read`, `read_bytes`); safetensors headers are
validated before they are trusted, shard paths never leave the checkpoint directory, and
pickles are opened with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Union, overload

from .draft_spec import (DECODER_KEY, DECODER_PREFIXES, FLAG_NAMES, LAYER_ID_LIMIT, MLA_FIELDS, SIZE_FIELDS,
                         TOP_LEVEL_FIELDS, DraftSpec, build_spec, config_values, detect_flavour)
from .errors import CheckpointError
from .io.dumps import named_dump, sample_format
from .io.inputs import inside
from .io.jsonio import read_json
from .io.safetensors_header import DTYPE_BITS, read_header, st_dtype, torch_dtype
from .tensor_info import TensorInfo

INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


class Checkpoint:
    """A draft or target checkpoint: tensor table from headers, config, layout and DraftSpec.

    >>> ckpt = Checkpoint.open("demo/speculators")
    >>> ckpt.layout, ckpt.spec.decoder_prefix
    ('speculators', 'layers.0.')
    """

    def __init__(self, path: Path, root: Path, tensors: dict[str, TensorInfo], config: dict[str, Any] | None,
                 files: tuple[Path, ...], index: dict[str, Any] | None = None,
                 pickled: dict[str, Any] | None = None) -> None:
        self.path = path
        self.root = root
        self.tensors = tensors
        self.config = config
        self.files = files
        self.index = index
        self._pickled = pickled or {}

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> "Checkpoint":
        """Open a directory, a single ``.safetensors`` file or a ``.bin``/``.pt`` pickle (weights only).

        The config is checked here (types and ranges of every field the spec reads), so a wrongly typed or
        absurd value is one line naming config.json before any probe uses it."""
        ckpt = cls._open(Path(path).expanduser())
        ckpt.spec  # noqa: B018  (validates the config against its own rules; cached)
        return ckpt

    @classmethod
    def _open(cls, path: Path) -> "Checkpoint":
        try:
            exists = path.exists()
        except OSError as exc:  # a name too long for the OS, a loop of links...
            raise CheckpointError(path, f"cannot open ({exc.strerror or exc})") from None
        if not exists:
            journal = path.with_name(f".{path.name}.eagle3lens-convert.json")  # safewrite.journal_path
            if os.path.lexists(journal):
                raise CheckpointError(path, f"no such directory; an interrupted convert left {journal.name} beside "
                                            "it: rerun that convert (it restores the original from .orig)")
            raise CheckpointError(path, "no such file or directory")
        if path.is_dir():
            dump = named_dump(path)
            if dump:
                raise CheckpointError(path, f"is a hidden-state dump ({dump[0]}), not a draft checkpoint: "
                                            "pass it with --data")
            config = _read_config(path, path / "config.json")
            return cls._open_dir(path, config)
        root = path.parent
        inside(root, path)
        config = _read_config(root, root / "config.json")
        if path.name in INDEX_NAMES:
            return cls._open_sharded(root, path, config)
        if path.suffix == ".safetensors":
            ckpt = cls._from_safetensors(path, root, (path,), config)
            sample = sample_format(frozenset(ckpt.tensors))
            if sample:
                raise CheckpointError(path, f"is a hidden-state sample ({sample}), not a draft checkpoint: pass it "
                                            "or its folder with --data")
            return ckpt
        if path.suffix in PICKLE_SUFFIXES:
            return cls._from_pickles(path, root, (path,), config)
        raise CheckpointError(path, "not a checkpoint (expected a directory, .safetensors, .bin or .pt)")

    @classmethod
    def _open_dir(cls, root: Path, config: dict[str, Any] | None) -> "Checkpoint":
        for name in INDEX_NAMES:
            if (root / name).exists():
                return cls._open_sharded(root, root / name, config)
        safetensors = sorted(p for p in root.glob("*.safetensors"))
        if safetensors:
            return cls._from_safetensors(root, root, tuple(inside(root, p) for p in safetensors), config)
        pickles = sorted(p for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
        if pickles:
            return cls._from_pickles(root, root, tuple(inside(root, p) for p in pickles), config)
        if not any(root.iterdir()):
            raise CheckpointError(root, "empty directory: no checkpoint files")
        raise CheckpointError(root, "not a checkpoint: no *.safetensors, *.bin or *.pt files")

    @classmethod
    def _open_sharded(cls, root: Path, index_path: Path, config: dict[str, Any] | None) -> "Checkpoint":
        inside(root, index_path, what=index_path.name)
        index = read_json(index_path, "index JSON", CheckpointError)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(index_path, "index has no weight_map of tensor name -> shard file")
        if not weight_map:
            raise CheckpointError(index_path, "index weight_map lists no tensors")
        if not isinstance(index.get("metadata", {}), (dict, type(None))):
            raise CheckpointError(index_path, f"index metadata must be a JSON object, got {type(index['metadata']).__name__}")
        shards: dict[str, Path] = {}
        for shard_name in dict.fromkeys(weight_map.values()):
            shard = root / shard_name
            if Path(shard_name).is_absolute() or ".." in Path(shard_name).parts:
                raise CheckpointError(index_path, f"shard path {shard_name!r} points outside the checkpoint directory")
            if not shard.exists() and not shard.is_symlink():
                raise CheckpointError(index_path, f"shard {shard_name!r} is missing")
            shard = inside(root, shard, what=f"shard {shard_name!r} (named in {index_path.name})")
            shards[shard_name] = shard
        is_pickle = index_path.name.startswith("pytorch_model")
        files = tuple(shards.values())
        ckpt = (cls._from_pickles if is_pickle else cls._from_safetensors)(root, root, files, config)
        for name, shard_name in weight_map.items():
            info = ckpt.tensors.get(name)
            if info is None or info.file != shards[shard_name]:
                raise CheckpointError(index_path, f"tensor {name!r} is not in its shard {shard_name!r}")
        ckpt.index = index
        return ckpt

    @classmethod
    def _from_safetensors(cls, path: Path, root: Path, files: tuple[Path, ...], config: dict[str, Any] | None) -> "Checkpoint":
        tensors: dict[str, TensorInfo] = {}
        make = TensorInfo._fast
        for file in files:
            header = read_header(file)
            if tensors and not tensors.keys().isdisjoint(e.name for e in header.entries):
                name = next(e.name for e in header.entries if e.name in tensors)
                raise CheckpointError(file, f"tensor {name!r} is also in {tensors[name].file.name} (present in two shards)")
            for name, dtype, shape, begin, end in header.entries:
                tensors[name] = make(name, dtype, shape, file, begin, end)
        return cls(path, root, _sorted(tensors), config, files)

    @classmethod
    def _from_pickles(cls, path: Path, root: Path, files: tuple[Path, ...], config: dict[str, Any] | None) -> "Checkpoint":
        tensors: dict[str, TensorInfo] = {}
        pickled: dict[str, Any] = {}
        for file in files:
            for name, tensor in _load_weights_only(file).items():
                if name in tensors:
                    raise CheckpointError(file, f"tensor {name!r} is also in {tensors[name].file.name} (present in two shards)")
                tensors[name] = TensorInfo(name, _torch_dtype_name(file, name, tensor), tuple(tensor.shape), file)
                pickled[name] = tensor
        return cls(path, root, _sorted(tensors), config, files, pickled=pickled)

    @property
    def pickled_names(self) -> tuple[str, ...]:
        """The pickled tensors' names in the order their files were saved (``torch.load``'s dicts, file by file)."""
        return tuple(self._pickled)

    # -- reading data lazily --------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __len__(self) -> int:
        return len(self.tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CheckpointError(self.path, f"no tensor named {name!r}") from None

    def read(self, name: str):  # -> torch.Tensor
        """Read one tensor: up to 1 MiB with one plain read (opening with safe_open costs ~0.3 ms), larger ones
        memory-mapped by safetensors (no copy until touched)."""
        info = self.info(name)
        if name in self._pickled:
            return self._pickled[name]
        if torch_dtype(info.dtype) is None:
            raise CheckpointError(info.file, f"tensor {name!r} is stored as {info.dtype} (several values packed per "
                                             "byte), which torch has no tensor type for: its values cannot be read here")
        if info.nbytes <= _PLAIN_READ_MAX:
            tensor = _from_bytes(self.read_bytes(name), info)
            if tensor is not None:
                return tensor
        from safetensors import safe_open

        with safe_open(str(info.file), framework="pt") as fh:
            return fh.get_tensor(name)

    def read_bytes(self, name: str, start: int = 0, stop: int | None = None, out: bytearray | memoryview | None = None) -> memoryview:
        """Raw little-endian bytes ``[start, stop)`` of a tensor, read with plain file I/O (no mmap residue).

        With ``out`` the bytes are read into that buffer (reused across chunks) and a view of it is returned.
        """
        info = self.info(name)
        if info.begin is None:
            return self._pickled_bytes(name)[start: info.nbytes if stop is None else stop]
        stop = info.nbytes if stop is None else min(stop, info.nbytes)
        size = max(stop - start, 0)
        buf = memoryview(out if out is not None else bytearray(size))[:size]
        with open(info.file, "rb", buffering=0) as fh:
            _read_exactly(fh, info, start, buf)
        return buf

    def iter_chunks(self, name: str, chunk_bytes: int = 16 << 20, start: int = 0,
                    stop: int | None = None) -> Iterator[memoryview]:
        """Yield a tensor's bytes ``[start, stop)`` in chunks of at most ``chunk_bytes`` (element-aligned), reusing
        one buffer and one open file."""
        info = self.info(name)
        elem = max(DTYPE_BITS[info.dtype] // 8, 1)
        chunk = max(chunk_bytes - chunk_bytes % elem, elem)
        stop = info.nbytes if stop is None else min(stop, info.nbytes)
        if start % elem or (stop % elem and stop != info.nbytes):
            raise ValueError(f"tensor {name!r}: byte span [{start}, {stop}) does not fall on {elem}-byte elements")
        if info.begin is None:
            data = self._pickled_bytes(name)
            for first in range(start, stop, chunk):
                yield data[first: min(first + chunk, stop)]
            return
        buf = memoryview(bytearray(min(chunk, max(stop - start, 0))))
        with open(info.file, "rb", buffering=0) as fh:
            for first in range(start, stop, chunk):
                view = buf[: min(chunk, stop - first)]
                _read_exactly(fh, info, first, view)
                yield view

    def _pickled_bytes(self, name: str) -> memoryview:
        import torch

        return memoryview(self._pickled[name].contiguous().view(-1).view(torch.uint8).numpy()).cast("B")

    # -- what it is -------------------------------------------------------------------------
    def require_draft(self) -> "Checkpoint":
        """This checkpoint, or a one-line error when it is no EAGLE-3 draft (e.g. the target given as the draft)."""
        if not self.spec.is_draft:
            raise CheckpointError(self.path, f"not an EAGLE-3 draft ({self.layout} layout, no fc.weight): give the "
                                             "draft checkpoint (the target goes to --target)")
        return self

    @cached_property
    def spec(self) -> DraftSpec:
        return build_spec(self.config, self.tensors, source=self.root / "config.json")

    @property
    def layout(self) -> str:
        """"speculators", "eagle" (EAGLE / SpecForge / SGLang-style), "hf" (an ordinary HF model) or "unknown"."""
        flavour = self.spec.flavour
        if flavour == "speculators":
            return "speculators"
        if flavour in ("sglang", "eagle"):
            return "eagle"
        if flavour == "hf":
            return "hf"
        prefix = self.spec.decoder_prefix
        if self.spec.has_fc and prefix in ("layers.0.",):
            return "speculators"
        if self.spec.has_fc and prefix is not None:
            return "eagle"
        return "unknown"

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def summary(self) -> dict[str, Any]:
        """The ``checkpoint`` object of the JSON report."""
        return {
            "path": str(self.path),
            "layout": self.layout,
            "flavour": self.spec.flavour,
            "files": [f.name for f in self.files],
            "num_tensors": len(self.tensors),
            "total_bytes": self.total_bytes,
            "spec": self.spec.to_dict(),
        }

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, layout={self.layout!r}, tensors={len(self.tensors)})"


# what every probe accepts for a draft or target: a path (opened headers-only) or an open Checkpoint
CheckpointLike = Union[str, "os.PathLike[str]", "Checkpoint"]


@overload
def as_checkpoint(source: None) -> None: ...
@overload
def as_checkpoint(source: CheckpointLike) -> Checkpoint: ...
def as_checkpoint(source: CheckpointLike | None) -> Checkpoint | None:
    """``source`` as a Checkpoint: a path is opened (headers only), a Checkpoint passes, None stays None."""
    if source is None or isinstance(source, Checkpoint):
        return source
    return Checkpoint.open(os.fspath(source))


# -- helpers ---------------------------------------------------------------------------------
def _sorted(tensors: dict[str, TensorInfo]) -> dict[str, TensorInfo]:
    return dict(sorted(tensors.items()))


def _read_config(root: Path, path: Path) -> dict[str, Any] | None:
    if not path.exists() and not path.is_symlink():
        return None
    inside(root, path, what="config.json")
    config = read_json(path, "config JSON", CheckpointError)
    if not isinstance(config, dict):
        raise CheckpointError(path, "config must be a JSON object")
    return config


def _load_weights_only(file: Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: refuses any pickle that would import or call code."""
    import pickle
    import warnings
    import zipfile

    import torch

    try:
        with warnings.catch_warnings():  # torch's "Detected pickle protocol N" note is not the user's business
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            try:
                obj = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc) and "zip" not in str(exc):
                    raise
                obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        blocked = re.search(r"unsupported GLOBAL (\S+)|Unsupported global: GLOBAL (\S+)", str(exc))
        if blocked:
            what = blocked.group(1) or blocked.group(2)
            raise CheckpointError(file, f"refused: the pickle would import {what} on load (only plain tensors are accepted)") from None
        raise CheckpointError(file, "cannot read as a PyTorch weights file (not a plain tensor pickle)") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, KeyError, TypeError) as exc:  # truncated zip, not a pickle at all, ...
        raise CheckpointError(file, f"cannot read as a PyTorch weights file ({type(exc).__name__}: {str(exc)[:160]})") from None
    for key in ("state_dict", "module", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict) and len(obj) <= 4:
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise CheckpointError(file, "not a state dict of name -> tensor")
    for name, tensor in obj.items():
        if tensor.layout != torch.strided or tensor.is_quantized:
            kind = "quantized" if tensor.is_quantized else str(tensor.layout).removeprefix("torch.")
            raise CheckpointError(file, f"tensor {name!r} is a {kind} tensor: only dense tensors are supported "
                                        "(save it with .to_dense() first)")
    return obj


_PLAIN_READ_MAX = 1 << 20


def _from_bytes(raw: memoryview, info: TensorInfo):  # -> torch.Tensor | None
    """A tensor over little-endian bytes read by ``read_bytes`` (None: dtype torch lacks, or a big-endian host)."""
    import sys

    import torch

    dtype = torch_dtype(info.dtype)
    if dtype is None or sys.byteorder != "little":
        return None
    if not info.nbytes:
        return torch.empty(info.shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(info.shape)


def _torch_dtype_name(file: Path, name: str, tensor: Any) -> str:
    try:
        return st_dtype(tensor.dtype)
    except ValueError:
        raise CheckpointError(file, f"tensor {name!r}: unsupported dtype {tensor.dtype}") from None


def _read_exactly(fh: io.RawIOBase, info: TensorInfo, start: int, view: memoryview) -> None:
    """Fill ``view`` with the tensor's bytes from ``start`` on; a file that ends early is a CheckpointError."""
    assert info.begin is not None, "pickled tensors are read through _pickled_bytes"
    fh.seek(info.begin + start)
    got = fh.readinto(view)
    if got != len(view):
        raise CheckpointError(info.file, f"tensor {info.name!r}: file ended after {got} of {len(view)} bytes")


__all__ = ["Checkpoint", "CheckpointLike", "InfoResult", "as_checkpoint", "TensorInfo", "INDEX_NAMES", "PICKLE_SUFFIXES",
           "DraftSpec", "build_spec", "config_values", "detect_flavour", "DECODER_KEY", "DECODER_PREFIXES",
           "FLAG_NAMES", "MLA_FIELDS", "SIZE_FIELDS", "TOP_LEVEL_FIELDS", "LAYER_ID_LIMIT"]


@dataclass(frozen=True)
class InfoResult:
    """The tensor table of a checkpoint; no findings of its own (its view: :mod:`eagle3lens.plots.info`)."""

    ckpt: Checkpoint
    findings: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"tensors": [t.to_dict() for t in self.ckpt.tensors.values()]}

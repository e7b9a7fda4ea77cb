"""Checkpoint: a headers-only view of a draft or target, its config flavour and a normalised DraftSpec.

Nothing here reads tensor bytes until asked (`read`, `read_bytes`); safetensors headers are
validated before they are trusted, shard paths never leave the checkpoint directory, and
pickles are opened with ``torch.load(weights_only=True)`` only.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Union, overload

from .errors import CheckpointError
from .jsonio import read_json
from .safetensors_header import DTYPE_BITS, read_header, st_dtype, torch_dtype

INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")
DECODER_KEY = re.compile(r"^(?P<prefix>(?:model\.)?(?:midlayer|layers\.(?P<index>\d+))\.)")
DECODER_PREFIXES = re.compile(r"^((?:model\.)?(?:midlayer|layers\.\d+)\.)", re.MULTILINE)  # DECODER_KEY's prefix
FLAG_NAMES = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives and what it is, from headers alone."""

    name: str
    dtype: str  # safetensors dtype name, e.g. "BF16", "I64", "BOOL"
    shape: tuple[int, ...]
    file: Path
    begin: int | None = None  # absolute byte offsets in ``file`` (None for pickled tensors)
    end: int | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BITS[self.dtype] // 8

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "file": self.file.name,
                "begin": self.begin, "end": self.end}

    @classmethod
    def _fast(cls, name: str, dtype: str, shape: tuple[int, ...], file: Path, begin: int | None,
              end: int | None) -> TensorInfo:
        """The same object as ``TensorInfo(...)``, built without the frozen dataclass's per-field
        ``object.__setattr__`` (half the cost; a header can list a million tensors)."""
        obj = object.__new__(cls)
        obj.__dict__.update(name=name, dtype=dtype, shape=shape, file=file, begin=begin, end=end)
        return obj


@dataclass(frozen=True)
class DraftSpec:
    """What a checkpoint says about itself, normalised across speculators / SpecForge / EAGLE configs."""

    flavour: str  # "speculators" | "sglang" (SpecForge/SGLang flat Llama) | "eagle" (EAGLE official) | "hf" | "unknown"
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    hidden_size: int | None = None
    target_hidden_size: int | None = None  # resolved: declared value, else hidden_size
    target_hidden_size_declared: int | None = None
    num_aux: int | None = None
    aux_layer_ids: tuple[int, ...] | None = None  # the list the config's own flavour reads
    aux_ids_source: str | None = None  # "top-level" | "eagle_config" | None
    aux_ids_by_source: dict[str, tuple[int, ...]] = field(default_factory=dict)
    use_aux_hidden_state: bool | None = None
    draft_vocab_size: int | None = None  # N
    vocab_size: int | None = None  # V
    num_hidden_layers: int | None = None  # from config
    num_decoder_layers: int = 0  # from keys
    decoder_prefix: str | None = None  # "layers.0." | "midlayer." | "model.layers.0." | "model.midlayer."
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float | None = None
    initializer_range: float | None = None
    rope_theta: float | None = None  # rope_theta or rope_parameters.rope_theta; None: not in config
    fc_bias_config: bool = False  # SGLang's config.bias
    attention_bias: bool = False
    flags: dict[str, bool | None] = field(default_factory=dict)  # None: not in config
    dtypes: tuple[str, ...] = ()
    has_d2t: bool = False
    has_t2d: bool = False
    has_embed_tokens: bool = False
    has_lm_head: bool = False
    has_fc: bool = False
    has_input_norm: bool = False
    has_fc_norm: bool = False
    fc_in_features: int | None = None
    fc_out_features: int | None = None
    lm_head_rows: int | None = None
    verifier: str | None = None
    # how the engines read the config beyond the flat flags (issue 14): nested eagle_config flags,
    # legacy aliases (use_aux_norm), declared aux counts, tied heads, MLA attention sizes
    nested_flags: dict[str, bool | None] = field(default_factory=dict)  # eagle_config[flag]; None: not there
    aliases: dict[str, bool | None] = field(default_factory=dict)  # legacy flag names: use_aux_norm
    num_aux_declared: dict[str, int] = field(default_factory=dict)  # num_aux_hidden_states / num_aux_layers
    tie_word_embeddings: bool | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None

    @property
    def is_draft(self) -> bool:
        return self.flavour in ("speculators", "sglang", "eagle") or self.has_fc

    def flag(self, name: str) -> bool:
        """A flag's effective value when the config is silent (False)."""
        return bool(self.flags.get(name))

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        data = asdict(self)
        data["aux_ids_by_source"] = {k: list(v) for k, v in self.aux_ids_by_source.items()}
        return data


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
            config = _read_config(path, path / "config.json")
            return cls._open_dir(path, config)
        root = path.parent
        _inside(root, path)
        config = _read_config(root, root / "config.json")
        if path.name in INDEX_NAMES:
            return cls._open_sharded(root, path, config)
        if path.suffix == ".safetensors":
            return cls._from_safetensors(path, root, (path,), config)
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
            return cls._from_safetensors(root, root, tuple(_inside(root, p) for p in safetensors), config)
        pickles = sorted(p for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
        if pickles:
            return cls._from_pickles(root, root, tuple(_inside(root, p) for p in pickles), config)
        if not any(root.iterdir()):
            raise CheckpointError(root, "empty directory: no checkpoint files")
        raise CheckpointError(root, "not a checkpoint: no *.safetensors, *.bin or *.pt files")

    @classmethod
    def _open_sharded(cls, root: Path, index_path: Path, config: dict[str, Any] | None) -> "Checkpoint":
        _inside(root, index_path, what=index_path.name)
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
            shard = _inside(root, shard, what=f"shard {shard_name!r} (named in {index_path.name})")
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


def _containment_roots(root: Path) -> tuple[Path, ...]:
    """The folders symlinks may lead into: the checkpoint directory, and for a real Hugging Face cache snapshot
    (``models--ORG--NAME/snapshots/REV``, whose files link to ``../../blobs``) that model's ``blobs`` folder.
    A ``snapshots/REV`` folder anywhere else widens nothing."""
    real = root.resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real, real.parent.parent / "blobs"
    return (real,)


def _inside(root: Path, path: Path, what: str | None = None) -> Path:
    """Refuse ``path`` when it (or a symlink on the way) leads outside ``root``, or is not a regular file
    (a FIFO or device would hang or never end)."""
    real = path.resolve()
    if not any(real == r or r in real.parents for r in _containment_roots(root)):
        raise CheckpointError(path, f"{what or 'file'} leads outside the checkpoint directory (to {real})")
    try:
        mode = real.stat().st_mode
    except OSError as exc:
        raise CheckpointError(path, f"cannot read {what or 'file'} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(path, f"{what or 'file'} is not a regular file")
    return path


def _read_config(root: Path, path: Path) -> dict[str, Any] | None:
    if not path.exists() and not path.is_symlink():
        return None
    _inside(root, path, what="config.json")
    config = read_json(path, "config JSON", CheckpointError)
    if not isinstance(config, dict):
        raise CheckpointError(path, "config must be a JSON object")
    return config


def _load_weights_only(file: Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: refuses any pickle that would import or call code."""
    import pickle
    import zipfile

    import torch

    try:
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


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return tuple(value)
    return None


def detect_flavour(config: dict[str, Any] | None) -> str:
    """speculators / sglang (SpecForge, SGLang flat Llama) / eagle (official EAGLE) / hf / unknown."""
    if not config:
        return "unknown"
    archs: list[Any] = config["architectures"] if isinstance(config.get("architectures"), list) else []
    if config.get("speculators_model_type") and isinstance(config.get("transformer_layer_config"), dict):
        return "speculators"
    if "LlamaForCausalLMEagle3" in archs or isinstance(config.get("eagle_config"), dict):
        return "sglang"
    if "draft_vocab_size" in config and "LlamaForCausalLM" in archs:
        return "eagle"
    if archs or config.get("model_type"):
        return "hf"
    return "unknown"


# Upper bounds for config sizes: far above any published model, far below what would make a module
# builder ask for petabytes (hidden_size 10**12); a value outside them is refused, never used.
SIZE_FIELDS: dict[str, int] = {
    "hidden_size": 1 << 20, "target_hidden_size": 1 << 20, "intermediate_size": 1 << 22,
    "num_attention_heads": 1 << 12, "num_key_value_heads": 1 << 12, "head_dim": 1 << 14,
    "num_hidden_layers": 1 << 12, "vocab_size": 1 << 24, "draft_vocab_size": 1 << 24, "num_aux_hidden_states": 64,
}
TOP_LEVEL_FIELDS = ("target_hidden_size", "draft_vocab_size", "num_aux_hidden_states")
LAYER_ID_LIMIT = 1 << 31


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def config_values(config: dict[str, Any], flavour: str, source: str | Path = "config.json") -> dict[str, Any]:
    """Every config field the DraftSpec reads, checked by type and range; a bad one raises CheckpointError
    naming ``source`` and the field (``transformer_layer_config.hidden_size must be ...``).

    Returns the checked values by field name (None where absent or null), plus ``layer_cfg`` / ``text_cfg``: the
    sub-configs the flavour reads sizes from (a speculators ``transformer_layer_config``, a ``text_config``)."""
    layer_cfg, layer_label = (config.get("transformer_layer_config"), "transformer_layer_config.") \
        if flavour == "speculators" else (config, "")
    if not isinstance(layer_cfg, dict):
        layer_cfg = {}
    text_cfg, text_label = (layer_cfg["text_config"], f"{layer_label}text_config.") \
        if isinstance(layer_cfg.get("text_config"), dict) else (layer_cfg, layer_label)

    def refuse(label: str, key: str, value: Any, want: str) -> CheckpointError:
        text = repr(value)
        return CheckpointError(source, f"{label}{key} must be {want}, got {text if len(text) <= 60 else text[:60] + '…'}")

    out: dict[str, Any] = {"layer_cfg": layer_cfg, "text_cfg": text_cfg}
    for key, limit in SIZE_FIELDS.items():
        cfg, label = (config, "") if key in TOP_LEVEL_FIELDS else (text_cfg, text_label)
        value = cfg.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit):
            raise refuse(label, key, value, f"an integer from 1 to {limit}")
        out[key] = value
    for key, low, high, open_low in (("rms_norm_eps", 0.0, 1.0, True), ("initializer_range", 0.0, 10.0, False)):
        value = text_cfg.get(key)
        if value is not None and (not _number(value) or value > high or value < low or (open_low and value == low)):
            raise refuse(text_label, key, value, f"a number in {'(' if open_low else '['}{low:g}, {high:g}]")
        out[key] = value
    thetas = []
    for cfg, label in ((text_cfg, text_label), (layer_cfg, layer_label), (config, "")):
        rope = cfg.get("rope_parameters")
        for key, value in (("rope_parameters.rope_theta", rope.get("rope_theta") if isinstance(rope, dict) else None),
                           ("rope_theta", cfg.get("rope_theta"))):
            if value is not None and not (_number(value) and value > 0):
                raise refuse(label, key, value, "a positive number")
            if value is not None:
                thetas.append(float(value))
    out["rope_theta"] = thetas[0] if thetas else None
    archs = config.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise refuse("", "architectures", archs, "a list of class names")
    out["architectures"] = tuple(archs or ())
    for cfg, label, key in ((text_cfg, text_label, "model_type"), (config, "", "model_type")):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), str):
            raise refuse(label, key, cfg.get(key), "a string")
    for cfg, label, key in ((config, "", "bias"), (text_cfg, text_label, "attention_bias")):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), bool):
            raise refuse(label, key, cfg.get(key), "true or false")
    eagle_cfg = config.get("eagle_config")
    if eagle_cfg is not None and not isinstance(eagle_cfg, dict):
        raise refuse("", "eagle_config", eagle_cfg, "an object")
    for cfg, label in ((config, ""), (eagle_cfg or {}, "eagle_config.")):
        ids = cfg.get("eagle_aux_hidden_state_layer_ids")
        if ids is not None and not (isinstance(ids, list) and all(
                isinstance(i, int) and not isinstance(i, bool) and -LAYER_ID_LIMIT < i < LAYER_ID_LIMIT for i in ids)):
            raise refuse(label, "eagle_aux_hidden_state_layer_ids", ids, "a list of layer indices")
    return out


def build_spec(config: dict[str, Any] | None, tensors: dict[str, TensorInfo],
               source: str | Path = "config.json") -> DraftSpec:
    """Normalise a config (any flavour) plus the tensor table into a DraftSpec (the config checked first by
    :func:`config_values`; ``source`` names it in the error)."""
    config = config or {}
    flavour = detect_flavour(config)
    values = config_values(config, flavour, source)
    text_cfg = values["text_cfg"]

    # Scans over all names at C speed (a header may list a million tensors): one newline-joined string.
    names = "\n" + "\n".join(tensors) + "\n"
    if names.count("\n") != len(tensors) + 1:  # a name holding a newline must not forge a line of its own
        names = "\n" + "\n".join(n.replace("\n", "\x00") for n in tensors) + "\n"
    prefixes = set(DECODER_PREFIXES.findall(names))
    dtypes = {info.dtype for info in tensors.values()}
    leaves = {"d2t": "\nd2t\n" in names or ".d2t\n" in names, "t2d": "\nt2d\n" in names or ".t2d\n" in names,
              "embed_tokens.weight": "embed_tokens.weight\n" in names,
              "input_norm.weight": "input_norm.weight\n" in names,
              "fc_norm": "\nfc_norm." in names or ".fc_norm." in names}
    decoder_prefix = min(prefixes, key=lambda p: (p.count("."), p)) if prefixes else None
    if flavour == "hf":
        decoder_prefix = None  # a target's layers are not a draft decoder

    top_ids = _ids(config.get("eagle_aux_hidden_state_layer_ids"))
    eagle_cfg = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    nested_ids = _ids(eagle_cfg.get("eagle_aux_hidden_state_layer_ids"))
    by_source: dict[str, tuple[int, ...]] = {}
    if top_ids is not None:
        by_source["top-level"] = top_ids
    if nested_ids is not None:
        by_source["eagle_config"] = nested_ids
    nested_layer_ids = _ids(eagle_cfg.get("layer_ids"))  # vLLM's V2 runner reads eagle_config["layer_ids"]
    if nested_layer_ids is not None:
        by_source["eagle_config.layer_ids"] = nested_layer_ids
    own_source = "top-level" if flavour == "speculators" else "eagle_config"
    if own_source not in by_source and by_source:
        own_source = next(iter(by_source))
    aux_ids = by_source.get(own_source)

    hidden = values["hidden_size"]
    declared_th = values["target_hidden_size"]
    target_hidden = declared_th or hidden
    fc = tensors.get("fc.weight") or tensors.get("model.fc.weight")
    fc_in = fc.shape[1] if fc is not None and len(fc.shape) == 2 else None
    fc_out = fc.shape[0] if fc is not None and len(fc.shape) == 2 else None
    if fc_in and target_hidden and fc_in % target_hidden == 0:
        num_aux = fc_in // target_hidden
    elif aux_ids is not None:
        num_aux = len(aux_ids)
    elif fc is not None or flavour in ("speculators", "sglang", "eagle"):
        num_aux = values["num_aux_hidden_states"] or 3
    else:
        num_aux = None
    lm_head = tensors.get("lm_head.weight")
    n_draft = values["draft_vocab_size"]
    use_aux = eagle_cfg.get("use_aux_hidden_state")
    heads = values["num_attention_heads"]
    head_dim = values["head_dim"] or (hidden // heads if hidden and heads else None)
    verifier = None
    spec_cfg = config.get("speculators_config")
    if isinstance(spec_cfg, dict) and isinstance(spec_cfg.get("verifier"), dict):
        verifier = spec_cfg["verifier"].get("name_or_path")
    return DraftSpec(
        flavour=flavour,
        architectures=values["architectures"],
        model_type=text_cfg.get("model_type") or config.get("model_type"),
        hidden_size=hidden,
        target_hidden_size=target_hidden,
        target_hidden_size_declared=declared_th,
        num_aux=num_aux,
        aux_layer_ids=aux_ids,
        aux_ids_source=own_source if aux_ids is not None else None,
        aux_ids_by_source=by_source,
        use_aux_hidden_state=use_aux if isinstance(use_aux, bool) else None,
        draft_vocab_size=n_draft,
        vocab_size=values["vocab_size"],
        num_hidden_layers=values["num_hidden_layers"],
        num_decoder_layers=len(prefixes) if flavour != "hf" else 0,
        decoder_prefix=decoder_prefix,
        intermediate_size=values["intermediate_size"],
        num_attention_heads=heads,
        num_key_value_heads=values["num_key_value_heads"] or heads,
        head_dim=head_dim,
        rms_norm_eps=values["rms_norm_eps"],
        initializer_range=values["initializer_range"],
        rope_theta=values["rope_theta"],
        fc_bias_config=bool(config.get("bias", False)),
        attention_bias=bool(text_cfg.get("attention_bias", False)),
        flags={name: (config[name] if isinstance(config.get(name), bool) else None) for name in FLAG_NAMES},
        dtypes=tuple(sorted(dtypes)),
        has_d2t=leaves["d2t"],
        has_t2d=leaves["t2d"],
        has_embed_tokens=leaves["embed_tokens.weight"],
        has_lm_head=lm_head is not None,
        has_fc=fc is not None,
        has_input_norm=leaves["input_norm.weight"],
        has_fc_norm=leaves["fc_norm"],
        fc_in_features=fc_in,
        fc_out_features=fc_out,
        lm_head_rows=lm_head.shape[0] if lm_head is not None and lm_head.shape else None,
        verifier=verifier,
        nested_flags={name: (eagle_cfg[name] if isinstance(eagle_cfg.get(name), bool) else None) for name in FLAG_NAMES},
        aliases={"use_aux_norm": config["use_aux_norm"] if isinstance(config.get("use_aux_norm"), bool) else None},
        num_aux_declared={k: v for k in ("num_aux_hidden_states", "num_aux_layers")
                          if (v := _int(config.get(k)) or 0) > 0},
        tie_word_embeddings=(text_cfg["tie_word_embeddings"] if isinstance(text_cfg.get("tie_word_embeddings"), bool)
                             else None),
        **{k: _int(text_cfg.get(k)) for k in MLA_FIELDS},
    )


def _read_exactly(fh: BinaryIO, info: TensorInfo, start: int, view: memoryview) -> None:
    """Fill ``view`` with the tensor's bytes from ``start`` on; a file that ends early is a CheckpointError."""
    fh.seek(info.begin + start)
    got = fh.readinto(view)
    if got != len(view):
        raise CheckpointError(info.file, f"tensor {info.name!r}: file ended after {got} of {len(view)} bytes")

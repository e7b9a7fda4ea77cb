"""Hidden-state data for offline probes: trainers' dumps read sample by sample, or captured live from a target.

    for sample in iter_samples("data/hidden_states"):      # speculators, SpecForge or eagle3lens dumps
        sample.token_ids, sample.aux, sample.last, sample.loss_mask

Formats (read from the trainers' sources, never by importing them):

- **speculators** (0.9.0 wheel, ``cli/generate_offline_data.py``, ``train/data.py::ArrowDataset``): a folder of
  ``hs_{i}.safetensors`` (often under ``hidden_states/``), each holding ``token_ids`` [T] and ``hidden_states``
  [T, n_aux + 1, H]: the aux layers in layer order, then the verifier's last hidden state **before** its final
  norm (the trainer applies ``verifier_norm``). The loss mask lives in the Arrow dataset beside it; a
  ``loss_mask`` [T] tensor in the file is used when present, otherwise every position counts.
- **SpecForge** (``scripts/prepare_hidden_states.py``, ``specforge/data/preprocessing.py`` at a6b6b023):
  ``*.ckpt`` (or ``*.ckpt.gz``) ``torch.save`` dicts with ``input_ids`` [T], ``loss_mask`` [T],
  ``aux_hidden_state`` [(1,) T, n_aux*H] and ``hidden_state`` [(1,) T, H], the target's final state **after**
  its norm (SpecForge's TargetHead is the bare lm_head), in ``rows_*`` sub-folders.
- **eagle3lens** (this module's own): a folder with ``eagle3lens-dump.json`` (format, aux layers as HF
  ``hidden_states`` indices, whether ``last_hidden_state`` is normed) and ``sample_{i}.safetensors`` files with
  ``token_ids``, ``aux_hidden_states`` [T, n_aux*H], ``last_hidden_state`` [T, H] and ``loss_mask`` [T].

Pickles are read only through ``torch.load(weights_only=True)``; every file is checked to be a regular file of
bounded size before it is opened, and only one sample is in memory at a time.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import torch
from torch import nn

from ..io.inputs import inside
from ..errors import CheckpointError, UsageError
from ..io.dumps import MANIFEST, named_dump, sample_format, sample_order
from ..hf_load import TOKENIZER_FILES
from ..io.textsafe import clip
from .limits import MIN_TOKENS, check_length, check_token_ids, max_positions

FORMAT_NAME = "eagle3lens-hidden-states"
MAX_SAMPLE_BYTES = 16 << 30  # one sample file; a dump of many GB is many files
MAX_PROMPT_BYTES = 64 << 20
MAX_GZIP_RATIO = 16  # a .ckpt.gz sample may expand to 16x its size (float hidden states compress ~1.1x)
MIN_GZIP_CAP = 64 << 20
FORMATS = ("speculators", "specforge", "eagle3lens")
MAX_AUX_LAYERS = 64
# A sample's tensors are read whole, so its token count is bounded before its bytes are read: 2M tokens of the
# smallest EAGLE-3 target's states (4 x 1024 wide in bf16: 8 KiB a token) already fill MAX_SAMPLE_BYTES.
MAX_SAMPLE_TOKENS = 1 << 21
HIDDEN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # the dtypes torch's math runs in
_ID_LINE = re.compile(r"[\s,]*[-+]?\d+(?:[\s,]+[-+]?\d+)*[\s,]*", re.ASCII)


@dataclass(frozen=True)
class Sample:
    """One sequence of a dump: tokens, the aux hidden states fed to fc and the verifier's last hidden state."""

    token_ids: torch.Tensor  # [T] long
    aux: torch.Tensor  # [T, n_aux * H]: aux layers concatenated in layer order
    last: torch.Tensor | None  # [T, H]: the verifier's last hidden state (None when the dump has none)
    loss_mask: torch.Tensor  # [T] bool
    last_normed: bool  # True when ``last`` already went through the target's final norm
    source: str  # the file it came from ("live" for captured samples)
    layers: tuple[int, ...] | None = None  # HF hidden_states indices of the aux chunks, when the dump records them

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass(frozen=True)
class DumpInfo:
    """What a dump is, from its file list and first sample."""

    path: str
    format: str
    files: tuple[Path, ...]
    hidden: int  # H of the last hidden state (aux width / n_aux)
    aux_width: int
    layers: tuple[int, ...] | None
    last_normed: bool
    has_loss_mask: bool

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "files": len(self.files), "hidden": self.hidden,
                "aux_width": self.aux_width, "layers": list(self.layers) if self.layers else None,
                "last_normed": self.last_normed, "has_loss_mask": self.has_loss_mask}


# -- reading ------------------------------------------------------------------------------------
def dump_files(path: str | Path) -> tuple[str, tuple[Path, ...]]:
    """The format of the dump at ``path`` (a folder or one file) and its sample files in order."""
    root = Path(path)
    if not root.exists():
        raise CheckpointError(root, "no such hidden-state dump")
    if root.is_file():
        return _format_of(root), (root,)
    named = named_dump(root)
    if named:
        fmt, files = named
        if fmt == "eagle3lens":
            inside(root, root / MANIFEST, what=MANIFEST)
        return fmt, _contained(root, list(files))
    ckpts = sorted([*root.rglob("*.ckpt"), *root.rglob("*.ckpt.gz")], key=lambda p: (str(p.parent), sample_order(p)))
    if ckpts:
        return "specforge", _contained(root, ckpts)
    raise CheckpointError(root, "not a hidden-state dump: no hs_*.safetensors (speculators), *.ckpt (SpecForge) "
                                f"or {MANIFEST} (eagle3lens) inside")


def _contained(root: Path, files: list[Path]) -> tuple[Path, ...]:
    """The dump's sample files, each a regular file inside ``root`` (a symlink may not lead out of the dump)."""
    return tuple(inside(root, f, what="hidden-state sample") for f in files)


def iter_samples(path: str | Path, limit: int | None = None, max_tokens: int | None = None) -> Iterator[Sample]:
    """Stream the samples of a dump one by one (at most ``limit``; a safetensors sample longer than
    ``max_tokens``, the target's max_position_embeddings, refused from its header)."""
    fmt, files = dump_files(path)
    manifest = _manifest(Path(path)) if fmt == "eagle3lens" and Path(path).is_dir() else {}
    for n, file in enumerate(files):
        if limit is not None and n >= limit:
            return
        yield read_sample(file, fmt, manifest, max_tokens)


def describe_dump(path: str | Path) -> DumpInfo:
    """Format, file count and widths of a dump (reads its first sample)."""
    fmt, files = dump_files(path)
    if not files:
        raise CheckpointError(path, "the hidden-state dump holds no samples")
    first = next(iter_samples(path, limit=1))
    hidden = first.last.shape[-1] if first.last is not None else first.aux.shape[-1]
    has_mask = fmt != "speculators" or bool(_safetensors_keys(files[0]) & {"loss_mask"})
    return DumpInfo(str(path), fmt, files, int(hidden), int(first.aux.shape[-1]), first.layers, first.last_normed,
                    has_mask)


def read_sample(file: Path, fmt: str, manifest: dict[str, Any] | None = None,
                max_tokens: int | None = None) -> Sample:
    """One sample file of a dump in format ``fmt`` (a safetensors one refused from its header when it claims more
    than ``max_tokens`` or MAX_SAMPLE_TOKENS tokens)."""
    _check_file(file, MAX_SAMPLE_BYTES)
    if fmt != "specforge":
        _check_claimed_tokens(file, max_tokens)
    if fmt == "speculators":
        data = _safetensors(file)
        hs, ids = _need(data, file, "hidden_states"), _need(data, file, "token_ids")
        if hs.dim() != 3 or hs.shape[1] < 2:
            raise CheckpointError(file, f"hidden_states has shape {list(hs.shape)}, expected [T, n_aux + 1, H]")
        aux, last = hs[:, :-1].flatten(1), hs[:, -1]
        return _sample(file, ids, aux, last, data.get("loss_mask"), last_normed=False)
    if fmt == "specforge":
        data = _torch_load(file)
        aux, last = _need(data, file, "aux_hidden_state"), _need(data, file, "hidden_state")
        return _sample(file, _need(data, file, "input_ids"), _squeeze(aux), _squeeze(last), data.get("loss_mask"),
                       last_normed=True)
    data = _safetensors(file)
    manifest = manifest if manifest is not None else {}
    return _sample(file, _need(data, file, "token_ids"), _need(data, file, "aux_hidden_states"),
                   data.get("last_hidden_state"), data.get("loss_mask"),
                   last_normed=manifest.get("last_hidden") == "post-norm", layers=manifest_layers(manifest))


def manifest_layers(manifest: dict[str, Any]) -> tuple[int, ...] | None:
    """The aux layers a (checked) eagle3lens manifest records, as HF hidden_states indices."""
    layers = manifest.get("aux_layers")
    return tuple(layers) if isinstance(layers, list) else None


def _sample(file: Path, ids: torch.Tensor, aux: torch.Tensor, last: torch.Tensor | None, mask: torch.Tensor | None,
            last_normed: bool, layers: tuple[int, ...] | None = None) -> Sample:
    for states in (aux, last):
        if states is not None and states.dtype not in HIDDEN_DTYPES:
            raise CheckpointError(file, f"hidden states in {str(states.dtype).removeprefix('torch.')}: eagle3lens "
                                        "reads them in float16, bfloat16, float32 or float64 (convert the dump)")
    ids = ids.reshape(-1).long()
    T = ids.shape[0]
    if T < MIN_TOKENS:
        raise CheckpointError(file, f"the sample holds {T} token{'s' if T != 1 else ''}: at least {MIN_TOKENS} are "
                                    "needed (a position and the token it predicts)")
    if aux.dim() != 2 or aux.shape[0] != T:
        raise CheckpointError(file, f"aux hidden states have shape {list(aux.shape)}, expected [{T}, n_aux * H]")
    if last is not None and (last.dim() != 2 or last.shape[0] != T):
        raise CheckpointError(file, f"last hidden state has shape {list(last.shape)}, expected [{T}, H]")
    mask = torch.ones(T, dtype=torch.bool) if mask is None else mask.reshape(-1).bool()
    if mask.shape[0] != T:
        raise CheckpointError(file, f"loss_mask has {mask.shape[0]} entries for {T} tokens")
    return Sample(ids, aux, last, mask, last_normed, str(file), layers)


def _check_claimed_tokens(file: Path, max_tokens: int | None) -> None:
    """Refuse a safetensors sample whose header claims more tokens (any tensor's first dimension) than the
    target takes or MAX_SAMPLE_TOKENS, before any of its bytes are read."""
    from ..io.safetensors_header import read_header

    longest = max((e for e in read_header(file).entries if e.shape), key=lambda e: e.shape[0], default=None)
    if longest is None:
        return
    check_length(longest.shape[0], max_tokens, file)
    if longest.shape[0] > MAX_SAMPLE_TOKENS:
        raise CheckpointError(file, f"tensor {longest.name!r} claims {longest.shape[0]} tokens, more than the "
                                    f"{MAX_SAMPLE_TOKENS} a hidden-state sample may hold")


def _squeeze(t: torch.Tensor) -> torch.Tensor:
    return t.squeeze(0) if t.dim() == 3 and t.shape[0] == 1 else t


def _need(data: dict[str, torch.Tensor], file: Path, key: str) -> torch.Tensor:
    if key not in data:
        raise CheckpointError(file, f"no {key!r} tensor (has {sorted(data)[:6]})")
    return data[key]


def _format_of(file: Path) -> str:
    if file.name.endswith((".ckpt", ".ckpt.gz", ".pt")):
        return "specforge"
    fmt = sample_format(_safetensors_keys(file)) if file.suffix == ".safetensors" else None
    if fmt:
        return fmt
    raise CheckpointError(file, "not a hidden-state sample file (speculators hs_*.safetensors, SpecForge *.ckpt or "
                                "eagle3lens sample_*.safetensors)")


def _check_file(file: Path, cap: int) -> None:
    if not file.is_file():
        raise CheckpointError(file, "not a regular file")
    size = file.stat().st_size
    if size > cap:
        raise CheckpointError(file, f"{size} bytes: larger than the {cap}-byte cap for one sample")


def _safetensors_keys(file: Path) -> set[str]:
    from ..io.safetensors_header import read_header

    return {entry.name for entry in read_header(file).entries}


def _safetensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as fh:
            return {key: fh.get_tensor(key) for key in fh.keys()}  # noqa: SIM118 (safe_open is not iterable)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(file, f"cannot read as safetensors ({str(exc)[:160]})") from None


def _gunzip(file: Path) -> io.BytesIO:
    """A ``.ckpt.gz`` decompressed by streaming, refused once it expands past ``MAX_GZIP_RATIO`` times its size
    (at least ``MIN_GZIP_CAP``, at most ``MAX_SAMPLE_BYTES``): hidden states barely compress, a bomb does."""
    cap = min(MAX_SAMPLE_BYTES, max(MIN_GZIP_CAP, MAX_GZIP_RATIO * file.stat().st_size))
    out = io.BytesIO()
    try:
        with gzip.open(file, "rb") as fh:
            while chunk := fh.read(1 << 20):
                if out.tell() + len(chunk) > cap:
                    raise CheckpointError(file, f"expands past {cap} bytes when decompressed (over {MAX_GZIP_RATIO}x "
                                                "its size): not a hidden-state sample")
                out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise CheckpointError(file, f"cannot decompress ({type(exc).__name__}: {str(exc)[:160]})") from None
    out.seek(0)
    return out


def _torch_load(file: Path) -> dict[str, torch.Tensor]:
    import pickle
    import warnings

    source: Path | io.BytesIO = _gunzip(file) if file.name.endswith(".gz") else file
    try:
        with warnings.catch_warnings():  # torch's "Detected pickle protocol N" note is not the user's business
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            opened = cast(IO[bytes], source) if isinstance(source, io.BytesIO) else source
            obj = torch.load(opened, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(file, "refused: not a plain tensor pickle (only tensors are accepted)") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(file, f"cannot read as a PyTorch file ({type(exc).__name__}: {str(exc)[:160]})") from None
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(file, "not a dict of name -> tensor")
    return obj


def _manifest(root: Path) -> dict[str, Any]:
    file = root / MANIFEST
    _check_file(file, 1 << 20)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(file, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise CheckpointError(file, f"not an eagle3lens dump manifest (format must be {FORMAT_NAME!r})")
    layers = data.get("aux_layers")
    if layers is not None and not (isinstance(layers, list) and 0 < len(layers) <= MAX_AUX_LAYERS and all(
            isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 1 << 20 for k in layers)):
        raise CheckpointError(file, f"aux_layers must be null or a list of layer indices (integers >= 0), not "
                                    f"{json.dumps(layers)[:80]}")
    if data.get("last_hidden", "pre-norm") not in ("pre-norm", "post-norm"):
        raise CheckpointError(file, f"last_hidden must be 'pre-norm' or 'post-norm', not "
                                    f"{json.dumps(data.get('last_hidden'))[:80]}")
    return data


# -- writing ------------------------------------------------------------------------------------
def write_speculators_sample(path: Path, token_ids: torch.Tensor, aux_layers: Sequence[torch.Tensor],
                             last_prenorm: torch.Tensor, loss_mask: torch.Tensor | None = None) -> None:
    """One ``hs_{i}.safetensors`` file as speculators' data generation writes it (plus ``loss_mask``)."""
    from safetensors.torch import save_file

    hs = torch.stack([*aux_layers, last_prenorm], dim=1).contiguous()  # [T, n_aux + 1, H]
    tensors = {"token_ids": token_ids.reshape(-1).long().contiguous(), "hidden_states": hs}
    if loss_mask is not None:
        tensors["loss_mask"] = loss_mask.reshape(-1).bool().contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})


def write_dump(out: str | Path, samples: Iterable[Sample]) -> Path:
    """Write samples in eagle3lens's own format (a folder with a manifest); returns the folder."""
    from safetensors.torch import save_file

    root = Path(out)
    root.mkdir(parents=True, exist_ok=False)
    layers, normed, n = None, None, 0
    for n, s in enumerate(samples):
        layers, normed = s.layers, s.last_normed
        tensors = {"token_ids": s.token_ids.long().contiguous(), "aux_hidden_states": s.aux.contiguous(),
                   "loss_mask": s.loss_mask.bool().contiguous()}
        if s.last is not None:
            tensors["last_hidden_state"] = s.last.contiguous()
        save_file(tensors, str(root / f"sample_{n}.safetensors"), metadata={"format": "pt"})
    manifest = {"format": FORMAT_NAME, "version": 1, "aux_layers": list(layers) if layers else None,
                "last_hidden": "post-norm" if normed else "pre-norm", "samples": n + 1}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return root


# -- live capture -------------------------------------------------------------------------------
def read_prompts(path: str | Path, tokenizer_dir: str | Path | None = None) -> list[torch.Tensor]:
    """Prompts as token ids: a JSON list of id lists, lines of integers, or text lines (through the target's tokenizer)."""
    file = Path(path)
    _check_file(file, MAX_PROMPT_BYTES)
    text = file.read_text(encoding="utf-8", errors="replace")
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped, parse_int=_bounded_int)
        except RecursionError:
            raise CheckpointError(file, "not a JSON list of token-id lists (nested too deeply)") from None
        except ValueError as exc:
            raise CheckpointError(file, f"not a JSON list of token-id lists ({str(exc)[:120]})") from None
        if not (isinstance(data, list) and data and all(
                isinstance(r, list) and r and all(isinstance(i, int) and not isinstance(i, bool) for i in r)
                for r in data)):
            raise CheckpointError(file, "a JSON prompts file must be a non-empty list of non-empty lists of token ids")
        return [torch.tensor(r, dtype=torch.long) for r in data]
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise CheckpointError(file, "no prompts in the file")
    if all(_ID_LINE.fullmatch(line) for line in lines):
        try:
            return [torch.tensor([_bounded_int(t) for t in re.split(r"[\s,]+", line.strip(" \t,")) if t],
                                 dtype=torch.long) for line in lines]
        except ValueError as exc:
            raise CheckpointError(file, f"a line of token ids holds {exc}") from None
    return _tokenize(file, lines, tokenizer_dir)


def _bounded_int(text: str) -> int:
    """An integer of at most 18 digits (int64 range): longer ones are no token id and need not be parsed."""
    if len(text.lstrip("+-")) > 18:
        raise ValueError(f"an integer of {len(text.lstrip('+-'))} digits (token ids have at most 18)")
    return int(text)


def _tokenize(file: Path, lines: list[str], tokenizer_dir: str | Path | None) -> list[torch.Tensor]:
    """Text prompts through the target's tokenizer (one clear line when it has none)."""
    if tokenizer_dir is None:
        raise UsageError(f"{file}: text prompts need the target's tokenizer (give --target)")
    root = Path(tokenizer_dir)
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        raise UsageError(f"{file}: the target has no tokenizer ({root}): give one line of token ids per prompt")
    from ..hf_load import load_tokenizer

    tokenizer = load_tokenizer(root)
    try:
        encoded = [tokenizer(line)["input_ids"] for line in lines]
    except Exception as exc:  # noqa: BLE001  # any failure of a third-party tokenizer on a user's files
        raise CheckpointError(file, f"the target's tokenizer cannot encode it ({type(exc).__name__}: "
                                    f"{clip(exc, 160)}): give one line of token ids per prompt") from None
    empty = [n for n, ids in enumerate(encoded, 1) if not ids]
    if empty:
        raise CheckpointError(file, f"prompt {empty[0]} encodes to no tokens")
    return [torch.tensor(ids, dtype=torch.long) for ids in encoded]


def capture_samples(target: nn.Module, prompts: Iterable[torch.Tensor], layers: Sequence[int],
                    new_tokens: int = 32, source: str | Path = "prompts",
                    stop: Iterable[Any] = ()) -> Iterator[Sample]:
    """Live samples: each prompt continued greedily by ``target``; aux = inputs of decoder layers ``layers`` (HF
    ``hidden_states`` indices), last = the final norm's output, loss mask on the generated tokens only (up to
    and with the first eos id: the server generates nothing after it).
    Every prompt is checked against the target's vocabulary and positions first (``source`` names them).
    ``stop``: more ids that end a continuation (the tokenizer's eos, which the server also stops at)."""
    from ..target_runtime.greedy import greedy_continuation
    from ..target_runtime.load import find_decoder_layers, input_device

    _, decoder_layers = find_decoder_layers(target)
    L = len(decoder_layers)
    bad = [k for k in layers if not 0 <= k < L]
    if bad:
        raise UsageError(f"aux layers {bad} are not inputs of any of the target's {L} decoder layers")
    prompts = list(prompts)
    check_prompts(prompts, target, new_tokens, source)
    device = input_device(target)
    ends = stop_ids(target, stop)
    for prompt in prompts:
        with torch.no_grad():
            ids = greedy_continuation(target, prompt.to(device)[None], new_tokens, ends)
        feats, _, normed = target_states(target, ids, sorted(set(layers)))
        mask = torch.zeros(ids.shape[1], dtype=torch.bool)
        mask[prompt.numel():] = True
        yield Sample(ids[0].cpu(), torch.cat([f[0].float().cpu() for f in feats], dim=-1), normed[0].float().cpu(),
                     mask, True, "live", tuple(sorted(set(layers))))


def check_prompts(prompts: Sequence[torch.Tensor], target: nn.Module, new_tokens: int, source: str | Path) -> None:
    """Each prompt's ids inside the target's vocabulary, and prompt + ``new_tokens`` inside its positions."""
    from ..target_runtime.load import input_embeddings

    vocab = int(input_embeddings(target).weight.shape[0])
    limit = max_positions(getattr(target, "config", {}))
    for n, ids in enumerate(prompts, 1):
        check_token_ids(ids, vocab, source, what=f"prompt {n}: ")
        check_length(ids.numel() + new_tokens, limit, source, what=f"prompt {n} with {new_tokens} new tokens")


def stop_ids(target: nn.Module, more: Iterable[Any] = ()) -> frozenset[int]:
    """The ids a server ends a generation at: the eos ids of the target's config and generation_config (an id
    or a list; both engines stop there unless a request sets ignore_eos), and ``more`` (the tokenizer's eos)."""
    values = [getattr(c, "eos_token_id", None) for c in (getattr(target, "config", None),
                                                         getattr(target, "generation_config", None))] + list(more)
    items = [i for v in values for i in (v if isinstance(v, (list, tuple)) else [v])]
    return frozenset(i for i in items if isinstance(i, int) and not isinstance(i, bool))


def target_states(target: nn.Module, ids: torch.Tensor, layers: Sequence[int],
                  **forward: Any) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """One forward of ``target`` over ``ids`` [B, T]: the inputs of decoder layers ``layers`` (HF hidden_states
    indices), and the final norm's input (the last hidden state before the norm) and output; ``forward`` goes to
    the model (an HF model's ``logits_to_keep=1``: the lm_head on the last position only)."""
    from ..target_runtime import HookPoints

    points = HookPoints(target)
    seen, _ = points.run(ids, [points.layer(k) for k in sorted(set(layers))] + ["norm.in", "norm.out"], **forward)
    return [seen[points.layer(k)] for k in layers], seen["norm.in"], seen["norm.out"]


def write_speculators_dump(out: str | Path, target: nn.Module, sequences: torch.Tensor, layers: Sequence[int],
                           loss_mask: torch.Tensor | None = None) -> Path:
    """``sequences`` [B, T] as speculators' offline data: ``out/hs_{i}.safetensors``, one per sequence."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=False)
    aux, last, _ = target_states(target, sequences, layers)
    for i in range(sequences.shape[0]):
        write_speculators_sample(root / f"hs_{i}.safetensors", sequences[i], [a[i] for a in aux], last[i],
                                 None if loss_mask is None else loss_mask[i])
    return root

"""The target at run time: named hook points on a loaded HF model, and the teacher (final norm and lm_head).

    points = HookPoints(model)                       # "layer.5.in", "norm.in", "norm.out", ...
    seen, _ = points.run(ids[None], ["layer.2.in", "norm.out"])
    teacher = Teacher.open("demo/target", torch.device("cpu"))
    tokens = teacher.greedy_tokens(teacher.final_norm(last_hidden))

Hook points, as TransformerLens' are, are names for the tensors a probe reads, each registered as one torch
forward hook (pre-hooks for inputs): ``layer.K.in`` is what decoder layer K reads (HF ``hidden_states[K]``, the aux
state an engine captures there), ``norm.in`` / ``norm.out`` the final norm's input (the last hidden state) and
output. Every probe that needs the target's states reads them here. Part of the model layer: it imports the
checkpoint reader and the target loader only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from ..checkpoint import Checkpoint
from ..errors import CheckpointError, UsageError
from .load import final_norm_path, find_decoder_layers, input_device, load_target

TEACHER_CHUNK = 256  # rows per lm_head block when taking the teacher's argmax over the full vocab


# -- hook points ----------------------------------------------------------------------------------
class _Enough(Exception):
    """Raised by a hook to end a target forward once the points asked for are captured."""


class HookPoints:
    """The named tensors of one loaded target: ``layer.K.in`` for each decoder layer K, ``norm.in``, ``norm.out``."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.decoder_path, self.decoder = find_decoder_layers(model)
        norm = final_norm_path(model, self.decoder_path)
        self.norm = model.get_submodule(norm) if norm is not None else None

    @staticmethod
    def layer(k: int) -> str:
        """The point of decoder layer ``k``'s input (HF ``hidden_states[k]``)."""
        return f"layer.{k}.in"

    def _module(self, name: str) -> tuple[nn.Module, bool]:
        """The module a point hooks and whether it is its output (else its input)."""
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "layer" and parts[1].isdigit() and parts[2] == "in":
            return self.decoder[int(parts[1])], False
        if name in ("norm.in", "norm.out"):
            if self.norm is None:
                raise UsageError(f"{type(self.model).__name__}: no final norm beside {self.decoder_path}")
            return self.norm, name == "norm.out"
        raise ValueError(f"unknown hook point {name!r}")

    def run(self, ids: torch.Tensor, names: Iterable[str], stop_before: int | None = None,
            **kwargs: Any) -> tuple[dict[str, torch.Tensor], Any]:
        """One forward over ``ids`` [B, T] (no grad, no cache): the tensors at ``names`` (detached, as the model
        holds them) and the model's output. ``stop_before``: end the forward as decoder layer K starts (None
        returned as output); ``kwargs`` go to the model (``output_hidden_states=True``, say)."""
        seen: dict[str, torch.Tensor] = {}
        handles = []
        try:
            for name in names:
                module, output = self._module(name)
                handles.append(module.register_forward_hook(_keep_output(seen, name)) if output else
                               module.register_forward_pre_hook(_keep_input(seen, name), with_kwargs=True))
            if stop_before is not None and stop_before < len(self.decoder):
                handles.append(self.decoder[stop_before].register_forward_pre_hook(_stop, with_kwargs=True))
            out = None
            with torch.no_grad():
                out = self.model(input_ids=ids.to(input_device(self.model)), use_cache=False, **kwargs)
        except _Enough:
            pass
        finally:
            for handle in handles:
                handle.remove()
        return seen, out


def _keep_input(seen: dict[str, torch.Tensor], name: str) -> Callable[..., None]:
    def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen[name] = (args[0] if args else kwargs["hidden_states"]).detach()
    return hook


def _keep_output(seen: dict[str, torch.Tensor], name: str) -> Callable[..., None]:
    def hook(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> None:
        seen[name] = (output if isinstance(output, torch.Tensor) else output[0]).detach()
    return hook


def _stop(_module: nn.Module, _args: Any, _kwargs: Any) -> None:
    raise _Enough


# -- the teacher ----------------------------------------------------------------------------------
@dataclass
class Teacher:
    """The target's final norm, lm_head (and embed when an engine shares it), read alone from its checkpoint."""

    norm: torch.Tensor
    eps: float
    lm_head: torch.Tensor  # [V, H]
    num_layers: int
    hidden: int
    source: str
    ckpt: Checkpoint | None = None
    model: Any = None  # a loaded HF model when one was given
    _sub: tuple[torch.Tensor, torch.Tensor] | None = None
    norm_offset: float = 0.0  # 1.0 where the final norm scales by (1 + weight) (Gemma's, Qwen3-Next's)

    @classmethod
    def open(cls, target: Any, device: torch.device) -> Teacher:
        if isinstance(target, nn.Module):
            return cls._of_model(target, device)
        ckpt = target if isinstance(target, Checkpoint) else Checkpoint.open(target)
        if ckpt.spec.is_draft:
            raise CheckpointError(ckpt.path, "--target must be the target model, not a draft")
        config = ckpt.config or {}
        config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
        norm_key = _first(ckpt, ("model.norm.weight", "model.language_model.norm.weight", "norm.weight"))
        head_key = _first(ckpt, ("lm_head.weight", "model.embed_tokens.weight", "embed_tokens.weight"))
        num_layers = config.get("num_hidden_layers")
        if norm_key is None or head_key is None or not isinstance(num_layers, int):
            raise CheckpointError(ckpt.path, "not an HF target: needs model.norm.weight, lm_head.weight (or tied "
                                             "embed_tokens) and num_hidden_layers in config.json")
        head = ckpt.read(head_key).float().to(device)
        return cls(ckpt.read(norm_key).float().to(device), float(config.get("rms_norm_eps") or 1e-6), head,
                   num_layers, int(head.shape[1]), str(ckpt.path), ckpt=ckpt, norm_offset=norm_offset(config))

    @classmethod
    def _of_model(cls, target: nn.Module, device: torch.device) -> Teacher:
        points = HookPoints(target)
        norm = points.norm
        if norm is None:
            raise UsageError(f"{type(target).__name__}: no final norm beside {points.decoder_path}")
        model: Any = target
        head = cast(torch.Tensor, model.get_output_embeddings().weight)
        eps = float(getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", None) or 1e-6)
        hf_config: Any = getattr(target, "config", None)
        config = hf_config.to_dict() if hasattr(hf_config, "to_dict") else {}
        return cls(cast(torch.Tensor, norm.weight).detach().float().to(device), eps,
                   head.detach().float().to(device), len(points.decoder), head.shape[1], "model", model=target,
                   norm_offset=norm_offset(config))

    @property
    def runnable(self) -> bool:
        """The whole target is at hand (a loaded model, or a checkpoint holding every decoder layer's weights)."""
        if self.model is not None:
            return True
        keys = self.ckpt.tensors if self.ckpt is not None else {}
        return all(any(f"layers.{i}." in k for k in keys) for i in range(self.num_layers))

    def states(self, ids: torch.Tensor, layers: tuple[int, ...],
               full: bool) -> tuple[dict[int, torch.Tensor], torch.Tensor | None, torch.Tensor | None]:
        """The target run on ``ids`` [T]: the inputs of decoder layers ``layers`` (HF indices) as the engine captures
        them, each [T, H]; with ``full`` also the final norm's input and output (else the forward stops after the
        deepest layer asked for). The target is loaded on first use."""
        if self.model is None:
            self.model = load_target(self.ckpt, "cpu")
        points = HookPoints(self.model)
        names = [points.layer(k) for k in layers] + (["norm.in", "norm.out"] if full else [])
        deepest = max(layers, default=-1) + 1  # no layer asked for: the forward runs whole (``full``)
        seen, _ = points.run(ids[None], names, stop_before=None if full else deepest)
        pre, post = seen.get("norm.in"), seen.get("norm.out")
        return ({k: seen[points.layer(k)][0].float() for k in layers}, pre[0].float() if pre is not None else None,
                post[0].float() if post is not None else None)

    def _rows(self, rows: torch.Tensor | None) -> torch.Tensor:
        """The verifier lm_head rows of the draft vocab (gathered once per mapping, not per sample)."""
        if rows is None:
            return self.lm_head
        cached = self._sub
        if cached is None or not torch.equal(cached[0], rows):
            self._sub = cached = (rows, self.lm_head[rows])
        return cached[1]

    def config(self) -> dict[str, Any]:
        """The target's config.json as a dict (a loaded model's config, else the checkpoint's)."""
        config = getattr(self.model, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            return cast(dict[str, Any], config.to_dict())
        return dict(self.ckpt.config or {}) if self.ckpt is not None else {}

    def embed(self) -> torch.Tensor | None:
        if self.model is not None:
            return self.model.get_input_embeddings().weight.detach().float()
        key = _first(self.ckpt, ("model.embed_tokens.weight", "embed_tokens.weight")) if self.ckpt else None
        return self.ckpt.read(key).float() if key and self.ckpt else None

    def final_norm(self, last: torch.Tensor) -> torch.Tensor:
        x = last.float()
        return (self.norm + self.norm_offset) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def greedy_tokens(self, normed: torch.Tensor) -> torch.Tensor:
        """The target's greedy token over the full vocabulary at each row (the ``full`` half of ``greedy``)."""
        return torch.cat([(chunk @ self.lm_head.T).argmax(-1) for chunk in normed.split(TEACHER_CHUNK)])

    def greedy(self, normed: torch.Tensor, rows: torch.Tensor | None,
               each: Callable[[torch.Tensor], None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Argmax over the full vocabulary and over the draft-vocab rows ``rows`` (index into the draft vocab);
        ``each`` sees every block of full-vocabulary logits (the sampled view gathers its statistics there)."""
        full, draft = [], []
        sub = self._rows(rows)
        for chunk in normed.split(TEACHER_CHUNK):
            logits = chunk @ self.lm_head.T
            if each is not None:
                each(logits)
            full.append(logits.argmax(-1))
            draft.append((chunk @ sub.T).argmax(-1))
        return torch.cat(full), torch.cat(draft)


# model types whose RMSNorm scales by (1 + weight) (transformers' Gemma*RMSNorm, Qwen3NextRMSNorm)
ZERO_CENTERED_NORM = ("gemma", "gemma2", "gemma3", "gemma3_text", "gemma3n_text", "qwen3_next")


def norm_offset(config: dict[str, Any]) -> float:
    """1.0 where the target's final norm multiplies by (1 + weight), else 0.0 (``config``: its config.json)."""
    text = config.get("text_config")
    types = {config.get("model_type"), text.get("model_type") if isinstance(text, dict) else None}
    return 1.0 if types & set(ZERO_CENTERED_NORM) else 0.0


def _first(ckpt: Checkpoint | None, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if ckpt is not None and n in ckpt.tensors), None)

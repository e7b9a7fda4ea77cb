"""What an engine leaves in a draft parameter it never writes: the profile's init, ``torch.empty`` modelled.

An engine builds its draft class, copies the checkpoint tensors it recognises, and never checks the rest
(FACTS §4, §8): norms stay 1.0, SGLang's plain ``nn.Linear`` fc keeps PyTorch's kaiming-uniform init, and
everything allocated with ``torch.empty`` (parallel linears, embed, lm_head) holds whatever the allocator
handed out. That memory is undefined; eagle3lens models it as ``"noise"`` (order-one values, N(0, 1), seeded
per parameter: uninitialised memory is never scaled like a trained weight, so no trained signal survives it,
which is what the incidents' ``accept len: 1.00`` shows) or, on request, ``"zeros"`` (freshly mapped pages:
a dropped linear then adds nothing and the rest of the draft speaks alone, the most favourable reading).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from ..engines import EngineProfile
from ..served.load import role_of

if TYPE_CHECKING:  # the CLI reads EMPTY_MEMORY at start-up: torch is imported only when a draft is initialised
    import torch

    from ..draft import Eagle3Draft

EmptyMemory = Literal["noise", "zeros"]
EMPTY_MEMORY: tuple[EmptyMemory, ...] = ("noise", "zeros")
NOISE_STD = 1.0  # uninitialised memory: order-one values, 1/sqrt(fan_in) times any init's scale and more


def kind_of(name: str) -> str:
    """The parameter kind a profile's ``inits`` is keyed by: norm, fc, embed or linear."""
    if any(part.endswith("norm") for part in name.split(".")[:-1]):
        return "norm"
    role = role_of(name)
    return role if role in ("fc", "embed") else "linear"


def apply_engine_init(module: Eagle3Draft, written: Iterable[str], profile: EngineProfile, *,
                      empty: EmptyMemory = "noise", seed: int = 0) -> dict[str, str]:
    """Give every parameter of ``module`` not in ``written`` (canonical names) what ``profile`` leaves there.

    Buffers (d2t / t2d) are left as they are (the caller reads them as the engine does). Returns
    name -> the init applied, for the parameters it touched.
    """
    import torch

    if empty not in EMPTY_MEMORY:
        raise ValueError(f"empty memory is modelled as one of {', '.join(EMPTY_MEMORY)}, not {empty!r}")
    done = set(written)
    applied: dict[str, str] = {}
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name, param in params.items():
            if name in done:
                continue
            role, kind = role_of(name), kind_of(name)
            init = profile.inits.get(name) or profile.init_for(role, kind)
            fan_in = _fan_in(name, params)
            param.copy_(_init_values(init, tuple(param.shape), fan_in, module.cfg.initializer_range,
                                     empty, seed, name).to(param.dtype))
            applied[name] = f"torch.empty ({empty})" if init == "empty" else init
    return applied


def _fan_in(name: str, params: dict[str, torch.nn.Parameter]) -> int:
    """fan_in of a weight (its second dimension); of a bias, that of its layer's weight."""
    param = params[name]
    if param.dim() >= 2:
        return int(param.shape[1])
    weight = params.get(name.rsplit(".", 1)[0] + ".weight")
    return int(weight.shape[1]) if weight is not None and weight.dim() >= 2 else int(param.shape[0])


def _init_values(init: str, shape: tuple[int, ...], fan_in: int, init_range: float, empty: EmptyMemory,
                 seed: int, name: str) -> torch.Tensor:
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    bound = 1.0 / math.sqrt(max(fan_in, 1))
    if init == "empty":
        if empty == "zeros":
            return torch.zeros(shape)
        return torch.randn(shape, generator=gen) * NOISE_STD
    if init == "ones":
        return torch.ones(shape)
    if init in ("zeros", "false"):
        return torch.zeros(shape)
    if init == "nan":
        return torch.full(shape, float("nan"))
    if init in ("kaiming-uniform", "uniform(±1/sqrt(fan_in))"):
        # kaiming_uniform_(a=sqrt(5)) on a [out, in] weight, and nn.Linear's bias: both U(±1/sqrt(fan_in))
        return (torch.rand(shape, generator=gen) * 2 - 1) * bound
    if init == "normal(0, initializer_range)":
        return torch.randn(shape, generator=gen) * init_range
    raise ValueError(f"no model of the init {init!r} for {name}")

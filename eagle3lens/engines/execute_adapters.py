"""What the engines' ``--execute`` builders share: the :class:`Adapter` record (how each engine builds its EAGLE-3
draft: its class lookup, config reader, constructor and the running-server state stood in, world size 1, one
process), the :class:`Built` draft, the config readers and the world-size-1 parallel group. The engines' own parts
are :mod:`.execute_sglang` and :mod:`.execute_vllm`; :data:`.execute.ADAPTERS` names them.

An adapter only *calls* the engine: its class lookup (SGLang's ``EntryClass``, vLLM's model registry), its config
reader where it has one, its constructor and its ``load_weights``. The attribute stand-ins it installs are listed
in ``SGLANG_STATE`` / ``VLLM_STATE`` and land in the result's ``stand_ins``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
from pathlib import Path
from typing import Any, Callable

from .standins import StandIns, placeholder


class SingleProcessGroup:
    """What a parallel group coordinator holds in a one-process server (world size 1, rank 0)."""

    world_size = 1
    rank = 0
    rank_in_group = 0
    local_rank = 0
    ranks = [0]
    first_rank = 0
    last_rank = 0
    is_first_rank = True
    is_last_rank = True
    next_rank = 0
    prev_rank = 0
    device_group = None
    cpu_group = None
    use_custom_allreduce = False
    unique_name = "eagle3lens:world-size-1"

    def all_reduce(self, x: Any) -> Any:
        return x

    def all_gather(self, x: Any, dim: int = -1) -> Any:  # noqa: ARG002 (same signature as the engine's)
        return x


GROUP = SingleProcessGroup()


def defaults_of(cls: Any) -> types.SimpleNamespace:
    """A dataclass's field defaults, without running its ``__post_init__`` (SGLang's ServerArgs probes the GPU)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
        else:
            values[f.name] = None
    return types.SimpleNamespace(**values)


def parallel_state(stand: StandIns, module: types.ModuleType) -> None:
    for name, value in list(vars(module).items()):
        if callable(value) and re.fullmatch(r"get_\w*(_group|_world_group)", name) and not name.startswith("get_group"):
            stand.patch(module, name, lambda *_a, **_k: GROUP,
                        "one process, no torch.distributed: every parallel group has world size 1, rank 0")


def tolerant_registries(stand: StandIns) -> None:
    """An engine pinned to an older transformers registers configs that the installed one already ships
    (``qwen3_asr`` in SGLang 0.5.11 under transformers 5): register them with ``exist_ok=True``."""
    import transformers

    for name in ("AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoImageProcessor"):
        cls = getattr(transformers, name, None)
        real = getattr(cls, "register", None) if cls is not None and type(cls).__name__ != "DummyObject" else None
        if real is None:
            continue

        def register(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            kwargs["exist_ok"] = True
            return _real(*args, **kwargs)

        stand.patch(cls, "register", staticmethod(register),
                    "the installed transformers already ships some configs the engine registers: exist_ok=True")
    from transformers import image_utils
    from transformers.utils import is_vision_available

    if not is_vision_available() and not hasattr(image_utils, "PILImageResampling"):
        stand.patch(image_utils, "PILImageResampling", placeholder("PILImageResampling", "PIL.Image"),
                    "Pillow is not installed: the name multimodal processors import from transformers.image_utils")


@dataclasses.dataclass
class Built:
    """A constructed draft: the module, the class, how its architecture was chosen."""

    model: Any
    module: str
    draft_class: str
    recognised: bool
    notes: list[str]


def read_config_dict(ckpt_dir: Path) -> dict[str, Any]:
    return json.loads((ckpt_dir / "config.json").read_text())


def flattened(config: dict[str, Any], draft_class: str) -> dict[str, Any]:
    """A speculators config as a flat HF config naming ``draft_class`` (what ``convert`` writes for SGLang)."""
    layer = config.get("transformer_layer_config")
    if not isinstance(layer, dict):
        return {**config, "architectures": [draft_class]}
    top = {k: v for k, v in config.items() if k not in ("transformer_layer_config", "speculators_config",
                                                        "architectures", "auto_map")}
    return {**layer, **top, "architectures": [draft_class]}


def instance(cls: Any, **overrides: Any) -> Any:
    """An instance of the engine's config dataclass holding its field defaults and ``overrides``, built without its
    validation (which would load the model it names)."""
    obj = object.__new__(cls)
    if dataclasses.is_dataclass(cls):
        defaults = vars(defaults_of(cls))
    else:  # vLLM 0.8's ModelConfig is a plain class: its __init__'s defaults
        defaults = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}
    for name, value in {**defaults, **overrides}.items():
        if isinstance(inspect.getattr_static(cls, name, None), property):
            continue  # derived by this release (vLLM 0.9's ModelConfig.runner_type), not a field to set
        object.__setattr__(obj, name, value)
    derive = getattr(obj, "get_model_arch_config", None)  # vLLM's ModelConfig derives it in __post_init__
    if callable(derive) and "model_arch_config" not in overrides:
        object.__setattr__(obj, "model_arch_config", derive())
    return obj


def accepted(fn: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return offered
    return {k: v for k, v in offered.items() if k in params}


@dataclasses.dataclass(frozen=True)
class Adapter:
    name: str
    packages: tuple[str, ...]
    state: dict[str, Callable[[StandIns, types.ModuleType], None]]
    build: Callable[[Path, str, StandIns], Built]
    loggers: tuple[str, ...]

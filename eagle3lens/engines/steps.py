"""Loader rules as an ordered sequence of small steps, in the spirit of vLLM's ``WeightsMapper``.

An engine's ``load_weights`` is restated as data: a tuple of steps that each look at one checkpoint
key and either rewrite it (``Rename``, ``Prefix``, ``Stack``) or decide its fate (``Skip``,
``Convert``, ``Drop``, ``Discard``, ``Lookup``). :func:`run` applies them in order; the last step of
every loader is a :class:`Lookup` holding the engine's unknown-key policy. Adding an engine
behaviour is adding a step, never a branch in the interpreter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Protocol, Union

from .params import ParamSpec

How = Literal["substr", "leaf", "regex", "prefix"]
FLAG_OFF_REASON = "the loader discards {what!r} keys unless {flag} is set in the config{where}"


@dataclass(frozen=True)
class Route:
    """Where the loader sends one checkpoint key."""

    fate: str  # loaded | loaded-shard | converted | skipped | dropped | raises
    param: str | None = None
    shard: str | None = None
    reason: str = ""
    log: str = ""  # the line the engine logs for this key ("" when it says nothing)
    finding: str | None = None  # a keys/* code this route raises by itself (e.g. keys/d2t-discarded)


@dataclass(frozen=True)
class Key:
    """A checkpoint key on its way through the steps."""

    name: str
    shard: str | None = None
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Context:
    params: Mapping[str, ParamSpec]
    flag: Callable[[str], bool]  # the engine's own reading of an option flag (nested eagle_config first, ...)


class Step(Protocol):
    def apply(self, key: Key, ctx: Context) -> Union[Key, Route]: ...

    def describe(self) -> str: ...


def _matches(name: str, pattern: str, how: How) -> bool:
    if how == "substr":
        return pattern in name
    if how == "leaf":
        return name == pattern or name.endswith("." + pattern)
    if how == "prefix":
        return name.startswith(pattern)
    return re.search(pattern, name) is not None


@dataclass(frozen=True)
class Skip:
    """Keys the loader skips by design (``t2d``, rotary caches)."""

    pattern: str
    how: How = "substr"
    reason: str = ""

    def apply(self, key: Key, ctx: Context) -> Key | Route:  # noqa: ARG002 (the Step protocol)
        if _matches(key.name, self.pattern, self.how):
            return Route("skipped", reason=self.reason or f"the loader skips keys containing {self.pattern!r} "
                                                         "(not used by the engine)")
        return key

    def describe(self) -> str:
        return f"skip {self.pattern!r} ({self.how})"


@dataclass(frozen=True)
class Convert:
    """A key turned into a non-parameter attribute (SGLang: ``hot_token_id = d2t + arange(N)``)."""

    pattern: str
    attribute: str
    how: How = "substr"
    reason: str = ""

    def apply(self, key: Key, ctx: Context) -> Key | Route:  # noqa: ARG002 (the Step protocol)
        if _matches(key.name, self.pattern, self.how):
            return Route("converted", self.attribute, reason=self.reason)
        return key

    def describe(self) -> str:
        return f"convert {self.pattern!r} -> {self.attribute}"


@dataclass(frozen=True)
class Rename:
    """Rewrite part of a key (substring everywhere, or a regex); ``tag`` marks it for later steps."""

    old: str
    new: str
    how: Literal["substr", "regex"] = "substr"
    tag: str | None = None

    def apply(self, key: Key, ctx: Context) -> Key | Route:  # noqa: ARG002 (the Step protocol)
        if self.how == "regex":
            name, n = re.subn(self.old, self.new, key.name)
            if not n:
                return key
        elif self.old in key.name:
            name = key.name.replace(self.old, self.new)
        else:
            return key
        return Key(name, key.shard, key.tags | {self.tag} if self.tag else key.tags)

    def describe(self) -> str:
        return f"rename {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class Prefix:
    """Prepend ``model.`` (or another prefix), except for keys containing ``unless`` or tagged ``unless_tag``;
    ``if_missing``: only when the name as it stands is not a parameter (SGLang's own loader)."""

    prefix: str
    unless: tuple[str, ...] = ()
    unless_tag: tuple[str, ...] = ()
    if_missing: bool = False

    def apply(self, key: Key, ctx: Context) -> Key | Route:
        if any(s in key.name for s in self.unless) or key.tags & set(self.unless_tag):
            return key
        if self.if_missing and key.name in ctx.params:
            return key
        return Key(self.prefix + key.name, key.shard, key.tags)

    def describe(self) -> str:
        return f"prefix {self.prefix!r}" + (" if not a parameter" if self.if_missing else "")


@dataclass(frozen=True)
class Drop:
    """Discard matching keys unless (or if) a config flag is on (vLLM ``input_norm.`` / ``fc.``, tied heads)."""

    pattern: str
    unless_flag: str | None = None
    if_flag: str | None = None
    how: How = "substr"
    where: str = ""  # where the flag is read, for the reason ("top-level config only")
    log: str = ""

    def apply(self, key: Key, ctx: Context) -> Key | Route:
        if not _matches(key.name, self.pattern, self.how):
            return key
        if self.unless_flag and not ctx.flag(self.unless_flag):
            where = f" ({self.where})" if self.where else ""
            return Route("dropped", reason=FLAG_OFF_REASON.format(what=self.pattern, flag=self.unless_flag,
                                                                  where=where), log=self.log)
        if self.if_flag and ctx.flag(self.if_flag):
            return Route("dropped", reason=f"{self.if_flag} is set: the loader ignores {self.pattern!r} keys",
                         log=self.log)
        return key

    def describe(self) -> str:
        cond = f" unless {self.unless_flag}" if self.unless_flag else f" if {self.if_flag}" if self.if_flag else ""
        return f"drop {self.pattern!r}{cond}"


@dataclass(frozen=True)
class Discard:
    """A key the loader takes and then throws away (vLLM 0.9.0: ``draft_id_to_target_id = None``)."""

    pattern: str
    reason: str
    how: How = "substr"
    finding: str | None = None

    def apply(self, key: Key, ctx: Context) -> Key | Route:  # noqa: ARG002 (the Step protocol)
        if _matches(key.name, self.pattern, self.how):
            return Route("dropped", reason=self.reason, finding=self.finding)
        return key

    def describe(self) -> str:
        return f"discard {self.pattern!r}"


@dataclass(frozen=True)
class Stack:
    """Shards of a fused parameter (q/k/v -> qkv_proj, gate/up -> gate_up_proj, q_a/kv_a -> fused_qkv_a...).

    ``missing``: what the loader does when the fused name is no parameter: ``"continue"`` (later steps
    decide), ``"keyerror"`` (``params_dict[name]`` raises), ``"drop"`` (skipped without a log)."""

    pairs: tuple[tuple[str, str, str], ...]  # (checkpoint part, fused part, shard id)
    missing: Literal["continue", "keyerror", "drop"] = "continue"
    strip: str = ""  # the KeyError names the key without this prefix (the inner loader's view)

    def apply(self, key: Key, ctx: Context) -> Key | Route:
        for weight, fused, shard in self.pairs:
            if weight in key.name:
                name = key.name.replace(weight, fused)
                if name not in ctx.params and self.missing == "keyerror":
                    inner = name[len(self.strip):] if self.strip and name.startswith(self.strip) else name
                    return Route("raises", reason=f"KeyError: {inner!r} (params_dict[name] on a stacked key)")
                if name not in ctx.params and self.missing == "drop":
                    return Route("dropped", reason=f"no parameter {name}: skipped without a log")
                return Key(name, shard, key.tags)
        return key

    def describe(self) -> str:
        return "stack " + ", ".join(f"{w}->{f}[{s}]" for w, f, s in self.pairs)


@dataclass(frozen=True)
class Lookup:
    """The final step: load into the parameter of that name, or apply the engine's unknown-key policy.

    ``unknown``: ``drop`` (silently), ``warn`` (``log`` is the engine's warning, formatted with the key),
    ``keyerror`` (``params_dict[name]``), ``valueerror`` (AutoWeightsLoader's recursive walk and message)."""

    unknown: Literal["drop", "warn", "keyerror", "valueerror"] = "drop"
    log: str = ""
    ignore_suffixes: tuple[str, ...] = ()  # unknown keys with these endings are ignored (debug log only)
    message: str = ""  # valueerror: formatted with name, loader, base, cls, available
    loader_classes: tuple[tuple[str, str], ...] = (("", "Model"),)  # (key prefix, module whose loader runs)
    module_classes: tuple[tuple[str, str], ...] = ()  # (path suffix, class) for the message; "#" = digits
    strip: str = ""  # the inner loader sees names without this prefix (vLLM's LlamaModel under "model.")

    def apply(self, key: Key, ctx: Context) -> Key | Route:
        if key.name in ctx.params:
            return Route("loaded-shard" if key.shard else "loaded", key.name, key.shard)
        return self.unknown_route(key.name, ctx.params)

    def unknown_route(self, name: str, params: Mapping[str, ParamSpec]) -> Route:
        if any(name.endswith(s) for s in self.ignore_suffixes):
            return Route("dropped", reason=f"no parameter {name!r}: unexpected '.bias' keys are ignored (debug log only)")
        if self.unknown == "drop":
            return Route("dropped", reason=f"no parameter {name}: skipped without a log")
        if self.unknown == "warn":
            return Route("dropped", reason=f"no parameter {name}: a warning is logged, then the key is ignored",
                         log=self.log.replace("{name}", name))
        if self.unknown == "keyerror":
            inner = name[len(self.strip):] if self.strip and name.startswith(self.strip) else name
            return Route("raises", reason=f"KeyError: {inner!r}")
        missing, base, loader, available = _missing_module(name, params, self.loader_classes)
        if any(missing.endswith(s) for s in self.ignore_suffixes):
            return Route("dropped", reason=f"no module {missing!r}: unexpected '.bias' keys are ignored (debug log only)")
        cls = _class_of(base, loader, self.module_classes)
        shown = "{" + ", ".join(repr(n) for n in sorted(available)) + "}"
        return Route("raises", reason=self.message.format(name=missing, loader=loader, base=base, cls=cls,
                                                          available=shown))

    def describe(self) -> str:
        return f"lookup; unknown keys: {self.unknown}"


Steps = tuple[Step, ...]


def run(steps: Steps, key: str, ctx: Context) -> Route:
    """Send ``key`` through ``steps``; a sequence without a final :class:`Lookup` ends in a silent drop."""
    state = Key(key)
    for step in steps:
        out = step.apply(state, ctx)
        if isinstance(out, Route):
            if "{key}" in out.log:
                out = Route(out.fate, out.param, out.shard, out.reason, out.log.replace("{key}", key), out.finding)
            return out
        state = out
    return Route("dropped", reason=f"no parameter {state.name}: skipped without a log")


def final_lookup(steps: Steps) -> Lookup:
    return next((s for s in reversed(steps) if isinstance(s, Lookup)), Lookup())


def _missing_module(name: str, params: Mapping[str, ParamSpec],
                    loader_classes: tuple[tuple[str, str], ...]) -> tuple[str, str, str, set[str]]:
    """Walk the module tree like a recursive loader: the first path component that does not exist."""
    loader_prefix, loader = next(((p, c) for p, c in loader_classes if name.startswith(p)), ("", "Model"))
    rel = name[len(loader_prefix):]
    names = [n[len(loader_prefix):] for n in params if n.startswith(loader_prefix)]
    modules = {".".join(n.split(".")[:k]) for n in names for k in range(1, n.count(".") + 1)}
    parts = rel.split(".")
    for k in range(1, len(parts) + 1):
        path = ".".join(parts[:k])
        if path not in modules and path not in names:
            base = ".".join(parts[:k - 1])
            available = {n for n in names if not base or n.startswith(base + ".")}
            return path, base, loader, available
    return rel, "", loader, set(names)


def _class_of(base: str, loader: str, module_classes: tuple[tuple[str, str], ...]) -> str:
    if not base:
        return loader
    last = base.split(".")[-1]
    for suffix, cls in module_classes:
        if last == suffix or (suffix == "#" and last.isdigit()):
            return cls
    return "Module"


__all__ = ["Context", "Convert", "Discard", "Drop", "Key", "Lookup", "Prefix", "Rename", "Route", "Skip", "Stack",
           "Step", "Steps", "final_lookup", "run"]

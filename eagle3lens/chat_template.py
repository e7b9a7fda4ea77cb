"""A chat template rendered as transformers' ``apply_chat_template`` renders it, within a bound on time and size.

    text = render_chat(tokenizer, [{"role": "user", "content": "hi"}], add_generation_prompt=True)

A chat template is code from the model directory. transformers runs it in Jinja's immutable sandbox, which stops
escapes, not work: three nested ``range(100000)`` loops run for ever and ``{{ 'x' * 3000000000 }}`` allocates
3 GB. Here it runs in a sandbox with transformers' own environment (``trim_blocks``, ``lstrip_blocks``, loop
controls, the ``generation`` tag, ``raise_exception``, ``strftime_now``, ``tojson``, ``dict``, ``namespace``; the
messages, ``add_generation_prompt`` and the tokenizer's special tokens as variables) whose every loop step, call,
filter and operator that builds text checks a deadline (:data:`MAX_SECONDS`) and a size (:data:`MAX_CHARS`
characters for any string or list the template builds, and for its output). Past either: one line naming the
template's file.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.runtime
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace

from .errors import CheckpointError
from .io.textsafe import clip

MAX_SECONDS = 5.0  # real templates render a conversation in milliseconds
MAX_CHARS = 16 << 20  # of any string or list a template builds, and of its rendering
MAX_INT_BITS = 1 << 16  # of an integer a template computes (9 ** 9 ** 9 would take minutes)
ITER_FILTER = "eagle3lens_bounded_iter"  # wraps every {% for %} iterable
_FORMAT_WIDTH = re.compile(r"\d{8,}")  # a width or precision of 10 million characters or more in a format string
_EXPANDERS = ("center", "ljust", "rjust", "zfill", "expandtabs", "indent", "truncate", "wordwrap")


class _TemplateLimit(Exception):
    """The template went past its time or size bound (said by ``render_chat`` as one line naming the file)."""


def _size(value: Any) -> int:
    """Characters of a string; items of a list or tuple plus the characters of the strings in it."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return len(value) + sum(len(v) for v in value if isinstance(v, str))
    return 0


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with every ``{% for %}`` iterable passed through the environment's bounded iterator
    and every ``~`` concatenation through its size check (neither is a call the sandbox sees)."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in node.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, ITER_FILTER, [], [], None, None, lineno=loop.lineno)
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.sized(")
        super().visit_Concat(node, frame)
        self.write(")")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with a deadline and a size bound on everything the template does."""

    intercepted_binops = frozenset({"*", "+", "%", "**"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, seconds: float = MAX_SECONDS, max_chars: int = MAX_CHARS) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
        self.seconds, self.max_chars = seconds, max_chars
        self.deadline = math.inf
        self.filters = {name: self._guarded(f) for name, f in self.filters.items()}
        self.filters["tojson"] = self._guarded(_tojson)
        self.filters[ITER_FILTER] = self._bounded_iter
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_TemplateDict(),
                            namespace=_TemplateNamespace)

    def start(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _TemplateLimit(f"ran past its {self.seconds:g} s bound")

    def sized(self, value: Any) -> Any:
        self.tick()
        if _size(value) > self.max_chars:
            raise _TemplateLimit(f"built a value of {_size(value):,} characters (the bound is {self.max_chars:,})")
        return value

    def _need(self, chars: float) -> None:
        if chars > self.max_chars:
            raise _TemplateLimit(f"would build a value of {chars:,.0f} characters (the bound is {self.max_chars:,})")

    def _bounded_iter(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            self.tick()
            yield item

    def _guarded(self, f: Any) -> Any:
        """A filter that checks the bound before (its widths and joins) and after (its result)."""
        @functools.wraps(f)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self._precheck(f.__name__, args, kwargs)
            return self.sized(f(*args, **kwargs))
        return guarded

    def _precheck(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """What a call would build, refused before it runs: a width past the bound, a join or replace too large."""
        self.tick()
        values = [a for a in (*args, *kwargs.values()) if not isinstance(a, (jinja2.runtime.Context, nodes.EvalContext, jinja2.Environment))]
        name = name.removeprefix("do_")
        if name in _EXPANDERS:
            self._need(max((v for v in values if isinstance(v, int)), default=0))
        strings = [v for v in values if isinstance(v, str)]
        if name in ("format", "format_map") and strings and _FORMAT_WIDTH.search(strings[0]):
            raise _TemplateLimit("formats to a width of ten million characters or more")
        if name == "join":
            seq = next((v for v in values if isinstance(v, (list, tuple))), [])
            self._need(_size(seq) + sum(len(s) for s in strings) * len(seq))
        if name == "replace" and len(strings) >= 3:
            text, old, new = strings[:3]
            self._need(len(text) + (text.count(old) if old else len(text) + 1) * max(len(new) - len(old), 0))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's names)
        bound = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        name = getattr(__obj, "__name__", "")
        __self._precheck(name, (bound, *args) if isinstance(bound, str) else args, kwargs)
        return __self.sized(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:  # noqa: ARG002 (jinja's)
        self.tick()
        if operator_ == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                self._need(_size(seq) * max(n, 0))
            elif isinstance(left, int) and isinstance(right, int) and \
                    abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
                raise _TemplateLimit(f"computes an integer of more than {MAX_INT_BITS} bits")
        elif operator_ == "+":
            self._need(_size(left) + _size(right))
        elif operator_ == "%" and isinstance(left, str) and _FORMAT_WIDTH.search(left):
            raise _TemplateLimit("formats to a width of ten million characters or more")
        elif operator_ == "**" and isinstance(left, int) and isinstance(right, (int, float)) and abs(left) > 1 \
                and right * abs(left).bit_length() > MAX_INT_BITS:
            raise _TemplateLimit(f"computes an integer of more than {MAX_INT_BITS} bits")
        return self.sized(self.binop_table[operator_](left, right))


class _Generation(Extension):
    """transformers' ``{% generation %}`` tag (it marks the assistant's tokens): rendered as its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 (the name templates call it with)
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict`` as transformers exposes it: a call and ``fromkeys``, no type to reach through."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(Namespace):
    """``namespace`` as transformers exposes it: no attribute starting with an underscore."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (Namespace's signature trick)
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a chat template cannot store an underscore attribute on a namespace ({name!r})")


@functools.lru_cache(maxsize=8)
def _compiled(template: str, seconds: float, max_chars: int) -> jinja2.Template:
    return BoundedEnvironment(seconds, max_chars).from_string(template)


def template_file(tokenizer: Any) -> Path:
    """The file the tokenizer's chat template was read from: ``chat_template.jinja``, ``chat_template.json``,
    else ``tokenizer_config.json`` (beside the tokenizer)."""
    root = Path(str(getattr(tokenizer, "name_or_path", "") or "."))
    return next((root / n for n in ("chat_template.jinja", "chat_template.json") if (root / n).is_file()),
                root / "tokenizer_config.json")


def render_chat(tokenizer: Any, conversation: list[dict[str, str]], add_generation_prompt: bool = True,
                seconds: float = MAX_SECONDS, max_chars: int = MAX_CHARS) -> str:
    """The text ``tokenizer.apply_chat_template(conversation, add_generation_prompt=..., tokenize=False)`` renders,
    within ``seconds`` and ``max_chars``; past either a CheckpointError naming the template's file, a template
    that refuses the conversation (``raise_exception``, a Jinja error) likewise."""
    source = template_file(tokenizer)
    try:
        text = tokenizer.get_chat_template()
        template = _compiled(text, seconds, max_chars)
    except (ValueError, TypeError, jinja2.TemplateError) as exc:
        raise CheckpointError(source, f"no usable chat template ({type(exc).__name__}: {clip(exc, 160)})") from None
    env = template.environment
    assert isinstance(env, BoundedEnvironment)
    messages = [{k: v for k, v in m.items() if v is not None} for m in conversation]
    out: list[str] = []
    total = 0
    env.start()
    try:
        for chunk in template.generate(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_generation_prompt, **tokenizer.special_tokens_map):
            total += len(chunk)
            env.sized(chunk)
            if total > max_chars:
                raise _TemplateLimit(f"rendered more than {max_chars:,} characters")
            out.append(chunk)
    except _TemplateLimit as exc:
        raise CheckpointError(source, f"the chat template {exc}: stopped (a template is code from the model "
                                      "directory)") from None
    except RecursionError:
        raise CheckpointError(source, "the chat template recursed too deeply: stopped") from None
    except MemoryError:
        raise CheckpointError(source, "the chat template ran out of memory: stopped") from None
    except Exception as exc:  # noqa: BLE001 -- jinja's TemplateError, the template's own raise_exception, a type error
        raise CheckpointError(source, f"the chat template refuses the conversation ({type(exc).__name__}: "
                                      f"{clip(exc, 120)})") from None
    return "".join(out)


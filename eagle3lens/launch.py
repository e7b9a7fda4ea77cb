"""The server launch as data: what a pasted command line or a server log says about speculative decoding.

    parse_launch("python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE ...")
    launch_from_log("server.log")          # SGLang's ``server_args=ServerArgs(...)``, vLLM's ``non-default args``

Untrusted text is parsed, never evaluated: command lines with :mod:`shlex` (shell operators end the
command; ``$(...)`` and backticks stay literal text), ``ServerArgs(...)`` and vLLM's config dumps with
:func:`ast.parse` and :func:`ast.literal_eval` on single literal nodes.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from .errors import LogFileError, UsageError
from .io.inputs import GiB, open_regular

MAX_LAUNCH_CHARS = 1 << 20  # a pasted command line or one log line
MAX_NESTING = 100  # brackets in one start-up line: a real ServerArgs(...) nests a few levels
_SHELL_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&"}
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Launch:
    """What the server was (or will be) started with, as far as speculative decoding is concerned."""

    engine: str  # "sglang" | "vllm"
    source: str  # "command line" | "ServerArgs line of LOG" | "vLLM non-default args of LOG" | ...
    target: str | None = None
    algorithm: str | None = None  # SGLang --speculative-algorithm (upper case) or vLLM method (lower case)
    draft: str | None = None
    num_steps: int | None = None
    num_draft_tokens: int | None = None
    topk: int | None = None
    cuda_graph: bool | None = None  # False: --disable-cuda-graph / --enforce-eager
    engine_version: str | None = None  # from a log banner, when it names one
    options: Mapping[str, Any] = field(default_factory=dict)  # every option read, as given

    @property
    def speculative(self) -> bool:
        return bool(self.algorithm)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "source": self.source, "target": self.target, "algorithm": self.algorithm,
                "draft": self.draft, "num_steps": self.num_steps, "num_draft_tokens": self.num_draft_tokens,
                "topk": self.topk, "cuda_graph": self.cuda_graph, "engine_version": self.engine_version,
                "options": {k: _plain(v) for k, v in self.options.items()}}


# -- command lines ------------------------------------------------------------------------------
def parse_launch(text: str) -> Launch:
    """The launch a pasted ``sglang`` / ``vllm`` server command line describes."""
    if len(text) > MAX_LAUNCH_CHARS:
        raise UsageError(f"launch command: longer than {MAX_LAUNCH_CHARS} characters")
    words = _command_words(text)
    engine, args = _engine_and_args(words)
    options, positional = _options(args)
    if engine == "sglang":
        return _sglang_launch(options, "command line")
    if positional and "model" not in options:
        options["model"] = positional[0]
    return _vllm_launch(options, "command line")


def _command_words(text: str) -> list[str]:
    """The words of the command that starts the server; shell operators split commands, nothing is expanded."""
    lexer = shlex.shlex(text.replace("\\\r\n", " ").replace("\\\n", " "), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as exc:  # no closing quotation
        raise UsageError(f"launch command: cannot split it into words ({exc})") from None
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in _SHELL_OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    for words in commands:
        if _launcher(words) is not None:
            return words
    raise UsageError("launch command: no sglang or vllm server command in it "
                     "(expected python -m sglang.launch_server, sglang serve, vllm serve or "
                     "python -m vllm.entrypoints.openai.api_server)")


def _launcher(words: list[str]) -> tuple[str, int] | None:
    """(engine, index of the first argument) when ``words`` start an sglang or vllm server."""
    i = 0
    while i < len(words) and (_ENV_ASSIGNMENT.match(words[i]) or words[i] in ("env", "exec", "nohup", "sudo")):
        i += 1
    for j in range(i, min(len(words), i + 6)):
        word = words[j]
        name = Path(word).name
        if word == "-m" and j + 1 < len(words):
            module = words[j + 1]
            if module.startswith("sglang.launch_server") or module == "sglang.launch_server":
                return "sglang", j + 2
            if module.startswith("vllm.entrypoints"):
                return "vllm", j + 2
        if name in ("sglang", "vllm") and j + 1 < len(words) and words[j + 1] == "serve":
            return name, j + 2
    return None


def _engine_and_args(words: list[str]) -> tuple[str, list[str]]:
    found = _launcher(words)
    assert found is not None
    engine, start = found
    return engine, words[start:]


def _options(args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` (True), names with ``-`` as ``_``."""
    options: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                options[key] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                options[key] = args[i + 1]
                i += 1
            else:
                options[key] = True
        elif not options:
            positional.append(word)
        i += 1
    return options, positional


# -- engine-specific readings ------------------------------------------------------------------
def _sglang_launch(options: Mapping[str, Any], source: str) -> Launch:
    algorithm = options.get("speculative_algorithm")
    algorithm = str(algorithm).upper() if algorithm not in (None, "", "None") else None
    disable = options.get("disable_cuda_graph")
    return Launch(
        engine="sglang", source=source,
        target=_text(options.get("model_path") or options.get("model")),
        algorithm=algorithm,
        draft=_text(options.get("speculative_draft_model_path") or options.get("speculative_draft")),
        num_steps=_count(options, "speculative_num_steps", source),
        num_draft_tokens=_count(options, "speculative_num_draft_tokens", source),
        topk=_count(options, "speculative_eagle_topk", source),
        cuda_graph=None if disable is None else not _truthy(disable),
        options=dict(options))


def _vllm_launch(options: Mapping[str, Any], source: str, version: str | None = None) -> Launch:
    spec = options.get("speculative_config")
    if isinstance(spec, str):
        spec = _json_object(spec)
    spec = spec if isinstance(spec, Mapping) else {}
    method = spec.get("method")
    draft = spec.get("model") or options.get("speculative_model")
    key = next((k for k in ("num_speculative_tokens", "num_spec_tokens") if k in spec), None)
    tokens = _count(spec, key, source, "--speculative-config ") if key else _count(options, "num_speculative_tokens",
                                                                                  source)
    eager = options.get("enforce_eager")
    return Launch(
        engine="vllm", source=source, target=_text(options.get("model")),
        algorithm=str(method).lower() if method not in (None, "") else ("draft" if draft else None),
        draft=_text(draft), num_steps=tokens, num_draft_tokens=None, topk=None,
        cuda_graph=None if eager is None else not _truthy(eager), engine_version=version,
        options={**options, "speculative_config": dict(spec)} if spec else dict(options))


def _json_object(text: str) -> Mapping[str, Any]:
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except (ValueError, RecursionError):
        raise UsageError(f"--speculative-config is not a JSON object: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--speculative-config is not a JSON object: {text[:80]!r}")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 18:
        raise ValueError("integer too long")
    return int(text)


def _count(options: Mapping[str, Any], key: str, source: str, within: str = "") -> int | None:
    """The count ``options[key]`` gives (None when absent or None); anything but a whole number is refused."""
    value = options.get(key)
    if value is None or value == "None":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31:
        return value
    text = value.strip() if isinstance(value, str) else None
    if text is not None and re.fullmatch(r"[0-9]{1,9}", text, re.ASCII):
        return int(text)
    flag = f"{within}{key}" if within else f"--{key.replace('_', '-')}"
    where = "--launch" if source == "command line" else source
    raise UsageError(f"{where}: {flag} is {_shown(value)}, not a count (a whole number below 2**31)")


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(_plain(value))
    return text if len(text) <= 60 else text[:60] + "…"


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


def _text(value: Any) -> str | None:
    return None if value in (None, "", "None") or isinstance(value, bool) else str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


# -- logs ---------------------------------------------------------------------------------------
_SERVER_ARGS = "ServerArgs("
_VLLM_ARGS = "non-default args: "
_VLLM_ENGINE = re.compile(r"LLM engine \(v(?P<version>[0-9][0-9A-Za-z.+-]{0,40})\) with config: ")


def launch_from_log(path: str | Path) -> Launch | None:
    """The launch the first start-up line of a server log records, or None when the log has none."""
    vllm_version: str | None = None
    for number, line in enumerate(_lines(path), 1):
        try:
            start = line.find(_SERVER_ARGS)
            if start >= 0:
                keywords = _call_keywords(line[start:].rstrip(), "its ServerArgs(...) call")
                if keywords is not None:
                    return _sglang_launch(keywords, f"ServerArgs line of {Path(path).name}")
            engine = _VLLM_ENGINE.search(line)
            if engine:
                vllm_version = engine.group("version")
                keywords = _call_keywords("f(" + line[engine.end():].rstrip() + ")", "vLLM's engine config")
                if keywords is not None and "speculative_config" in keywords:
                    return _vllm_launch(_vllm_config_dump(keywords), f"vLLM engine config of {Path(path).name}",
                                        vllm_version)
            at = line.find(_VLLM_ARGS)
            if at >= 0:
                value = _literal_text(line[at + len(_VLLM_ARGS):].strip(), "vLLM's non-default args")
                if isinstance(value, dict):
                    return _vllm_launch(value, f"vLLM non-default args of {Path(path).name}", vllm_version)
        except _TooDeep as exc:
            raise LogFileError(path, f"line {number}: {exc} is nested too deeply to read: not a server's "
                                     "start-up line; pass --launch with the server command line") from None
    return None


class _TooDeep(Exception):
    """A start-up line nested beyond :data:`MAX_NESTING` levels (or beyond what the parser's recursion allows)."""


def _literal_text(text: str, what: str) -> Any:
    """``ast.literal_eval(text)``, None when it is no literal; :class:`_TooDeep` when it nests too deeply."""
    if _depth(text) > MAX_NESTING:
        raise _TooDeep(what)
    try:
        return ast.literal_eval(text)
    except RecursionError:
        raise _TooDeep(what) from None
    except (ValueError, SyntaxError, MemoryError, TypeError):
        return None


def _depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` outside quotes (linear)."""
    depth = deepest = 0
    quote = None
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _lines(path: str | Path) -> Iterator[str]:
    """The log's lines, each cut at :data:`MAX_LAUNCH_CHARS` (the rest of a longer line skipped in bounded reads)."""
    limit = MAX_LAUNCH_CHARS * 4  # bytes: a UTF-8 character is at most 4
    with open_regular(path, 2 * GiB, "server log") as handle:
        while raw := handle.readline(limit):
            if not raw.endswith(b"\n"):
                while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
                    pass
            yield raw.decode("utf-8", "replace")[:MAX_LAUNCH_CHARS].rstrip("\r\n")


def _call_keywords(text: str, what: str) -> dict[str, Any] | None:
    """Keyword arguments of the call expression ``text`` starts with, literal values only (others as text);
    :class:`_TooDeep` (naming it ``what``) when it nests beyond :data:`MAX_NESTING` levels."""
    depth, end, quote = 0, None, None
    i = 0
    while i < len(text):  # find the closing parenthesis, skipping quoted text: linear
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
        i += 1
    if end is None:
        return None
    if _depth(text[:end]) > MAX_NESTING:
        raise _TooDeep(what)
    try:
        node = ast.parse(text[:end].strip(), mode="eval").body
        if not isinstance(node, ast.Call):
            return None
        return {keyword.arg: _literal(keyword.value) for keyword in node.keywords if keyword.arg is not None}
    except RecursionError:  # nesting without brackets (a chain of unary minus or attributes)
        raise _TooDeep(what) from None
    except (SyntaxError, ValueError, MemoryError):
        return None


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Call):  # SpeculativeConfig(method='eagle3', ...): its keywords
        return {k.arg: _literal(k.value) for k in node.keywords if k.arg is not None}
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, MemoryError, TypeError):
        return ast.unparse(node)[:200]


def _vllm_config_dump(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's ``with config: model=..., speculative_config=SpeculativeConfig(...)`` as non-default-args keys."""
    out = dict(keywords)
    spec = out.get("speculative_config")
    if isinstance(spec, Mapping):
        out["speculative_config"] = dict(spec)
    if out.get("enforce_eager") is not None:
        out["enforce_eager"] = _truthy(out["enforce_eager"])
    return out

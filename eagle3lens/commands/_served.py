"""What the server does with traffic, as ``acceptance`` and ``doctor`` take it: the sampling options (``--temperature``
/ ``--top-p`` / ``--top-k`` or ``--request`` / ``--launch``), the K it drafts (``--steps``, else the launch's or the
log's) and what training promised (``--expected-accept-len``); one parser and one resolution for both commands."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from . import positive_float, positive_int

LAUNCH_HELP = ("the server command line, quoted (parsed, never run): its sampling defaults (vLLM --generation-config / "
               "--override-generation-config, SGLang --sampling-defaults / --preferred-sampling-params) apply to what "
               "the request leaves out, and the K it drafts (else both are read from --log's start-up line)")


def add_served_options(p: argparse.ArgumentParser, launch_help: str = LAUNCH_HELP) -> None:
    """--temperature, --top-p, --top-k, --request, --launch, --steps and --expected-accept-len."""
    p.add_argument("--temperature", type=float, metavar="T",
                   help="also score speculative sampling at temperature T (as SGLang and vLLM verify: the draft's "
                        "greedy token accepted with the target's probability of it)")
    p.add_argument("--top-p", type=float, metavar="P", help="with --temperature: the target's top-p")
    p.add_argument("--top-k", type=int, metavar="K", help="with --temperature: the target's top-k (0 or -1: off), "
                                                          "applied before top-p as both engines do")
    p.add_argument("--request", metavar="FILE.json",
                   help="a request body as sent to the server (chat, completions or SGLang /generate): score the "
                        "temperature, top-k and top-p the engine serves it with (the request's, else the launch's and "
                        "the model's generation_config.json defaults, as the engine resolves them)")
    p.add_argument("--launch", metavar="CMD", help=launch_help)
    p.add_argument("--steps", type=positive_int, metavar="K",
                   help="draft steps per verify step (default: the K the --launch or --log states, else the config's "
                        "speculative tokens, else 3)")
    p.add_argument("--expected-accept-len", type=positive_float, metavar="X",
                   help="the accept length training promised (bonus token included): the budget's first row when no "
                        "--data dump gives it, and what --log is judged low against")


def check_sampling_options(args: argparse.Namespace) -> None:
    """The combinations that do not make sense, refused in one line."""
    if (args.top_p is not None or args.top_k is not None) and args.temperature is None:
        raise UsageError("--top-p / --top-k need --temperature: they shape the distribution the server samples from")
    if args.temperature is not None and args.request is not None:
        raise UsageError("give --temperature (score at T) or --request (score as the server resolves the request's "
                         "sampling), not both")


def served_sampling(args: argparse.Namespace) -> tuple[Any, Any, str | None]:
    """The sampling to score (None: greedy only); from --request / --launch, how the server resolved it; for
    --temperature, what the serving engine does to that temperature (raised, or served greedily), if anything.
    ``--launch`` alone resolves the request defaults only where ``resolve_launch`` (acceptance) asks for it."""
    from ..engines.versions import spec_parts
    from ..probes.served_sampling import served_temperature, verify_defect
    from ..probes.traffic_result import Sampling

    if args.temperature is not None:
        top_k = 0 if args.top_k in (None, -1) else args.top_k  # -1: off, as both engines write it
        temperature, remark = args.temperature, None
        engine, release, _ = spec_parts(args.engine) if args.engine else (None, None, None)
        if engine in ("sglang", "vllm") and temperature > 0:  # the engine's own rule, as --request gets it
            temperature, remark = served_temperature(engine, temperature)
            if temperature == 0:
                return None, None, remark
            broken = verify_defect(engine, release)
            if broken is not None:  # the estimate scores a sound verify step; the build serves another
                remark = "; ".join(r for r in (remark, f"{broken} These figures are what a sound build serves.") if r)
        return Sampling(temperature, 1.0 if args.top_p is None else args.top_p, top_k), None, remark
    if args.request is None and (args.launch is None or not getattr(args, "launch_sampling", True)):
        return None, None, None
    from ..launch import launch_from_log, parse_launch
    from ..probes.served_sampling import read_request, resolve_sampling

    launch = parse_launch(args.launch) if args.launch is not None else \
        launch_from_log(args.log) if args.log is not None else None

    engine, release, _ = spec_parts(args.engine) if args.engine and args.engine != "installed" else (
        launch.engine if launch is not None else None, None, None)
    banner = launch.engine_version if launch is not None and launch.engine == engine else None
    if engine not in ("sglang", "vllm"):
        raise UsageError("--request / --launch: name the serving engine (--engine sglang or vllm, or a --launch "
                         "command line): each resolves a request's sampling its own way")
    if launch is not None and launch.engine != engine:
        raise UsageError(f"--launch starts {launch.engine}, but --engine is {args.engine}")
    request = read_request(args.request) if args.request is not None else None
    served = resolve_sampling(engine, request=request, options=launch.options if launch is not None else None,
                              target=args.target, endpoint="chat" if args.chat is not None else "completions",
                              release=_release(release) if release else _banner_release(banner))
    return served.sampling, served, None


def wants_budget(args: argparse.Namespace) -> bool:
    """The budget is shown where something beyond the draft's own acceptance is given: served traffic, the served
    sampling, the promise or the server's log."""
    return any(getattr(args, name, None) is not None for name in (
        "chat", "prompts", "temperature", "request", "expected_accept_len", "log")) or bool(getattr(args, "measure", False))


def sampling_notes(args: argparse.Namespace, result: Any, sampling: Any, served: Any, remark: str | None) -> list[str]:
    """What the sampled figures mean and where the sampling came from, for the report's notes."""
    from ..probes.traffic import sampling_notes as probe_notes

    notes = []
    if served is not None:
        notes.append(served.note())
    if remark is not None:
        notes.append(f"--temperature: {remark}")
    if sampling is not None or (served is None and remark is None):  # served greedily: no default named
        notes.extend(probe_notes(result, sampling, args.engine))
    return notes


def _release(release: str) -> str:
    """The release ``--engine E==V`` names, checked."""
    from ..engines.versions import parse_version

    return str(parse_version(release))


def _banner_release(version: str | None) -> str | None:
    """The release a log's banner names, when it is a version number (else the newest read)."""
    from ..engines.versions import parse_version

    try:
        return str(parse_version(version)) if version else None
    except UsageError:
        return None

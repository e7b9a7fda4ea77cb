"""``eagle3lens demo [DIR]``: build the miniature incident (tiny target, trained draft, broken variants, logs,
and a Kimi-like DeepSeek-V3 target with an MLA drafter)."""

from __future__ import annotations

import argparse
import json

from ..io.textsafe import printable
from . import example_epilog


def run(args: argparse.Namespace) -> int:
    if args.real is not None:
        return run_real(args)
    from ..demo import build_demo
    from ..demo_built import DemoBuilt
    from ..plots.registry import rich_view
    from ..render import terminal

    console = terminal(stderr=args.json)
    with console.status("building the demo...") as status:
        paths = build_demo(args.dir, force=args.force, progress=lambda message: status.update(printable(message)))
    manifest = json.loads(paths.manifest.read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps({"root": str(paths.root), "target": str(paths.target),
                          "drafts": {name: str(path) for name, path in paths.drafts.items()},
                          "kimi_target": str(paths.kimi_target),
                          "kimi_drafts": {name: str(path) for name, path in paths.kimi_drafts.items()},
                          "logs": [str(paths.sglang_log), str(paths.vllm_log)], "manifest": manifest}, indent=2))
        return 0
    console.print(rich_view(DemoBuilt(paths, manifest)), crop=False)
    return 0


def run_real(args: argparse.Namespace) -> int:
    """``demo --real DIR``: build (or reuse) the real demo and print its manifest's ``real`` part."""
    from ..demo_real import build_real
    from ..render import terminal

    console = terminal(stderr=args.json)
    with console.status("building the real demo (minutes the first time)...") as status:
        root = build_real(args.real, force=args.force, progress=lambda message: status.update(printable(message)))
    real = json.loads((root / "manifest.json").read_text(encoding="utf-8"))["real"]
    if args.json:
        print(json.dumps({"root": str(root), "real": real}, indent=2))
        return 0
    parts = {name: real[name] for name in ("target", "draft", "draft_specforge", "draft_raw", "draft_small_vocab",
                                           "chat")}
    console.print(f"real demo in {printable(root)} (build {real['key']}, {real['build_seconds']} s)", markup=False)
    for name, path in {**parts, **{f"dumps.{k}": v for k, v in real["dumps"].items()}}.items():
        console.print(f"  {name:18} {printable(path)}", markup=False)
    console.print(f"  launch             {printable(real['launch']['command'])}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build the miniature zero-acceptance incident (seconds, CPU)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens demo                 # into ./demo",
                                             "eagle3lens demo /tmp/demo --force",
                                             "eagle3lens demo --real real-demo   # SmolLM2-135M + trained drafters"))
    p.add_argument("dir", metavar="DIR", nargs="?", default="demo", help="output directory (default: ./demo)")
    p.add_argument("--real", metavar="DIR", help="build the real demo into DIR instead: SmolLM2-135M-Instruct as the "
                                                 "target, EAGLE-3 drafters trained for it on CPU (minutes; cached by "
                                                 "content) and real low-acceptance causes")
    p.add_argument("--force", action="store_true", help="rebuild even if DIR already holds a demo")
    p.add_argument("--json", action="store_true", help="print the built paths and manifest as JSON")
    p.set_defaults(func=run)

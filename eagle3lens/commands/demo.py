"""``eagle3lens demo [DIR]``: build the miniature incident (tiny target, trained draft, broken variants, logs,
and a Kimi-like DeepSeek-V3 target with an MLA drafter)."""

from __future__ import annotations

import argparse
import json

from ..io.textsafe import printable
from . import example_epilog


def run(args: argparse.Namespace) -> int:
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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build the miniature zero-acceptance incident (seconds, CPU)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=example_epilog("eagle3lens demo                 # into ./demo",
                                             "eagle3lens demo /tmp/demo --force"))
    p.add_argument("dir", metavar="DIR", nargs="?", default="demo", help="output directory (default: ./demo)")
    p.add_argument("--force", action="store_true", help="rebuild even if DIR already holds a demo")
    p.add_argument("--json", action="store_true", help="print the built paths and manifest as JSON")
    p.set_defaults(func=run)

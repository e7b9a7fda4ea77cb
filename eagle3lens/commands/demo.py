"""``eagle3lens demo [DIR]``: build the miniature incident (tiny target, trained draft, broken variants, logs)."""

from __future__ import annotations

import argparse
import json

from . import example_epilog


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..demo import build_demo
    from ..plots.style import markup

    console = Console(stderr=args.json)
    with console.status("building the demo...") as status:
        paths = build_demo(args.dir, force=args.force, progress=lambda message: status.update(markup(message)))
    manifest = json.loads(paths.manifest.read_text(encoding="utf-8"))
    if args.json:
        print(json.dumps({"root": str(paths.root), "target": str(paths.target),
                          "drafts": {name: str(path) for name, path in paths.drafts.items()},
                          "logs": [str(paths.sglang_log), str(paths.vllm_log)], "manifest": manifest}, indent=2))
        return 0
    training = manifest["training"]
    console.print(f"[bold green]demo ready[/] in {markup(paths.root)}  (see {markup(paths.readme.name)})")
    table = Table("made", "what should be found", box=None, padding=(0, 2))
    table.add_row("target/", f"tiny Llama target, {manifest['target']['num_hidden_layers']} layers")
    for name, variant in manifest["variants"].items():
        codes = ", ".join(variant["expected_findings"]) or "healthy"
        codes += "".join(f"; {engine}: {', '.join(extra)}" for engine, extra in variant["expected_findings_by_engine"].items())
        table.add_row(f"{name}/", codes)
    table.add_row("sglang.log, vllm.log", "logs/zero-acceptance")
    console.print(table)
    console.print(f"draft accuracy {training['accuracy']:.1%} (majority baseline {training['majority_baseline']:.1%})")
    console.print("next:")
    console.print(f"  eagle3lens info {markup(paths.speculators)}", soft_wrap=True)
    console.print(f"  eagle3lens doctor {markup(paths.speculators)} --engine sglang==0.5.11 --log {markup(paths.sglang_log)}",
                  soft_wrap=True)
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

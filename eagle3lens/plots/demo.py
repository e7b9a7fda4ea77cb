"""Terminal view of ``eagle3lens demo``: what was built, what each variant should show, what to run next."""

from __future__ import annotations

from typing import Any

from ..demo_built import DemoBuilt
from .registry import rich_view
from .style import markup


def _variant_rows(table: Any, variants: dict[str, Any]) -> None:
    """One row per variant: its own expected findings, then what each engine adds."""
    for name, variant in variants.items():
        codes = ", ".join(variant["expected_findings"]) or "healthy"
        codes += "".join(f"; {engine}: {', '.join(extra) or 'loads cleanly'}"
                         for engine, extra in variant["expected_findings_by_engine"].items())
        table.add_row(markup(f"{name}/"), markup(codes))


@rich_view.register
def demo_rich(result: DemoBuilt) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    paths, manifest = result.paths, result.manifest
    training = manifest["training"]
    table = Table("made", "what should be found", box=None, padding=(0, 2))
    table.add_row("target/", f"tiny Llama target, {manifest['target']['num_hidden_layers']} layers")
    _variant_rows(table, manifest["variants"])
    kimi = manifest["kimi"]
    table.add_row("kimi-target/", f"tiny DeepSeek-V3 (Kimi-like: MLA + MoE), {kimi['target']['num_hidden_layers']} layers")
    _variant_rows(table, kimi["variants"])
    table.add_row("sglang.log, vllm.log", "logs/zero-acceptance")
    table.add_row("sglang-eagle.log", "eagle/ launched as EAGLE: wiring predicts trace/fc-bypassed")
    commands = [Text.from_markup(f"  eagle3lens info {markup(paths.speculators)}", overflow="ignore"),
                Text.from_markup(f"  eagle3lens doctor {markup(paths.speculators)} --engine sglang==0.5.11 "
                                 f"--log {markup(paths.sglang_log)}", overflow="ignore"),
                Text.from_markup(f"  eagle3lens wiring --target {markup(paths.target)} --draft {markup(paths.eagle)} "
                                 f"--log {markup(paths.sglang_eagle_log)}", overflow="ignore"),
                Text.from_markup(f"  eagle3lens trace --target {markup(paths.kimi_target)} --draft "
                                 f"{markup(paths.kimi_mla)} --engine sglang==0.5.23", overflow="ignore")]
    for line in commands:  # one line each, never wrapped, so they copy cleanly (print with crop=False)
        line.no_wrap = True
    return Group(
        Text.from_markup(f"[bold green]demo ready[/] in {markup(paths.root)}  (see {markup(paths.readme.name)})"),
        table,
        Text(f"draft accuracy {training['accuracy']:.1%} (majority baseline {training['majority_baseline']:.1%})"),
        Text("next:"),
        *commands,
    )

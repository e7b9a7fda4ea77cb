"""The served-template views escape every token: HTML, the terminal, and plotly (which reads ``<s>`` as a
strikethrough and ``<br>`` as a line break)."""

from __future__ import annotations

import io

from rich.console import Console

from eagle3lens.plots.registry import figures, html_view, rich_view
from eagle3lens.probes.chat import TemplateCheck
from eagle3lens.probes.served_render import Segment, SideBySide

HOSTILE = "<script>alert(1)</script>"


def check() -> TemplateCheck:
    side = SideBySide("the chat file's conversation 1",
                      (Segment("prompt", ("<s>", "hi")), Segment("reply", (HOSTILE, "\x1b[31m"))),
                      (Segment("user", ("<s>", "<|user|>", "hi", "<br>")), Segment("generation prompt", ("<|assistant|>",)),
                       Segment("reply", (HOSTILE, "\x1b[31m"))),
                      {"<s>": (1, 1), "<|user|>": (0, 1), "generation prompt '<|assistant|>'": (0, 1)}, ())
    return TemplateCheck("dump", "target", 4, {"<s>": (1,), "<|user|>": (4,)}, {"<s>": 4, "<|user|>": 0}, side=side)


def test_html_escapes_every_token_and_marker() -> None:
    html = html_view(check())
    assert html is not None
    assert "<s>" not in html and "&lt;s&gt;" in html and "<script>" not in html and "<br>" not in html
    assert "\x1b" not in html and "\\x1b[31m" in html
    assert "&lt;|user|&gt;</td><td>0 / 4</td><td>0</td><td>1</td>" in html  # dump sequences, shown dump, served


def test_plotly_labels_are_escaped() -> None:
    fig = figures(check())[0]
    labels = [x for trace in fig.data for x in trace.x]
    assert "&lt;s&gt;" in labels and "&lt;|user|&gt;" in labels and not any("<" in x for x in labels)
    assert [list(t.y) for t in fig.data[1:]] == [[1, 0, 0], [1, 1, 1]]  # the counts: dump, served


def test_terminal_view_shows_tokens_as_text() -> None:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(rich_view(check()))
    text = out.getvalue()
    assert "<|user|>" in text and "generation prompt: <|assistant|>" in text and "\x1b" not in text
    assert "what the server sends: the chat file's conversation 1" in text

"""The two consoles every command prints through: results on stdout, errors and progress on
stderr, so `flowkit … > file` keeps only results.

Whatever they print may come from data (a model's reply, a metric name, an error a server sent),
so neither console reads markup in plain strings (`a[/]b` or `[link=…]` in a metric name is
text), and every printed character that a terminal would act on (ESC, BEL, the C1 controls,
bidi overrides) is shown escaped, `\\x1b`, instead: no data can set the window title, write the
clipboard (OSC 52) or clear the screen. flowkit's own styling uses `styled("[bold]…[/]")` or
rich Text objects.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import (
    Console,
    ConsoleOptions,
    ConsoleRenderable,
    RenderableType,
    RenderHook,
    RenderResult,
)
from rich.segment import Segment
from rich.text import Text

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on or that reorder text; tab and newline are layout."""


def plain(text: Any) -> str:
    """``text`` with control characters shown as escapes (``\\x1b``), never acted on."""
    value = str(text)
    if not _CONTROL.search(value):
        return value
    return _CONTROL.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        value,
    )


def styled(markup: str) -> Text:
    """flowkit's own markup (never data) as styled text."""
    return Text.from_markup(markup)


class _Escaped:
    """Renders its renderable with the text of every segment passed through ``plain``."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(plain(segment.text), segment.style)


class _EscapeHook(RenderHook):
    """A render hook: every renderable a console prints is escaped (see ``_Escaped``)."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(r) for r in renderables]


def _console(**kwargs: Any) -> Console:
    made = Console(markup=False, **kwargs)
    made.push_render_hook(_EscapeHook())
    return made


# Off a terminal (CI logs, pipes) rich would wrap at 80 columns and cut names; use a wide page.
err_console = _console(stderr=True, soft_wrap=True)
console = _console(width=None if Console().is_terminal else 160)

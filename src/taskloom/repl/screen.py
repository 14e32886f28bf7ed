"""The REPL's live area, drawn by prompt_toolkit below the scrollback, and its styles.

Top to bottom: the line of the answer being streamed and a "working" line while a turn runs
(saying what the model's todo in progress says it does), the task panel, the main thread's todo
list, the permission question (or plan, or the model's question) when a call waits for one,
the input, the status line. What it shows comes from a :class:`ScreenSource` (the REPL); lines
for the scrollback are written with :func:`write_lines`.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.data_structures import Size
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import FormattedText, StyleAndTextTuples
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.input.vt100 import Vt100Input
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.dimension import Dimension
from prompt_toolkit.shortcuts import print_formatted_text
from prompt_toolkit.styles import Style

from taskloom.repl.asks import LOCAL_SETTINGS, PermissionAsks
from taskloom.repl.panel import TaskPanel, todo_lines
from taskloom.repl.questions import PLAN_TOOL, plan_lines
from taskloom.repl.transcript import Line, TranscriptView
from taskloom.tools.todo import Todo

STYLE = Style.from_dict(
    {
        "prompt": "bold",
        "tool": "ansicyan",
        "result": "ansibrightblack",
        "error": "ansired",
        "note": "ansibrightblack",
        "warn": "ansiyellow",
        "status": "reverse",
        "foreground": "ansiyellow",
        "done": "ansigreen",
        "failed": "ansired",
        "stopped": "ansibrightblack",
        "ask": "bold ansiyellow",
        "working": "ansibrightblack",
    }
)


class ScreenSource(Protocol):
    """What the live area shows."""

    view: TranscriptView
    panel: TaskPanel
    asks: PermissionAsks

    @property
    def todos(self) -> Sequence[Todo]:
        """The main thread's todo list."""
        ...

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        ...

    @property
    def turn_seconds(self) -> int:
        """How long the running turn has run."""
        ...

    @property
    def reasoning(self) -> bool:
        """Whether the user is typing why a call is denied."""
        ...

    def status_text(self, width: int) -> str:
        """The status line, in ``width`` cells."""
        ...


def write_lines(lines: list[Line]) -> None:
    """Print ``(style, text)`` lines to the terminal (above the live area if it runs)."""
    fragments = [(f"class:{style}", text + "\n") for style, text in lines]
    print_formatted_text(FormattedText(fragments), style=STYLE, end="")


class RawWhilePrinting(Vt100Input):
    """The terminal's input, left raw while lines are printed above the live area.

    prompt_toolkit prints above a running application (``run_in_terminal``, and
    ``print_formatted_text``, which schedules one of those) in cooked mode, and the lines show
    before it turns raw again. A line typed in that moment (the user, or a test, answering what
    it sees) is echoed among the output by the line discipline, and its Enter turned into a
    newline (ICRNL), which the input takes for Ctrl+J: the line stays in the input, unsent.
    Under load the moment is long enough to be hit. Nothing of ours reads in cooked mode, so
    the terminal stays raw: what is typed is read, as typed, once the live area is back.
    """

    def cooked_mode(self) -> contextlib.AbstractContextManager[None]:
        """No change: the terminal stays raw (see the class docstring)."""
        return contextlib.nullcontext()


def terminal_input() -> Input:
    """The live area's input: stdin, kept raw while lines print (:class:`RawWhilePrinting`).

    A stdin that is no file (replaced in tests) gets what prompt_toolkit gives it.
    """
    try:
        sys.stdin.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return create_input()
    return RawWhilePrinting(sys.stdin)


def build_application(source: ScreenSource, buffer: Buffer, keys: KeyBindings) -> Application[int]:
    """The prompt_toolkit application of the live area (inline, not full screen)."""
    app: Application[int]
    # The output's size is the application's, known once it exists (asked while drawing).
    area = _LiveArea(source, lambda: app.output.get_size())
    app = Application(
        layout=area.layout(buffer),
        input=terminal_input(),
        key_bindings=keys,
        style=STYLE,
        full_screen=False,
        mouse_support=False,
        erase_when_done=True,
    )
    # Esc alone must act at once (by default prompt_toolkit waits half a second to tell it
    # from the start of an escape sequence).
    app.ttimeoutlen = 0.05
    app.timeoutlen = 0.3
    return app


class _LiveArea:
    """The parts of the live area, each drawn from ``source`` whenever prompt_toolkit asks."""

    def __init__(self, source: ScreenSource, size: Callable[[], Size]) -> None:
        self.source = source
        self.size = size

    def layout(self, buffer: Buffer) -> Layout:
        """Top to bottom: the live lines, the panel, the question, the input, the status."""
        source = self.source
        return Layout(
            HSplit(
                [
                    _framed(
                        FormattedTextControl(self.live),
                        Condition(lambda: bool(source.view.partial) or source.busy),
                    ),
                    # Its rows are cut to the width already: no wrapping to work out.
                    _framed(
                        FormattedTextControl(self.panel),
                        Condition(source.panel.shows_rows),
                        wrap=False,
                    ),
                    _framed(
                        FormattedTextControl(self.todo_list),
                        Condition(lambda: bool(source.todos)),
                        wrap=False,
                    ),
                    _framed(
                        FormattedTextControl(self.question),
                        Condition(lambda: source.asks.current is not None),
                    ),
                    Window(
                        BufferControl(buffer),
                        height=Dimension(min=1, max=10),
                        dont_extend_height=True,
                        wrap_lines=True,
                        get_line_prefix=self.prefix,
                    ),
                    Window(FormattedTextControl(self.status), height=1, style="class:status"),
                ]
            ),
            focused_element=buffer,
        )

    def live(self) -> StyleAndTextTuples:
        """The answer being streamed, and the "working" line while a turn runs."""
        source = self.source
        out: StyleAndTextTuples = []
        if source.view.partial:
            out.append(("", source.view.partial + "\n"))
        if source.busy:
            seconds = source.turn_seconds
            # What the model says it is doing (its todo in progress), as Claude Code shows.
            doing = next((t.active_form for t in source.todos if t.status == "in_progress"), "")
            working = doing or "Working"
            out.append(("class:working", f"✻ {working}… {seconds}s · esc to interrupt\n"))
        if out:  # no newline after the last line: it would draw an empty one
            out[-1] = (out[-1][0], out[-1][1].rstrip("\n"))
        return out

    def panel(self) -> StyleAndTextTuples:
        """The task panel's rows."""
        size = self.size()
        # At most a third of the screen: the input and the scrollback need the rest.
        rows = self.source.panel.lines(size.columns, max(3, size.rows // 3))
        return [
            (f"class:{style}", text + ("\n" if i < len(rows) - 1 else ""))
            for i, (style, text) in enumerate(rows)
        ]

    def todo_list(self) -> StyleAndTextTuples:
        """The main thread's todo list, at most a quarter of the screen."""
        size = self.size()
        rows = todo_lines(self.source.todos, size.columns, max(3, size.rows // 4))
        return [
            (f"class:{style}" if style else "", text + ("\n" if i < len(rows) - 1 else ""))
            for i, (style, text) in enumerate(rows)
        ]

    def question(self) -> StyleAndTextTuples:
        """The permission question of the call waiting for one, if any."""
        source = self.source
        ask = source.asks.current
        if ask is None:
            return []
        special: list[tuple[str, str]] = []
        if ask.form is not None:
            special = ask.form.lines(source.asks.settled)
        elif ask.request.tool_name == PLAN_TOOL:
            special = plan_lines(ask.request.input, source.asks.settled, source.reasoning)
        if special:
            return [
                (f"class:{style}" if style else "", text + ("\n" if i < len(special) - 1 else ""))
                for i, (style, text) in enumerate(special)
            ]
        who = f" ({ask.who})" if ask.who else ""
        waiting = source.asks.waiting
        more = f"  [{waiting} more waiting]" if waiting else ""
        lines: StyleAndTextTuples = [
            ("class:ask", f"Allow {ask.title}{who}?{more}\n"),
            ("", f"  {ask.decision.reason}\n"),
        ]
        if source.reasoning:
            lines.append(
                ("", "  Why not? Type a reason for the model and press Enter (empty: none)")
            )
        elif not source.asks.settled:
            lines.append(("", "  …"))  # its keys work in a moment (see asks.ARM_S)
        else:
            lines.append(
                (
                    "",
                    f"  1 yes · 2 yes, always allow {ask.rule} (saved to {LOCAL_SETTINGS}) · "
                    "3 no, and say why · Esc no, and stop",
                )
            )
        return lines

    def status(self) -> StyleAndTextTuples:
        """The status line."""
        return [("class:status", self.source.status_text(self.size().columns))]

    def prefix(self, line: int, wrap: int) -> StyleAndTextTuples:
        """The input's prompt on its first line, an indent on the others."""
        if line == 0 and not wrap:
            ask = self.source.asks.current
            if ask is not None and ask.form is not None:
                return [("class:prompt", "answer> ")]
            return [("class:prompt", "reason> " if self.source.reasoning else "> ")]
        return [("", "  ")]


def _framed(
    control: FormattedTextControl, shown: Condition, *, wrap: bool = True
) -> ConditionalContainer:
    window = Window(control, dont_extend_height=True, wrap_lines=wrap)
    return ConditionalContainer(window, filter=shown)


__all__ = [
    "STYLE",
    "RawWhilePrinting",
    "ScreenSource",
    "build_application",
    "terminal_input",
    "write_lines",
]

"""The REPL's keys, bound to what a :class:`KeyActions` (the REPL) does.

Enter sends (a line ending in a backslash continues instead); Ctrl+J or Alt+Enter adds a line; Esc
interrupts the turn (or, at a permission question, denies the call and stops the turn); Tab
completes a slash command's name;
Ctrl+B sends the running foreground work to the background; Ctrl+C clears the input, or
interrupts, and twice in a row exits; Ctrl+D on an empty input exits. At a permission
question (on an empty input, once it has been up a moment) 1 allows once, 2 always, 3 denies
and asks for a reason.
"""

from __future__ import annotations

from typing import Protocol

from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent


class KeyActions(Protocol):
    """What the keys do."""

    buffer: Buffer

    @property
    def asking(self) -> bool:
        """Whether a permission question waits for 1, 2 or 3."""
        ...

    def submit(self) -> None:
        """Enter: send the input (a prompt, a command, a deny reason)."""
        ...

    def escape(self) -> None:
        """Esc."""
        ...

    def to_background(self) -> None:
        """Ctrl+B."""
        ...

    def ctrl_c(self) -> None:
        """Ctrl+C on an empty input."""
        ...

    def exit(self, code: int = 0) -> None:
        """Leave."""
        ...

    def allow(self, always: bool) -> None:
        """Allow the call asked about (once, or always)."""
        ...

    def ask_reason(self) -> None:
        """Deny the call asked about, once a reason is typed."""
        ...

    def complete(self) -> None:
        """Tab: complete the slash command being typed."""
        ...


def key_bindings(actions: KeyActions) -> KeyBindings:
    """The REPL's key bindings (see the module docstring)."""
    keys = KeyBindings()
    asking = Condition(lambda: actions.asking)

    @keys.add("enter")
    def _(event: KeyPressEvent) -> None:
        buffer = actions.buffer
        if buffer.document.text_before_cursor.endswith("\\"):
            buffer.delete_before_cursor()
            buffer.insert_text("\n")
            return
        actions.submit()

    @keys.add("c-j")
    @keys.add("escape", "enter")
    def _(event: KeyPressEvent) -> None:
        actions.buffer.insert_text("\n")

    @keys.add("escape")
    def _(event: KeyPressEvent) -> None:
        actions.escape()

    @keys.add("tab")
    def _(event: KeyPressEvent) -> None:
        actions.complete()

    @keys.add("c-b")
    def _(event: KeyPressEvent) -> None:
        actions.to_background()

    # SIGINT too: one sent to the process (``kill -INT``; the terminal itself stays raw, see
    # screen.RawWhilePrinting) is otherwise ignored by prompt_toolkit.
    @keys.add("c-c")
    @keys.add("<sigint>")
    def _(event: KeyPressEvent) -> None:
        if actions.buffer.text:
            actions.buffer.reset()
        else:
            actions.ctrl_c()

    @keys.add("c-d")
    def _(event: KeyPressEvent) -> None:
        if not actions.buffer.text:
            actions.exit(0)

    @keys.add("1", filter=asking, eager=True)
    def _(event: KeyPressEvent) -> None:
        actions.allow(always=False)

    @keys.add("2", filter=asking, eager=True)
    def _(event: KeyPressEvent) -> None:
        actions.allow(always=True)

    @keys.add("3", filter=asking, eager=True)
    def _(event: KeyPressEvent) -> None:
        actions.ask_reason()

    return keys


__all__ = ["KeyActions", "key_bindings"]

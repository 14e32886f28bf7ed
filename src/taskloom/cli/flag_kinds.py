"""What a print-mode flag is (:class:`Flag`), and the kinds of flag the table is made of.

:mod:`taskloom.cli.flags` holds the table itself. Nothing heavier than argparse is imported
here: print mode is what scripts start again and again.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from taskloom._dataclass import dataclass

#: The argument group of the flags of Claude Code's print mode (and those the Agent SDKs pass)
#: that taskloom has no feature for: accepted rather than refused, so that a program passing
#: them still runs, and named in the ``--debug`` log (``taskloom.cli.flags.inert_notes``).
COMPAT = "accepted for compatibility, no effect"

_UNSET: Any = object()

#: Turns a flag's parsed value into its field's value; the namespace is there for a flag that
#: depends on another. A ``ValueError`` is a usage error, its text the message (exit 2).
Convert = Callable[[Any, argparse.Namespace], Any]

#: The ``--debug`` line for a value of a flag that taskloom (partly) ignores, or None.
Note = Callable[[Any], "str | None"]


class FlagError(ValueError):
    """A flag's value that its conversion refuses; the text says what is wrong."""


@dataclass(frozen=True)
class Flag:
    """One command-line flag: how argparse reads it and which fields it fills.

    Attributes:
        names: The flag's names (``-p``, ``--print``), or one positional name.
        help: The help text (None: none).
        dest: The namespace attribute (None: argparse's, from the first long name).
        action: argparse's action (``store_true``, ``store_false``, ``extend``, ``append``).
        nargs: argparse's ``nargs``.
        type: Parses one value; raises ``argparse.ArgumentTypeError`` to refuse it.
        choices: The values allowed.
        default: The value when the flag is absent (unset: argparse's).
        metavar: The value's name in the help.
        option: The field of ``Options`` this flag fills, if any.
        printed: The field of ``PrintOptions`` this flag fills, if any.
        convert: Turns the parsed value into the fields' value (None: as parsed; a list is
            copied).
        group: The argument group it is listed under (None: the main one).
        const: The value of a flag given without its optional value (``nargs="?"``).
        note: Says, for a value given, what of it has no effect (the ``--debug`` log).
    """

    names: tuple[str, ...]
    help: str | None = None
    dest: str | None = None
    action: str | None = None
    nargs: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = _UNSET
    metavar: str | None = None
    option: str | None = None
    printed: str | None = None
    convert: Convert | None = None
    group: str | None = None
    const: Any = _UNSET
    note: Note | None = None

    @property
    def key(self) -> str:
        """The namespace attribute argparse stores the value in."""
        if self.dest is not None:
            return self.dest
        longs = [n for n in self.names if n.startswith("--")]
        name = longs[0][2:] if longs else self.names[0].lstrip("-")
        return name.replace("-", "_")

    def add_to(self, target: argparse._ActionsContainer) -> None:
        """Add this flag to a parser or an argument group."""
        kwargs: dict[str, Any] = {
            "help": self.help,
            "dest": self.dest,
            "action": self.action,
            "nargs": self.nargs,
            "type": self.type,
            "choices": self.choices,
            "metavar": self.metavar,
        }
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if self.default is not _UNSET:
            kwargs["default"] = self.default
        if self.const is not _UNSET:
            kwargs["const"] = self.const
        target.add_argument(*self.names, **kwargs)

    def value(self, ns: argparse.Namespace) -> Any:
        """The value of the fields this flag fills, from the parsed namespace."""
        raw = getattr(ns, self.key)
        if self.convert is not None:
            return self.convert(raw, ns)
        return list(raw) if isinstance(raw, list) else raw


def positive_float(text: str) -> float:
    """A number above 0 (``--max-budget-usd``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def positive_int(text: str) -> int:
    """A whole number of at least 1 (``--max-turns`` and the other counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def no_effect(name: str) -> Note:
    """The ``--debug`` line of a flag taskloom has no feature for."""

    def note(value: Any) -> str:
        values = value if isinstance(value, list) else [] if value is True else [value]
        shown = "".join(f" {v}" for v in values)
        return f"{name}{shown}: accepted for compatibility; taskloom has no such feature, no effect"

    return note


def inert(*names: str, **how: Any) -> Flag:
    """A flag of Claude Code's that taskloom accepts and ignores (``--debug`` says so).

    ``how`` says how argparse reads it (default: one value).
    """
    if "action" not in how and "nargs" not in how:
        how["metavar"] = "VALUE"
    return Flag(names, group=COMPAT, note=no_effect(names[-1]), **how)


def switch(*names: str) -> Flag:
    """An ignored flag that takes no value."""
    return inert(*names, action="store_true")


def optional(*names: str) -> Flag:
    """A flag whose value may be left out (``--cloud [description]``)."""
    return inert(*names, nargs="?", const=True, metavar="VALUE")


def repeated(*names: str) -> Flag:
    """An ignored flag that may be given again, each time with a value."""
    return inert(*names, action="append", default=[], metavar="VALUE")

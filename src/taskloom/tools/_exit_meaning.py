"""Exit codes that are answers, not failures: ``grep`` finding nothing, ``diff`` finding a change.

A command line whose last command is one of these and that exits with 1 without writing to
stderr has answered a question: its result is not an error, and says what the answer was.
Anything written to stderr (``grep: nofile: No such file or directory``) keeps it an error.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

#: Exit code 1 of these commands, and what it means.
MEANINGS: dict[str, str] = {
    "grep": "No matches found",
    "egrep": "No matches found",
    "fgrep": "No matches found",
    "rg": "No matches found",
    "diff": "Files differ",
    "test": "Condition is false",
    "[": "Condition is false",
    "[[": "Condition is false",
}
# Not ``find``: its exit 1 means a directory it could not read, which it always says on
# stderr, so "nothing on stderr" would only ever be true of a failure of something else
# (``find -exec grep -q``): that stays an error.

#: What separates the commands of a line: its last command decides its exit status.
_SEPARATORS = set(";&|\n")
#: Words before a command that do not change whose exit status it is.
_PREFIXES = {"(", "{", "time", "command", "builtin", "exec", "nohup"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def last_command(command: str) -> str | None:
    """The name of the command whose exit status a command line returns, when simple to tell.

    Returns:
        The command's name (``grep`` for ``/usr/bin/grep``), or None when the line cannot
        be read (unbalanced quotes) or negates its status (``! grep``).
    """
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    segment: list[str] = []
    fresh = False
    for token in tokens:
        if set(token) <= _SEPARATORS:
            fresh = True  # a trailing separator (``grep x f;``) leaves the last command
            continue
        if fresh:
            segment, fresh = [], False
        segment.append(token)
    for word in segment:
        if word == "!":
            return None
        if word in _PREFIXES or _ASSIGNMENT.match(word):
            continue  # a prefix, or an assignment (``LC_ALL=C grep``)
        return PurePosixPath(word).name or None
    return None


def exit_meaning(command: str, exit_code: int | None, stderr_written: bool) -> str | None:
    """What exit code 1 of ``command`` means, when it is an answer rather than a failure."""
    if exit_code != 1 or stderr_written:
        return None
    name = last_command(command)
    return MEANINGS.get(name) if name is not None else None


def stderr_shown(command: str, output: str) -> bool:
    """Whether ``output``, stdout and stderr merged, holds a complaint of ``command``.

    For where the two streams cannot be told apart (an editor's terminal): the commands of
    :data:`MEANINGS` start what they say on stderr with their name (``grep: nofile: No such
    file or directory``), bash its own with ``bash:`` (``bash: [: missing `]'``).
    """
    name = last_command(command)
    if name is None:
        return True  # nothing to look for: no meaning can be given anyway
    prefixes = (f"{name}: ", "bash: ")
    return any(line.startswith(prefixes) for line in output.splitlines())


__all__ = ["MEANINGS", "exit_meaning", "last_command", "stderr_shown"]

r"""A shell command's text read as bash reads it: quotes, comments, heredocs, redirections.

One scanner (:func:`scan`) walks the text once, so that what counts as a quote, a comment
or a heredoc is the same for the commands judged and for the redirections found: ``<<``
inside quotes or a comment starts no heredoc, a heredoc's delimiter is its word with the
quoting removed (``<<\EOF``, ``<<'EOF'``, ``<<"EOF"`` all end at ``EOF``; ``<<-`` at
``EOF`` after tabs), and a heredoc never closed leaves the rest of the text judged as
commands (erring towards judging data as commands, never the reverse). A body is data, but
under an unquoted delimiter bash expands it: its command substitutions (``$(...)``, backticks)
run, so they are kept as commands. Arithmetic's ``<<`` (``$(( 1<<2 ))``) shifts bits and opens
no heredoc.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Characters that end an unquoted word.
_METACHARS = " \t\n;&|<>()"
#: A redirection operator at the start of a word (``2>``, ``&>>``, ``<<-``, ``<<<``...).
_REDIRECTION = re.compile(r"(\d*|&)(<<<|<<-?|<>|<&|<|>>|>&|>\||>)")


@dataclass
class ShellText:
    """What :func:`scan` found in a command line.

    Attributes:
        commands: The text without heredoc bodies and comments: what runs.
        redirects: The words after its output redirections (``>``, ``>>``, ``>|``, ``&>``,
            ``<>``), unquoted, in order; a copied descriptor (``>&2``) is its digits.
    """

    commands: str = ""
    redirects: list[str] = field(default_factory=list)


def scan(text: str) -> ShellText:
    """Read ``text`` as bash does (see the module docstring)."""
    out: list[str] = []
    found = ShellText()
    pending: list[tuple[str, bool, bool]] = []  # opened on this line: (delimiter, tabs, expands)
    quote = ""  # ', ", or $' (ANSI-C quoting, where a backslash escapes)
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote != "'":
                out.append(text[i : i + 2])
                i += 2
                continue
            if char == quote[-1]:
                quote = ""
            out.append(char)
            i += 1
        elif char == "\\":
            out.append(text[i : i + 2])
            i += 2
        elif char in "'\"":
            quote = "$'" if char == "'" and text[i - 1 : i] == "$" else char
            out.append(char)
            i += 1
        elif char == "#" and (i == 0 or text[i - 1] in _METACHARS):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end  # a comment: nothing of it runs
        elif char == "\n":
            out.append(char)
            i, bodies = _after_bodies(text, i + 1, pending)
            out.extend(f": {sub}\n" for body in bodies for sub in substitutions(body))
            pending = []
        elif text.startswith("$((", i) or (
            text.startswith("((", i) and (i == 0 or text[i - 1] in _METACHARS)
        ):
            end = text.find("))", i)
            end = len(text) if end < 0 else end + 2
            out.append(text[i:end])  # arithmetic: its ``<<`` is a shift, not a heredoc
            i = end
        elif text.startswith("<<<", i):
            out.append("<<<")
            i += 3
        elif text.startswith("<<", i):
            strip_tabs = text.startswith("<<-", i)
            start = i + (3 if strip_tabs else 2)
            delimiter, end = _delimiter(text, start)
            if delimiter:
                quoted = any(c in text[start:end] for c in "\\'\"")
                pending.append((delimiter, strip_tabs, not quoted))
            out.append(text[i:end])
            i = end
        elif char == ">" and not text.startswith(">(", i):
            j = i + (2 if text.startswith(">>", i) else 1)
            j += 1 if text[j : j + 1] in ("|", "&") else 0
            found.redirects.append(word_after(text, j)[0])
            out.append(text[i:j])
            i = j
        else:
            out.append(char)
            i += 1
    found.commands = "".join(out)
    return found


def _delimiter(text: str, start: int) -> tuple[str, int]:
    """A heredoc's delimiter word from ``start`` (quotes removed), and where it ends."""
    i = start
    while i < len(text) and text[i] in " \t":
        i += 1
    word: list[str] = []
    while i < len(text) and text[i] not in _METACHARS:
        char = text[i]
        if char == "\\":
            word.append(text[i + 1 : i + 2])
            i += 2
        elif char in "'\"":
            end = text.find(char, i + 1)
            end = len(text) if end < 0 else end
            word.append(text[i + 1 : end])
            i = end + 1
        else:
            word.append(char)
            i += 1
    return "".join(word), min(i, len(text))


def _after_bodies(
    text: str, start: int, pending: list[tuple[str, bool, bool]]
) -> tuple[int, list[str]]:
    """Where the commands go on after the bodies of ``pending`` heredocs begun at ``start``.

    Also returns the bodies bash expands (an unquoted delimiter's). A body runs to its
    delimiter's own line; when one is never closed, everything from ``start`` on is judged as
    commands (and no body is returned).
    """
    i = start
    expanded: list[str] = []
    for delimiter, strip_tabs, expands in pending:
        body_start = i
        while True:
            if i >= len(text):
                return start, []  # never closed: nothing is data
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                if expands:
                    expanded.append(text[body_start:i])
                i = end + 1
                break
            i = end + 1
    return min(i, len(text)), expanded


def substitutions(body: str) -> list[str]:
    """The command substitutions in ``body`` (``$(...)`` and backticks), as written."""
    found: list[str] = []
    i = 0
    while i < len(body):
        if body.startswith("$(", i):
            depth, j = 0, i + 1
            while j < len(body):
                depth += {"(": 1, ")": -1}.get(body[j], 0)
                if depth == 0:
                    break
                j += 1
            found.append(body[i : j + 1])
            i = j + 1
        elif body[i] == "`" and body[i - 1 : i] != "\\":
            end = body.find("`", i + 1)
            end = len(body) if end < 0 else end
            found.append(body[i : end + 1])
            i = end + 1
        else:
            i += 1
    return found


def word_after(line: str, start: int) -> tuple[str, int]:
    """The (unquoted) word starting after ``start``'s spaces, and where it ends."""
    i = start
    while i < len(line) and line[i] in " \t":
        i += 1
    word: list[str] = []
    quote = ""
    while i < len(line):
        char = line[i]
        if quote:
            if char == quote:
                quote = ""
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and i + 1 < len(line):
            i += 1
            word.append(line[i])
        elif char in _METACHARS:
            break
        else:
            word.append(char)
        i += 1
    return "".join(word), i


def without_redirections(words: list[str]) -> list[str]:
    """``words`` without redirections (judged apart): ``bash <<EOF`` runs no script."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        found = _REDIRECTION.match(word)
        if found is None or word.startswith(("<(", ">(")):  # a process substitution's pipe
            kept.append(word)
        else:
            skip = found.end() == len(word)  # the bare operator: its word follows
    return kept


def temp_roots(extra: Iterable[str]) -> tuple[str, ...]:
    """The temporary directories (the system's, ``/tmp`` and ``extra``), resolved."""
    roots = {tempfile.gettempdir(), "/tmp", *extra}
    return tuple(os.path.realpath(r) for r in roots)


def outside_temp(target: str, roots: tuple[str, ...]) -> bool:
    """Whether writing ``target`` may change a file outside the temp dirs (and /dev/null)."""
    if target == "/dev/null":
        return False
    if any(c in target for c in "$`*?[{~") or not os.path.isabs(target):
        return True  # where it goes depends on the shell, or on where it stands
    real = os.path.realpath(target)
    return not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def redirect_target(command: str, roots: tuple[str, ...]) -> str | None:
    """The first file an output redirection of ``command`` writes outside the temp dirs."""
    for target in scan(command).redirects:
        if re.fullmatch(r"&?\d+|-", target):
            continue  # a descriptor copied or closed, or nothing kept
        if outside_temp(target, roots):
            return target
    return None


#: What makes a command substitution's extent unsure to a reader that counts parentheses: a
#: quote or a backslash (a ``)`` or backtick that does not count), a line break, and ``case``
#: (whose patterns end in a lone ``)``).
_UNSURE_IN_SUBSTITUTION = re.compile(r"['\"\\\n]|\bcase\b")


def unsure_substitution(text: str) -> str | None:
    """A command substitution in ``text`` whose extent cannot be read surely; None if none.

    Within one without quotes, backslashes, line breaks or ``case``, parentheses and
    backticks mean what they seem, so the commands found in it are all it runs.
    Single-quoted text is skipped; arithmetic (``$((``) is not a substitution.
    """
    quoted = False
    i = 0
    while i < len(text):
        char = text[i]
        if char == "'" and text[i - 1 : i] != "\\":
            quoted = not quoted
        elif not quoted and (
            char == "`" or (text.startswith("$(", i) and not text.startswith("$((", i))
        ):
            span = substitutions(text[i:])[0]
            inner = span[1:-1] if char == "`" else span[2:-1]
            if _UNSURE_IN_SUBSTITUTION.search(inner):
                return span
            i += 1 if char == "`" else 2  # nested ones are checked in their turn
            continue
        i += 1
    return None

r"""A shell command's text read as bash reads it: quotes, comments, heredocs, redirections.

One scanner (:func:`scan`) walks the text once, so that what counts as a quote, a comment
or a heredoc is the same for the commands judged and for the redirections found: ``<<``
inside quotes or a comment starts no heredoc, a heredoc's delimiter is its word with the
quoting removed (``<<\EOF``, ``<<'EOF'``, ``<<"EOF"`` all end at ``EOF``; ``<<-`` at
``EOF`` after tabs), and a heredoc never closed leaves the rest of the text judged as
commands (erring towards judging data as commands, never the reverse). A body is data, but
under an unquoted delimiter bash expands it: its command substitutions (``$(...)``, backticks)
run, so they are kept as commands. Arithmetic's ``<<`` (``$(( 1<<2 ))``) shifts bits and opens
no heredoc. A line continuation (``\`` and a line break) is dropped, as bash drops it
(``r\<newline>m f`` runs ``rm f``). What bash itself reads one way or another depending on
more than the text shows is marked unsure (:attr:`ShellText.unsure`), for the caller to
refuse.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import field

from taskloom._dataclass import dataclass

#: Characters that end an unquoted word.
_METACHARS = " \t\n;&|<>()"
#: A redirection operator at the start of a word (``2>``, ``&>>``, ``<<-``, ``<<<``...).
_REDIRECTION = re.compile(r"(\d*|&|\{[A-Za-z_]\w*\})(<<<|<<-?|<>|<&|<|>>|>&|>\||>)")


@dataclass
class ShellText:
    """What :func:`scan` found in a command line.

    Attributes:
        commands: The text without heredoc bodies, comments and line continuations: what runs.
        redirects: The words after its output redirections (``>``, ``>>``, ``>|``, ``&>``,
            ``<>``), unquoted, in order; a descriptor copied or closed by ``>&`` is ``&``
            and its word (``>&2`` is ``&2``, ``>&-`` is ``&-``).
        unsure: Why the text cannot be read surely as bash reads it ("" when it can): a
            ``#`` that bash may or may not take for a comment, arithmetic with quotes in it, a
            ``<<`` inside ``${...}``, ``$[...]`` or a subscript (a shift, not a heredoc).
    """

    commands: str = ""
    redirects: list[str] = field(default_factory=list)
    unsure: str = ""


def scan(text: str) -> ShellText:
    """Read ``text`` as bash does (see the module docstring)."""
    return _Scanner(text).run()


class _Scanner:
    """One pass of :func:`scan` over a command line."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.out: list[str] = []
        self.found = ShellText()
        self.pending: list[tuple[str, bool, bool]] = []  # this line's (delimiter, tabs, expands)
        self.quote = ""  # ', ", or $' (ANSI-C quoting, where a backslash escapes)
        self.backtick = False  # inside an unclosed backtick substitution
        self.closers: list[str] = []  # open ``${``, ``$[`` and subscripts: their closing chars

    def unsure(self, why: str) -> None:
        self.found.unsure = self.found.unsure or why

    def run(self) -> ShellText:
        text, i = self.text, 0
        while i < len(text):
            i = self._quoted(i) if self.quote else self._unquoted(i)
        self.found.commands = "".join(self.out)
        return self.found

    def _quoted(self, i: int) -> int:
        text, char = self.text, self.text[i]
        if char == "\\" and self.quote != "'":
            if text[i + 1 : i + 2] == "\n" and self.quote == '"':
                return i + 2  # a line continuation: bash drops it
            self.out.append(text[i : i + 2])
            return i + 2
        if char == "`" and self.quote == '"':
            self.backtick = not self.backtick
        if char == self.quote[-1]:
            self.quote = ""
        self.out.append(char)
        return i + 1

    def _unquoted(self, i: int) -> int:
        text, char = self.text, self.text[i]
        if char == "\\":
            if text[i + 1 : i + 2] != "\n":
                self.out.append(text[i : i + 2])
            return i + 2  # ``\<newline>`` is a line continuation: bash drops it
        if char in "'\"":
            self.quote = "$'" if char == "'" and text[i - 1 : i] == "$" else char
        elif char == "`":
            self.backtick = not self.backtick
        elif char == "#" and (i == 0 or text[i - 1] in _METACHARS):
            if self.backtick or text[i - 1 : i] == ")":
                self.unsure("a '#' inside backticks or right after ')', which bash may or may "
                            "not read as a comment")  # fmt: skip
            else:
                end = text.find("\n", i)
                return len(text) if end < 0 else end  # a comment: nothing of it runs
        elif char == "\n":
            self.out.append(char)
            i, bodies = _after_bodies(text, i + 1, self.pending)
            self.out.extend(f": {sub}\n" for body in bodies for sub in substitutions(body))
            self.pending = []
            return i
        elif text.startswith(("$((", "$[", "((", "${"), i) or (
            char == "[" and _after_name(text, i)
        ):
            return self._bracket(i)
        elif self.closers and char == self.closers[-1]:
            self.closers.pop()
        elif text.startswith("<<<", i):
            self.out.append("<<<")
            return i + 3
        elif text.startswith("<<", i):
            return self._heredoc(i)
        elif char == ">" and not text.startswith(">(", i):
            return self._redirect(i)
        self.out.append(char)
        return i + 1

    def _bracket(self, i: int) -> int:
        """Arithmetic (``$((``, ``((``), ``${``, ``$[`` or a subscript opened at ``i``."""
        text = self.text
        if text.startswith(("$((", "(("), i) and (
            text[i] == "$" or i == 0 or text[i - 1] in _METACHARS
        ):
            end = _arithmetic_end(text, i + (1 if text[i] == "$" else 0))
            if end is not None:
                if any(c in text[i:end] for c in "'\"\\`"):
                    self.unsure("arithmetic with quotes, backslashes or backticks inside")
                self.out.append(text[i:end])  # arithmetic: its ``<<`` is a shift, not a heredoc
                return end
        elif text.startswith(("${", "$[", "["), i):
            self.closers.append("}" if text.startswith("${", i) else "]")
            width = 1 if text[i] == "[" else 2
            self.out.append(text[i : i + width])
            return i + width
        self.out.append(text[i])
        return i + 1

    def _heredoc(self, i: int) -> int:
        text = self.text
        if self.closers:
            self.unsure("a '<<' inside ${...}, $[...] or a subscript, which bash shifts by")
        strip_tabs = text.startswith("<<-", i)
        start = i + (3 if strip_tabs else 2)
        delimiter, end = _delimiter(text, start)
        if delimiter and not self.closers:
            quoted = any(c in text[start:end] for c in "\\'\"")
            self.pending.append((delimiter, strip_tabs, not quoted))
        self.out.append(text[i:end])
        return end

    def _redirect(self, i: int) -> int:
        text = self.text
        j = i + (2 if text.startswith(">>", i) else 1)
        copied = text[j : j + 1] == "&"
        j += 1 if text[j : j + 1] in ("|", "&") else 0
        self.found.redirects.append(("&" if copied else "") + word_after(text, j)[0])
        self.out.append(text[i:j])
        return j


def _after_name(text: str, i: int) -> bool:
    """Whether the ``[`` at ``i`` follows a name (``a[1<<2]=5``: a subscript)."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def _arithmetic_end(text: str, i: int) -> int | None:
    """Where arithmetic ``((...))`` opened at ``i`` ends; None if bash reads subshells there.

    ``((echo a) )`` and ``$((echo a); rm f)`` are not arithmetic: the second ``(`` is not
    closed right before the first.
    """
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 1 and text[j] == ")":
            return j + 2 if text[j + 1 : j + 2] == ")" else None
        if depth == 0:
            return None
    return None


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
        if re.fullmatch(r"&(\d+-?|-)", target):
            continue  # ``>&2``, ``>&-``: a descriptor copied or closed (``> 2`` is a file)
        target = target.removeprefix("&")  # ``>&file`` writes the file
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
    backticks mean what they seem, so the commands found in it are all it runs. Process
    substitutions (``<(...)``, ``>(...)``) count, and so does arithmetic (``$((...))``), which
    bash reads as a command substitution when its parentheses do not close as ``))``.
    Single-quoted text is skipped (not a ``'`` inside double quotes).
    """
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote in ("'", "$'"):
            if char == "\\" and quote == "$'":
                i += 1
            elif char == "'":
                quote = ""
        elif char == "\\":
            i += 1
        elif char == "`" or text.startswith(("$(", "<(", ">("), i):
            span = _span(text, i)
            inner = span[1:-1] if char == "`" else span[2:-1]
            if _UNSURE_IN_SUBSTITUTION.search(inner):
                return span
            i += 1 if char == "`" else 2  # nested ones are checked in their turn
            continue
        elif char == "'" and not quote:
            quote = "$'" if text[i - 1 : i] == "$" else "'"
        elif char == '"':
            quote = "" if quote else '"'
        i += 1
    return None


def _span(text: str, i: int) -> str:
    """The substitution opened at ``i`` (a backtick, ``$(``, ``<(`` or ``>(``), as written."""
    if text[i] == "`":
        end = text.find("`", i + 1)
        return text[i:] if end < 0 else text[i : end + 1]
    depth = 0
    for j in range(i + 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return text[i : j + 1]
    return text[i:]

"""What bash's own builtins and a few wrappers show: text they run later, names they set.

Bash runs text given to some builtins as commands (``trap 'rm f' EXIT``, ``mapfile -C``),
lets others change what a word runs (``alias``, ``hash -p``, ``BASH_CMDS[ls]=``, ``enable
-f``), and some variables name what another program runs or where it reads its settings
(``GIT_EXTERNAL_DIFF``, ``BASH_ENV``, ``HOME`` for git's configuration): setting one, by
whatever builtin (``declare -x``, ``read``, ``printf -v``, a ``for`` loop's variable, ``set
-a``...), is refused. Wrappers not known option by option (``taskset``, ``strace``...) have
every command their words may start judged. The checks are built by
:func:`builtin_checks` around the read-only module's judges, which they call back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from taskloom.permissions._git_check import RUNNING_ENV
from taskloom.permissions._shell_text import outside_temp

#: A check of one program's arguments (see :mod:`taskloom.permissions._program_checks`).
Check = Callable[[list[str], bool, tuple[str, ...]], "str | None"]
LineJudge = Callable[[str, tuple[str, ...]], "str | None"]
ArgvJudge = Callable[[list[str], bool, tuple[str, ...]], "str | None"]

#: Variables whose value a program runs, or that say where bash or git read commands or
#: settings from, or that change what a word runs.
PROTECTED = re.compile(
    rf"(?:{RUNNING_ENV.pattern})|BASH_ENV|ENV|BASH_ALIASES|BASH_CMDS|BASH_FUNC_\S*|HOME"
    r"|XDG_CONFIG_HOME|GIT_DIR|GIT_ALLOW_PROTOCOL|SHELLOPTS|BASHOPTS|PROMPT_COMMAND|PS[0-4]"
)
#: A word that sets a variable: ``NAME=``, ``NAME+=``, ``NAME[...]=`` (its name captured).
_SETS = re.compile(r"([A-Za-z_][^=\[\s]*)(\[[^]]*\])?\+?=.*", re.S)
#: Builtins whose operands name variables they set (``read NAME``, ``export NAME``).
_NAMERS = frozenset({"read", "export", "declare", "typeset", "local", "readonly", "getopts",
                     "mapfile", "readarray", "printf"})  # fmt: skip
#: Wrappers whose options are not known one by one: every command their words may start is
#: judged (``taskset 1 rm f``), and their own record (``strace -o f``) must be scratch.
OPAQUE_WRAPPERS = frozenset({
    "time", "taskset", "chrt", "setpriv", "prlimit", "strace", "ltrace", "fakeroot",
    "unshare", "nsenter", "chroot", "numactl", "valgrind", "faketime", "catchsegv", "setarch",
    "linux32", "linux64", "cgexec", "dbus-run-session", "xvfb-run", "systemd-run", "unbuffer",
    "rlwrap", "firejail", "bwrap", "proot", "torsocks", "proxychains", "chpst", "tini",
    "dumb-init", "trickle", "cpulimit", "systemd-inhibit", "caffeinate", "eatmydata",
})  # fmt: skip
_RECORD_OPTIONS = ("-o", "--output", "--log-file", "--output-file", "--outfile")


def protected_name(word: str) -> str | None:
    """The protected variable ``word`` sets or names (``GIT_PAGER=x``, ``HOME``), if any."""
    found = _SETS.fullmatch(word)
    name = found.group(1) if found else word
    return name if PROTECTED.fullmatch(name) else None


def sets_protected(name: str) -> str:
    return (
        f"it sets {name}, a variable whose value a program may run or read its settings or "
        "commands from"
    )


#: ``{a,b}`` or ``{1..3}`` outside quotes and not ``${...}``: words made when bash runs.
_BRACE = re.compile(r"(?<![$\\])\{[^\s{}'\"]*(,|\.\.)[^\s{}'\"]*\}")
_PROMPT_EXPANSION = re.compile(r"@P\}")
_DEFAULTS = re.compile(r"\$\{(\w+):?[=]")
_LOOP = re.compile(r"(?:^|[\s;&|()])(?:for|select)\s+(\w+)")


def line_unsure(commands: str) -> str | None:
    """Why the command text (quotes kept, comments gone) cannot be judged surely, if so."""
    unquoted = _without_single_quotes(commands)
    brace = _BRACE.search(unquoted)
    if brace is not None:
        return (
            f"its brace expansion {brace.group(0)!r} makes words only when bash runs it (a "
            "program or an option among them); write the words out"
        )
    if _PROMPT_EXPANSION.search(unquoted):
        return "it expands a variable as a prompt (${x@P}), which runs the command text in it"
    for found in (*_DEFAULTS.finditer(unquoted), *_LOOP.finditer(unquoted)):
        if PROTECTED.fullmatch(found.group(1)):
            return sets_protected(found.group(1))
    return None


def _without_single_quotes(text: str) -> str:
    """``text`` with its single-quoted strings blanked (as ``''``)."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if quote == "'":
            quote = "" if char == "'" else quote
            out.append(char if not quote else "")
        elif char == "\\":
            out.append(text[i : i + 2])
            i += 1
        elif char == "'" and quote != '"':
            quote = "'"
            out.append(char)
        else:
            quote = ("" if quote else '"') if char == '"' else quote
            out.append(char)
        i += 1
    return "".join(out)


def builtin_checks(line: LineJudge, argv: ArgvJudge) -> dict[str, Check]:
    """The checks of bash's builtins and opaque wrappers.

    Args:
        line: The judge of a command line (what ``trap`` and ``mapfile -C`` run).
        argv: The judge of a command's words (what a wrapper runs).
    """

    def trap(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        operands = [a for a in args if a not in ("-p", "-l", "-P", "--")]
        action = operands[0] if len(operands) > 1 else ""
        return line(action, allowed) or "" if action not in ("", "-") else ""

    def mapfile(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        for i, arg in enumerate(args):
            callback = args[i + 1] if arg == "-C" and i + 1 < len(args) else None
            callback = arg[2:] if arg.startswith("-C") and len(arg) > 2 else callback
            if callback is not None:
                why = line(callback, allowed)
                if why is not None:
                    return why
        return _names(args)

    def opaque(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        for i, arg in enumerate(args):
            name, equals, value = arg.partition("=")
            if name in _RECORD_OPTIONS or (arg.startswith("-o") and len(arg) > 2):
                value = value if equals else arg[2:] if name not in _RECORD_OPTIONS else ""
                value = value or (args[i + 1] if i + 1 < len(args) else "")
                if outside_temp(value, allowed):
                    return f"it writes its record to {value}"
        for i, arg in enumerate(args):
            if not arg.startswith("-"):
                why = argv(args[i:], True, allowed)
                if why is not None:
                    return why
        return None

    def sg(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        operands = [a for a in args if a not in ("-", "-c")]
        if len(operands) < 2:
            return "it starts a shell (sg, newgrp) reading its commands from its input"
        return line(" ".join(operands[1:]), allowed) or ""

    return {
        "trap": trap,
        **dict.fromkeys(("mapfile", "readarray"), mapfile),
        "alias": _alias,
        "hash": _hash,
        "enable": _enable,
        "set": _set,
        **{name: _namer(name) for name in _NAMERS - {"mapfile", "readarray"}},
        **dict.fromkeys(OPAQUE_WRAPPERS, opaque),
        **dict.fromkeys(("sg", "newgrp"), sg),
    }


def _names(args: list[str]) -> str | None:
    for arg in args:
        name = protected_name(arg)
        if name is not None:
            return sets_protected(name)
    return None


def _namer(program: str) -> Check:
    """``declare``, ``export``, ``read``, ``printf -v``...: a protected name set, a nameref."""

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        options = [a for a in args if a.startswith("-") and not a.startswith("--")]
        if program in ("declare", "typeset", "local") and any("n" in o for o in options):
            return "it makes a name reference (-n), which may set any variable"
        if program not in ("read", "printf") and "-p" in options and "=" not in "".join(args):
            return ""  # ``declare -p HOME``: it prints
        if program == "printf":
            args = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-v"]
        return _names(args)

    return check


def _alias(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    if any("=" in a for a in args):
        return "it defines an alias, whose text runs where its name is written later"
    return ""


def _hash(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    if any(a.startswith("-") and "p" in a for a in args):
        return "it runs hash -p, which makes a command's name run another program"
    return ""


def _enable(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    if any(a.startswith("-") and "f" in a for a in args):
        return "it runs enable -f, which loads a builtin's code from a file"
    return None


def _set(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``set -a`` / ``set -o allexport`` exports every variable set after it."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "a" in arg[1:]:
            return "it runs set -a, which exports every variable set after it"
        if arg == "-o" and args[i + 1 : i + 2] == ["allexport"]:
            return "it runs set -o allexport, which exports every variable set after it"
    return None


def program_unsure(program: str) -> bool:
    """Whether bash may read the program word otherwise than it is written here.

    Operators glued to it (``a)rm``, ``then(rm``, ``{fd}<f``), braces, and glob characters
    (``/bin/r[m]``): this reading of its words is not bash's, or the word names the program
    only when bash expands it.
    """
    if program in ("[", "[[", "{", "}", "!"):
        return False
    base = os.path.basename(program) if "/" in program else program
    return bool(re.search(r"[()<>;&|{}*?]|\[.*\]", program)) or base == ""

"""What a read-only agent may not do: edit files, or write them through its shell.

A read-only agent (the built-in ``verification`` agent) is offered no Write, Edit or
NotebookEdit tool, nor any tool that starts agents; its permission policy
(:meth:`PermissionPolicy.read_only <taskloom.permissions.policy.PermissionPolicy.read_only>`)
also denies, in every mode and whatever a PreToolUse hook answers:

- every edit-kind tool (an MCP server's, say);
- a shell command that writes a file as far as **the command's text** shows
  (:func:`shell_writes`). Each simple command is read after the shell's own words (``(``,
  ``{``, ``!``, ``if``/``then``/``do``/``case ... in`` and the like), variable assignments and
  wrappers (``env`` -- its ``-C`` and ``-S`` too --, ``sudo``, ``nice``, ``timeout``,
  ``xargs``...), inside ``$(...)``, backticks and ``sh -c '...'``. It is refused for:

  - an output redirection to anything but ``/dev/null`` or a file under the temporary
    directory (where a verifier may keep a throw-away script);
  - a program or subcommand that changes files, the repository or the installed packages
    (:data:`WRITING_COMMANDS`; git's options before its subcommand, such as ``-C``, ``-c``,
    ``--git-dir``, are looked past), unless every file it writes is under the temporary
    directory (``cp``, ``mv``, ``rm``, ``mkdir``, ``touch``, ``tee``);
  - ``find -delete``, ``-fprint*``, ``-fls``, and ``-exec`` of a writing command; ``tar``
    extracting or creating, ``unzip``, ``zip``, ``gzip`` and the like writing files;
    ``curl -o/-O`` and ``wget`` saving outside the temporary directory;
  - text run as commands: ``eval``, a shell reading its commands from its input (``| sh``,
    ``bash <<EOF``);
  - inline code of an interpreter (``python -c``, ``node -e``, ``perl -e``, ``ruby -e``...) or
    code fed on its input (``python -``): what code does cannot be judged from its text. A
    verifier runs tests as ``python -m pytest`` and scripts by their path.

What is **not** caught: what a program does that its command line does not show -- a script
run by its path, a test suite writing a cache, a build (``make``, ``npm run``, ``cargo
build``), a formatter, ``awk``'s own ``print > file``, a program's configuration, variables
expanded at run time (``$cmd``). The agent's prompt forbids those; the policy cannot see them.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Callable, Iterable

from taskloom.permissions.matchers import command_matches, split_command, with_hidden
from taskloom.permissions.rules import PermissionRequest

#: Commands that change files, the repository or the installed packages, as Bash rules.
WRITING_COMMANDS: tuple[str, ...] = (
    *(f"{p}:*" for p in ("rm", "rmdir", "mv", "cp", "touch", "mkdir", "ln", "chmod", "chown",
                         "chgrp", "truncate", "dd", "tee", "install", "patch", "shred",
                         "unlink", "rsync", "mkfifo", "zip")),
    "sed -i*", "sed *-i*", "sed --in-place*", "perl -i*", "perl *-pi*",
    *(f"git {s}:*" for s in ("add", "commit", "push", "checkout", "switch", "reset", "restore",
                             "rm", "mv", "stash", "apply", "am", "clean", "merge", "rebase",
                             "cherry-pick", "revert", "tag", "pull", "fetch", "init",
                             "worktree", "config", "branch -d", "branch -D", "branch -m",
                             "branch -M", "branch -c", "branch -C", "branch --delete",
                             "branch --move", "branch --copy", "gc", "prune", "repack",
                             "pack-refs", "notes", "update-ref", "update-index",
                             "checkout-index", "read-tree", "symbolic-ref", "submodule",
                             "sparse-checkout", "bisect", "filter-branch", "replace", "lfs",
                             "maintenance", "format-patch", "reflog expire", "reflog delete",
                             "remote add", "remote remove", "remote rm", "remote rename",
                             "remote set-url", "clone")),
    *(f"{pm}:*" for pm in ("pip install", "pip uninstall", "pip3 install", "uv add", "uv pip",
                           "uv sync", "poetry add", "poetry install", "npm install", "npm i",
                           "npm ci", "npm uninstall", "yarn add", "yarn install", "pnpm add",
                           "pnpm install", "cargo install", "go install", "go get",
                           "apt-get", "apt", "brew", "gem install")),
    "python -m pip install*", "python3 -m pip install*",
)  # fmt: skip

#: A check of one program's arguments: why it writes; "" when it surely does not; None when
#: it has no opinion (the :data:`WRITING_COMMANDS` decide). Its arguments: the program's
#: arguments, whether more come from elsewhere (``xargs``), and the temporary directories.
_Check = Callable[[list[str], bool, tuple[str, ...]], "str | None"]

#: The shell's own words before a command, dropped to find the program.
_KEYWORDS = frozenset({"!", "{", "(", "if", "then", "else", "elif", "do", "while", "until",
                       "time", "coproc"})  # fmt: skip
#: Words that run the rest of the command line, and those of their options that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "--class", "--classdata"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                        "--delimiter", "--eof", "--replace", "--max-lines", "--max-args",
                        "--max-procs", "--max-chars", "--process-slot-var"}),
}  # fmt: skip
#: ``uv run python ...``: runners whose ``run`` subcommand runs the rest.
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(\[[^]]*\])?\+?=.*", re.S)
_REDIRECTION = re.compile(r"(\d*|&)(<<<|<<-?|<>|<&|<|>>|>&|>\||>)")
_CASE_PATTERN = re.compile(r"\(?[^()\s]*\)")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "csh", "tcsh"})


def shell_writes(request: PermissionRequest, temp_dirs: Iterable[str] = ()) -> str | None:
    """Why the shell command of ``request`` writes files, as far as its text shows; None if not.

    Args:
        request: A Bash (or Monitor) call; its ``target`` is the command line.
        temp_dirs: Where commands may write besides the system's temporary directory.
    """
    return _line_writes(request.target or "", _temp_roots(temp_dirs))


def _line_writes(command: str, allowed: tuple[str, ...]) -> str | None:
    """Why a command line writes files (its redirections, then each simple command)."""
    target = _redirect_target(command, allowed)
    if target is not None:
        return f"it writes to {target} by an output redirection"
    for part in with_hidden(split_command(_without_heredocs(command))):
        argv, fed = _argv(part)
        why = _argv_writes(argv, fed, allowed)
        if why is not None:
            return why
    return None


def _argv(part: str) -> tuple[list[str], bool]:
    """The words of the command ``part`` runs, and whether ``xargs`` adds to them."""
    text = part.strip()
    if text.startswith("(") and not text.startswith("((") and text.endswith(")"):
        text = text[1:-1]  # a subshell
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: the shell would refuse it; judge the words
        words = text.split()
    return _unwrapped(_without_redirections(words))


def _without_redirections(words: list[str]) -> list[str]:
    """``words`` without redirections (judged apart): ``bash <<EOF`` runs no script."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        found = _REDIRECTION.match(word)
        if found is None:
            kept.append(word)
        else:
            skip = found.end() == len(word)  # the bare operator: its word follows
    return kept


def _unwrapped(words: list[str]) -> tuple[list[str], bool]:
    """``words`` without the shell's keywords, assignments and wrappers before the program."""
    fed = False
    while words:
        word = words[0]
        if word in _KEYWORDS or _ASSIGNMENT.fullmatch(word) or _CASE_PATTERN.fullmatch(word):
            words = words[1:]
        elif word in ("for", "select"):
            return [], fed  # a loop's header runs nothing (its substitutions are looked into)
        elif word == "case":
            words = words[words.index("in") + 1 :] if "in" in words else []
        elif word == "function" or word.endswith("()"):
            words = words[1:] if word.endswith("()") else words[2:]
            words = words[1:] if words[:1] == ["()"] else words
        elif word.startswith("(") and not word.startswith("(("):
            words = [word[1:], *words[1:]]
        elif os.path.basename(word) in _WRAPPERS:
            fed = fed or os.path.basename(word) == "xargs"
            words = _after_wrapper(os.path.basename(word), words[1:])
        elif os.path.basename(word) in _RUNNERS and words[1:2] == ["run"]:
            words = words[2:]
            while words and words[0].startswith("-"):
                words = words[1:]
        else:
            break
    return words, fed


def _after_wrapper(wrapper: str, words: list[str]) -> list[str]:
    """The command a wrapper runs: ``words`` past its options (``env -S`` split as it does)."""
    takes = _WRAPPERS[wrapper]
    while words and words[0].startswith("-") and words[0] != "-":
        option, words = words[0], words[1:]
        if option == "--":
            break
        if wrapper == "env" and (option in ("-S", "--split-string") or option.startswith("-S")):
            value = option[2:] if option.startswith("-S") and option != "-S" else ""
            if not value and words:
                value, words = words[0], words[1:]
            words = [*value.split(), *words]
        elif option in takes and words:
            words = words[1:]
    if wrapper == "timeout" and words:
        words = words[1:]  # its duration
    return words


def _argv_writes(argv: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """Why the command ``argv`` writes files; ``fed``: more arguments come from ``xargs``."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    args = argv[1:]
    if program == "git":
        args = _without_git_globals(args)
    check = _CHECKS.get(program) or _interpreter_check(program)
    if check is not None:
        why = check(args, fed, allowed)
        if why is not None:
            return why or None  # "" is the check's word that the command writes nothing
    line = " ".join([program, *args])
    for pattern in WRITING_COMMANDS:
        if command_matches(pattern, line):
            return f"it runs {line!r}, which changes files ({pattern})"
    return None


def _without_git_globals(args: list[str]) -> list[str]:
    """The arguments of git from its subcommand on (``-C d``, ``-c k=v``... dropped)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        takes_value = args[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace",
                                  "--super-prefix", "--config-env")  # fmt: skip
        i += 2 if takes_value else 1
    return args[i:]


def _without_heredocs(command: str) -> str:
    """``command`` without the bodies of its heredocs (data, not commands)."""
    kept: list[str] = []
    ending: str | None = None
    for line in command.split("\n"):
        if ending is not None:
            ending = None if line.strip() == ending else ending
            continue
        kept.append(line)
        found = re.search(r"<<-?\s*(['\"]?)([^\s'\";&|<>]+)\1", line)
        if found and "<<<" not in line:
            ending = found.group(2)
    return "\n".join(kept)


def _temp_roots(extra: Iterable[str]) -> tuple[str, ...]:
    roots = {tempfile.gettempdir(), "/tmp", *extra}
    return tuple(os.path.realpath(r) for r in roots)


def _redirect_target(command: str, temp_roots: tuple[str, ...]) -> str | None:
    """The first file an output redirection of ``command`` writes outside the temp dirs."""
    for target in _redirect_targets(command):
        if re.fullmatch(r"&?\d+|-", target):
            continue  # a descriptor copied or closed, or nothing kept
        if _outside_temp(target, temp_roots):
            return target
    return None


def _outside_temp(target: str, temp_roots: tuple[str, ...]) -> bool:
    """Whether writing ``target`` may change a file outside the temp dirs (and /dev/null)."""
    if target == "/dev/null":
        return False
    if any(c in target for c in "$`*?[{~") or not os.path.isabs(target):
        return True  # where it goes depends on the shell, or on where it stands
    real = os.path.realpath(target)
    return not any(real == r or real.startswith(r.rstrip("/") + "/") for r in temp_roots)


def _redirect_targets(command: str) -> list[str]:
    """The words after the output redirections of ``command``, outside quotes and heredocs."""
    targets: list[str] = []
    quote = ""
    heredoc: str | None = None
    lines = command.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if heredoc is not None:  # a heredoc's body is data, not redirections
            if line.strip() == heredoc:
                heredoc = None
            continue
        i = 0
        while i < len(line):
            char = line[i]
            if quote:
                quote = "" if char == quote else quote
            elif char == "\\":
                i += 1
            elif char in "'\"":
                quote = char
            elif line.startswith("<<", i) and not line.startswith("<<<", i):
                word = re.match(r"<<-?\s*(['\"]?)([^\s'\";&|<>]+)\1", line[i:])
                if word:
                    heredoc = word.group(2)
                    i += word.end()
                    continue
            elif char == ">" and not line.startswith(">(", i):
                # ``>``, ``>>``, ``>|``, ``>&word``, and ``&>`` / ``&>>`` met at their ``&``.
                i += 2 if line.startswith(">>", i) else 1
                if i < len(line) and line[i] in "|&":
                    i += 1
                target, i = _word_after(line, i)
                targets.append(target)
                continue
            i += 1
    return targets


def _word_after(line: str, start: int) -> tuple[str, int]:
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
        elif char in " \t;&|<>()":
            break
        else:
            word.append(char)
        i += 1
    return "".join(word), i


# -- what one program's arguments show ------------------------------------------------------


def _shell(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """A shell: its ``-c`` command line judged; its commands read from its input refused."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--version", "--help"):
            return ""
        if not arg.startswith(("-", "+")) or arg in ("-", "--"):
            return None if arg not in ("-", "--") else _fed_code("a shell")
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return _line_writes(args[i + 1], allowed) or "" if i + 1 < len(args) else ""
        if arg.startswith("-") and not arg.startswith("--") and "s" in arg[1:]:
            break
        i += 2 if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file") else 1
    return None if fed else _fed_code("a shell")


def _fed_code(what: str) -> str:
    return (
        f"it feeds {what} the commands or code to run on its input, which cannot be judged "
        "from the command's text; run a script by its path"
    )


def _eval(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    return "it runs text through eval, which cannot be judged from the command's text"


#: Interpreters: the options of inline code (letters, long names), letters taking a value,
#: and letters after which the rest names what runs (``python -m``).
_INTERPRETERS: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "python": ("c", (), "WXQ", "m"),
    "pypy": ("c", (), "WXQ", "m"),
    "node": ("ep", ("--eval", "--print"), "r", ""),
    "nodejs": ("ep", ("--eval", "--print"), "r", ""),
    "perl": ("eE", (), "IMmx", ""),
    "ruby": ("e", (), "IrCx", ""),
    "php": ("rRBE", (), "cdfz", ""),
    "lua": ("e", (), "l", ""),
    "Rscript": ("e", ("--expr",), "", ""),
    "osascript": ("e", (), "l", ""),
}
_INFO = frozenset({"-V", "-VV", "-v", "--version", "-h", "--help"})


def _interpreter_check(program: str) -> _Check | None:
    """The check of an interpreter's inline code, if ``program`` is one."""
    name = re.sub(r"[\d.]+$", "", program)  # python3.11 is python
    if name not in _INTERPRETERS:
        return None
    inline, longs, takes, stops = _INTERPRETERS[name]

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in longs or arg.startswith(tuple(f"{o}=" for o in longs)):
                return _inline(program, arg)
            if arg == "-":
                return _fed_code(program)
            if not arg.startswith("-"):
                return None  # a script by its path
            for j, letter in enumerate(arg[1:] if not arg.startswith("--") else ""):
                if letter in inline:
                    return _inline(program, f"-{letter}")
                if letter in stops:
                    return None
                if letter in takes:
                    i += 1 if j == len(arg) - 2 else 0
                    break
            i += 1
        if fed or (args and all(a in _INFO for a in args)):
            return None
        return _fed_code(program)

    return check


def _inline(program: str, option: str) -> str:
    return (
        f"it runs inline {program} code ({option}), which a read-only agent may not run: what "
        "code does cannot be judged from its text. Run tests as `python -m pytest ...`, and "
        "code as a script by its path (one may be written under the temporary directory)"
    )


def _temp_writer(dest_only: bool, takes: frozenset[str]) -> _Check:
    """A writer allowed when all it writes is under the temporary directory.

    Args:
        dest_only: Only its last operand (or ``-t``'s) is written (``cp``); else all are.
        takes: Its options that take a value.
    """

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        operands: list[str] = []
        target: str | None = None
        options = True
        i = 0
        while i < len(args):
            arg = args[i]
            if options and arg == "--":
                options = False
            elif options and arg in ("-t", "--target-directory") and "-t" in takes:
                target = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            elif options and arg.startswith("--target-directory="):
                target = arg.split("=", 1)[1]
            elif options and arg in takes:
                i += 1
            elif not (options and arg.startswith("-") and arg != "-"):
                operands.append(arg)
            i += 1
        if dest_only:
            written = [target] if target is not None else operands[-1:] if len(operands) > 1 else []
        else:
            written = [*operands, *([target] if target is not None else [])]
        if fed or not written:
            return None
        return "" if not any(_outside_temp(w, allowed) for w in written) else None

    return check


def _find(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``find``: its writing actions, and the commands its ``-exec`` runs."""
    for i, arg in enumerate(args):
        if arg in ("-delete", "-fprint", "-fprint0", "-fprintf", "-fls"):
            return f"it runs find with {arg}, which deletes or writes files"
        if arg in ("-exec", "-execdir", "-ok", "-okdir"):
            inner: list[str] = []
            for word in args[i + 1 :]:
                if word in (";", "+"):
                    break
                inner.append(word)
            argv, _ = _unwrapped(inner)
            why = _argv_writes(argv, True, allowed)
            if why is not None:
                return why
    return None


def _tar(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``tar``: listing is reading; extracting, creating or updating an archive writes."""
    letters = ""
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            if arg.split("=")[0] in ("--extract", "--get", "--create", "--append", "--update",
                                     "--delete", "--concatenate", "--catenate"):  # fmt: skip
                return f"it runs tar {arg}, which writes files"
        elif arg.startswith("-") or (i == 0 and arg.isalpha()):
            letters += arg.lstrip("-").split("f")[0]
    if set(letters) & set("xcruA"):
        return "it runs tar to extract or create an archive, which writes files"
    return ""


def _unpack(stdout_letters: str, longs: tuple[str, ...]) -> _Check:
    """An archiver or compressor, reading when one of these options says it only shows."""

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        for arg in args:
            if arg in longs or (
                arg.startswith("-")
                and not arg.startswith("--")
                and set(arg[1:]) & set(stdout_letters)
            ):
                return ""
        return "it unpacks or packs files, which writes them"

    return check


def _saves(
    args: list[str], takes: str, wanted: str, longs: tuple[str, ...]
) -> tuple[list[str], set[str]]:
    """The values of ``wanted`` options (short letters or long names), and every option seen."""
    values: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            seen.add(name)
            if name in longs:
                if not value and i + 1 < len(args):
                    i += 1
                    value = args[i]
                values.append(value)
        elif arg.startswith("-") and arg != "-":
            for j, letter in enumerate(arg[1:], start=1):
                seen.add(letter)
                if letter in takes:
                    value = arg[j + 1 :]
                    if not value and i + 1 < len(args):
                        i += 1
                        value = args[i]
                    if letter in wanted:
                        values.append(value)
                    break
        i += 1
    return values, seen


def _curl(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``curl``: ``-o``, ``-O`` and the options that save to a file."""
    files, seen = _saves(
        args, "AbCcDdEeFHKmoPQrTtUuwXxYyz", "oDc",
        ("--output", "--dump-header", "--cookie-jar", "--trace", "--trace-ascii", "--libcurl",
         "--stderr", "--etag-save", "--hsts", "--alt-svc"),
    )  # fmt: skip
    if seen & {"O", "J", "--remote-name", "--remote-name-all", "--remote-header-name"}:
        return "it runs curl -O, which saves what it downloads in the working directory"
    outside = [f for f in files if f != "-" and _outside_temp(f, allowed)]
    return f"it runs curl saving to {outside[0]}" if outside else ""


def _wget(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``wget``: it saves what it downloads, unless to standard output or the temp dirs."""
    docs, seen = _saves(args, "OoaPeiBtTwQUlARDIX", "O", ("--output-document",))
    logs, _ = _saves(args, "OoaPeiBtTwQUlARDIX", "oa", ("--output-file", "--append-output"))
    if not docs and "--spider" not in seen:
        return "it runs wget, which saves what it downloads"
    outside = [f for f in [*docs, *logs] if f != "-" and _outside_temp(f, allowed)]
    return f"it runs wget saving to {outside[0]}" if outside else ""


_CHECKS: dict[str, _Check] = {
    **dict.fromkeys(_SHELLS, _shell),
    "eval": _eval,
    "cp": _temp_writer(True, frozenset({"-t", "-S", "--suffix"})),
    "mv": _temp_writer(False, frozenset({"-t", "-S", "--suffix"})),
    **dict.fromkeys(("rm", "rmdir", "tee"), _temp_writer(False, frozenset())),
    "mkdir": _temp_writer(False, frozenset({"-m", "--mode"})),
    "touch": _temp_writer(False, frozenset({"-t", "-d", "-r", "--date", "--reference"})),
    "find": _find,
    "tar": _tar,
    "unzip": _unpack("lvtpZz", ()),
    **dict.fromkeys(("gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd"),
                    _unpack("cltk", ("--stdout", "--to-stdout", "--list", "--test"))),
    "curl": _curl,
    "wget": _wget,
}  # fmt: skip


__all__ = ["WRITING_COMMANDS", "shell_writes"]

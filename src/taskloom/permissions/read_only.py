"""What a read-only agent may not do: edit files, or write them through its shell.

A read-only agent (the built-in ``verification`` agent) is offered no Write, Edit or
NotebookEdit tool, nor any tool that starts agents; its permission policy
(:meth:`PermissionPolicy.read_only <taskloom.permissions.policy.PermissionPolicy.read_only>`)
also denies, in every mode and whatever a PreToolUse hook answers:

- every edit-kind tool, and every MCP tool its server does not declare read-only (the
  annotation ``readOnlyHint: true``; only those are offered to a read-only agent);
- a shell command that writes a file as far as **the command's text** shows
  (:func:`shell_writes`). Each simple command is read after the shell's own words (``(``,
  ``{``, ``!``, ``if``/``then``/``do``/``case ... in`` and the like), variable assignments and
  wrappers (``env`` -- its ``-C`` and ``-S`` too --, ``sudo``, ``nice``, ``timeout``,
  ``xargs``, ``busybox``...), inside ``$(...)``, backticks, ``sh -c '...'`` and the commands
  ``flock``, ``watch``, ``parallel``, ``script -c`` and ``su -c`` run. Its text is read as
  bash reads it (:mod:`taskloom.permissions._shell_text`): heredoc bodies are data,
  comments nothing. It is refused for:

  - an output redirection to anything but ``/dev/null`` or a file under the temporary
    directory (scratch output);
  - a program or subcommand that changes files, the repository or the installed packages
    (:data:`WRITING_COMMANDS`; git as :mod:`taskloom.permissions._git_check` reads it: the
    subcommands and forms that write -- ``git tag v1``, ``git stash``, ``git branch new``,
    ``git config k v``, ``--output=`` -- not those that read -- ``git tag -l``, ``git stash
    list``, ``git config --get`` --, and a ``-c``/``--config-env`` key or a variable such as
    ``GIT_PAGER`` whose value git runs; a package manager as
    :mod:`taskloom.permissions._package_checks` reads it, its options before the subcommand
    looked past: ``pip -q install``, ``python3.11 -m pip install``, ``npm audit fix``, bare
    ``yarn``, ``uv lock``, ``go mod tidy``...), unless every file it writes is under the temporary
    directory (``cp``, ``mv``, ``rm``, ``mkdir``, ``touch``, ``tee``, ``sort -o``); ``sed -i``
    and ``awk -i inplace`` as their options parse (``sed -ni``, ``sed -i.bak``); ``cp -s`` or
    ``-l`` (a link written through writes what it points to), wherever it goes; editors
    (``ed``, ``ex``, ``vi``); ``flock``'s lock file and ``script``'s record outside the
    temporary directory;
  - a command substitution whose extent its text cannot show surely (a quote, a backslash, a
    line break or ``case`` inside it: ``_shell_text.unsure_substitution``; process
    substitutions and ``$((`` too), and text bash may read otherwise (a ``#`` right after ``)``
    or in backticks, quotes in arithmetic, ``<<`` inside ``${...}``, ``$[...]`` or a subscript);
  - a program word with operators glued to it (``a)rm``, ``then(rm``), braces or glob
    characters (``/bin/r[m]``), and a brace expansion anywhere (``sed {-i,s/a/b/,f}``);
  - text bash runs later or a name it changes (:mod:`taskloom.permissions._bash_checks`):
    ``trap``'s and ``mapfile -C``'s commands judged, ``alias`` definitions, ``hash -p``,
    ``enable -f``, ``${x@P}``, ``set -a``, namerefs, and a variable a program runs or reads its
    settings from (``GIT_EXTERNAL_DIFF``, ``BASH_ENV``, ``HOME``...) set in any way; wrappers not
    known option by option (``taskset``, ``strace``, ``/usr/bin/time``...) with every
    command their words may start judged;
  - a program known only when the command runs (``$cmd``, ``$(...)`` or a backtick as the
    program word);
  - ``find -delete``, ``-fprint*``, ``-fls``, and ``-exec`` of a writing command; ``tar``
    extracting or creating, ``unzip``, ``zip``, ``gzip`` and the like writing files;
    ``curl -o/-O`` and ``wget`` saving outside the temporary directory;
  - text run as commands: ``eval``, a shell reading its commands from its input (``| sh``,
    ``bash <<EOF``, ``su`` or ``script`` without ``-c``, ``parallel`` without a command),
    or from a pipe or its input named as a file (``/dev/stdin``, ``/dev/fd/N``,
    ``/proc/self/fd/N``, ``<(...)``; ``source`` too);
  - inline code of an interpreter (``python -c``, ``node -e``, ``perl -e``, ``ruby -e``...) or
    code fed on its input (``python -``): what code does cannot be judged from its text. A
    verifier runs tests as ``python -m pytest`` and scripts by their path.

What is **not** caught: what a program does that its command line does not show -- a script
run by its path, a test suite writing a cache, a build (``make``, ``npm run``, ``cargo
build``), a formatter, ``awk``'s own ``print > file`` and ``system()``, sed's ``w`` and ``e``
commands, arithmetic on a variable holding command text (``$((x))`` with ``x='a[$(cmd)]'``), a
program's configuration, variables expanded at run time in arguments (``rm $f``), links
already in the tree a copy keeps (``cp -a``). The agent's prompt forbids those; the policy
cannot see them. Where the kernel has Landlock, the sandbox its commands run in stops them
(:mod:`taskloom.process.landlock`; ``run_shell(sandboxed=True)``): this judge gives the model a
clear refusal before anything runs, the sandbox is the guarantee behind it.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Iterable

from taskloom.permissions import _program_checks as checks
from taskloom.permissions._bash_checks import (
    builtin_checks,
    line_unsure,
    program_unsure,
    protected_name,
    sets_protected,
)
from taskloom.permissions._git_check import env_writes, git
from taskloom.permissions._package_checks import package_check
from taskloom.permissions._shell_text import (
    outside_temp,
    redirect_target,
    scan,
    temp_roots,
    unsure_substitution,
    without_redirections,
)
from taskloom.permissions.matchers import command_matches, split_command, with_hidden
from taskloom.permissions.rules import PermissionRequest

#: Commands that change files, the repository or the installed packages, as Bash rules.
WRITING_COMMANDS: tuple[str, ...] = (
    *(f"{p}:*" for p in ("rm", "rmdir", "mv", "cp", "touch", "mkdir", "ln", "chmod", "chown",
                         "chgrp", "truncate", "dd", "tee", "install", "patch", "shred",
                         "unlink", "rsync", "mkfifo", "mknod", "link", "split", "csplit",
                         "ar", "zip", "sqlite3", "ssh-keygen", "gpg", "ed", "ex", "vi", "vim",
                         "nvim")),
    "perl -i*", "perl *-pi*",
    *(f"{pm}:*" for pm in ("apt-get", "apt", "brew", "gem install", "dnf", "yum", "apk add")),
)  # fmt: skip


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
    "busybox": frozenset(),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                        "--delimiter", "--eof", "--replace", "--max-lines", "--max-args",
                        "--max-procs", "--max-chars", "--process-slot-var"}),
}  # fmt: skip
#: ``uv run python ...``: runners whose ``run`` subcommand runs the rest.
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye"})
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(\[[^]]*\])?\+?=.*", re.S)
_CASE_PATTERN = re.compile(r"\(?[^()\s]*\)")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "csh", "tcsh"})


def shell_writes(request: PermissionRequest, temp_dirs: Iterable[str] = ()) -> str | None:
    """Why the shell command of ``request`` writes files, as far as its text shows; None if not.

    Args:
        request: A Bash (or Monitor) call; its ``target`` is the command line.
        temp_dirs: Where commands may write besides the system's temporary directory.
    """
    return _line_writes(request.target or "", temp_roots(temp_dirs))


def _line_writes(command: str, allowed: tuple[str, ...]) -> str | None:
    """Why a command line writes files (its redirections, then each simple command)."""
    text = scan(command)
    if text.unsure:
        return f"it cannot be read surely: {text.unsure}; write it plainly"
    commands = text.commands
    unsure = unsure_substitution(commands)
    if unsure is not None:
        return (
            f"what its command substitution {unsure[:60]!r} runs cannot be read surely "
            "(quotes, backslashes, line breaks or case inside it); run that command on its own"
        )
    why = line_unsure(commands)
    if why is not None:
        return why
    parts = with_hidden(split_command(commands))
    for part in parts:  # a substitution's own redirections too, even inside "..."
        target = redirect_target(part, allowed)
        if target is not None:
            return f"it writes to {target} by an output redirection"
    for part in parts:
        argv, fed, assigned = _argv(part)
        names = [n for n in map(protected_name, assigned) if n is not None]
        if names:  # git runs a GIT_PAGER's value, bash reads BASH_ENV...
            return env_writes(assigned) or sets_protected(names[0])
        why = _argv_writes(argv, fed, allowed)
        if why is not None:
            return why
    return None


def _argv(part: str) -> tuple[list[str], bool, list[str]]:
    """The words of the command ``part`` runs, whether ``xargs`` adds, and variables set."""
    text = part.strip()
    # A subshell, nested ones too (``((rm f) )``); arithmetic, ``(( ... ))``, is left.
    arithmetic = text.startswith("((") and text.endswith("))")
    while text.startswith("(") and text.endswith(")") and not arithmetic:
        text = text[1:-1].strip()
        arithmetic = text.startswith("((") and text.endswith("))")
    if arithmetic:
        return [], False, []  # it runs nothing; its substitutions are judged apart
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: the shell would refuse it; judge the words
        words = text.split()
    words = without_redirections(words)
    argv, fed = _unwrapped(words)
    before = words[: len(words) - len(argv)]
    return argv, fed, [w for w in before if _ASSIGNMENT.fullmatch(w)]


def _unwrapped(words: list[str]) -> tuple[list[str], bool]:
    """``words`` without the shell's keywords, assignments and wrappers before the program."""
    fed = False
    while words:
        word = words[0]
        if word == "coproc" and len(words) > 2 and words[2][:1] in ("{", "("):
            words = words[2:]  # ``coproc NAME { ...; }``: NAME is not the program
        elif word in _KEYWORDS or _ASSIGNMENT.fullmatch(word) or _CASE_PATTERN.fullmatch(word):
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
    while words and words[0].startswith("-") and (words[0] != "-" or wrapper == "env"):
        option, words = words[0], words[1:]
        if option == "--":
            break
        if wrapper == "command" and option in ("-v", "-V"):
            return []  # it names the program, and runs nothing
        if wrapper == "env":
            words = _after_env_option(option, words)
        elif option in takes and words:
            words = words[1:]
    if wrapper == "timeout" and words:
        words = words[1:]  # its duration
    return words


def _after_env_option(option: str, words: list[str]) -> list[str]:
    """``words`` after one of env's options: ``-S``'s string split into words, a value skipped.

    Short options cluster (``-iS'rm f'``, ``-iu VAR``); ``--split-string`` may be abbreviated.
    """
    name, equals, value = option.partition("=")
    if option.startswith("--"):
        splits = len(name) > 3 and "--split-string".startswith(name)
        takes = splits or any(o.startswith(name) for o in ("--unset", "--chdir"))
    else:
        letters = option[1:]
        cut = next((k for k, c in enumerate(letters) if c in "SuC"), -1)
        splits, takes = cut >= 0 and letters[cut] == "S", cut >= 0
        value, equals = letters[cut + 1 :], "x" if cut >= 0 and letters[cut + 1 :] else ""
    if takes and not equals and words:
        value, words = words[0], words[1:]
    if not splits:
        return words
    try:
        return [*shlex.split(value), *words]
    except ValueError:
        return [*value.split(), *words]


def _argv_writes(argv: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """Why the command ``argv`` writes files; ``fed``: more arguments come from ``xargs``."""
    if not argv:
        return None
    if "$" in argv[0] or "`" in argv[0]:
        return (
            f"its program ({argv[0]}) is known only when the command runs, so what it does "
            "cannot be judged from the command's text; name the program itself or its path "
            "(python -m pytest, .venv/bin/python -m pytest)"
        )
    if program_unsure(argv[0]):
        return (
            f"its program word ({argv[0]}) cannot be read surely: operators glued to it, "
            "braces or glob characters, which bash reads or expands otherwise; write the "
            "program plainly, apart from ( ) ; < > |"
        )
    program = os.path.basename(argv[0])
    args = argv[1:]
    check = _CHECKS.get(program) or checks.interpreter_check(program) or package_check(program)
    if check is not None:
        why = check(args, fed, allowed)
        if why is not None:
            return why or None  # "" is the check's word that the command writes nothing
    line = " ".join([program, *args])
    for pattern in WRITING_COMMANDS:
        if command_matches(pattern, line):
            return f"it runs {line!r}, which changes files ({pattern})"
    return None


# -- what one program's arguments show ------------------------------------------------------


def _shell(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """A shell: its ``-c`` command line judged; its commands read from its input refused.

    With ``-c`` the command line is its first word that is not an option, wherever the
    ``-c`` stands (``bash -c -e 'rm f'``, ``bash -c -- 'rm f'``). An rc file fed from a pipe
    (``--rcfile <(...)``) is fed code.
    """
    command = stdin = dashed = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--version", "--help") and not command:
            return ""
        if arg in ("-", "--"):
            dashed, i = True, i + 1
            break
        if not arg.startswith(("-", "+")):
            break
        value = args[i + 1] if i + 1 < len(args) else ""
        if arg in ("--rcfile", "--init-file") and checks.fed_path(value):
            return checks.fed_code("a shell")
        if not arg.startswith("--"):
            command = command or "c" in arg[1:]
            stdin = stdin or "s" in arg[1:]
        long_value = arg in ("--rcfile", "--init-file")
        i += 2 if long_value or (not arg.startswith("--") and arg[-1] in "oO") else 1
    rest = args[i:]
    if command:
        return _line_writes(rest[0], allowed) or "" if rest else ""
    if dashed or (rest and checks.fed_path(rest[0])):
        return checks.fed_code("a shell")
    if stdin or not rest:
        return None if fed else checks.fed_code("a shell")
    return None  # a script by its path


def _eval(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    return "it runs text through eval, which cannot be judged from the command's text"


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


def _parse(
    args: list[str], takes: frozenset[str], permute: bool = False
) -> tuple[dict[str, str], list[str]]:
    """A wrapper's options (name: value, "" for a flag) and its operands.

    Args:
        args: Its arguments.
        takes: Its options that take a value (``-c CMD``, ``-cCMD``, ``--command=CMD``).
        permute: Options may follow operands (GNU getopt); else the first operand ends them.
    """
    options: dict[str, str] = {}
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return options, operands + args[i:]
        if not arg.startswith("-") or arg == "-":
            operands.append(arg)
            if not permute:
                return options, operands + args[i:]
            continue
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("--"):  # a cluster: -qc CMD, -cCMD
            for j, letter in enumerate(arg[1:], start=2):
                name, equals, value = f"-{letter}", "", ""
                if name in takes:
                    equals, value = ("=", arg[j:]) if arg[j:] else ("", "")
                    break
                options[name] = ""
        if name in takes and not equals:
            value = args[i] if i < len(args) else ""
            i += 1
        options[name] = value
    return options, operands


def _command_of(options: dict[str, str], names: tuple[str, ...]) -> str | None:
    return next((options[n] for n in names if n in options), None)


def _flock(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``flock [opts] FILE CMD...`` or ``FILE -c CMD``: it creates FILE; its command is judged."""
    takes = frozenset(
        {"-w", "--wait", "--timeout", "-E", "--conflict-exit-code", "-c", "--command"}
    )
    options, operands = _parse(args, takes)
    if not operands:
        return None
    lock, rest = operands[0], operands[1:]
    if not lock.isdigit() and rest and outside_temp(lock, allowed):
        return f"it runs flock, which creates its lock file {lock}"
    line = _command_of(options, ("-c", "--command"))
    if rest[:1] in (["-c"], ["--command"]):
        line = rest[1] if len(rest) > 1 else ""
    elif line is None:
        return _argv_writes(_unwrapped(rest)[0], fed, allowed)
    return _line_writes(line, allowed) or ""


def _watch(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``watch [opts] CMD...``: the command it runs again and again, judged."""
    takes = frozenset({"-n", "--interval", "-q", "--equexit"})
    _, operands = _parse(args, takes)
    return _line_writes(" ".join(operands), allowed) or "" if operands else None


def _parallel(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``parallel [opts] CMD ::: ARGS``: its command judged; commands on its input refused.

    Its many options are not all known: the command is judged from every word before
    ``:::`` on, so an option's value is never taken for the whole command.
    """
    words = list(itertools.takewhile(lambda w: not w.startswith(":::"), args))
    starts = [i for i, w in enumerate(words) if not w.startswith("-")]
    if not starts:
        return None if fed else checks.fed_code("parallel")
    for i in starts:
        why = _argv_writes(_unwrapped(words[i:])[0], True, allowed)
        if why is not None:
            return why
    return None


def _script(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``script [-c CMD] [FILE]``: it records to FILE (``typescript``); its command judged."""
    logs = ("-I", "--log-in", "-O", "--log-out", "-B", "--log-io", "-T", "--log-timing")
    takes = frozenset({"-c", "--command", "-E", "--echo", "-m", "--logging-format", *logs})
    options, operands = _parse(args, takes, permute=True)
    if "-V" in options or "--version" in options or "-h" in options or "--help" in options:
        return ""
    written = [*operands[:1], *(options[o] for o in logs if o in options)] or ["typescript"]
    outside = [w for w in written if outside_temp(w, allowed)]
    if outside:
        return f"it runs script, which records the session in {outside[0]}"
    line = _command_of(options, ("-c", "--command"))
    return checks.fed_code("script") if line is None else _line_writes(line, allowed) or ""


def _su(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``su [-c CMD] [USER]``: its command judged; a shell reading its input refused."""
    takes = frozenset({"-c", "--command", "-s", "--shell", "-g", "--group", "-G",
                       "--supp-group", "-w", "--whitelist-environment"})  # fmt: skip
    options, _ = _parse(args, takes, permute=True)
    line = _command_of(options, ("-c", "--command"))
    return checks.fed_code("su") if line is None else _line_writes(line, allowed) or ""


_CHECKS: dict[str, checks.Check] = {
    **{program: checks.delegate(program) for program in checks.DELEGATES},
    **builtin_checks(_line_writes, _argv_writes),
    **dict.fromkeys(_SHELLS, _shell),
    **dict.fromkeys(("source", "."), checks.source),
    **dict.fromkeys(("su", "runuser"), _su),
    "flock": _flock,
    "watch": _watch,
    "parallel": _parallel,
    "script": _script,
    "sort": checks.sort,
    "shuf": checks.output_option("shuf", "ino"),
    "uniq": checks.uniq,
    "mktemp": checks.mktemp,
    **dict.fromkeys(("awk", "gawk"), checks.awk),
    "eval": _eval,
    "git": git,
    "cp": checks.cp,
    "sed": checks.sed,
    "mv": checks.temp_writer(False, frozenset({"-t", "-S", "--suffix"})),
    **dict.fromkeys(("rm", "rmdir", "tee"), checks.temp_writer(False, frozenset())),
    "mkdir": checks.temp_writer(False, frozenset({"-m", "--mode"})),
    "touch": checks.temp_writer(False, frozenset({"-t", "-d", "-r", "--date", "--reference"})),
    "find": _find,
    "tar": checks.tar,
    "unzip": checks.unpack("lvtpZz", ()),
    **dict.fromkeys(("gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd"),
                    checks.unpack("clt", ("--stdout", "--to-stdout", "--list", "--test"))),
    "curl": checks.curl,
    "wget": checks.wget,
}  # fmt: skip


__all__ = ["WRITING_COMMANDS", "shell_writes"]

"""What one program's arguments show: the checks of :mod:`taskloom.permissions.read_only`.

Each check reads one program's arguments the way the program parses them and says why the
command writes files, "" when it surely does not, or None when it has no opinion (the
read-only policy's list of writing commands decides).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from taskloom.permissions._package_checks import package_check
from taskloom.permissions._shell_text import outside_temp

#: A check of one program's arguments: why it writes; "" when it surely does not; None when
#: it has no opinion. Its arguments: the program's arguments, whether more come from
#: elsewhere (``xargs``), and the temporary directories.
Check = Callable[[list[str], bool, tuple[str, ...]], "str | None"]


def fed_code(what: str) -> str:
    return (
        f"it feeds {what} the commands or code to run on its input, which cannot be judged "
        "from the command's text"
    )


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


def interpreter_check(program: str) -> Check | None:
    """The check of an interpreter's inline code, if ``program`` is one."""
    name = re.sub(r"[\d.]+$", "", program)  # python3.11 is python
    if name not in _INTERPRETERS:
        return None
    inline, longs, takes, stops = _INTERPRETERS[name]

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        i = 0
        while i < len(args):
            arg = args[i]
            if name in ("node", "nodejs") and arg.split("=")[0] in ("--test", "--run"):
                return None  # the test files (a package script) it finds: not fed code
            if arg in longs or arg.startswith(tuple(f"{o}=" for o in longs)):
                return _inline(program, arg)
            if arg == "-":
                return fed_code(program)
            if not arg.startswith("-"):
                return fed_code(program) if fed_path(arg) else None  # a script by its path
            for j, letter in enumerate(arg[1:] if not arg.startswith("--") else ""):
                if letter in inline:
                    return _inline(program, f"-{letter}")
                if letter in stops:  # ``-m pip``: a package manager is judged as one
                    module, after = (
                        (arg[j + 2 :], i + 1) if arg[j + 2 :] else (_at(args, i + 1), i + 2)
                    )
                    manager = package_check(module)
                    return manager(args[after:], fed, allowed) if manager else None
                if letter in takes:
                    i += 1 if j == len(arg) - 2 else 0
                    break
            i += 1
        if fed or (args and all(a in _INFO for a in args)):
            return None
        return fed_code(program)

    return check


def _at(args: list[str], index: int) -> str:
    return args[index] if index < len(args) else ""


def _inline(program: str, option: str) -> str:
    return (
        f"it runs inline {program} code ({option}), which a read-only agent may not run: what "
        "code does cannot be judged from its text. Run tests as `python -m pytest ...`"
    )


def temp_writer(dest_only: bool, takes: frozenset[str]) -> Check:
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
        return "" if not any(outside_temp(w, allowed) for w in written) else None

    return check


def tar(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
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


def unpack(stdout_letters: str, longs: tuple[str, ...]) -> Check:
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


def curl(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``curl``: ``-o``, ``-O`` and the options that save to a file."""
    files, seen = _saves(
        args, "AbCcDdEeFHKmoPQrTtUuwXxYyz", "oDc",
        ("--output", "--dump-header", "--cookie-jar", "--trace", "--trace-ascii", "--libcurl",
         "--stderr", "--etag-save", "--hsts", "--alt-svc"),
    )  # fmt: skip
    if seen & {"O", "J", "--remote-name", "--remote-name-all", "--remote-header-name"}:
        return "it runs curl -O, which saves what it downloads in the working directory"
    outside = [f for f in files if f != "-" and outside_temp(f, allowed)]
    return f"it runs curl saving to {outside[0]}" if outside else ""


def wget(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``wget``: it saves what it downloads, unless to standard output or the temp dirs."""
    docs, seen = _saves(args, "OoaPeiBtTwQUlARDIX", "O", ("--output-document",))
    logs, _ = _saves(args, "OoaPeiBtTwQUlARDIX", "oa", ("--output-file", "--append-output"))
    if not docs and "--spider" not in seen:
        return "it runs wget, which saves what it downloads"
    outside = [f for f in [*docs, *logs] if f != "-" and outside_temp(f, allowed)]
    return f"it runs wget saving to {outside[0]}" if outside else ""


def options_seen(
    args: list[str], takes: str = "", long_takes: tuple[str, ...] = (), rest: str = ""
) -> set[str]:
    """The options of ``args`` as getopt reads them: ``-x`` per letter, and long names.

    Args:
        args: The program's arguments (options may follow operands, as GNU tools allow).
        takes: Letters that take a value (the rest of the cluster, or the next word).
        long_takes: Long options that take a value (or an unambiguous prefix of one).
        rest: Letters whose optional value is the rest of the cluster (``sed -i.bak``).
    """
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, equals, _ = arg.partition("=")
            seen.add(name)
            if not equals and len(name) > 2 and any(t.startswith(name) for t in long_takes):
                i += 1
        elif arg.startswith("-") and arg != "-":
            for j, letter in enumerate(arg[1:], start=1):
                seen.add(f"-{letter}")
                if letter in takes:
                    i += 1 if j == len(arg) - 1 else 0
                    break
                if letter in rest:
                    break
        i += 1
    return seen


def _has_long(seen: set[str], option: str, shortest: int) -> bool:
    """Whether ``seen`` holds ``option`` or a prefix of it getopt takes for it."""
    return any(len(s) >= shortest and option.startswith(s) for s in seen if s.startswith("--"))


def sed(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``sed``: ``-i`` (in a cluster too: ``-ni``, ``-i.bak``) or ``--in-place`` edits files.

    Its options are read as options (anywhere before ``--``), so ``-i`` inside the script
    (``sed -n '/-i/p'``) is not one.
    """
    seen = options_seen(args, "efl", ("--expression", "--file", "--line-length"), rest="i")
    if "-i" in seen or _has_long(seen, "--in-place", 3):
        return "it runs sed -i, which edits files in place"
    return None


_CP_WRITES = temp_writer(True, frozenset({"-t", "-S", "--suffix"}))


def cp(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``cp``: a link made (``-s``, ``-l``) is refused like ``ln``; a copy as a temp writer.

    Writing through a link made in the temporary directory writes the file it points to,
    which the temporary directory's test cannot see before the command runs.
    """
    longs = ("--suffix", "--target-directory", "--sparse", "--no-preserve")
    seen = options_seen(args, "St", longs)
    if seen & {"-s", "-l"} or _has_long(seen, "--symbolic-link", 4) or _has_long(seen, "--link", 3):
        return "it runs cp making links (-s, -l), which like ln may let a file be written"
    return _CP_WRITES(args, fed, allowed)


_FED_PATH = re.compile(r"(^|/)(dev/(stdin|fd/|tcp/|udp/)|proc/[^/]+/fd/)|^[<>]\(")


def fed_path(arg: str) -> bool:
    """Whether ``arg``, named as a script, is the command's input or a pipe (``<(...)``).

    Read after its dots and doubled slashes (``/dev/./stdin``, ``//dev/stdin``), a process
    named by its variable (``/proc/$$/fd/0``), and the network (``/dev/tcp/...``) too.
    """
    return _FED_PATH.search(posixpath.normpath(arg) if arg else arg) is not None


def source(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``source`` / ``.``: a script by its path is not judged; its input or a pipe is fed code."""
    return fed_code("the shell") if args and fed_path(args[0]) else None


def output_option(program: str, takes: str) -> Check:
    """``sort -o FILE``, ``shuf -o FILE``: FILE written (``--output`` or a prefix of it too)."""

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        longs = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        prefixes = tuple(n for n in longs if len(n) > 3 and "--output".startswith(n))
        files, _ = _saves(args, takes, "o", ("--output", *prefixes))
        outside = [f for f in files if outside_temp(f, allowed)]
        return f"it runs {program} -o {outside[0]}, which writes it" if outside else None

    return check


sort = output_option("sort", "okStT")


def uniq(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``uniq IN OUT`` writes OUT."""
    operands, i = [], 0
    while i < len(args):
        if args[i] in ("-f", "-s", "-w"):
            i += 1
        elif not args[i].startswith("-") or args[i] == "-":
            operands.append(args[i])
        i += 1
    out = operands[1] if len(operands) > 1 else "-"
    return f"it runs uniq writing {out}" if out != "-" and outside_temp(out, allowed) else None


def mktemp(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``mktemp`` creates its file in the temporary directory unless told where."""
    options, rest = set(), []
    where = None
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if arg == "-p" or name in ("--tmpdir", "-p"):
            where = value or (args[i + 1] if i + 1 < len(args) else "")
        if arg.startswith("-"):
            options.add(name)
        elif args[i - 1 : i] != ["-p"]:
            rest.append(arg)
    if options & {"-u", "--dry-run"}:
        return ""
    if where is not None and outside_temp(where, allowed):
        return f"it runs mktemp creating a file in {where}"
    if where is None and rest and not options & {"-t"} and outside_temp(rest[0], allowed):
        return f"it runs mktemp creating {rest[0]}"
    return ""


def awk(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``awk -i inplace`` (gawk's in-place extension) edits its files."""
    loaded, _ = _saves(args, "FvfilEW", "il", ("--include", "--load"))
    if any(name.startswith("inplace") for name in loaded):
        return "it runs awk -i inplace, which edits files in place"
    return None


#: Programs whose work is done by another process, outside anything that confines the
#: command: a terminal multiplexer's server (tmux send-keys, run-shell), a remote or local
#: shell (ssh), a container or cluster daemon, a debugger attached to another process, the
#: scheduler, the service manager and the message bus; and programs that signal other
#: processes or change files' attributes, which no file-writing rule covers.
DELEGATES = frozenset(
    {
        "tmux", "screen", "ssh", "scp", "sftp", "mosh", "docker", "podman", "kubectl",
        "ray", "gdb", "lldb", "at", "batch", "crontab", "systemctl", "loginctl", "busctl",
        "dbus-send", "gdbus", "socat", "nc", "ncat", "netcat", "kill", "pkill", "killall",
        "setfattr", "setfacl", "chattr",
    }
)  # fmt: skip


def delegate(program: str) -> Check:
    """The check of a program of :data:`DELEGATES`: refused unless it only says its version."""

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        if args and all(a in _INFO for a in args):
            return ""
        return (
            f"it runs {program}, which has another process act (a server, a daemon) or "
            "signals processes or changes files' attributes: a read-only agent may not"
        )

    return check

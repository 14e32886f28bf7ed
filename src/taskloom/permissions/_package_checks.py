"""What a package manager's arguments show: reading what is installed, or changing it.

Its options before the subcommand are looked past (``pip -q install``, ``npm --prefix x
install``); then the subcommand decides. For most managers only the subcommands listed as
reading pass (``pip list``, ``npm ls``, ``npm audit``), so one not known here is refused;
``cargo`` and ``go`` build and test through subcommands too many to list, so for them the
subcommands that write are listed instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import field

from taskloom._dataclass import dataclass

#: A check of one program's arguments (see :mod:`taskloom.permissions._program_checks`).
Check = Callable[[list[str], bool, tuple[str, ...]], "str | None"]

#: Next words: None (whatever follows), or those that keep it reading ("" for none).
_Next = frozenset[str] | None
_INFO = frozenset({"--version", "-V", "-v", "--help", "-h", "help"})


@dataclass(frozen=True)
class _Manager:
    """How one package manager's command line says whether it writes.

    Attributes:
        takes: Its options before the subcommand that take a value.
        reads: The subcommands that only read, and the next words that keep them reading;
            any other subcommand writes. None: see ``writes``.
        writes: When ``reads`` is None, the subcommands that write (and the next words that
            make them write); any other only reads (or is judged elsewhere: a build).
        bare: It writes when given no subcommand (``yarn`` installs).
        write_options: Options that make a subcommand (key, or ``*`` for any) write.
    """

    takes: frozenset[str] = frozenset()
    reads: Mapping[str, _Next] | None = None
    writes: Mapping[str, _Next] = field(default_factory=dict)
    bare: bool = False
    write_options: Mapping[str, frozenset[str]] = field(default_factory=dict)


_PIP = _Manager(
    takes=frozenset({"--python", "--log", "--proxy", "--retries", "--timeout", "--cert",
                     "--exists-action", "--trusted-host", "--client-cert", "--cache-dir",
                     "--use-feature", "--use-deprecated", "--keyring-provider"}),
    reads={**dict.fromkeys(("list", "show", "freeze", "check", "search", "index", "inspect",
                            "help", "debug", "hash", "completion")),
           "config": frozenset({"list", "get", "debug"}),
           "cache": frozenset({"dir", "info", "list"})},
)  # fmt: skip
_NPM = _Manager(
    takes=frozenset({"--prefix", "--registry", "--cache", "--userconfig", "--globalconfig",
                     "--loglevel", "-w", "--workspace"}),
    reads={**dict.fromkeys(("ls", "list", "ll", "la", "view", "v", "info", "show", "search",
                            "outdated", "test", "t", "tst", "run", "run-script", "start",
                            "explain", "why", "doctor", "root", "prefix", "bin", "help", "fund",
                            "query", "ping", "whoami", "help-search")),
           "audit": frozenset({"", "signatures"}),
           "config": frozenset({"get", "list", "ls"}),
           "pkg": frozenset({"get"}),
           "version": frozenset({""})},
)  # fmt: skip
_YARN = _Manager(
    takes=frozenset({"--cwd", "--modules-folder", "--cache-folder"}),
    reads={**dict.fromkeys(("list", "info", "why", "outdated", "audit", "test", "run", "bin",
                            "help", "licenses", "versions", "start")),
           "config": frozenset({"get", "list"}),
           "cache": frozenset({"dir", "list"}),
           "workspaces": frozenset({"info", "list"})},
    bare=True,
)  # fmt: skip
_PNPM = _Manager(
    takes=frozenset({"-C", "--dir", "--filter", "-F", "--reporter"}),
    reads={**dict.fromkeys(("list", "ls", "ll", "why", "outdated", "audit", "test", "t", "run",
                            "start", "view", "info", "help", "root", "bin", "licenses")),
           "store": frozenset({"path", "status"}),
           "config": frozenset({"get", "list"})},
    write_options={"*": frozenset({"--fix"})},
)  # fmt: skip
_UV = _Manager(
    takes=frozenset({"--directory", "--project", "--cache-dir", "--config-file", "--color",
                     "--python", "-p"}),
    reads={**dict.fromkeys(("run", "tree", "help", "export")),
           "version": frozenset({""}),
           "pip": frozenset({"list", "show", "freeze", "check", "tree"}),
           "python": frozenset({"list", "find", "dir"}),
           "tool": frozenset({"list", "dir"}),
           "cache": frozenset({"dir"}),
           "self": frozenset({"version"})},
    write_options={"*": frozenset({"-o", "--output-file"})},
)  # fmt: skip
_POETRY = _Manager(
    takes=frozenset({"-C", "--directory", "-P", "--project"}),
    reads={**dict.fromkeys(("show", "check", "search", "about", "help", "list", "run",
                            "export")),
           "env": frozenset({"info", "list"}),
           "config": frozenset({""}),
           "version": frozenset({""}),
           "debug": frozenset({"info", "resolve"})},
    write_options={"*": frozenset({"-o", "--output"})},
)  # fmt: skip
_CONDA = _Manager(
    takes=frozenset({"-n", "--name", "-p", "--prefix"}),
    reads={**dict.fromkeys(("list", "info", "search", "help", "config", "compare")),
           "env": frozenset({"list", "export"})},
    write_options={"config": frozenset({"--set", "--add", "--append", "--prepend", "--remove",
                                        "--remove-key"}),
                   "env": frozenset({"-f", "--file"})},
)  # fmt: skip
_PIPX = _Manager(reads={**dict.fromkeys(("list", "environment", "help"))})
_CARGO = _Manager(
    takes=frozenset({"-C", "--config", "-Z", "--color"}),
    writes=dict.fromkeys(("install", "uninstall", "add", "remove", "rm", "update", "new",
                          "init", "fix", "publish", "generate-lockfile", "vendor", "clean",
                          "login", "logout", "owner", "yank")),
)  # fmt: skip
_GO = _Manager(
    takes=frozenset({"-C"}),
    writes={**dict.fromkeys(("install", "get", "generate", "fix", "clean", "fmt")),
            "mod": frozenset({"tidy", "vendor", "init", "edit", "download"}),
            "work": frozenset({"init", "use", "edit", "sync", "vendor"})},
    write_options={"env": frozenset({"-w", "-u"})},
)  # fmt: skip
_MANAGERS: dict[str, _Manager] = {
    "pip": _PIP, "npm": _NPM, "yarn": _YARN, "pnpm": _PNPM, "uv": _UV, "poetry": _POETRY,
    "conda": _CONDA, "mamba": _CONDA, "micromamba": _CONDA, "pipx": _PIPX, "cargo": _CARGO,
    "go": _GO,
}  # fmt: skip


def package_check(program: str) -> Check | None:
    """The check of a package manager's command line, if ``program`` is one (``pip3.11``)."""
    name = re.sub(r"[\d.]+$", "", program)
    manager = _MANAGERS.get(name)
    if manager is None:
        return None

    def check(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
        sub, rest, before = _split(args, manager.takes)
        options = before | {w.split("=", 1)[0] for w in rest if w.startswith("-")}
        following = next((w for w in rest if not w.startswith("-")), "")
        if sub is None:
            writes = manager.bare and not options & _INFO
        elif manager.reads is not None:
            keeps = manager.reads.get(sub, frozenset())
            writes = sub not in manager.reads or (keeps is not None and following not in keeps)
        else:
            makes = manager.writes.get(sub, frozenset())
            writes = sub in manager.writes and (makes is None or following in makes)
        by_option = manager.write_options.get("*", frozenset()) | manager.write_options.get(
            sub or "", frozenset()
        )
        if writes or options & by_option:
            line = " ".join([program, *args])
            return f"it runs {line!r}, which changes the installed packages or the project"
        return ""

    return check


def _split(args: list[str], takes: frozenset[str]) -> tuple[str | None, list[str], set[str]]:
    """The subcommand (past the options before it), the words after it, the options before."""
    before: set[str] = set()
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, equals, _ = args[i].partition("=")
        before.add(name)
        i += 2 if name in takes and not equals else 1
    return (args[i], args[i + 1 :], before) if i < len(args) else (None, [], before)

"""What git's arguments show: a read-only agent may read the repository, not change it.

Git's own options before the subcommand are read: a ``-c`` or ``--config-env`` of a key
that runs a command (a pager, an editor, an alias, a filter, a protocol...) is refused, as
are the environment variables that do the same (:func:`env_writes`). Then the subcommand: the
ones that always write are refused, and so is one not known to only read (``git difftool``,
``git mailinfo``, an alias); options that write or run (``--output`` or a prefix git takes
for it, ``grep -O``, ``--upload-pack``, an ``ext::`` address) too. For the others, their
options say whether they only read
(``git stash list``, ``git tag -l``, ``git config --get``, ``git branch -a``) or write
(``git stash``, ``git tag v1``, ``git config k v``, ``git branch new``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Subcommands that always change the repository, its index or the work tree.
_WRITES = frozenset({
    "add", "commit", "push", "checkout", "switch", "reset", "restore", "rm", "mv", "am",
    "clean", "merge", "rebase", "cherry-pick", "revert", "pull", "fetch", "init", "init-db",
    "gc", "prune", "repack", "pack-refs", "update-ref", "update-index", "checkout-index",
    "read-tree", "filter-branch", "filter-repo", "lfs", "maintenance", "clone", "fast-import",
    "prune-packed", "write-tree", "commit-tree", "mktag", "mktree", "unpack-objects",
    "index-pack", "update-server-info", "annex",
})  # fmt: skip
#: Subcommands that read unless their first word names one of these actions... or reads.
_READ_ACTIONS: dict[str, frozenset[str]] = {
    "stash": frozenset({"list", "show"}),
    "worktree": frozenset({"list"}),
    "sparse-checkout": frozenset({"list"}),
    "bisect": frozenset({"log", "visualize", "view", "help"}),
    "rerere": frozenset({"status", "diff", "remaining"}),
    "bundle": frozenset({"verify", "list-heads"}),
    "commit-graph": frozenset({"verify"}),
    "multi-pack-index": frozenset({"verify"}),
}
#: ... or read when the first word is missing or one of these (``git notes`` lists).
_READ_BARE: dict[str, frozenset[str]] = {
    "notes": frozenset({"list", "show"}),
    "submodule": frozenset({"status", "summary"}),
    "remote": frozenset({"show", "get-url"}),
}
#: ... or write only when the first word is one of these.
_WRITE_ACTIONS: dict[str, frozenset[str]] = {"reflog": frozenset({"expire", "delete"})}
#: Subcommands that only read (with the option checks of :func:`_subcommand`); any other
#: not judged by the tables above is refused, since git has many that write a file.
_READS = frozenset({
    "status", "log", "show", "diff", "diff-tree", "diff-index", "diff-files", "blame",
    "annotate", "grep", "ls-files", "ls-tree", "ls-remote", "rev-parse", "rev-list",
    "cat-file", "describe", "shortlog", "for-each-ref", "show-ref", "name-rev",
    "merge-base", "count-objects", "version", "help", "var", "check-ignore", "check-attr",
    "check-mailmap", "check-ref-format", "cherry", "range-diff", "whatchanged",
    "verify-commit", "verify-tag", "verify-pack", "show-branch", "archive", "fsck",
    "get-tar-commit-id", "column", "stripspace", "patch-id", "show-index", "fmt-merge-msg",
    "request-pull", "interpret-trailers",
})  # fmt: skip
#: Options (as given, or a prefix git takes for them) that write a file or run a command:
#: ``grep --open-files-in-pager=rm``, ``ls-remote --upload-pack=CMD``, ``archive --exec``.
_WRITING_OPTIONS = ("--output", "--open-files-in-pager", "--upload-pack", "--exec",
                    "--remote", "--in-place", "--lost-found", "--receive-pack")  # fmt: skip
#: Short options that do the same, by subcommand (``grep -Orm``, ``archive -ox.tar``).
_WRITING_LETTERS = {"grep": "O", "archive": "o", "ls-remote": "u"}
#: Config keys whose value git runs (lower case; ``alias.x = !cmd`` too).
_RUNS = re.compile(
    r"(alias|pager|filter|include|includeif|browser|man|difftool|mergetool|protocol)\..*"
    r"|.*\.(textconv|command|driver|helper|program|cmd|editor|pager|sshcommand|askpass"
    r"|hookspath|fsmonitor|gitproxy|external|difffilter|packobjectshook|browser|path)"
)
#: Environment variables whose value git runs or reads its configuration from.
RUNNING_ENV = re.compile(
    r"GIT_(PAGER|EDITOR|SEQUENCE_EDITOR|SSH|SSH_COMMAND|ASKPASS|EXTERNAL_DIFF|PROXY_COMMAND"
    r"|EXEC_PATH|CONFIG|CONFIG_\w+)|PAGER|EDITOR|VISUAL|SSH_ASKPASS"
)
_GLOBAL_TAKES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace",
                           "--super-prefix", "--config-env", "--list-cmds"})  # fmt: skip


def env_writes(assignments: list[str]) -> str | None:
    """Why variables set for a git command may run a command (``GIT_PAGER=...``), if so."""
    for assignment in assignments:
        name = assignment.split("=", 1)[0]
        if RUNNING_ENV.fullmatch(name):
            return f"it sets {name}, whose value git may run as a command"
    return None


def git(args: list[str], fed: bool, allowed: tuple[str, ...]) -> str | None:
    """``git``: its global options, then whether its subcommand writes (module docstring)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, equals, value = args[i].partition("=")
        if name in _GLOBAL_TAKES and not equals:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        i += 1
        if name == "--exec-path" and equals:
            return "it runs git with --exec-path, from where git runs its programs"
        key = value.split("=", 1)[0].lower()
        if name in ("-c", "--config-env") and _RUNS.fullmatch(key):
            return f"it runs git with {name} {key}, a setting whose value git may run"
    if i >= len(args):
        return ""
    return _subcommand(args[i], args[i + 1 :])


def _subcommand(sub: str, rest: list[str]) -> str:
    """Why ``git SUB REST`` writes; "" when it only reads."""
    operands = [w for w in rest if not w.startswith("-")]
    options = {w.split("=", 1)[0] for w in rest if w.startswith("-")}
    first = operands[0] if operands else None
    why = _writing_option(sub, rest)
    if why is not None:
        return why
    if sub in _READ_ACTIONS:
        writes = first not in _READ_ACTIONS[sub]
    elif sub in _WRITE_ACTIONS:
        writes = first in _WRITE_ACTIONS[sub]
    elif sub in _READ_BARE:
        writes = first is not None and first not in _READ_BARE[sub]
    elif sub in _CONDITIONS:
        writes = _CONDITIONS[sub](operands, options)
    elif sub not in _WRITES and sub not in _READS:
        return (
            f"it runs git {sub}, which is not known to only read (git has many subcommands "
            "that write a file or run a command)"
        )
    else:
        writes = sub in _WRITES
    line = " ".join(["git", sub, *rest])
    return f"it runs {line!r}, which changes the repository or its files" if writes else ""


def _writing_option(sub: str, rest: list[str]) -> str | None:
    """Why an option of ``git SUB`` writes a file or runs a command (``--outp=f`` too)."""
    letters = _WRITING_LETTERS.get(sub, "")
    for word in rest:
        name = word.split("=", 1)[0]
        if word.startswith("--") and len(name) >= 4:
            if any(
                o.startswith(name) for o in _WRITING_OPTIONS if o != "--remote" or sub == "archive"
            ):
                return f"it runs git {sub} {name}, which writes a file or runs a command"
        elif word.startswith("-") and set(word[1:]) & set(letters):
            return f"it runs git {sub} {word[:2]}, which writes a file or runs a command"
        if "ext::" in word:
            return "it names an ext:: address, for which git runs a command"
    return None


def _tag(operands: list[str], options: set[str]) -> bool:
    if options & {"-d", "--delete", "-a", "-s", "-u", "-m", "-F", "-f", "--force"}:
        return True
    listing = {"-l", "--list", "-v", "--verify", "-n", "--contains", "--no-contains",
               "--merged", "--no-merged", "--points-at", "--sort", "--format"}  # fmt: skip
    return bool(operands) and not options & listing


def _branch(operands: list[str], options: set[str]) -> bool:
    changing = {"-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "-f",
                "--force", "-u", "--set-upstream-to", "--unset-upstream", "--edit-description",
                "--track", "-t"}  # fmt: skip
    if options & changing:
        return True
    listing = {"-l", "--list", "-a", "--all", "-r", "--remotes", "--contains", "--no-contains",
               "--merged", "--no-merged", "--points-at", "--show-current", "--format",
               "--sort", "-v", "-vv", "--verbose"}  # fmt: skip
    return bool(operands) and not options & listing


def _config(operands: list[str], options: set[str]) -> bool:
    changing = {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section",
                "--remove-section", "-e", "--edit"}  # fmt: skip
    reading = {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color",
               "--get-colorbool", "-l", "--list"}  # fmt: skip
    if options & changing or operands[:1] in (["set"], ["unset"], ["edit"],
                                              ["rename-section"], ["remove-section"]):  # fmt: skip
        return True
    if options & reading or operands[:1] in (["get"], ["list"]):
        return False
    # ``--file F``, ``--blob B``, ``--type T``... take values: two words may be one key.
    valued = options & {"-f", "--file", "--blob", "--type", "--default", "--comment"}
    return len(operands) - len(valued) >= 2


def _replace(operands: list[str], options: set[str]) -> bool:
    return bool(operands or options & {"-d", "--delete", "-f", "--edit", "--graft"})


def _symbolic_ref(operands: list[str], options: set[str]) -> bool:
    return len(operands) >= 2 or bool(options & {"-d", "--delete"})


_CONDITIONS: dict[str, Callable[[list[str], set[str]], bool]] = {
    "tag": _tag,
    "branch": _branch,
    "config": _config,
    "replace": lambda o, opts: _replace(o, opts) and not opts & {"-l", "--list"},
    "symbolic-ref": _symbolic_ref,
    "apply": lambda o, opts: not opts & {"--check", "--stat", "--numstat", "--summary"},
    "merge-file": lambda o, opts: not opts & {"-p", "--stdout"},
    "format-patch": lambda o, opts: "--stdout" not in opts,
    "hash-object": lambda o, opts: "-w" in opts,
}

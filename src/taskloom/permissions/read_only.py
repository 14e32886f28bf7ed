"""What a read-only agent may not do: edit files, or write them through its shell.

A read-only agent (the built-in ``verification`` agent) is offered no Write, Edit or
NotebookEdit tool; its permission policy (:meth:`PermissionPolicy.read_only
<taskloom.permissions.policy.PermissionPolicy.read_only>`) also denies, in every mode:

- every edit-kind tool (an MCP server's, say);
- a shell command that writes a file as far as the command line shows (:func:`shell_writes`):
  an output redirection to anything but ``/dev/null`` or a file under the temporary directory
  (where a verifier may keep a throw-away script), or a program or subcommand that changes
  files, the repository or the installed packages (:data:`WRITING_COMMANDS`), also behind
  ``env``, ``sudo`` and the like, inside ``$(...)`` and backticks, and inside ``sh -c '...'``.

What a program does that its command line does not show (a test suite writing a cache, a
script opening a file) the policy cannot see; the agent's prompt forbids it.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Iterable

from taskloom.permissions.matchers import (
    command_matches,
    normalize_command,
    split_command,
    with_hidden,
)
from taskloom.permissions.rules import PermissionRequest

#: Commands that change files, the repository or the installed packages, as Bash rules.
WRITING_COMMANDS: tuple[str, ...] = (
    *(f"{p}:*" for p in ("rm", "rmdir", "mv", "cp", "touch", "mkdir", "ln", "chmod", "chown",
                         "chgrp", "truncate", "dd", "tee", "install", "patch", "shred",
                         "unlink", "rsync", "mkfifo")),
    "sed -i*", "sed *-i*", "sed --in-place*", "perl -i*", "perl *-pi*", "find *-delete*",
    "find *-exec rm*", "xargs rm:*",
    *(f"git {s}:*" for s in ("add", "commit", "push", "checkout", "switch", "reset", "restore",
                             "rm", "mv", "stash", "apply", "am", "clean", "merge", "rebase",
                             "cherry-pick", "revert", "tag", "pull", "fetch", "init",
                             "worktree", "config", "branch -d", "branch -D", "branch -m")),
    *(f"{pm}:*" for pm in ("pip install", "pip uninstall", "pip3 install", "uv add", "uv pip",
                           "uv sync", "poetry add", "poetry install", "npm install", "npm i",
                           "npm ci", "npm uninstall", "yarn add", "yarn install", "pnpm add",
                           "pnpm install", "cargo install", "go install", "go get",
                           "apt-get", "apt", "brew", "gem install")),
    "python -m pip install*", "python3 -m pip install*",
)  # fmt: skip

#: Shells whose ``-c`` argument is a command line of its own, looked into.
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})


def shell_writes(request: PermissionRequest, temp_dirs: Iterable[str] = ()) -> str | None:
    """Why the shell command of ``request`` writes files, as far as its text shows; None if not.

    Args:
        request: A Bash (or Monitor) call; its ``target`` is the command line.
        temp_dirs: Where redirections may write besides the system's temporary directory.
    """
    command = request.target or ""
    allowed = _temp_roots(temp_dirs)
    for line in _command_lines(command):
        target = _redirect_target(line, allowed)
        if target is not None:
            return f"it writes to {target} by an output redirection"
        for part in with_hidden(split_command(_without_heredocs(line))):
            for pattern in WRITING_COMMANDS:
                if command_matches(pattern, part) or command_matches(
                    pattern, normalize_command(part)
                ):
                    return f"it runs {part!r}, which changes files ({pattern})"
    return None


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


def _command_lines(command: str) -> list[str]:
    """``command``, and the command lines its ``sh -c '...'`` parts run, recursively."""
    found = [command]
    for part in split_command(command):
        try:
            words = shlex.split(normalize_command(part))
        except ValueError:
            continue
        if len(words) >= 3 and os.path.basename(words[0]) in _SHELLS and words[1] == "-c":
            found += _command_lines(words[2])
    return found


def _temp_roots(extra: Iterable[str]) -> tuple[str, ...]:
    roots = {tempfile.gettempdir(), "/tmp", *extra}
    return tuple(os.path.realpath(r) for r in roots)


def _redirect_target(command: str, temp_roots: tuple[str, ...]) -> str | None:
    """The first file an output redirection of ``command`` writes outside the temp dirs."""
    for target in _redirect_targets(command):
        if target == "/dev/null" or re.fullmatch(r"&?\d+|-", target):
            continue  # a descriptor copied or closed, or nothing kept
        if any(c in target for c in "$`*?[{~") or not os.path.isabs(target):
            return target  # where it goes depends on the shell, or on where it stands
        real = os.path.realpath(target)
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in temp_roots):
            return target
    return None


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


__all__ = ["WRITING_COMMANDS", "shell_writes"]

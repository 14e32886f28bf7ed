"""Imports in instruction files (``@path``), and whether one may reach outside the project.

Claude Code's syntax: ``@path`` at the start of a line or after a space, relative to the file,
``~/`` or absolute, not in code spans or blocks; block-level HTML comments are left out of what
the model is shown. A project's file importing from outside the project is followed once the
user approved such imports for the project (:func:`external_imports_approved`).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

#: Where an instruction file comes from.
Scope = Literal["user", "project", "local"]

_IMPORT = re.compile(r"(?:^|\s)@((?:[^\s\\]|\\ )+)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


class Approval:
    """Whether the user approved the project's imports from outside it (read when needed)."""

    def __init__(self, project: Path, cwd: Path) -> None:
        self.project = project
        self.cwd = cwd
        self._granted: bool | None = None

    def granted(self) -> bool:
        """The answer, read once (most sessions never import from outside)."""
        if self._granted is None:
            self._granted = external_imports_approved(self.project, self.cwd)
        return self._granted

    def refusal(self, scope: str) -> str:
        """Why an import from outside was not followed, and how to allow it."""
        return (
            f"a {scope} file imports from outside it once the project's external imports "
            f"are approved: hasClaudeMdExternalIncludesApproved for {self.project} in "
            f"{claude_global_config()}, as Claude Code's dialog records it; the user's own "
            "CLAUDE.md and rules may import any file)"
        )


def claude_global_config() -> Path:
    """Claude Code's global configuration: ``$CLAUDE_CONFIG_DIR/.claude.json``, else ``~``'s."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(env).expanduser() if env else Path.home()) / ".claude.json"


def external_imports_approved(project: Path, cwd: Path) -> bool:
    """Whether the user approved imports from outside ``project`` in its instruction files.

    Claude Code asks once per project, the first time its files import from outside, and
    records the answer in its global configuration (``projects[PATH]`` with
    ``hasClaudeMdExternalIncludesApproved``, PATH the repository root, or the working
    directory for older versions and directories outside a repository). Headless it never
    asks: until approved, such imports are not followed. taskloom reads the same record.
    """
    try:
        with claude_global_config().open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return False
    for where in dict.fromkeys((project, cwd)):
        entry = projects.get(unicodedata.normalize("NFC", str(where)))
        if isinstance(entry, dict) and entry.get("hasClaudeMdExternalIncludesApproved") is True:
            return True
    return False


def imports(text: str, base: Path) -> list[Path]:
    """The files ``text`` imports with ``@path``, resolved from ``base``; code is left out."""
    found: list[Path] = []
    for line, code in _lines(text):
        if code or line.startswith(("    ", "\t")):  # a fenced or an indented code block
            continue
        for match in _IMPORT.finditer(_CODE_SPAN.sub(" ", line)):
            target = _import_path(match.group(1), base)
            if target is not None and target not in found:
                found.append(target)
    return found


def without_comments(text: str) -> str:
    """``text`` without its block-level HTML comments, as Claude Code sends it.

    A comment on lines of its own (``<!--`` starting a line, through the line holding
    ``-->``) is a note for the file's maintainers, not for the model. One in a code block is
    code; one never closed is kept, so a typo does not swallow the rest of the file.
    """
    lines = list(_lines(text))
    kept: list[str] = []
    i = 0
    while i < len(lines):
        line, code = lines[i]
        if (
            not code
            and line.lstrip(" ").startswith("<!--")
            and len(line) - len(line.lstrip(" ")) < 4
        ):
            end = next((j for j in range(i, len(lines)) if "-->" in lines[j][0]), None)
            if end is not None:
                i = end + 1
                continue
        kept.append(line)
        i += 1
    return "\n".join(kept)


def _lines(text: str) -> Iterator[tuple[str, bool]]:
    """Each line of ``text``, and whether it is in a fenced code block (its fences too)."""
    fence: str | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            yield line, True
        elif opened:
            fence = opened.group(1)
            yield line, True
        else:
            yield line, False


def _import_path(raw: str, base: Path) -> Path | None:
    """Where ``@raw`` points, or None when it names no path (``@user``-like words pass)."""
    raw = raw.replace("\\ ", " ").split("#", 1)[0]
    # Prose around it is not part of it: ``see @README.md.`` imports README.md.
    raw = raw.rstrip(",;:!?)")
    if raw.endswith(".") and not raw.endswith(".."):
        raw = raw.rstrip(".")
    if not raw or raw == "/" or raw.startswith("@") or not re.match(r"[~/\w.-]", raw):
        return None
    if raw.startswith("~/"):
        return Path(os.path.normpath(Path.home() / raw[2:]))
    if raw.startswith("~"):
        return None
    return Path(os.path.normpath(raw if raw.startswith("/") else base / raw))


def within(path: Path, directory: Path) -> bool:
    """Whether ``path`` is ``directory`` or below it."""
    return path == directory or directory in path.parents


__all__ = [
    "Scope",
    "claude_global_config",
    "external_imports_approved",
    "imports",
    "within",
    "without_comments",
]

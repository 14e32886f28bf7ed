"""Project instructions: ``CLAUDE.md`` and ``AGENTS.md`` files, found as Claude Code finds them.

At the start of a session (:func:`load_instructions`), in this order (later files are closer to
the work, and win where they disagree):

- **user**: each name in ``$CLAUDE_CONFIG_DIR`` (:func:`~taskloom.settings.claude_config_dir`);
- **user rules**: the Markdown files under ``$CLAUDE_CONFIG_DIR/rules`` (recursively);
- **project**: in every directory from the repository root down to the working directory
  (without a repository: from the filesystem root), ``NAME`` then ``.claude/NAME`` for each
  name, then the rules files under ``.claude/rules`` (:mod:`taskloom.instruction_rules`);
- **local**: in the same directories, after the project's, each name's local companion
  (``CLAUDE.local.md``, ``AGENTS.local.md``: the user's own, not checked in).

The names are the setting ``instructionFiles`` (default ``["CLAUDE.md", "AGENTS.md"]``).
``--setting-sources`` leaves out the scopes it leaves out (``user``, ``project``, ``local``).

A rules file whose frontmatter names ``paths`` (globs) is held back, and joins when the model
first works on a matching file, as a nested file does.

A file may import others with ``@path`` (relative to the file, ``~/``, or absolute; not inside
code spans or blocks), up to :data:`MAX_IMPORT_DEPTH` imports deep; each imported file is an
entry of its own after the one importing it. Every file is read once (a cycle of imports is
cut there). A project or local file imports from outside its project (``@~/.claude/mine.md``)
only once the user has approved the project's external imports, as Claude Code asks before
following them (:func:`external_imports_approved`): a clone cannot send the user's private
files to the model unasked. Each file is cut at :data:`MAX_FILE_CHARS` characters, all of
them together at :data:`MAX_TOTAL_CHARS`; what was cut or skipped, and why, is kept
(``/memory`` shows it).
Block-level HTML comments are left out (:func:`without_comments`), as Claude Code leaves them.

Files in the directories below, met only when the model works there (a Read, Edit, Write,
Glob, Grep or NotebookEdit on a path in a directory not read yet), are loaded then
(:class:`ConversationInstructions`) and told to the model in its next user message.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import UsageError
from taskloom.instruction_imports import (
    Approval,
    Scope,
    imports,
    within,
    without_comments,
)
from taskloom.instruction_rules import RULES_DIR, HeldRule, rule_files, rule_globs
from taskloom.messages import TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.settings import claude_config_dir

#: The setting naming the instruction files.
SETTING = "instructionFiles"
#: Its default: Claude Code's file, and the one most other coding agents read.
DEFAULT_NAMES = ("CLAUDE.md", "AGENTS.md")
#: How many imports deep a file may be (``@a`` in ``@b`` in the file: two).
MAX_IMPORT_DEPTH = 5
#: The most of one file the model is shown, in characters (Claude Code's warning threshold).
MAX_FILE_CHARS = 40_000
#: The most of all of a conversation's files together, in characters.
MAX_TOTAL_CHARS = 120_000


#: What the model is told before the files (Claude Code's words).
PREAMBLE = (
    "Codebase and user instructions are shown below. Be sure to adhere to these "
    "instructions. IMPORTANT: These instructions OVERRIDE any default behavior and you MUST "
    "follow them exactly as written."
)
_LABELS: dict[str, str] = {
    "project": " (project instructions, checked into the codebase)",
    "local": " (user's private project instructions, not checked in)",
    "user": " (user's private global instructions for all projects)",
}
#: The path argument of each tool whose use loads the instructions of the directory it names.
TOUCHING_TOOLS: dict[str, str] = {
    "Read": "file_path",
    "Edit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "path",
    "Grep": "path",
}


@dataclass(frozen=True)
class InstructionFile:
    """One file the model was given.

    Attributes:
        path: Where it is (absolute, symlinks resolved).
        scope: ``user``, ``project`` or ``local``.
        text: What the model is shown of it (cut to the caps).
        size: Its size on disk, in bytes.
        imported_by: The file whose ``@path`` brought it in, if one did.
        nested: Loaded when the model first worked in its directory (or, a conditional
            rules file, on a file it names), not at the start.
        cut: Why it was shortened, if it was.
        rule: A rules file (``.claude/rules``).
        globs: A conditional rules file's ``paths``.
    """

    path: Path
    scope: Scope
    text: str
    size: int
    imported_by: Path | None = None
    nested: bool = False
    cut: str | None = None
    rule: bool = False
    globs: tuple[str, ...] = ()

    def rendered(self) -> str:
        """The file as the session's instructions show it (its path, its scope, its text)."""
        return f"Contents of {self.path}{_LABELS[self.scope]}:\n\n{self.text}"

    def reminder(self) -> str:
        """The file as a nested file is told to the model (Claude Code's ``nested_memory``)."""
        return f"<system-reminder>\nContents of {self.path}:\n\n{self.text}\n</system-reminder>"


@dataclass
class Instructions:
    """The instruction files of a session's start.

    Attributes:
        files: The files loaded, in order.
        skipped: What was cut or left out, and why (one line each).
        names: The file names looked for (the setting's, then their local companions).
        root: The project: the repository root, else the working directory. Nested files
            are looked for below it only.
        scanned: The directories whose files were looked for at the start.
        scopes: The scopes read (``--setting-sources``).
        held: The conditional rules files, waiting for a file they name.
    """

    files: list[InstructionFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    names: tuple[str, ...] = DEFAULT_NAMES
    root: Path | None = None
    scanned: frozenset[Path] = frozenset()
    scopes: frozenset[str] = frozenset(("user", "project", "local"))
    held: list[HeldRule] = field(default_factory=list)

    def text(self) -> str:
        """The block for a system prompt (``""`` without files: a prompt gains nothing)."""
        return render(self.files)

    def chars(self) -> int:
        """How many characters of files the model is shown."""
        return sum(len(f.text) for f in self.files)


def render(files: Sequence[InstructionFile]) -> str:
    """``files`` under Claude Code's ``claudeMd`` heading and preamble (``""``: none)."""
    if not files:
        return ""
    return "\n\n".join(["# claudeMd", PREAMBLE, *(f.rendered() for f in files)])


def instruction_names(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The file names of the setting ``instructionFiles`` (default :data:`DEFAULT_NAMES`).

    Raises:
        UsageError: The setting is not a list of plain file names.
    """
    value = settings.get(SETTING)
    if value is None:
        return DEFAULT_NAMES
    ok = isinstance(value, list) and all(
        isinstance(n, str) and n.strip() and "/" not in n and n not in (".", "..") for n in value
    )
    if not ok:
        raise UsageError(
            f"settings: {SETTING} must be a list of file names, like "
            f'["CLAUDE.md", "AGENTS.md"] (no directories); got {value!r}'
        )
    return tuple(dict.fromkeys(value))


def local_name(name: str) -> str:
    """The local companion of ``name``: ``CLAUDE.md`` → ``CLAUDE.local.md``."""
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}.local.{suffix}" if dot and stem else f"{name}.local"


def load_instructions(
    cwd: Path, settings: Mapping[str, Any], sources: Sequence[str] | None = None
) -> Instructions:
    """The instruction files for a session in ``cwd`` (see the module's docstring).

    Args:
        cwd: The session's working directory.
        settings: The effective settings (``instructionFiles``).
        sources: The settings sources read (``--setting-sources``): a scope not among them
            is not loaded. None: all.

    Raises:
        UsageError: The setting ``instructionFiles`` is malformed.
    """
    names = instruction_names(settings)
    scopes = frozenset(("user", "project", "local") if sources is None else sources)
    here = Path(os.path.realpath(cwd))
    repo = next((d for d in (here, *here.parents) if (d / ".git").exists()), None)
    # Walked from the top down: the files closest to the work come last.
    walk = [here, *here.parents]
    if repo is not None:
        walk = walk[: walk.index(repo) + 1]
    walk.reverse()
    result = Instructions(names=names, root=repo or here, scanned=frozenset(walk), scopes=scopes)
    project = repo or here
    reader = _Reader(result.skipped, MAX_TOTAL_CHARS, set(), Approval(project, here))
    if "user" in scopes:
        for name in names:
            result.files += reader.load(claude_config_dir() / name, "user", None)
        # The user's conditional rules are relative to the session's directory.
        rules = reader.load_rules(claude_config_dir() / "rules", "user", None, here, False)
        result.files += rules[0]
        result.held += rules[1]
    for directory in walk:
        bound = repo or directory
        result.files += directory_files(
            reader, directory, names, scopes, bound, nested=False, held=result.held
        )
    return result


def directory_files(
    reader: _Reader,
    directory: Path,
    names: Sequence[str],
    scopes: Iterable[str],
    bound: Path,
    *,
    nested: bool,
    held: list[HeldRule],
) -> list[InstructionFile]:
    """The files of one directory, in Claude Code's order: project ones, then local ones.

    The project's are ``NAME``, ``.claude/NAME``, then the rules files of ``.claude/rules``;
    the conditional ones among those are added to ``held`` instead.
    """
    wanted = set(scopes)
    found: list[InstructionFile] = []
    if "project" in wanted:
        for name in names:
            for path in (directory / name, directory / ".claude" / name):
                found += reader.load(path, "project", bound, nested=nested)
        rules, waiting = reader.load_rules(
            directory / RULES_DIR, "project", bound, directory, nested
        )
        found += rules
        held += waiting
    if "local" in wanted:
        for name in names:
            found += reader.load(directory / local_name(name), "local", bound, nested=nested)
    return found


class _Reader:
    """Reads files once each, within the caps, following their imports."""

    def __init__(self, skipped: list[str], budget: int, seen: set[str], approval: Approval) -> None:
        self.skipped = skipped
        self.budget = budget  # characters left for all the files
        self.seen = seen  # real paths read (or refused): each file once
        self.approval = approval

    def load_rules(
        self, directory: Path, scope: Scope, bound: Path | None, base: Path, nested: bool
    ) -> tuple[list[InstructionFile], list[HeldRule]]:
        """The rules files under ``directory``: those loaded, and the conditional ones held.

        Args:
            directory: The rules directory.
            scope: ``user`` or ``project``.
            bound: The directory their imports must stay in (None: anywhere).
            base: The directory their ``paths`` globs are relative to.
            nested: Found when the model first worked in a directory below.
        """
        loaded: list[InstructionFile] = []
        held: list[HeldRule] = []
        for path in rule_files(directory):
            real = os.path.realpath(path)
            if real in self.seen:
                continue
            try:
                with open(real, encoding="utf-8", errors="replace") as handle:
                    _, globs = rule_globs(handle.read(MAX_FILE_CHARS * 4))
            except (OSError, ValueError) as exc:
                self.seen.add(real)
                self.skipped.append(f"{path}: not loaded, {getattr(exc, 'strerror', 0) or exc}")
                continue
            if globs:
                held.append(HeldRule(Path(real), scope, globs, base, bound))
                continue
            loaded += self.load(path, scope, bound, nested=nested, rule=())
        return loaded, held

    def load(
        self,
        path: Path,
        scope: Scope,
        bound: Path | None,
        *,
        nested: bool = False,
        parent: Path | None = None,
        depth: int = 0,
        rule: tuple[str, ...] | None = None,
    ) -> list[InstructionFile]:
        """``path`` and what it imports, in order; nothing for a missing or read file.

        Args:
            path: The file.
            scope: Its scope (an imported file's is its importer's).
            bound: The directory its imports must stay in (None: anywhere, a user file's).
            nested: Found when the model first worked in its directory.
            parent: The file importing it.
            depth: How many imports deep it is.
            rule: For a rules file, its ``paths`` globs (its frontmatter is left out).
        """
        real = os.path.realpath(path)
        if real in self.seen:
            if parent is not None:
                self.skipped.append(f"@{path} in {parent}: already loaded (each file once)")
            return []
        if not os.path.isfile(real):
            if parent is not None and "." in path.name:  # a path, not a mention (``@alice``)
                self.skipped.append(f"@{path} in {parent}: no such file")
            return []
        self.seen.add(real)
        read = self._read(Path(real), scope, parent, nested, rule)
        if read is None:
            return []
        loaded = [read]
        if depth >= MAX_IMPORT_DEPTH:
            if imports(read.text, read.path.parent):
                self.skipped.append(
                    f"imports in {read.path}: not followed, {MAX_IMPORT_DEPTH} imports deep"
                )
            return loaded
        for target in imports(read.text, read.path.parent):
            inside = bound is None or within(Path(os.path.realpath(target)), bound)
            if not inside and (nested or not self.approval.granted()):
                self.skipped.append(
                    f"@{target} in {read.path}: outside the project {bound} ("
                    + (
                        "a file met in a directory below imports only from inside it)"
                        if nested
                        else self.approval.refusal(scope)
                    )
                )
                continue
            loaded += self.load(
                target, scope, bound, nested=nested, parent=read.path, depth=depth + 1
            )
        return loaded

    def _read(
        self,
        path: Path,
        scope: Scope,
        parent: Path | None,
        nested: bool,
        rule: tuple[str, ...] | None,
    ) -> InstructionFile | None:
        """One file, cut to the caps; None when it cannot be used (said why)."""
        try:
            size = path.stat().st_size
            with path.open("rb") as handle:
                raw = handle.read(MAX_FILE_CHARS * 4 + 4)  # a character is 4 bytes at most
        except OSError as exc:
            self.skipped.append(f"{path}: not read ({exc.strerror or exc})")
            return None
        if b"\0" in raw[:8192]:
            self.skipped.append(f"{path}: not text")
            return None
        text = raw.decode("utf-8", errors="replace")
        if rule is not None:
            try:
                text = rule_globs(text)[0]
            except ValueError as exc:
                self.skipped.append(f"{path}: not loaded, {exc}")
                return None
        text = without_comments(text).strip()
        if not text:
            return None
        cap = min(MAX_FILE_CHARS, self.budget)
        if cap <= 0:
            self.skipped.append(
                f"{path}: left out, the files before it fill the {MAX_TOTAL_CHARS} characters "
                "all instruction files may take"
            )
            return None
        cut = None
        if len(text) > cap or len(raw) < size:
            why = "per file" if cap == MAX_FILE_CHARS else "for all files together"
            cut = f"cut to {min(cap, len(text))} characters (the cap {why}); {size} bytes in all"
            text = text[:cap].rstrip()
            text += f"\n\n[{path} is cut here ({cut}): read the file for the rest.]"
            self.skipped.append(f"{path}: {cut}")
        self.budget -= len(text)
        globs = rule or ()
        return InstructionFile(
            path, scope, text, size, parent, nested, cut, rule is not None, globs
        )


class ConversationInstructions:
    """One conversation's instruction files: the session's, and those met as it works.

    Each conversation (the main thread, every subagent and teammate) keeps its own: a nested
    file told to one is not in another's context.
    """

    def __init__(self, base: Instructions) -> None:
        """Start from the session's files (``base``)."""
        self.base = base
        self.files: list[InstructionFile] = list(base.files)
        self.skipped: list[str] = list(base.skipped)
        self.held: list[HeldRule] = list(base.held)
        self._visited: set[Path] = set(base.scanned)
        seen = {os.path.realpath(f.path) for f in base.files}
        root = base.root or Path.cwd()
        approval = Approval(root, root)  # never asked: files met later import from inside
        self._reader = _Reader(self.skipped, MAX_TOTAL_CHARS - base.chars(), seen, approval)

    def after_tools(
        self, calls: Sequence[ToolUseBlock], results: Sequence[ToolResultBlock], cwd: Path
    ) -> list[TextBlock]:
        """The files of the directories the calls first worked in, as reminders.

        Only calls that succeeded count (a refused Read saw nothing there).

        Args:
            calls: The turn's tool calls.
            results: Their results, in the same order.
            cwd: Where relative paths are resolved from (the agent's shell directory).
        """
        ok = {r.tool_use_id for r in results if not r.is_error}
        found: list[InstructionFile] = []
        for call in calls:
            key = TOUCHING_TOOLS.get(call.name)
            raw = call.input.get(key) if key else None
            if call.id in ok and isinstance(raw, str) and raw:
                found += self.touch(Path(os.path.expanduser(raw)), cwd)
        return [TextBlock(text=f.reminder()) for f in found]

    def touch(self, path: Path, cwd: Path) -> list[InstructionFile]:
        """The new files for work on ``path``.

        Those of the directories from the project down to ``path``'s not read yet, then the
        conditional rules files whose ``paths`` match ``path``.
        """
        root = self.base.root
        if root is None:
            return []
        target = Path(os.path.realpath(cwd / path))
        directory = target if os.path.isdir(target) else target.parent
        new: list[InstructionFile] = []
        if within(directory, root):
            chain = [d for d in (directory, *directory.parents) if within(d, root)]
            for d in reversed(chain):
                if d in self._visited:
                    continue
                self._visited.add(d)
                new += directory_files(
                    self._reader,
                    d,
                    self.base.names,
                    self.base.scopes,
                    root,
                    nested=True,
                    held=self.held,
                )
        for rule in [r for r in self.held if r.matches(target)]:
            self.held.remove(rule)
            new += self._reader.load(
                rule.path,
                rule.scope,
                rule.bound,
                nested=True,
                rule=rule.globs,
            )
        self.files += new
        return new


__all__ = [
    "DEFAULT_NAMES",
    "MAX_FILE_CHARS",
    "MAX_IMPORT_DEPTH",
    "MAX_TOTAL_CHARS",
    "PREAMBLE",
    "SETTING",
    "TOUCHING_TOOLS",
    "ConversationInstructions",
    "InstructionFile",
    "Instructions",
    "imports",
    "instruction_names",
    "load_instructions",
    "local_name",
    "render",
    "without_comments",
]

"""What skills and custom slash commands are, once found: one record each, and the catalog.

Claude Code treats both as prompt commands: a skill (``<root>/<name>/SKILL.md``) and a custom
command (``<root>/**/<name>.md``) each have a name, a description, a Markdown body that
becomes the model's instructions, and optional ``allowed-tools`` (permission rules that hold,
without asking, while it runs) and ``model``. Both can be typed as ``/name args``; the model
invokes them with the Skill tool.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Literal

from taskloom._dataclass import dataclass

log = logging.getLogger("taskloom.skills")

#: What kind of file a prompt command came from.
Kind = Literal["skill", "command"]


@dataclass(frozen=True, slots=True)
class SkillRoot:
    """A directory skills or commands are found under, and what they are called there.

    Attributes:
        directory: The directory (``~/.claude/skills``, ``.claude/commands``, a plugin's
            ``skills``), or one file a plugin's manifest names (a skill's ``SKILL.md``, a
            command's ``.md``).
        kind: ``skill``: one ``<name>/SKILL.md`` per directory; ``command``: every ``*.md``
            below it, subdirectories naming them (``frontend/component.md`` is
            ``frontend:component``).
        scope: Where it comes from, as listings say: ``user``, ``project``, or a plugin's
            name.
        prefix: Put before each name with a colon (a plugin's name: ``plugin:skill``), if any.
        plugin_root: The plugin's directory, for a plugin's root (``${CLAUDE_PLUGIN_ROOT}``).
    """

    directory: Path
    kind: Kind
    scope: str
    prefix: str | None = None
    plugin_root: Path | None = None


@dataclass(frozen=True, slots=True)
class PromptCommand:
    """One skill or custom slash command.

    Attributes:
        name: What it is invoked by (``/name``, the Skill tool's ``skill``).
        kind: ``skill`` or ``command``.
        description: What it does (its frontmatter's, else its body's first line).
        body: Its Markdown body: the instructions, before arguments are put in.
        path: The file it was read from.
        scope: Where it comes from (``user``, ``project``, a plugin's name).
        base_dir: A skill's directory (the model is told it: its files are there).
        allowed_tools: Permission rules allowed without asking while it runs.
        model: The model it runs with, if it names one (``inherit``: none).
        argument_hint: What arguments it takes, as completion shows it.
        argument_names: Names of its positional arguments (``$name`` in its body).
        user_invocable: It may be typed as ``/name``.
        model_invocable: The model may invoke it with the Skill tool.
        described: Its frontmatter gives a description (else one was made up).
        plugin_root: The directory of the plugin it comes from, if it does.
    """

    name: str
    kind: Kind
    description: str
    body: str
    path: Path
    scope: str
    base_dir: Path | None = None
    allowed_tools: tuple[str, ...] = ()
    model: str | None = None
    argument_hint: str | None = None
    argument_names: tuple[str, ...] = ()
    user_invocable: bool = True
    model_invocable: bool = True
    described: bool = True
    plugin_root: Path | None = None


@dataclass
class SkillCatalog:
    """The skills and custom commands in effect, and the files that lost or failed.

    Attributes:
        active: Name -> the one in effect (the first root that has it wins).
        shadowed: Ones a root before theirs had a command of the same name for.
        skipped: ``(file, reason)`` for each file that could not be used.
    """

    active: dict[str, PromptCommand] = field(default_factory=dict)
    shadowed: list[PromptCommand] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __iter__(self) -> Iterator[PromptCommand]:
        return iter(self.active.values())

    def __len__(self) -> int:
        return len(self.active)

    def get(self, name: str) -> PromptCommand | None:
        """The command called ``name`` (a leading ``/`` is ignored), or None."""
        return self.active.get(name.removeprefix("/"))

    def add(self, command: PromptCommand) -> None:
        """Add ``command`` unless one of its name is in effect already (that one wins)."""
        if command.name in self.active:
            self.shadowed.append(command)
            return
        self.active[command.name] = command

    def skip(self, path: Path, reason: str) -> None:
        """Record (and log) a file that could not be used."""
        self.skipped.append((str(path), reason))
        log.warning("skipping %s: %s", path, reason)

    def skills(self) -> list[PromptCommand]:
        """The skills in effect, by name."""
        return sorted((c for c in self if c.kind == "skill"), key=lambda c: c.name)

    def typed(self) -> list[PromptCommand]:
        """What a user may type as ``/name``, by name."""
        return sorted((c for c in self if c.user_invocable), key=lambda c: c.name)

    def for_model(self) -> list[PromptCommand]:
        """What the Skill tool offers the model, by name.

        Skills, and commands whose file describes them (Claude Code offers a command the
        model cannot know what it does for no better than its first line), unless their
        frontmatter says ``disable-model-invocation``.
        """
        return sorted(
            (c for c in self if c.model_invocable and (c.kind == "skill" or c.described)),
            key=lambda c: c.name,
        )


__all__ = ["Kind", "PromptCommand", "SkillCatalog", "SkillRoot"]

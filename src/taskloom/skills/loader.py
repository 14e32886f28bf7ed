"""Finding skills and custom slash commands under their roots, as Claude Code does.

Roots, in precedence order (the first to have a name wins; :func:`default_roots`):

1. user skills: ``skills/<name>/SKILL.md`` of Claude Code's configuration directory
   (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``);
2. project skills: ``.claude/skills/<name>/SKILL.md`` in the working directory and each
   directory above it up to the repository root, the nearest first;
3. user commands: ``commands/**/*.md`` of the configuration directory;
4. project commands: ``.claude/commands/**/*.md``, likewise.

A skill and a command of the same name: the skill wins. Subdirectories of a commands root
namespace its commands with colons (``.claude/commands/frontend/component.md`` is
``/frontend:component``); a directory there holding a ``SKILL.md`` is one command named after
the directory. More roots (a plugin's, with its name as the prefix) are passed to
:func:`load_catalog` after these. A file that cannot be used (unreadable, broken frontmatter,
a field of the wrong type, a malformed ``allowed-tools`` rule) is skipped with a warning
naming it (:attr:`SkillCatalog.skipped`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from taskloom.errors import UsageError
from taskloom.frontmatter import parse_yaml, split_frontmatter
from taskloom.permissions.rules import parse_rule, split_rule_list
from taskloom.settings import claude_config_dir, find_project_root
from taskloom.skills.catalog import Kind, PromptCommand, SkillCatalog, SkillRoot

#: The file that makes a directory a skill.
SKILL_FILE = "SKILL.md"
#: The longest description made up from a body's first line, in characters.
_MADE_UP_DESCRIPTION = 100


def default_roots(cwd: Path, config_dir: Path | None = None) -> list[SkillRoot]:
    """The user's and the project's roots, in precedence order (see the module docstring).

    Args:
        cwd: The session's working directory.
        config_dir: Claude Code's user configuration directory (default:
            :func:`~taskloom.settings.claude_config_dir`).
    """
    user = config_dir or claude_config_dir()
    start = Path(cwd).absolute()
    root = find_project_root(start)
    levels = [root]
    for part in start.relative_to(root).parts:
        levels.append(levels[-1] / part)
    nearest = list(reversed(levels))
    roots: list[SkillRoot] = []
    layouts: tuple[tuple[Kind, str], ...] = (("skill", "skills"), ("command", "commands"))
    for kind, sub in layouts:
        roots.append(SkillRoot(user / sub, kind, "user"))
        roots += [SkillRoot(level / ".claude" / sub, kind, "project") for level in nearest]
    return roots


def load_catalog(roots: Iterable[SkillRoot]) -> SkillCatalog:
    """Every skill and command under ``roots`` (in precedence order), and what was skipped."""
    catalog = SkillCatalog()
    seen: set[str] = set()  # a file reached through two roots (a symlink) is read once
    for root in roots:
        if root.directory.is_file():  # a plugin's manifest may name one skill or command
            one = root.directory
            found = [(one.parent.name if root.kind == "skill" else one.stem, one)]
        elif root.directory.is_dir():
            found = _skill_files(root.directory) if root.kind == "skill" else _command_files(root)
        else:
            continue
        for name, path in found:
            key = os.path.realpath(path)
            if key in seen:
                continue
            seen.add(key)
            full = f"{root.prefix}:{name}" if root.prefix else name
            command = _read(path, full, root)
            if isinstance(command, str):
                catalog.skip(path, command)
            else:
                catalog.add(command)
    return catalog


def _skill_files(directory: Path) -> list[tuple[str, Path]]:
    """``(name, SKILL.md)`` of each skill directory directly under ``directory``."""
    found = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir():  # follows a symlinked skill directory, as Claude Code does
            path = Path(entry.path) / SKILL_FILE
            if path.is_file():
                found.append((entry.name, path))
    return found


def _command_files(root: SkillRoot) -> list[tuple[str, Path]]:
    """``(name, file)`` of each command under ``root``: ``*.md``, or a directory's SKILL.md."""
    found: list[tuple[str, Path]] = []
    # os.walk does not follow symlinked directories, so a link loop cannot hang start-up.
    for parent, dirs, names in os.walk(root.directory):
        dirs.sort()
        here = Path(parent)
        namespace = ":".join(here.relative_to(root.directory).parts)
        skill = next((n for n in sorted(names) if n.lower() == SKILL_FILE.lower()), None)
        if skill is not None and here != root.directory:
            # A skill-format command: named after its directory, its other files are its own.
            found.append((namespace, here / skill))
            dirs.clear()
            continue
        for name in sorted(names):
            if name.endswith(".md"):
                stem = name.removesuffix(".md")
                found.append((f"{namespace}:{stem}" if namespace else stem, here / name))
    return found


def _read(path: Path, name: str, root: SkillRoot) -> PromptCommand | str:
    """The command ``path`` defines, or why it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read it: {exc}"
    try:
        meta, body = _split(text)
        return _command(meta, body, path, name, root)
    except (ValueError, UsageError) as exc:
        return str(exc)


def _split(text: str) -> tuple[dict[Any, Any], str]:
    """A file's frontmatter (empty when it has none: a plain prompt) and its body.

    Raises:
        ValueError: The frontmatter is never closed, or is not YAML.
    """
    first = next((line for line in text.lstrip("\ufeff").splitlines() if line.strip()), "")
    if first.rstrip() != "---":
        return {}, text
    import yaml  # only for a file with frontmatter: PyYAML costs start-up time

    meta, body, line = split_frontmatter(text)
    return parse_yaml(meta, yaml, line), body


def _command(
    meta: Mapping[Any, Any], body: str, path: Path, name: str, root: SkillRoot
) -> PromptCommand:
    """The command of a file's parsed parts.

    Raises:
        ValueError: A field of the wrong type.
        UsageError: A malformed ``allowed-tools`` rule.
    """
    description = _text(meta, "description")
    model = _text(meta, "model")
    source = f"allowed-tools of {path}"
    rules = tuple(str(parse_rule(r, "allow", source)) for r in _list(meta, "allowed-tools"))
    return PromptCommand(
        name=name,
        kind=root.kind,
        description=description or _first_line(body, root.kind),
        body=body.strip("\n"),
        path=path,
        scope=root.scope,
        base_dir=path.parent if path.name.lower() == SKILL_FILE.lower() else None,
        allowed_tools=rules,
        model=None if model in (None, "inherit") else model,
        argument_hint=_hint(meta),
        argument_names=tuple(n for n in _list(meta, "arguments") if not n.isdigit()),
        user_invocable=_flag(meta, "user-invocable", True),
        model_invocable=not _flag(meta, "disable-model-invocation", False),
        described=description is not None,
        plugin_root=root.plugin_root,
    )


def _text(meta: Mapping[Any, Any], key: str) -> str | None:
    value = meta.get(key)
    if value is None or isinstance(value, str):
        return value.strip() if isinstance(value, str) and value.strip() else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"frontmatter field {key!r} must be text, not {type(value).__name__}")


def _list(meta: Mapping[Any, Any], key: str) -> list[str]:
    """A field that is a list of strings, or one string of them separated by commas/spaces."""
    value = meta.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return split_rule_list(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ValueError(
        f"frontmatter field {key!r} must be a list of strings or a comma-separated string"
    )


def _flag(meta: Mapping[Any, Any], key: str, default: bool) -> bool:
    value = meta.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"frontmatter field {key!r} must be true or false, not {value!r}")


def _hint(meta: Mapping[Any, Any]) -> str | None:
    value = meta.get("argument-hint")
    if isinstance(value, list):  # ``argument-hint: [file]`` is a YAML list: its text was meant
        return " ".join(f"[{v}]" for v in value)
    return _text(meta, "argument-hint")


def _first_line(body: str, kind: Kind) -> str:
    """The description Claude Code makes up: the body's first line (headings unmarked)."""
    for line in body.splitlines():
        text = line.strip().lstrip("#").strip()
        if text:
            if len(text) > _MADE_UP_DESCRIPTION:
                return text[: _MADE_UP_DESCRIPTION - 3] + "..."
            return text
    return "Skill" if kind == "skill" else "Custom command"


__all__ = ["SKILL_FILE", "default_roots", "load_catalog"]

"""Find and load agent definitions: built-ins, agent files, ``--agents`` JSON, managed policy.

Sources, lowest precedence first; a later one replaces an earlier one of the same name:

1. built-in (:mod:`taskloom.agents.builtins`), then plugin agents;
2. user: ``agents`` of Claude Code's user configuration directory (``$CLAUDE_CONFIG_DIR``, else
   ``~/.claude``: :func:`~taskloom.settings.claude_config_dir`), then ``$TASKLOOM_HOME/agents``;
3. project: ``.claude/agents`` then ``.taskloom/agents`` in every directory from the repository
   root down to the working directory, so the nearest directory wins;
4. the ``--agents`` JSON object;
5. the managed policy directory (``TASKLOOM_MANAGED_AGENTS_DIR``).

Directories are searched recursively for ``*.md`` files. A file that cannot be used is skipped
with a warning on the ``taskloom.agents`` logger and listed in :attr:`AgentCatalog.skipped`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from taskloom.agents.builtins import BUILTIN_AGENTS
from taskloom.agents.definition import AgentDefinition
from taskloom.errors import UsageError
from taskloom.settings import claude_config_dir, find_project_root, taskloom_home

_log = logging.getLogger("taskloom.agents")

MANAGED_DIR_ENV = "TASKLOOM_MANAGED_AGENTS_DIR"


@dataclass
class AgentCatalog:
    """The agents in effect, and what lost or failed on the way.

    Attributes:
        active: Agent name -> the winning definition, in the order names were first seen.
        shadowed: Definitions replaced by a later one of the same name, in load order.
        skipped: ``(file or label, reason)`` for each definition that could not be loaded.
        warnings: ``(file or label, message)`` for fields that were dropped from a definition
            that still loaded.
    """

    active: dict[str, AgentDefinition] = field(default_factory=dict)
    shadowed: list[AgentDefinition] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> AgentDefinition | None:
        """Return the active definition called ``name``, or None."""
        return self.active.get(name)

    def names(self) -> list[str]:
        """Return the active agent names, sorted case-insensitively."""
        return sorted(self.active, key=lambda n: (n.lower(), n))

    def __contains__(self, name: object) -> bool:
        return name in self.active

    def add(self, definition: AgentDefinition) -> None:
        """Make ``definition`` active, shadowing any earlier one of the same name."""
        previous = self.active.get(definition.agent_type)
        if previous is not None:
            self.shadowed.append(previous)
        self.active[definition.agent_type] = definition

    def skip(self, where: str, reason: str) -> None:
        """Record (and log) a definition that could not be loaded."""
        self.skipped.append((where, reason))
        _log.warning("skipping agent definition %s: %s", where, reason)

    def warn(self, where: str, message: str) -> None:
        """Record (and log) a problem that did not stop a definition from loading."""
        self.warnings.append((where, message))
        _log.warning("agent definition %s: %s", where, message)


def load_agents(
    cwd: Path,
    *,
    flag_json: str | None = None,
    managed_dir: Path | None = None,
    home: Path | None = None,
    plugin_agents: Iterable[AgentDefinition] = (),
) -> AgentCatalog:
    """Load every agent definition that applies in ``cwd`` (see the module docstring).

    Args:
        cwd: The working directory of the session.
        flag_json: The ``--agents`` value: a JSON object mapping names to
            ``{"description", "prompt", "tools", "model", ...}``.
        managed_dir: The managed policy directory; default ``$TASKLOOM_MANAGED_AGENTS_DIR``.
        home: The taskloom state directory; defaults to :func:`taskloom_home`.
        plugin_agents: Definitions contributed by plugins.

    Returns:
        The catalog of active, shadowed and skipped definitions.

    Raises:
        UsageError: ``flag_json`` is not a JSON object. It was asked for explicitly, so
            running without it would be worse than stopping.
    """
    catalog = AgentCatalog()
    for agent in (*BUILTIN_AGENTS, *plugin_agents):
        catalog.add(agent)
    if managed_dir is None and os.environ.get(MANAGED_DIR_ENV):
        managed_dir = Path(os.environ[MANAGED_DIR_ENV]).expanduser()
    user_dirs = [claude_config_dir() / "agents", (home or taskloom_home()) / "agents"]
    seen: set[str] = set()
    # The managed directory is claimed first so that, if it is also a user or project
    # directory, its files still load at policy precedence.
    managed = _files(managed_dir, seen) if managed_dir is not None else []
    user = [f for d in user_dirs for f in _files(d, seen)]
    project = [f for d in _project_dirs(cwd) for f in _files(d, seen)]
    if not (managed or user or project):
        if flag_json is not None:
            _load_flag(flag_json, catalog)
        return catalog
    import yaml  # only when there are files: PyYAML costs start-up time

    for source, files in (("userSettings", user), ("projectSettings", project)):
        _load_files(files, source, catalog, yaml)
    if flag_json is not None:
        _load_flag(flag_json, catalog)
    _load_files(managed, "policySettings", catalog, yaml)
    return catalog


def _project_dirs(cwd: Path) -> list[Path]:
    """Project agent directories, farthest (the repository root) first."""
    start = Path(cwd).absolute()
    root = find_project_root(start)
    levels = [root]
    for part in start.relative_to(root).parts:
        levels.append(levels[-1] / part)
    return [level / sub / "agents" for level in levels for sub in (".claude", ".taskloom")]


def _files(directory: Path, seen: set[str]) -> list[Path]:
    """The ``*.md`` files under ``directory``, sorted; a directory already read gives none.

    When the project is the home directory, ``~/.claude/agents`` can be both a user and a project
    directory; reading it once keeps the shadowing report honest.
    """
    key = os.path.realpath(directory)
    if key in seen or not directory.is_dir():
        return []
    seen.add(key)
    found: list[Path] = []
    # os.walk does not follow symlinked directories, so a link loop cannot hang start-up.
    for parent, dirs, names in os.walk(directory):
        dirs.sort()
        found.extend(Path(parent) / n for n in sorted(names) if n.endswith(".md"))
    return found


def _load_files(
    files: Iterable[Path], source: str, catalog: AgentCatalog, yaml: ModuleType
) -> None:
    for path in files:
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
            meta, body, first = _split_frontmatter(text)
            data = _parse_yaml(meta, yaml, first)
            agent = AgentDefinition.from_mapping(
                data,
                source=source,
                path=where,
                body=body,
                on_warning=functools.partial(catalog.warn, where),
            )
        except (OSError, UnicodeDecodeError) as exc:
            catalog.skip(where, f"cannot read it: {exc}")
        except ValueError as exc:
            catalog.skip(where, str(exc))
        else:
            catalog.add(agent)


def _load_flag(flag_json: str, catalog: AgentCatalog) -> None:
    try:
        data = json.loads(flag_json)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--agents: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"--agents: expected a JSON object mapping agent names to definitions, "
            f"got {type(data).__name__}"
        )
    for name, entry in data.items():
        where = f"--agents {name}"
        if not isinstance(entry, dict):
            catalog.skip(where, f"expected an object, got {type(entry).__name__}")
            continue
        # Claude Code's --agents schema requires a prompt: there is no file body to fall back on.
        if not isinstance(entry.get("prompt"), str) or not entry["prompt"].strip():
            catalog.skip(where, "missing required field 'prompt'")
            continue
        try:
            agent = AgentDefinition.from_mapping(
                entry,
                source="flagSettings",
                name=name,
                on_warning=functools.partial(catalog.warn, where),
            )
        except ValueError as exc:
            catalog.skip(where, str(exc))
        else:
            catalog.add(agent)


# --- Frontmatter ---------------------------------------------------------------------------


_CLOSING = re.compile(r"-{3,}")


def _split_frontmatter(text: str) -> tuple[str, str, int]:
    """Split a file into its YAML frontmatter and its body.

    Returns:
        The frontmatter, the body, and the file's line number of the frontmatter's first line.

    Raises:
        ValueError: There is no frontmatter block, or it is never closed.
    """
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if start == len(lines) or lines[start].rstrip() != "---":
        raise ValueError("no frontmatter: the file must start with a '---' line")
    for end in range(start + 1, len(lines)):
        # Some editors close the block with a longer rule ("-------------"); accept it.
        if _CLOSING.fullmatch(lines[end].strip()):
            return "\n".join(lines[start + 1 : end]), "\n".join(lines[end + 1 :]), start + 2
    raise ValueError("frontmatter is never closed by a '---' line")


def _parse_yaml(meta: str, yaml: ModuleType, first: int = 1) -> dict[Any, Any]:
    """Parse frontmatter, repairing unquoted values as hand-written files often need.

    Args:
        meta: The frontmatter.
        yaml: The yaml module (imported by the caller, only when there are files).
        first: The file's line number of the frontmatter's first line (for errors).

    Raises:
        ValueError: The frontmatter is not YAML even after repair (naming the file's line),
            or is not a mapping.
    """
    try:
        data = yaml.safe_load(meta)
    except yaml.YAMLError as exc:
        repaired = _quote_bad_values(meta, yaml)
        try:
            data = yaml.safe_load(repaired) if repaired != meta else None
        except yaml.YAMLError:
            data = None
        if data is None:
            raise ValueError(_yaml_problem(exc, first)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"frontmatter must be a mapping of keys, not {type(data).__name__}")
    return data


def _yaml_problem(exc: Exception, first: int) -> str:
    """``invalid YAML frontmatter at line N: what`` for a YAML error, N the file's line.

    The line is where the broken construct starts (an unclosed quote or bracket), else where
    the parser gave up.
    """
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    context = getattr(exc, "context", None)
    mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
    where = f" at line {first + mark.line}" if mark is not None else ""
    what = f"{context}: {problem}" if context else problem
    return f"invalid YAML frontmatter{where}: {what}"


_TOP_LEVEL_PAIR = re.compile(r"^([A-Za-z_][\w.-]*)[ \t]*:[ \t]+(\S.*?)[ \t]*$")

#: What closes the quote, list or mapping a value opens with.
_CLOSERS = {"'": "'", '"': '"', "[": "]", "{": "}"}


def _unclosed(value: str) -> bool:
    """Whether ``value`` opens a quote, a list or a mapping that it never closes.

    Such a value is broken, not plain text to quote: its file is skipped, saying where.
    ``"Expert" reviewer`` or ``[Beta] Reviews code`` close what they open, and are read as
    text when YAML refuses them whole.
    """
    opener = value[:1]
    if opener in ("'", '"'):
        return _CLOSERS[opener] not in value[1:]
    if opener not in ("[", "{"):
        return False
    depth = 0
    for char in value:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return False
    return True


def _quote_bad_values(meta: str, yaml: ModuleType) -> str:
    """Single-quote each one-line top-level value that is not valid YAML on its own.

    This is what makes ``description: Use this agent when: the user asks`` load, and values
    that start with a YAML indicator (``*``, ``@``, backquote, ``%``...). Values continued on
    indented lines are left alone: quoting their first line would break them. So are values
    that open a quote, a list or a mapping: when they do not parse, the file is broken.
    """
    lines = meta.split("\n")
    for i, line in enumerate(lines):
        match = _TOP_LEVEL_PAIR.match(line)
        if match is None or _continues(lines, i) or _unclosed(match.group(2)):
            continue
        try:
            if isinstance(yaml.safe_load(line), dict):
                continue
        except yaml.YAMLError:
            pass
        key, value = match.groups()
        # Single quotes: backslashes stay literal, as they are in a plain scalar.
        lines[i] = f"{key}: '{value.replace(chr(39), chr(39) * 2)}'"
    return "\n".join(lines)


def _continues(lines: list[str], i: int) -> bool:
    """Whether the value on line ``i`` goes on over the following indented lines."""
    following: Iterator[str] = (line for line in lines[i + 1 :] if line.strip())
    nxt = next(following, "")
    return nxt[:1] in (" ", "\t")

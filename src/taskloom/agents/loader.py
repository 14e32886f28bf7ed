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
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from types import ModuleType

from taskloom._dataclass import dataclass
from taskloom.agents.builtins import BUILTIN_AGENTS
from taskloom.agents.definition import AgentDefinition
from taskloom.errors import UsageError
from taskloom.frontmatter import parse_yaml, split_frontmatter
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
            meta, body, first = split_frontmatter(text)
            data = parse_yaml(meta, yaml, first)
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

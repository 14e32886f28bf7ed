"""Claude Code plugins: directories of agents, skills, commands, hooks and MCP servers.

A plugin is a directory with ``.claude-plugin/plugin.json`` (``name``; ``version``,
``description``, ``author``… optional; without a manifest the plugin is named after its
directory) and any of::

    agents/*.md                 subagent definitions, typed ``<plugin>:<name>``
    skills/<name>/SKILL.md      skills, invoked as ``<plugin>:<name>``
    commands/**/*.md            custom slash commands, ``/<plugin>:<name>``
    hooks/hooks.json            ``{"hooks": {...}}``, as the ``hooks`` setting
    .mcp.json                   ``{"mcpServers": {...}}``; each server is named
                                ``plugin:<plugin>:<server>`` (its tools
                                ``mcp__plugin_<plugin>_<server>__<tool>``)

The manifest may name more, relative to the plugin and inside it, added to the default ones:
``agents`` and ``commands`` (directories or ``.md`` files), ``skills`` (directories of skills,
or one skill's own directory), ``hooks`` and ``mcpServers`` (files or objects inline; one or a
list). ``${CLAUDE_PLUGIN_ROOT}`` in hooks, MCP servers, and the text of its agents, skills and
commands is replaced by the plugin's directory; ``CLAUDE_PLUGIN_ROOT`` is in the environment of
its hooks and stdio servers. As in Claude Code, a plugin's agents cannot set ``hooks``,
``mcpServers`` or ``permissionMode`` (those fields are dropped, with a warning).

Plugins come from ``--plugin-dir DIR`` (each one a plugin) and from the ``enabledPlugins``
setting (``{"name@marketplace": true}``), found where Claude Code installed them
(``plugins/installed_plugins.json`` of its configuration directory). The first plugin of a name
wins: ``--plugin-dir`` ones before installed ones. A piece that cannot be used (a manifest that
is not JSON or lacks a name, a broken agent file, a malformed ``hooks.json``…) is skipped with a
warning naming the file (:attr:`PluginSet.skipped`); the rest of the plugin still loads.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.agents.definition import AgentDefinition
from taskloom.frontmatter import parse_yaml, split_frontmatter
from taskloom.settings import claude_config_dir
from taskloom.skills.catalog import SkillRoot
from taskloom.skills.loader import SKILL_FILE

if TYPE_CHECKING:
    from taskloom.hooks import HookConfig
    from taskloom.mcp.config import McpServerConfig

log = logging.getLogger("taskloom.plugins")

MANIFEST = Path(".claude-plugin") / "plugin.json"
ROOT_VAR = "${CLAUDE_PLUGIN_ROOT}"
#: What Claude Code allows a plugin's name to be (kebab-case).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Agent fields Claude Code ignores in a plugin's agents (they would widen what it may do).
#: What each manifest key may name, for the reason a path is refused.
_WHAT = {
    "agents": "directory or .md file",
    "commands": "directory or .md file",
    "skills": "directory",
}
_AGENT_DROPPED = ("hooks", "mcpServers", "mcp_servers", "permissionMode", "permission_mode")


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin and what it contributes.

    Attributes:
        name: Its manifest's name (the prefix of its agents, skills and commands).
        root: Its directory.
        source: Where it was named: ``--plugin-dir``, or its ``enabledPlugins`` key.
        version: Its manifest's version, if any.
        description: Its manifest's description, if any.
        agents: Its agent definitions, named ``<plugin>:<agent>``.
        skill_roots: Where its skills and commands are found (prefixed with its name).
        hooks: Its hooks (the ``hooks`` setting's form), root already substituted.
        mcp_servers: Its MCP servers by their session name (``plugin:<plugin>:<server>``).
    """

    name: str
    root: Path
    source: str
    version: str | None = None
    description: str | None = None
    agents: tuple[AgentDefinition, ...] = ()
    skill_roots: tuple[SkillRoot, ...] = ()
    hooks: Mapping[str, Any] = field(default_factory=dict)
    mcp_servers: Mapping[str, McpServerConfig] = field(default_factory=dict)


@dataclass
class PluginSet:
    """The plugins in effect, and what could not be used.

    Attributes:
        plugins: The loaded plugins, in precedence order.
        skipped: ``(file, reason)`` for each plugin or piece of one that was not used.
    """

    plugins: list[Plugin] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def skip(self, path: Path | str, reason: str) -> None:
        """Record (and log) a plugin or a piece of one that could not be used."""
        self.skipped.append((str(path), reason))
        log.warning("skipping plugin piece %s: %s", path, reason)

    def agents(self) -> list[AgentDefinition]:
        """Every plugin's agent definitions."""
        return [agent for plugin in self.plugins for agent in plugin.agents]

    def skill_roots(self) -> list[SkillRoot]:
        """Every plugin's skill and command roots (after the user's and project's)."""
        return [root for plugin in self.plugins for root in plugin.skill_roots]

    def mcp_servers(self) -> dict[str, McpServerConfig]:
        """Every plugin's MCP servers, by session name."""
        return {name: cfg for plugin in self.plugins for name, cfg in plugin.mcp_servers.items()}

    def hook_config(self) -> HookConfig:
        """Every plugin's hooks, run after the settings' hooks."""
        from taskloom.hooks.config import HookConfig

        config = HookConfig()
        for plugin in self.plugins:
            if plugin.hooks:
                source = f"plugin {plugin.name} hooks"
                config = config.merged(HookConfig.parse(plugin.hooks, source=source))
        return config


def load_plugins(
    plugin_dirs: Iterable[str | Path],
    settings: Mapping[str, Any] | None = None,
    *,
    config_dir: Path | None = None,
    cwd: Path | None = None,
) -> PluginSet:
    """Load the plugins of ``--plugin-dir`` and of the ``enabledPlugins`` setting.

    Args:
        plugin_dirs: The ``--plugin-dir`` values, in order.
        settings: The effective settings (their ``enabledPlugins``), if any.
        config_dir: Claude Code's configuration directory (default:
            :func:`~taskloom.settings.claude_config_dir`), where installed plugins are listed.
        cwd: What a relative ``--plugin-dir`` is relative to (default: the process's).
    """
    found = PluginSet()
    base = Path(cwd) if cwd is not None else Path.cwd()
    places = [((base / Path(d).expanduser()).resolve(), "--plugin-dir") for d in plugin_dirs]
    places += _installed(settings or {}, config_dir or claude_config_dir(), found)
    names: dict[str, Path] = {}
    for root, source in places:
        plugin = _load_one(root, source, found)
        if plugin is None:
            continue
        if plugin.name in names:
            found.skip(root, f"a plugin named {plugin.name!r} is loaded from {names[plugin.name]}")
            continue
        names[plugin.name] = root
        found.plugins.append(plugin)
    return found


def _installed(
    settings: Mapping[str, Any], config_dir: Path, found: PluginSet
) -> list[tuple[Path, str]]:
    """The directories of the plugins ``enabledPlugins`` turns on, as Claude Code installed them."""
    enabled = settings.get("enabledPlugins")
    if not isinstance(enabled, Mapping):
        return []
    wanted = [key for key, on in enabled.items() if on is True and isinstance(key, str)]
    if not wanted:
        return []
    registry = config_dir / "plugins" / "installed_plugins.json"
    try:
        data = json.loads(registry.read_text(encoding="utf-8"))
        installed = data["plugins"] if isinstance(data, dict) else None
    except (OSError, ValueError, KeyError) as exc:
        for key in wanted:
            found.skip(f"enabledPlugins {key}", f"cannot read {registry}: {exc}")
        return []
    places = []
    for key in wanted:
        entry = installed.get(key) if isinstance(installed, dict) else None
        if isinstance(entry, list):  # version 2: one installation per scope; the first counts
            entry = entry[0] if entry else None
        path = entry.get("installPath") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path:
            found.skip(f"enabledPlugins {key}", f"not installed (no entry in {registry})")
            continue
        places.append((Path(path).expanduser(), key))
    return places


def _load_one(root: Path, source: str, found: PluginSet) -> Plugin | None:
    """The plugin at ``root``, or None (recorded as skipped) when it has no usable manifest."""
    manifest_path = root / MANIFEST
    if not root.is_dir():
        found.skip(root, "not a directory")
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        # The manifest is optional: the plugin is named after its directory, its pieces
        # found in their default places (Claude Code's plugin-dev has none).
        manifest = {"name": root.name}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        found.skip(manifest_path, f"not a JSON manifest: {exc}")
        return None
    name = manifest.get("name") if isinstance(manifest, dict) else None
    if not isinstance(name, str) or not _NAME.match(name):
        found.skip(manifest_path, "its 'name' must be a plugin name (kebab-case text)")
        return None
    version, description = manifest.get("version"), manifest.get("description")
    return Plugin(
        name=name,
        root=root,
        source=source,
        version=version if isinstance(version, str) else None,
        description=description if isinstance(description, str) else None,
        agents=tuple(_agents(root, name, manifest, found)),
        skill_roots=tuple(_skill_roots(root, name, manifest, found)),
        hooks=_hooks(root, name, manifest, found),
        mcp_servers=_mcp(root, name, manifest, found),
    )


def _places(root: Path, manifest: Mapping[str, Any], key: str, found: PluginSet) -> list[Path]:
    """The default directory ``root/key`` and what the manifest's ``key`` adds.

    The manifest may name directories, and, as Claude Code's reference does, single files:
    an agent's or a command's ``.md``, or a skill's own directory (one with a ``SKILL.md``,
    given as that file). A path must stay inside the plugin.
    """
    places = [root / key]
    value = manifest.get(key)
    listed = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    if value is not None and not listed:
        found.skip(root / MANIFEST, f"{key!r} must be a path or a list of paths")
    for entry in listed:
        path = Path(os.path.normpath(root / entry)) if isinstance(entry, str) else None
        if path is not None and key == "skills" and (path / SKILL_FILE).is_file():
            path = path / SKILL_FILE
        usable = path is not None and (path.is_dir() or (path.is_file() and _names_one(key, path)))
        if path is None or not usable or not path.is_relative_to(root):
            found.skip(root / MANIFEST, f"{key!r}: {entry!r} is not a {_WHAT[key]} in the plugin")
        elif path not in places:
            places.append(path)
    return places


def _names_one(key: str, path: Path) -> bool:
    """Whether the manifest's ``key`` may name the file ``path`` (one skill, agent, command)."""
    return path.name == SKILL_FILE if key == "skills" else path.suffix == ".md"


def _skill_roots(
    root: Path, name: str, manifest: Mapping[str, Any], found: PluginSet
) -> list[SkillRoot]:
    skills = _places(root, manifest, "skills", found)
    commands = _places(root, manifest, "commands", found)
    return [SkillRoot(d, "skill", name, name, root) for d in skills] + [
        SkillRoot(d, "command", name, name, root) for d in commands
    ]


def _agents(
    root: Path, name: str, manifest: Mapping[str, Any], found: PluginSet
) -> list[AgentDefinition]:
    files = sorted(
        {
            path
            for place in _places(root, manifest, "agents", found)
            for path in (place.rglob("*.md") if place.is_dir() else _if_file(place))
        }
    )
    if not files:
        return []
    import yaml  # only when a plugin has agents: PyYAML costs start-up time

    agents = []
    for path in files:
        try:
            meta, body, first = split_frontmatter(path.read_text(encoding="utf-8"))
            data = parse_yaml(meta, yaml, first)
            own = data.get("name", path.stem)
            if not isinstance(own, str) or not own.strip():
                raise ValueError("its 'name' must be text")
            for key in _AGENT_DROPPED:
                if data.pop(key, None) is not None:
                    log.warning("agent definition %s: %r is ignored in a plugin's agent", path, key)
            warn = functools.partial(log.warning, "agent definition %s: %s", path)
            body = body.replace(ROOT_VAR, str(root))  # its prompt may run the plugin's scripts
            agent = AgentDefinition.from_mapping(
                data, source="plugin", path=str(path), body=body,
                name=f"{name}:{own.strip()}", on_warning=warn,
            )  # fmt: skip
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            found.skip(path, str(exc))
        else:
            agents.append(agent)
    return agents


def _if_file(path: Path) -> list[Path]:
    return [path] if path.is_file() else []


def _substitute(value: Any, root: Path) -> Any:
    """``value`` with ``${CLAUDE_PLUGIN_ROOT}`` replaced in every string inside it."""
    if isinstance(value, str):
        return value.replace(ROOT_VAR, str(root))
    if isinstance(value, list):
        return [_substitute(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, root) for k, v in value.items()}
    return value


def _json_part(
    root: Path, default: str, manifest: Mapping[str, Any], key: str, found: PluginSet
) -> list[tuple[Path, dict[str, Any]]]:
    """Each object a piece is given by: its default file, and the manifest's ``key``."""
    parts: list[tuple[Path, dict[str, Any]]] = []
    value = manifest.get(key)
    paths = [root / default]
    for entry in value if isinstance(value, list) else [] if value is None else [value]:
        if isinstance(entry, str):
            paths.append(Path(os.path.normpath(root / entry)))
        elif isinstance(entry, dict):
            parts.append((root / MANIFEST, entry))
        else:
            found.skip(root / MANIFEST, f"{key!r} must be paths or objects, not {entry!r}")
    for path in dict.fromkeys(paths):
        if not path.is_relative_to(root):
            found.skip(path, f"named by the manifest's {key!r} but outside the plugin")
            continue
        if not path.is_file():
            if path != root / default:
                found.skip(path, f"named by the manifest's {key!r} but not found")
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            found.skip(path, f"not JSON: {exc}")
            continue
        if not isinstance(data, dict):
            found.skip(path, f"expected a JSON object, got {type(data).__name__}")
            continue
        parts.append((path, data))
    return parts


def _hooks(root: Path, name: str, manifest: Mapping[str, Any], found: PluginSet) -> dict[str, Any]:
    merged: dict[str, list[Any]] = {}
    for path, data in _json_part(root, "hooks/hooks.json", manifest, "hooks", found):
        events = data.get("hooks", data if path == root / MANIFEST else None)
        if not isinstance(events, dict) or not all(isinstance(v, list) for v in events.values()):
            found.skip(path, 'expected {"hooks": {EVENT: [matchers…]}}')
            continue
        for event, entries in _substitute(events, root).items():
            merged.setdefault(event, []).extend(_exporting_root(e, root) for e in entries)
    return merged


def _exporting_root(entry: Any, root: Path) -> Any:
    """A matcher entry whose command hooks also have ``CLAUDE_PLUGIN_ROOT`` in their environment.

    Claude Code sets it for a plugin's hooks: the scripts they run read it. Hooks run with
    ``sh -c``, so exporting it first reaches every command of the line.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
        return entry  # malformed: left for the hooks' parser to report
    import shlex  # only a plugin with hooks needs it

    export = f"export CLAUDE_PLUGIN_ROOT={shlex.quote(str(root))}; "
    hooks = [
        {**h, "command": export + h["command"]}
        if isinstance(h, dict) and h.get("type") == "command" and isinstance(h.get("command"), str)
        else h
        for h in entry["hooks"]
    ]
    return {**entry, "hooks": hooks}


def _mcp(
    root: Path, name: str, manifest: Mapping[str, Any], found: PluginSet
) -> dict[str, McpServerConfig]:
    parts = _json_part(root, ".mcp.json", manifest, "mcpServers", found)
    if not parts:
        return {}
    from taskloom.mcp.config import McpConfigError, parse_server

    servers: dict[str, McpServerConfig] = {}
    for path, data in parts:
        entries = data.get("mcpServers", data)
        if not isinstance(entries, dict):
            found.skip(path, 'expected {"mcpServers": {NAME: {...}}}')
            continue
        for server, raw in _substitute(entries, root).items():
            full = f"plugin:{name}:{server}"
            if isinstance(raw, dict) and isinstance(raw.get("env", {}), dict):
                # As Claude Code does for a plugin's servers: they may read it.
                raw = {**raw, "env": {"CLAUDE_PLUGIN_ROOT": str(root), **raw.get("env", {})}}
            try:
                servers[full] = parse_server(full, raw, str(path))
            except McpConfigError as exc:
                found.skip(path, str(exc))
    return servers


def describe(found: PluginSet) -> dict[str, Any]:
    """The plugins as plain data (``taskloom plugins --json``): loaded, and skipped.

    A plugin's skill or command file that cannot be used is listed among the skipped too.
    """
    from taskloom.hooks import HookConfig
    from taskloom.skills import load_catalog

    plugins, skipped = [], [{"file": where, "reason": why} for where, why in found.skipped]
    for p in found.plugins:
        catalog = load_catalog(p.skill_roots)
        skipped += [{"file": where, "reason": why} for where, why in catalog.skipped]
        # The events that have a hook that runs (the parser's warnings go to the log only).
        events = sorted(str(e) for e in HookConfig.parse(p.hooks, source=f"plugin {p.name}").events)
        skipped += [
            {"file": f"{p.root} hooks {event!r}", "reason": "no hook of it can run here"}
            for event in sorted(set(p.hooks) - set(events))
        ]
        plugins.append(
            {
                "name": p.name,
                "version": p.version,
                "description": p.description,
                "path": str(p.root),
                "source": p.source,
                "agents": [a.agent_type for a in p.agents],
                "skills": [c.name for c in catalog.skills()],
                "commands": sorted(c.name for c in catalog if c.kind == "command"),
                "hooks": events,
                "mcp_servers": list(p.mcp_servers),
            }
        )
    return {"plugins": plugins, "skipped": skipped}


__all__ = ["MANIFEST", "Plugin", "PluginSet", "describe", "load_plugins"]

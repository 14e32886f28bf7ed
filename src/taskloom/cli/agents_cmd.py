"""``taskloom agents``: list the agent definitions in effect here, and where each came from."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from taskloom.agents.definition import AgentDefinition
from taskloom.agents.loader import AgentCatalog, load_agents


def tools_summary(agent: AgentDefinition) -> str:
    """Describe what an agent may use in a few words: ``all``, ``none``, ``Read, Grep``..."""
    if agent.all_tools:
        allowed = "all"
    elif not agent.tools:
        return "none"
    else:
        allowed = ", ".join(agent.tools)
    if agent.disallowed_tools:
        return f"{allowed} except {', '.join(agent.disallowed_tools)}"
    return allowed


def _origin(agent: AgentDefinition) -> str:
    if agent.path is None:
        return "--agents" if agent.source == "flagSettings" else f"({agent.source})"
    home = str(Path.home())
    if agent.path.startswith(home + "/"):
        return "~" + agent.path[len(home) :]
    return agent.path


def _describe(agent: AgentDefinition) -> dict[str, Any]:
    return {
        "name": agent.agent_type,
        "description": agent.when_to_use,
        "source": agent.source,
        "file": agent.path,
        "model": agent.model,
        "tools": None if agent.tools is None else list(agent.tools),
        "disallowed_tools": list(agent.disallowed_tools),
        "color": agent.color,
        "permission_mode": agent.permission_mode,
        "max_turns": agent.max_turns,
        "background": agent.background,
        "isolation": agent.isolation,
        "memory": agent.memory,
        "skills": list(agent.skills),
        "effort": agent.effort,
        "omit_claude_md": agent.omit_claude_md,
    }


def report(catalog: AgentCatalog) -> dict[str, Any]:
    """Return the catalog as plain data: active, shadowed (and by what), skipped, warnings."""
    shadowed = []
    for agent in catalog.shadowed:
        winner = catalog.active[agent.agent_type]
        entry = _describe(agent)
        entry["shadowed_by"] = {"source": winner.source, "file": winner.path}
        shadowed.append(entry)
    return {
        "active": [_describe(catalog.active[name]) for name in catalog.names()],
        "shadowed": shadowed,
        "skipped": [{"file": where, "reason": why} for where, why in catalog.skipped],
        "warnings": [{"file": where, "message": msg} for where, msg in catalog.warnings],
    }


def load_here(plugin_dirs: Sequence[str], cwd: Path) -> AgentCatalog:
    """The agents a session started in ``cwd`` with ``--plugin-dir plugin_dirs`` would have.

    The plugins are those of ``--plugin-dir`` and of the ``enabledPlugins`` setting; what a
    plugin could not load (its manifest, an agent file) is among the catalog's skipped.

    Raises:
        SettingsError: The settings (their ``enabledPlugins``) cannot be read.
    """
    from taskloom.plugins import load_plugins
    from taskloom.settings import load_settings

    found = load_plugins(plugin_dirs, load_settings(cwd), cwd=cwd)
    catalog = load_agents(cwd, plugin_agents=found.agents())
    catalog.skipped[:0] = found.skipped
    return catalog


def list_agents(plugin_dirs: Sequence[str], as_json: bool) -> int:
    """Print the agents that apply in the current directory; returns the exit code."""
    catalog = load_here(plugin_dirs, Path.cwd())
    if as_json:
        # default=str: hooks and MCP configs are free-form YAML and may hold dates.
        json.dump(report(catalog), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Agents")
    for name in ("name", "source", "model", "tools", "file"):
        table.add_column(name, overflow="fold")
    for name in catalog.names():
        agent = catalog.active[name]
        table.add_row(
            name,
            agent.source,
            agent.model or "default",
            tools_summary(agent),
            _origin(agent),
        )
    console = Console()
    console.print(table)
    for agent in catalog.shadowed:
        winner = catalog.active[agent.agent_type]
        console.print(
            Text(
                f"shadowed: {agent.agent_type} from {_origin(agent)} "
                f"(by {winner.source}: {_origin(winner)})",
                style="dim",
            )
        )
    for where, why in catalog.skipped:
        console.print(Text(f"skipped: {where}: {why}", style="yellow"))
    return 0

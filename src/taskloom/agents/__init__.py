"""Agent definitions: what each agent type is, the built-ins, and the loader for agent files.

Typical use::

    catalog = load_agents(Path.cwd(), flag_json=args.agents)
    agent = catalog.get("Explore") or builtin("general-purpose")
"""

from taskloom.agents.builtins import BUILTIN_AGENTS, READ_ONLY_DISALLOWED, builtin
from taskloom.agents.definition import AGENT_SOURCES, AgentDefinition
from taskloom.agents.loader import MANAGED_DIR_ENV, AgentCatalog, load_agents

__all__ = [
    "AGENT_SOURCES",
    "BUILTIN_AGENTS",
    "MANAGED_DIR_ENV",
    "READ_ONLY_DISALLOWED",
    "AgentCatalog",
    "AgentDefinition",
    "builtin",
    "load_agents",
]

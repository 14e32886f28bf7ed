"""The ``initialize`` request of a stream-json session: what the program brings, and the answer.

The Agent SDKs send ``initialize`` as their first line. The session is built from what it
carries (:func:`program_options`): the program's hook functions (``hooks``), agents
(``agents``), system prompt (``systemPrompt``, a list of strings; ``appendSystemPrompt``;
``excludeDynamicSections``), its in-process MCP servers (``sdkMcpServers``, reached with
``mcp_message`` requests) and the servers taskloom is to start itself (``mcpServers``: stdio,
http, sse). ``title``, ``skills``, ``toolAliases``, ``planModeInstructions`` and
``appendSubagentSystemPrompt`` are accepted and have no effect (said under ``--debug``).

The answer (:func:`initialize_answer`) has the field names of Claude Code's: ``commands``
(``/compact``, the custom commands and the skills a prompt ``/name args`` runs),
``agents``, ``models`` (the price table's families), ``account``, ``output_style``, ``pid``,
``claude_code_version``, ``current_permission_mode``, and ``mcp_servers_applied`` when the
request carried ``mcpServers``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.hooks import HookConfig
from taskloom.session import COMPACT_COMMAND

if TYPE_CHECKING:
    from taskloom.cli.control import ControlChannel
    from taskloom.harness import Harness
    from taskloom.options import Options

log = logging.getLogger(__name__)

#: The system prompt of a program that set none (the TypeScript SDK sends ``[""]``): not a
#: coding agent's, only who the model is working for.
MINIMAL_PROMPT = (
    "You are an agent built on taskloom, working for the program that started you. Use the "
    "tools you are given to do what you are asked, and answer concisely."
)

#: Accepted in ``initialize``, with no effect in taskloom.
_NOT_USED = (
    "title",
    "skills",
    "toolAliases",
    "planModeInstructions",
    "appendSubagentSystemPrompt",
    "systemPromptSnapshot",
    "sdkMcpServerConfigs",
    "sdkMcpServerManifests",
)


@dataclass
class ProgramSetup:
    """What the program's ``initialize`` made of the session's options.

    Attributes:
        options: The session's options with it applied.
        problems: Fields that could not be used, each with why (the answer is an error).
        mcp_servers: Whether it carried ``mcpServers`` (then the answer says they were taken).
    """

    options: Options
    problems: list[str] = dataclasses.field(default_factory=list)
    mcp_servers: bool = False


def program_options(
    options: Options, request: dict[str, Any], channel: ControlChannel
) -> ProgramSetup:
    """The session's options with what ``request`` (an ``initialize``) brings."""
    from taskloom.cli.control import SdkHookCaller

    setup = ProgramSetup(options)
    changes: dict[str, Any] = {}
    try:
        changes["hooks"] = HookConfig.from_callbacks(request.get("hooks"), SdkHookCaller(channel))
    except ValueError as exc:
        setup.problems.append(f"hooks: {exc}")
    agents = request.get("agents")
    if isinstance(agents, dict) and agents:
        own = json.loads(options.agents) if options.agents else {}
        changes["agents"] = json.dumps({**own, **agents})
    elif agents is not None and not isinstance(agents, dict):
        setup.problems.append("agents must be an object of agent definitions")
    changes.update(_prompt_changes(request, setup.problems))
    servers = _mcp_configs(request, setup)
    if servers:
        changes["mcp_config"] = (*options.mcp_config, *servers)
    for name in _NOT_USED:
        if request.get(name) is not None:
            log.debug("initialize: %s is accepted and has no effect in taskloom", name)
    setup.options = dataclasses.replace(options, **changes)
    return setup


def _prompt_changes(request: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The system prompt fields: ``systemPrompt`` replaces ours, ``appendSystemPrompt`` adds.

    ``systemPrompt`` absent: ours (the SDKs' ``claude_code`` preset), without its environment
    block when ``excludeDynamicSections``; all of it empty: :data:`MINIMAL_PROMPT`.
    """
    from taskloom.prompts import MAIN_PROMPT

    changes: dict[str, Any] = {}
    given = request.get("systemPrompt")
    if isinstance(given, str):
        given = [given]
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
            problems.append("systemPrompt must be a string or a list of strings")
        else:
            text = "\n\n".join(p for p in given if p.strip())
            changes["system_prompt"] = text or MINIMAL_PROMPT
    elif request.get("excludeDynamicSections") is True:
        changes["system_prompt"] = MAIN_PROMPT
    append = request.get("appendSystemPrompt")
    if isinstance(append, str):
        changes["append_system_prompt"] = append
    elif append is not None:
        problems.append("appendSystemPrompt must be a string")
    return changes


def _mcp_configs(request: dict[str, Any], setup: ProgramSetup) -> list[str]:
    """``--mcp-config`` texts for the servers ``request`` names: the program's and others."""
    out = []
    hosted = request.get("sdkMcpServers")
    if hosted is not None:
        if isinstance(hosted, list) and all(isinstance(n, str) and n for n in hosted):
            servers = {name: {"type": "sdk", "name": name} for name in hosted}
            out.append(json.dumps({"mcpServers": servers}))
        else:
            setup.problems.append("sdkMcpServers must be a list of server names")
    started = request.get("mcpServers")
    if started is not None:
        if isinstance(started, dict):
            setup.mcp_servers = True
            if started:
                out.append(json.dumps({"mcpServers": started}))
        else:
            setup.problems.append("mcpServers must be an object of server configurations")
    return out


def initialize_answer(harness: Harness, setup: ProgramSetup | None) -> dict[str, Any]:
    """The ``initialize`` answer, as Claude Code's names its fields."""
    from taskloom._version import __version__
    from taskloom.cli.print_mode import PROTOCOL_VERSION, api_key_source, typed_commands

    catalog = harness.agents.catalog
    agents = []
    for name in sorted(catalog.names()):
        definition = catalog.get(name)
        if definition is None:
            continue
        entry = {"name": name, "description": definition.when_to_use}
        if definition.model:
            entry["model"] = definition.model
        agents.append(entry)
    answer: dict[str, Any] = {
        # The slash commands a prompt can be: /compact, the custom commands and the skills;
        # any other prompt starting with "/" goes to the model as it is.
        "commands": [
            COMPACT_COMMAND,
            *(
                {
                    "name": c.name,
                    "description": c.description,
                    "argumentHint": c.argument_hint or "",
                }
                for c in typed_commands(harness)
            ),
        ],
        "agents": agents,
        "output_style": "default",
        "available_output_styles": ["default"],
        "models": models(harness),
        "account": {"apiKeySource": api_key_source(), "tokenSource": "none"},
        "pid": os.getpid(),
        "claude_code_version": PROTOCOL_VERSION,
        "taskloom_version": __version__,
        "current_permission_mode": str(harness.policy.mode),
        "hook_on_failure_supported": True,
        # What the SDK trusts to enforce its hooks' onFailure: true only when this request's
        # hooks are the session's (a later initialize, or a bad hooks field, brings none).
        "hooks_applied": setup is not None
        and not any(p.startswith("hooks:") for p in setup.problems),
        "capabilities": [],
    }
    if setup is not None and setup.mcp_servers:
        answer["mcp_servers_applied"] = True  # read before the session started
    return answer


def models(harness: Harness) -> list[dict[str, Any]]:
    """The models a program may pick: the session's, and each family of the price table."""
    from taskloom.models.pricing import LIST_PRICES, price_for

    prices = harness.settings.get("modelPrices")
    out: list[dict[str, Any]] = [
        {
            "value": "default",
            "resolvedModel": harness.model_name,
            "displayName": "Default",
            "description": f"The session's model ({harness.model_name})",
        }
    ]
    names = [*LIST_PRICES, *(prices or {})]
    for name in names:
        price = price_for(name, prices)
        cost = f" · ${price.input:g}/${price.output:g} per Mtok" if price is not None else ""
        out.append(
            {
                "value": name,
                "displayName": name[:1].upper() + name[1:],
                "description": f"{name}: the newest in the price table{cost}",
            }
        )
    return out


def mcp_status(harness: Harness) -> list[dict[str, Any]]:
    """The session's MCP servers: name, status (a failure's reason) and each one's tools."""
    from taskloom.cli.print_mode import mcp_servers

    mcp = harness.started.mcp
    tools: dict[str, list[dict[str, str]]] = {}
    for tool in mcp.tools() if mcp is not None else []:
        info = getattr(tool, "info", None)
        server = getattr(tool, "server", None)
        if info is not None and isinstance(server, str):
            tools.setdefault(server, []).append(
                {"name": info.name, "description": info.description}
            )
    return [{**s, "tools": tools.get(s["name"], [])} for s in mcp_servers(harness)]

"""What one subagent's engine is made of: its definition, model, tools, prompt, permissions.

An :class:`AgentBuilder` turns an agent definition and what the Agent tool was asked into a
complete :class:`~taskloom.engine.EngineConfig`. Everything the engine needs — the working
directory and the directory file tools are confined to included — is passed in up front, so
nobody changes the configuration once it is built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.engine import EngineConfig, EngineObserver
from taskloom.errors import ToolError
from taskloom.instructions import ConversationInstructions, Instructions
from taskloom.prompts import environment
from taskloom.settings import DEFAULT_MAX_OUTPUT_TOKENS
from taskloom.signals import emit
from taskloom.skills.expand import instructions
from taskloom.tools.deferral import with_tool_search

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.loader import AgentCatalog
    from taskloom.agents.memory import AgentMemory
    from taskloom.hooks import HookConfig
    from taskloom.models.base import Model
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.skills import SkillCatalog
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import Tool

log = logging.getLogger(__name__)

#: Permission modes from loosest to strictest.
_STRICTNESS = {"bypassPermissions": 0, "acceptEdits": 1, "default": 2, "dontAsk": 3, "plan": 4}

AGENT_SUFFIX = """You are a subagent: you were given one task by another agent, which sees only your
final message. Do the task with your tools, then answer with a complete, self-contained report
of what you found or did (paths, commands, results). Do not ask questions: no one can answer."""


#: The agent type of a spawn that names none, outside coordinator mode.
DEFAULT_TYPE = "general-purpose"
#: How many distinct system prompts the builder keeps to share (see ``AgentBuilder._shared``).
_PROMPTS_KEPT = 16


class AgentBuilder:
    """The session's agent catalog and everything a subagent's engine is built from."""

    def __init__(
        self,
        runtime: TaskRuntime,
        *,
        catalog: AgentCatalog,
        model: Model,
        model_name: str,
        tools: Callable[[], Sequence[Tool[Any]]],
        settings: dict[str, Any],
        policy: PermissionPolicy | None,
        max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        resolve_model: Callable[[str], Model] | None = None,
        hooks: HookConfig | None = None,
        prompter: PermissionPrompter | None = None,
        observer: EngineObserver | None = None,
        default_type: str = DEFAULT_TYPE,
        instructions: Instructions | None = None,
        skills: SkillCatalog | None = None,
    ) -> None:
        """Build subagents from ``catalog`` for ``runtime``'s session.

        Args:
            runtime: The session's runtime.
            catalog: The agent definitions.
            model: The parent's model (``inherit``, and every scripted run, use it).
            model_name: The parent's model id.
            tools: Returns every tool a subagent could be given (filtered per agent).
            settings: Effective settings.
            policy: The session's permission policy (a subagent may change its mode).
            max_tokens: Cap on each of its agents' responses (the session's, see
                :func:`taskloom.settings.max_output_tokens`).
            resolve_model: Builds a model for an alias or id (``sonnet``, ``claude-…``).
            hooks: The session's hooks (an agent's own hooks are added for its runs).
            prompter: Who answers the calls of its agents that need approval, if anyone.
            observer: Who watches every agent's engine (the session's output), if anyone.
            default_type: The agent type of a spawn that names none (``worker`` for a
                coordinator).
            instructions: The session's instruction files (CLAUDE.md, AGENTS.md), which its
                agents get unless their definition says ``omitClaudeMd``.
            skills: The session's skills and custom commands (the Skill tool's, and what a
                definition's ``skills`` preload).
        """
        self.runtime = runtime
        self.catalog = catalog
        self.model = model
        self.model_name = model_name
        self.tools = tools
        self.settings = settings
        self.policy = policy
        self.max_tokens = max_tokens
        self.resolve_model = resolve_model
        self.hooks = hooks
        self.prompter = prompter
        self.observer = observer
        self.default_type = default_type
        self.instructions = instructions or Instructions()
        self.skills = skills
        self.allow_nesting = bool(settings.get("allowNestedAgents", False))
        # One model per alias for the whole session: its connections are shared.
        self._models: dict[str, Model] = {}
        # The system prompts made lately, each kept once: a fan-out's agents of one type
        # have the same one, and thousands of copies of it would cost each agent kilobytes.
        self._prompts: dict[str, str] = {}

    async def aclose(self) -> None:
        """Close the models made for aliases (not the parent's, which its owner closes)."""
        models, self._models = list(self._models.values()), {}
        for model in models:
            if model is not self.model:
                await model.aclose()

    def first_prompt(self, definition: AgentDefinition, prompt: str) -> str:
        """``prompt`` after the instructions of the skills ``definition`` preloads.

        Its ``skills`` are loaded whole into the agent's first message, each as the Skill
        tool would give it, so the agent starts knowing them; a name that is no skill of
        the session's is left out with a warning.
        """
        loaded = []
        for name in definition.skills:
            found = self.skills.get(name) if self.skills is not None else None
            if found is None:
                log.warning("agent %s: no skill %r to preload", definition.agent_type, name)
                continue
            loaded.append(instructions(found, "", self.runtime.session_id))
        return "\n\n".join([*loaded, prompt])

    def definition(self, subagent_type: str | None) -> AgentDefinition:
        """The definition for ``subagent_type`` (default :attr:`default_type`).

        Raises:
            ToolError: No such agent type; the message lists the known ones.
        """
        name = subagent_type or self.default_type
        found = self.catalog.get(name)
        if found is None:
            known = ", ".join(sorted(self.catalog.names()))
            raise ToolError(f"Agent type '{name}' not found. Available agents: {known}")
        return found

    def config(
        self,
        agent_id: str,
        definition: AgentDefinition,
        *,
        description: str,
        cwd: Path,
        is_async: bool,
        model: str | None = None,
        mode: str | None = None,
        confine_to: Path | None = None,
        extra_tools: Sequence[Tool[Any]] = (),
        suffix: str = AGENT_SUFFIX,
    ) -> EngineConfig:
        """The complete configuration of one subagent's engine.

        Args:
            agent_id: Its task id.
            definition: Its agent type.
            description: What it was asked to do, in a few words (request metadata).
            cwd: Where it works.
            is_async: Whether it runs in the background (some tools are foreground-only).
            model: The model the caller asked for; else the definition's; else the parent's.
            mode: A permission mode the caller asked for (only a stricter one applies).
            confine_to: The directory its file tools may not leave (its worktree), if any.
            extra_tools: Tools of its own (its MCP servers), offered besides the session's.
            suffix: What its prompt says of its place, after its definition's (a teammate's
                is the team's section, not a subagent's).
        """
        # What configuring an agent takes is loaded at the first spawn: off the start-up path.
        from taskloom.agents.filter import filter_tools, own_tools, read_only_offer, restrict_spawns
        from taskloom.agents.memory import load_memory, memory_project
        from taskloom.agents.run import sidechain_path

        chosen, model_name = self._model_for(model or definition.model)
        offered: dict[str, Tool[Any]] = {}
        for tool in self.tools():
            offered.setdefault(tool.name, tool)  # the API refuses duplicate tool names
        spawns = definition.allowed_agent_types
        tools = filter_tools(
            list(offered.values()),
            allowed=definition.tools,
            disallowed=definition.disallowed_tools,
            is_async=is_async,
            # Types named in its definition are the user's word that it may start agents;
            # a read-only agent may not (its agents would run under the session's policy).
            allow_nesting=(self.allow_nesting or spawns is not None) and not definition.read_only,
        )
        tools = restrict_spawns(tools, spawns) + own_tools(definition, extra_tools, offered)
        if definition.read_only:
            tools = read_only_offer(tools)
        # Many MCP tools: offered by name, found with ToolSearch (as on the main thread).
        tools = with_tool_search(tools, model_name, self.settings)
        # A worktree's memory is its main checkout's: a note kept there outlives it.
        memory = load_memory(definition.memory, definition.agent_type, memory_project(cwd))
        if memory is not None:
            emit(
                "agent_memory_loaded",
                session_id=self.runtime.session_id,
                agent_id=agent_id,
                scope=memory.scope,
                source=definition.source,
                path=str(memory.directory),
            )
        # Explore and Plan omit them: search agents need no project rules (and save tokens).
        told = None if definition.omit_claude_md else ConversationInstructions(self.instructions)
        # The same text for every agent of a type: kept once (see _shared).
        prompt = self._shared(_prompt(definition, memory, told, suffix, cwd))
        policy = self._policy_for(mode, definition.permission_mode)
        if definition.read_only:
            policy = _read_only(policy, cwd)
        if memory is not None and policy is not None:
            policy = policy.with_directories([memory.directory])
        return EngineConfig(
            model=chosen,
            model_name=model_name,
            system_prompt=prompt,
            tools=tools,
            owner=agent_id,
            agent_id=agent_id,
            cwd=cwd,
            max_turns=definition.max_turns,
            max_tokens=self.max_tokens,
            permissions=policy,
            headless=True,
            prompter=self.prompter,
            wait_for_tasks=False,
            settings=self.settings,
            metadata={"agent_type": definition.agent_type, "description": description},
            hooks=self._hooks_for(definition),
            confine_to=confine_to,
            # Its memory stays writable from a worktree (it lives outside it).
            confine_also=(memory.directory,) if memory is not None and confine_to else (),
            session_id=self.runtime.session_id,
            transcript_path=str(sidechain_path(self.runtime, agent_id)),
            observer=self.observer,
            instructions=told,
        )

    def _shared(self, prompt: str) -> str:
        """``prompt``, or the equal one made before (the last few are kept)."""
        found = self._prompts.get(prompt)
        if found is not None:
            return found
        if len(self._prompts) >= _PROMPTS_KEPT:
            del self._prompts[next(iter(self._prompts))]
        self._prompts[prompt] = prompt
        return prompt

    def _model_for(self, spec: str | None) -> tuple[Model, str]:
        if not spec or spec == "inherit" or self.resolve_model is None:
            return self.model, self.model_name
        if spec not in self._models:
            self._models[spec] = self.resolve_model(spec)
        model = self._models[spec]
        return model, model.name

    def _hooks_for(self, definition: AgentDefinition) -> HookConfig | None:
        if not definition.hooks:
            return self.hooks
        from taskloom.hooks.config import HookConfig

        own = HookConfig.parse(definition.hooks, source=f"agent {definition.agent_type}")
        return self.hooks.merged(own) if self.hooks else own

    def _policy_for(self, requested: str | None, defined: str | None) -> PermissionPolicy | None:
        """The agent's policy: its file's mode, then a mode the model asked for if stricter.

        A definition file is the user's word and may loosen the mode; the model may only
        tighten it — otherwise ``mode: bypassPermissions`` would escape every rule.
        """
        if self.policy is None:
            return None
        # Always a copy of its own: a skill's grants for one agent's turn are not another's.
        policy = self.policy.with_mode(defined) if defined else self.policy.with_directories(())
        if requested and _STRICTNESS.get(requested, -1) > _STRICTNESS.get(str(policy.mode), -1):
            policy = policy.with_mode(requested)
        return policy


def _read_only(policy: PermissionPolicy | None, cwd: Path) -> PermissionPolicy:
    """A read-only agent's policy: ``policy``'s, read-only; one of its own when there is none.

    A session without a policy allows everything; its read-only agents are still refused
    what would change files.
    """
    if policy is not None:
        return policy.read_only()
    from taskloom.permissions import PermissionMode, PermissionPolicy

    return PermissionPolicy(PermissionMode.BYPASS_PERMISSIONS, (), cwd).read_only()


def _prompt(
    definition: AgentDefinition,
    memory: AgentMemory | None,
    told: ConversationInstructions | None,
    suffix: str,
    cwd: Path,
) -> str:
    """An agent's system prompt: its definition's, its memory, its place, its project's rules."""
    parts = (
        definition.system_prompt.strip(),
        memory.prompt() if memory is not None else "",
        suffix,
        environment(cwd),
        told.base.text() if told is not None else "",
    )
    return "\n\n".join(p for p in parts if p)

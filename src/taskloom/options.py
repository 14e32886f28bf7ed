"""What a session is built from: :class:`Options`, the fields of ``taskloom.Harness``.

Every entry point fills one: the command line from its flags, a program from its arguments
(``taskloom.run(prompt, **options)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass

if TYPE_CHECKING:
    from taskloom.events import EngineObserver
    from taskloom.hooks import HookConfig
    from taskloom.mcp.program import McpMessageCaller
    from taskloom.models.base import Model
    from taskloom.permissions import PermissionPrompter
    from taskloom.tools.backends import CommandRunner, TextFiles
    from taskloom.tools.base import Tool


@dataclass
class Options:
    """What a session is built from: what the CLI flags and the settings carry.

    Attributes:
        model: A model spec (``sonnet``, ``claude-…``, ``openai:ID``, ``scripted:FILE``) or a
            model object (e.g. :class:`taskloom.testing.ScriptedModel`: the caller's, which the
            harness does not close); None: from the
            settings and the environment.
        cwd: The session's working directory.
        permission_mode: ``default``, ``acceptEdits``, ``plan``, ``bypassPermissions`` or
            ``dontAsk``; None: the settings' ``permissions.defaultMode``.
        allowed_tools: Permission rules to allow (``--allowedTools``).
        disallowed_tools: Permission rules to deny (``--disallowedTools``).
        skip_permissions: Allow every call (``--dangerously-skip-permissions``).
        system_prompt: Replaces the main system prompt (``--system-prompt``; ``""`` sends
            none, as Claude Code does for ``claude-agent-sdk`` programs that set none).
        append_system_prompt: Added to the main system prompt.
        settings: A settings file or inline JSON, applied last (``--settings``).
        skip_broken_settings: Run without settings files that do not parse.
        agents: Extra agent definitions as a JSON object (``--agents``).
        resume: Continue this session id.
        continue_session: Continue the latest conversation of this directory (``-c``).
        session_id: The id of the new session (a UUID; ``--session-id``), or of the fork.
        fork_session: With ``resume``/``continue_session``: a new session starting from a copy
            of that conversation (``--fork-session``).
        setting_sources: Read only these kinds of settings files (``user``, ``project``,
            ``local``); None reads all. The ``settings`` option is always read.
        builtin_tools: Offer only these built-in tools (``--tools``; empty: none); None offers
            all. MCP tools and ``tools`` are not affected.
        add_dirs: More directories where acceptEdits allows edits (``--add-dir``).
        persist_session: Keep the conversation's transcript (False: it cannot be resumed;
            ``--no-session-persistence``).
        json_schema: The final answer must be JSON this schema accepts, given through the
            StructuredOutput tool (``--json-schema``); see :attr:`Harness.structured_output`.
        fallback_model: The model the main thread goes on with when its own fails after its
            retries (overloaded, unreachable), for the rest of the session.
        max_turns: Most model turns per run.
        max_output_tokens: Cap on each model response, in tokens, for the main thread and
            every agent (``--max-output-tokens``); None: ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``,
            else the setting ``maxOutputTokens``, else 16,000.
        max_budget_tokens: The token budget of the whole session, its main thread and every
            agent (``--max-budget-tokens``; the setting ``sessionBudget`` may add others).
        max_budget_usd: The cost budget of the whole session, likewise (``--max-budget-usd``).
        tools: Extra tools offered to the main thread (e.g. from :func:`taskloom.tool`).
        wait_for_tasks: A run of the main thread does not end while a task it started runs
            or a notification waits (print mode); False ends it when the model is done, and
            the caller starts a turn for what arrives later (the REPL).
        headless: No one can answer a permission prompt: an ``ask`` is a denial, unless...
        prompter: ...this answers it, for the main thread and every agent (a program driving
            the session, e.g. over the stream-json protocol).
        hooks: Hooks added to those of the settings (the program's own functions).
        observer: Watches the engines of the main thread and every agent as they run (the
            stream-json output: the model's stream, hook runs, subagents' messages).
        mcp_config: MCP configurations added to the configured servers (``--mcp-config``):
            each a file path or a JSON string holding ``{"mcpServers": {...}}``; a server
            here replaces a configured one of the same name.
        strict_mcp_config: Use only the servers of ``mcp_config``, ignoring every other MCP
            configuration (``--strict-mcp-config``).
        plugin_dirs: Plugin directories loaded for this session (``--plugin-dir``), before
            the installed plugins the ``enabledPlugins`` setting turns on
            (:mod:`taskloom.plugins`).
        mcp_caller: Reaches the MCP servers of type ``sdk``, hosted by the program driving the
            session (``mcp_message`` control requests); without it they are not started.
        coordinator: The main thread only orchestrates workers (``--coordinator``): its tools
            are Agent, SendMessage and TaskStop, and every agent runs in the background.
            None: the setting ``coordinatorMode`` or the environment decides.
        listen: Receive messages from other taskloom sessions of this machine on a Unix
            socket in the session directory (``--listen``), and from sessions on the Ray
            cluster at ``bridge:<session id>`` when one is configured; None: the setting
            ``listen``.
        teams: The session may lead a team of teammates (``--teams``); None: the setting
            ``agentTeams`` or the environment decides.
        teammate_mode: Where teammates run: ``in-process``, ``tmux`` (each in a tmux pane
            of its own) or ``auto`` (tmux inside a tmux session) (``--teammate-mode``); None:
            ``TASKLOOM_TEAMMATE_MODE``, else the setting ``teammateMode``, else in-process.
        join_team: Run as the teammate whose spec its lead wrote to this file, in the lead's
            team (the process ``taskloom teammate --join FILE`` runs in a pane), instead of
            as a session of its own.
        text_files: Where the main thread's Read, Write and Edit find text files instead of
            the local disk: an editor's buffers (:mod:`taskloom.tools.backends`; ACP builds it
            from the client's capabilities). None: the disk.
        commands: Where the main thread's foreground Bash commands run instead of as local
            shell tasks: an editor's terminal. None: locally.
    """

    model: str | Model | None = None
    cwd: str | Path = "."
    permission_mode: str | None = None
    allowed_tools: Sequence[str] = ()
    disallowed_tools: Sequence[str] = ()
    skip_permissions: bool = False
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    settings: str | Path | None = None
    skip_broken_settings: bool = False
    agents: str | None = None
    resume: str | None = None
    continue_session: bool = False
    session_id: str | None = None
    fork_session: bool = False
    setting_sources: Sequence[str] | None = None
    builtin_tools: Sequence[str] | None = None
    add_dirs: Sequence[str] = ()
    persist_session: bool = True
    json_schema: dict[str, Any] | None = None
    fallback_model: str | None = None
    max_turns: int | None = None
    max_output_tokens: int | None = None
    max_budget_tokens: int | None = None
    max_budget_usd: float | None = None
    tools: Sequence[Tool[Any]] = field(default_factory=tuple)
    wait_for_tasks: bool = True
    headless: bool = True
    prompter: PermissionPrompter | None = None
    hooks: HookConfig | None = None
    observer: EngineObserver | None = None
    mcp_config: Sequence[str] = ()
    strict_mcp_config: bool = False
    plugin_dirs: Sequence[str] = ()
    mcp_caller: McpMessageCaller | None = None
    coordinator: bool | None = None
    listen: bool | None = None
    teams: bool | None = None
    teammate_mode: str | None = None
    join_team: str | Path | None = None
    text_files: TextFiles | None = None
    commands: CommandRunner | None = None

    def check_session(self) -> None:
        """Check that the session fields go together.

        Raises:
            UsageError: ``session_id`` is not a UUID, names a new id for a continued session
                that is not forked, or ``fork_session`` has nothing to fork.
        """
        from taskloom.errors import UsageError

        if self.session_id is not None:
            import uuid  # only here: it imports platform, a millisecond of every start-up

            try:
                uuid.UUID(self.session_id)
            except ValueError:
                raise UsageError(f"--session-id {self.session_id!r} is not a UUID") from None
            if (self.resume or self.continue_session) and not self.fork_session:
                raise UsageError(
                    "--session-id can be used with --resume or --continue only together "
                    "with --fork-session"
                )
        if self.fork_session and not (self.resume or self.continue_session):
            raise UsageError("--fork-session needs --resume or --continue")

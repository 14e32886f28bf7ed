"""How an engine runs: its model, tools, owner, permissions, hooks and budgets (its config).

Kept apart from the loop itself (:mod:`taskloom.engine`, which re-exports it): agents, teams
and the harness build configurations without touching the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.settings import DEFAULT_MAX_OUTPUT_TOKENS

if TYPE_CHECKING:
    from taskloom.events import EngineObserver, Meter
    from taskloom.hooks import HookConfig
    from taskloom.instructions import ConversationInstructions
    from taskloom.messages import TextBlock, ToolResultBlock, ToolUseBlock
    from taskloom.models.base import Model
    from taskloom.models.caching import CacheTtl
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.tools.backends import CommandRunner, TextFiles
    from taskloom.tools.base import Tool


@dataclass
class EngineConfig:
    """How an engine runs.

    Attributes:
        model: The model to ask.
        system_prompt: The system prompt.
        tools: The tools offered.
        owner: Whose calls these are (the agent id, or the session id on the main thread).
        cwd: Working directory for tools.
        agent_id: The subagent's id, None on the main thread.
        model_name: The model id to request (default: the model's own name).
        max_turns: Most model requests in one :meth:`Engine.run` (None: no limit).
        max_tokens: Cap on each response, in tokens (see
            :func:`taskloom.settings.max_output_tokens`).
        permissions: The permission policy (None: everything allowed).
        headless: No one can answer a permission prompt: an ``ask`` is a denial (unless a
            ``prompter`` answers it).
        prompter: Who answers the calls that need approval (the program driving the session).
        wait_for_tasks: Do not end while owned tasks run or notifications are pending.
        settings: Effective settings, passed to tools.
        inbox: Returns (and takes from the agent's mailbox) messages sent to it while it
            runs; they go into its next user message, at its next tool boundary or before it
            would end, and are acknowledged once its transcript holds that message.
        hooks: Hook configuration (PreToolUse, PostToolUse, PostToolUseFailure run here).
        confine_to: File tools may only touch paths under this directory (a worktree).
        confine_also: Directories outside ``confine_to`` its file tools may use too (its
            memory directory).
        cwd_source: Where the working directory is read from on each call (EnterWorktree
            moves the main session); ``cwd`` when None. Its shell starts there, and a ``cd``
            holds for its next calls (:class:`~taskloom.tools.workdir.WorkingDirectory`).
        cwd_roots: Directories besides its start directory where its shell may stand when
            it is not confined (a subagent: its parent's).
        rules_base: The directory its permission rules are relative to, when not its place:
            a subagent's is its parent's, wherever the parent's shell stood at the spawn.
        session_id: For hook input.
        transcript_path: For hook input.
        metadata: Extra request metadata (e.g. the agent type), for logs and test models.
        observer: Sees what happens as it happens (the model's stream, hook runs, a
            subagent's messages), e.g. the stream-json output; shared by a session's agents.
        meter: Counts its tokens and tool calls against its budgets, and adds their notes
            (wrap up) to its next request.
        instructions: Its instruction files (CLAUDE.md, AGENTS.md): those of a directory it
            first works in are added to its next user message. None: it has none (its
            definition omits them).
        text_files: Where its file tools find text files (an editor's buffers); None: the
            local disk (:mod:`taskloom.tools.backends`).
        commands: Where its foreground Bash commands run (an editor's terminal); None:
            locally.
    """

    model: Model
    system_prompt: str
    tools: Sequence[Tool[Any]]
    owner: str
    cwd: Path
    agent_id: str | None = None
    model_name: str | None = None
    max_turns: int | None = None
    max_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    permissions: PermissionPolicy | None = None
    headless: bool = True
    prompter: PermissionPrompter | None = None
    wait_for_tasks: bool = True
    settings: dict[str, Any] = field(default_factory=dict)
    inbox: Callable[[], list[str]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    hooks: HookConfig | None = None
    confine_to: Path | None = None
    confine_also: tuple[Path, ...] = ()
    cwd_source: Callable[[], Path] | None = None
    cwd_roots: tuple[Path, ...] = ()
    rules_base: Path | None = None
    session_id: str = ""
    transcript_path: str | None = None
    observer: EngineObserver | None = None
    meter: Meter | None = None
    instructions: ConversationInstructions | None = None
    text_files: TextFiles | None = None
    commands: CommandRunner | None = None

    def cache_ttl(self) -> CacheTtl | None:
        """How long its requests' prefixes are cached (None: not at all).

        The setting ``promptCacheTtl`` for the main thread, ``subagentPromptCacheTtl`` for a
        subagent or teammate (it has an agent id); ``DISABLE_PROMPT_CACHING`` turns it off.

        Raises:
            UsageError: The setting's value is neither ``"5m"`` nor ``"1h"``.
        """
        from taskloom.models.caching import prompt_cache_ttl

        return prompt_cache_ttl(self.settings, subagent=self.agent_id is not None)

    def instructions_after(
        self, calls: Sequence[ToolUseBlock], results: Sequence[ToolResultBlock], cwd: Path
    ) -> list[TextBlock]:
        """The instruction files of the directories ``calls`` first worked in, as reminders.

        Claude Code's nested ``CLAUDE.md``: told in the user message after the results, never
        in the system prompt, whose bytes (and so the cached prefix) stay the same.
        """
        if self.instructions is None:
            return []
        return self.instructions.after_tools(calls, results, cwd)

    def place(self) -> Path:
        """Where the agent works now, and its shell starts (EnterWorktree moves the main's)."""
        return self.cwd_source() if self.cwd_source else self.cwd

    def rules_root(self) -> Path:
        """The directory its permission rules are relative to (a ``cd`` does not move it)."""
        return self.rules_base or self.place()

    def shell_roots(self) -> tuple[Path, ...]:
        """Where its shell may stand besides its place's tree.

        Its worktree and memory when confined, else its parent's directories and the
        permissions' added ones.
        """
        if self.confine_to is not None:
            return (self.confine_to, *self.confine_also)
        added = self.permissions.additional_directories if self.permissions is not None else ()
        return (*self.cwd_roots, *added)


__all__ = ["EngineConfig"]

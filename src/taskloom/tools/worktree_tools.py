"""EnterWorktree and ExitWorktree: move the main session into an isolated worktree and back.

Both tools share one :class:`WorktreeSession`; the session's working directory is its ``cwd``,
which the engine reads, so entering and leaving a worktree is a change of that one field.
ExitWorktree acts only on the worktree EnterWorktree made, never on one the model names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.hooks import HookConfig
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.worktree_tools import EnterWorktreeInput, ExitWorktreeInput
    from taskloom.worktrees import Worktree


@dataclass(slots=True)
class WorktreeSession:
    """The main session's working directory and the worktree it is in, if any.

    Attributes:
        cwd: Where the session works now.
        active: The worktree EnterWorktree made, until ExitWorktree leaves it.
        original_cwd: Where the session worked before entering it.
    """

    cwd: Path
    active: Worktree | None = None
    original_cwd: Path | None = None


#: A subagent (a fork carries these tools) must not move the session it belongs to.
_MAIN_ONLY = "{tool} is only available to the main session, not to subagents."


class _WorktreeTool:
    """What both tools share: the session state and where hooks come from."""

    def __init__(self, session: WorktreeSession, hooks: HookConfig | None = None) -> None:
        """Bind the tool to the session's state.

        Args:
            session: The state shared by EnterWorktree, ExitWorktree and the engine.
            hooks: The WorktreeCreate/WorktreeRemove hooks used outside git; when None they
                are read from the call's settings.
        """
        self.session = session
        self._hooks = hooks

    def hooks(self, ctx: ToolContext) -> HookConfig:
        """The configured hooks for this call."""
        return self._hooks if self._hooks is not None else HookConfig.from_settings(ctx.settings)


#: :class:`EnterWorktreeInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
ENTER_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`EnterWorktreeTool`.",
    "properties": {
        "name": {
            "maxLength": 64,
            "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]*(\\.[A-Za-z0-9_-]+)*$",
            "type": "string",
            "description": "A name for the worktree (letters, digits, '-', '_', "
            "'.'); random if omitted.",
        }
    },
    "type": "object",
}


class EnterWorktreeTool(_WorktreeTool, Tool["EnterWorktreeInput"]):
    """Create a worktree and make it the session's working directory."""

    name = "EnterWorktree"
    description = (
        "Create an isolated git worktree (a new branch at the current HEAD commit, under "
        ".taskloom/worktrees/) and switch the session's working directory into it. Use only "
        "when the user explicitly asks for a worktree. Fails if the session is already in one."
    )
    input_model = "taskloom.tools.inputs.worktree_tools:EnterWorktreeInput"
    static_schema = (input_model, ENTER_SCHEMA)
    kind = "other"

    async def call(self, params: EnterWorktreeInput, ctx: ToolContext) -> ToolResult:
        """Create the worktree; on success move the session into it."""
        if ctx.agent_id is not None:
            return tool_error(_MAIN_ONLY.format(tool=self.name))
        state = self.session
        if state.active is not None:
            return tool_error(
                f"Already in worktree {state.active.path}; call ExitWorktree before entering "
                "another one"
            )
        # Loaded on first use, not with the tool: most sessions never enter a worktree.
        import secrets

        from taskloom.worktrees import WorktreeError, create_worktree

        name = params.name or f"wt-{secrets.token_hex(4)}"
        try:
            wt = await create_worktree(state.cwd, name, hooks=self.hooks(ctx), session_id=ctx.owner)
        except WorktreeError as exc:
            return tool_error(str(exc))  # the session stays where it was: never run in place
        state.original_cwd, state.cwd, state.active = state.cwd, wt.path, wt
        where = f" on branch {wt.branch} at {wt.base_commit}" if wt.branch else ""
        data = {"worktree_path": str(wt.path), "worktree_branch": wt.branch}
        return ToolResult(
            f"Created worktree {wt.path}{where}. The session now works there; call "
            "ExitWorktree to leave it.",
            data=data,
        )


#: :class:`ExitWorktreeInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
EXIT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`ExitWorktreeTool`.",
    "properties": {
        "action": {
            "description": "keep: leave the worktree and its branch on disk; remove: delete both.",
            "enum": ["keep", "remove"],
            "type": "string",
        },
        "discard_changes": {
            "default": False,
            "description": "With remove: confirm that uncommitted changes and commits may be lost.",
            "type": "boolean",
        },
    },
    "required": ["action"],
    "type": "object",
}


class ExitWorktreeTool(_WorktreeTool, Tool["ExitWorktreeInput"]):
    """Leave the worktree EnterWorktree made, keeping or removing it."""

    name = "ExitWorktree"
    description = (
        "Leave the worktree created by EnterWorktree and return to the original working "
        "directory. action=keep leaves the worktree and its branch on disk; action=remove "
        "deletes both, and refuses when there are uncommitted changes or new commits unless "
        "discard_changes=true."
    )
    input_model = "taskloom.tools.inputs.worktree_tools:ExitWorktreeInput"
    static_schema = (input_model, EXIT_SCHEMA)
    kind = "other"

    async def call(self, params: ExitWorktreeInput, ctx: ToolContext) -> ToolResult:
        """Keep or remove the worktree, then restore the original working directory."""
        if ctx.agent_id is not None:
            return tool_error(_MAIN_ONLY.format(tool=self.name))
        state = self.session
        wt = state.active
        if wt is None:
            return tool_error(
                "Not in a worktree: ExitWorktree only leaves one made by EnterWorktree"
            )
        from taskloom.worktrees import WorktreeError

        try:
            if params.action == "remove":
                text = await self._remove(wt, params.discard_changes, ctx)
            else:
                text = await self._keep(wt)
        except WorktreeError as exc:  # nothing was removed; the session stays in the worktree
            return tool_error(str(exc))
        state.cwd = state.original_cwd or state.cwd
        state.active, state.original_cwd = None, None
        data = {
            "action": params.action,
            "worktree_path": str(wt.path),
            "worktree_branch": wt.branch,
        }
        return ToolResult(f"{text}\nThe session is back in {state.cwd}.", data=data)

    async def _remove(self, wt: Worktree, discard: bool, ctx: ToolContext) -> str:
        from taskloom.worktrees import WorktreeError, inspect, remove

        if not discard and not wt.hook_based:
            state = await inspect(wt)
            if not state.clean:
                lost = [f"changed files: {', '.join(state.changed_files)}"] if state.changes else []
                lost += [f"{state.commits} commit(s) on {wt.branch}"] if state.moved else []
                raise WorktreeError(
                    f"Worktree {wt.path} has work that removing would lose ({'; '.join(lost)}). "
                    "Use action=keep, or action=remove with discard_changes=true to discard it."
                )
        # remove() checks again: a change made since our look must not be lost silently.
        await remove(wt, discard_changes=discard, hooks=self.hooks(ctx), session_id=ctx.owner)
        return f"Removed worktree {wt.path}" + (f" and branch {wt.branch}." if wt.branch else ".")

    async def _keep(self, wt: Worktree) -> str:
        text = f"Kept worktree {wt.path}" + (f" on branch {wt.branch}." if wt.branch else ".")
        if wt.hook_based:
            return text
        from taskloom.worktrees import WorktreeError, inspect

        try:
            summary = (await inspect(wt)).diffstat
        except WorktreeError as exc:  # only the report suffers; keeping needs nothing from git
            summary = f"(cannot inspect it: {exc})"
        return f"{text}\nChanges from its base:\n{summary}" if summary else text

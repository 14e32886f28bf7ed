"""The team task list tools: TaskCreate, TaskGet, TaskList, TaskUpdate.

Every member of a team (the lead included) shares one numbered task list in the store.
Task ids are strings holding the number, as in Claude Code ("1"; "#1" is accepted too).
Starting a task nobody owns claims it for the caller, atomically: of two members claiming
at once, one wins and the other is told who. Assigning a task to someone else sends them a
``task_assignment`` message through the board's ``on_assign``; the owner may be a name nobody
has joined under yet (the message waits for whoever does).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.errors import StoreError, TaskloomError, clipped
from taskloom.store import TaskRow, TeamTables, TeamTaskError
from taskloom.store.teams import open_blockers
from taskloom.teams.model import LEAD_NAME, TeamError
from taskloom.teams.roster import check_name
from taskloom.tools.base import InputT, Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.teams.inputs.task_tools import (
        TaskCreateInput,
        TaskGetInput,
        TaskListInput,
        TaskUpdateInput,
    )

NOT_IN_TEAM = (
    "Not in a team. Create one with TeamCreate, or spawn a teammate with Agent and a name."
)
BLANK_SUBJECT = "The subject is blank. Call TaskCreate again with a short title in `subject`."
COMPLETED_HINT = (
    "\n\nTask completed. Call TaskList now to find your next available task or see if your "
    "work unblocked others."
)
#: The store's names of changed fields as the model wrote them.
_FIELD_NAMES = {"active_form": "activeForm", "blocked_by": "blockedBy"}


@dataclass(frozen=True, slots=True)
class Board:
    """A caller's view of its team's task list.

    Attributes:
        team: The team's name.
        member: The caller's name in the team (``team-lead`` for the lead).
        tables: The store's team tables.
        on_assign: Called as ``(team, new owner's name, payload)`` after a task is assigned
            to another member (or a name not joined yet); the payload is a
            ``task_assignment`` message.
        clock: The time of changes.
    """

    team: str
    member: str
    tables: TeamTables
    on_assign: Callable[[str, str, dict[str, Any]], None]
    clock: Clock = SYSTEM_CLOCK


#: How a tool finds the caller's board (None: the caller is in no team).
BoardOf = Callable[[ToolContext], Board | None]


def parse_task_id(text: str, field: str = "taskId") -> int | ToolResult:
    """The number in ``"1"`` or ``"#1"``, or a tool error naming ``field``."""
    digits = text.strip().removeprefix("#")
    if digits.isascii() and digits.isdigit():
        return int(digits)
    return tool_error(f'{field} must be a task number such as "1", got "{clipped(text)}"')


def iso_utc(seconds: float) -> str:
    """Epoch seconds as ISO 8601 UTC with milliseconds (``2025-01-02T03:04:05.678Z``)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_json(task: TaskRow) -> dict[str, Any]:
    """A task as the tools' structured data gives it (Claude Code's field names)."""
    return {
        "id": str(task.id),
        "subject": task.subject,
        "description": task.description,
        "activeForm": task.active_form,
        "status": task.status,
        "owner": task.owner,
        "blocks": [str(i) for i in task.blocks],
        "blockedBy": [str(i) for i in task.blocked_by],
        "metadata": task.metadata,
    }


def _ids(ids: tuple[int, ...] | list[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


class _BoardTool(Tool[InputT]):
    """A tool over the caller's board."""

    def __init__(self, board: BoardOf) -> None:
        """Find the caller's board with ``board``."""
        self.board = board


#: :class:`TaskCreateInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_CREATE: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskCreateTool`.",
    "properties": {
        "subject": {
            "description": "A brief title, in the imperative (Run the tests).",
            "type": "string",
        },
        "description": {
            "description": "What needs to be done, and how to know it is done.",
            "type": "string",
        },
        "activeForm": {
            "type": "string",
            "description": "Shown while the task runs, present continuous (Running tests).",
        },
        "metadata": {
            "additionalProperties": True,
            "type": "object",
            "description": "Arbitrary data to attach to the task.",
        },
    },
    "required": ["subject", "description"],
    "type": "object",
}


class TaskCreateTool(_BoardTool["TaskCreateInput"]):
    """Add a task to the team's task list."""

    name = "TaskCreate"
    description = (
        "Add a task to your team's shared task list. It starts pending, with no owner; "
        "teammates claim it by setting its status to in_progress, or the lead assigns it "
        "with TaskUpdate and owner. Use it for work that others can pick up or that you "
        "must track; link tasks with TaskUpdate addBlocks/addBlockedBy."
    )
    input_model = "taskloom.teams.inputs.task_tools:TaskCreateInput"
    static_schema = (input_model, INPUT_SCHEMA_CREATE)

    async def call(self, params: TaskCreateInput, ctx: ToolContext) -> ToolResult:
        """Create the task, then run the TaskCreated hooks (a block deletes it again)."""
        board = self.board(ctx)
        if board is None:
            return tool_error(NOT_IN_TEAM)
        if not params.subject.strip():
            return tool_error(BLANK_SUBJECT)
        try:
            task = board.tables.create_task(
                board.team,
                params.subject,
                params.description,
                params.activeForm,
                params.metadata,
                board.clock.time(),
            )
        except StoreError as exc:
            return tool_error(str(exc))
        if ctx.engine is not None:
            outcome = await ctx.engine.run_hook(
                "TaskCreated",
                None,
                task_id=str(task.id),
                task_subject=task.subject,
                task_description=task.description,
                teammate_name=board.member,
                team_name=board.team,
            )
            if outcome is not None and outcome.blocked:
                board.tables.delete_task(board.team, task.id)
                return tool_error(f"TaskCreated hook blocked the task: {outcome.block_reason}")
        return ToolResult(
            f"Task #{task.id} created successfully: {task.subject}",
            data={"task": {"id": str(task.id), "subject": task.subject}},
        )


#: :class:`TaskGetInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_GET: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskGetTool`.",
    "properties": {"taskId": {"description": 'The task\'s number, such as "1".', "type": "string"}},
    "required": ["taskId"],
    "type": "object",
}


class TaskGetTool(_BoardTool["TaskGetInput"]):
    """Read one task of the team's task list."""

    name = "TaskGet"
    description = (
        "Read one task of your team's task list: subject, status, description, owner, and "
        "which tasks it blocks or is blocked by. Read a task before starting it."
    )
    input_model = "taskloom.teams.inputs.task_tools:TaskGetInput"
    static_schema = (input_model, INPUT_SCHEMA_GET)
    kind = "read"
    concurrency_safe = True

    async def call(self, params: TaskGetInput, ctx: ToolContext) -> ToolResult:
        """Describe the task, or say it is not found."""
        board = self.board(ctx)
        if board is None:
            return tool_error(NOT_IN_TEAM)
        task_id = parse_task_id(params.taskId)
        if isinstance(task_id, ToolResult):
            return task_id
        task = board.tables.get_task(board.team, task_id)
        if task is None:
            return ToolResult("Task not found", data={"task": None})
        lines = [
            f"Task #{task.id}: {task.subject}",
            f"Status: {task.status}",
            f"Description: {task.description}",
        ]
        if task.owner:
            lines.append(f"Owner: {task.owner}")
        if task.blocks:
            lines.append(f"Blocks: {_ids(task.blocks)}")
        if task.blocked_by:
            lines.append(f"Blocked by: {_ids(task.blocked_by)}")
        return ToolResult("\n".join(lines), data={"task": task_json(task)})


#: :class:`TaskListInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_LIST: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskListTool`.",
    "properties": {},
    "type": "object",
}


class TaskListTool(_BoardTool["TaskListInput"]):
    """List the team's tasks."""

    name = "TaskList"
    description = (
        "List your team's tasks: number, status, subject, owner, and the open tasks each "
        "waits for. Call it when you finish a task, to find the next one: prefer the lowest "
        "numbered pending task with no owner and no open blockers."
    )
    input_model = "taskloom.teams.inputs.task_tools:TaskListInput"
    static_schema = (input_model, INPUT_SCHEMA_LIST)
    kind = "read"
    concurrency_safe = True

    async def call(self, params: TaskListInput, ctx: ToolContext) -> ToolResult:
        """One line per task, by number."""
        board = self.board(ctx)
        if board is None:
            return tool_error(NOT_IN_TEAM)
        tasks = board.tables.list_tasks(board.team)
        if not tasks:
            return ToolResult("No tasks found", data={"tasks": []})
        lines = []
        for task in tasks:
            line = f"#{task.id} [{task.status}] {task.subject}"
            if task.owner:
                line += f" ({task.owner})"
            blockers = open_blockers(task, tasks)
            if blockers:
                line += f" [blocked by {_ids(blockers)}]"
            lines.append(line)
        return ToolResult("\n".join(lines), data={"tasks": [task_json(t) for t in tasks]})


#: :class:`TaskUpdateInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_UPDATE: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskUpdateTool`.",
    "properties": {
        "taskId": {"description": 'The task\'s number, such as "1".', "type": "string"},
        "subject": {"type": "string", "description": "A new title."},
        "description": {"type": "string", "description": "A new description."},
        "activeForm": {"type": "string", "description": "A new present-continuous form."},
        "status": {
            "enum": ["pending", "in_progress", "completed", "deleted"],
            "type": "string",
            "description": "in_progress when you start (claims it if nobody owns it), completed "
            "when done, deleted to remove it.",
        },
        "addBlocks": {
            "items": {"type": "string"},
            "type": "array",
            "description": "Tasks that cannot start until this one is completed.",
        },
        "addBlockedBy": {
            "items": {"type": "string"},
            "type": "array",
            "description": "Tasks that must be completed before this one starts.",
        },
        "owner": {"type": "string", "description": "The member who should do it ('' to unassign)."},
        "metadata": {
            "additionalProperties": True,
            "type": "object",
            "description": "Keys to merge into the task's metadata (null removes one).",
        },
    },
    "required": ["taskId"],
    "type": "object",
}


class TaskUpdateTool(_BoardTool["TaskUpdateInput"]):
    """Change a task: start, complete, assign, link or delete it."""

    name = "TaskUpdate"
    description = (
        "Change a task of your team's task list. Set status in_progress when you start one "
        "(that claims it, if nobody owns it) and completed when it is done; set owner to "
        "assign it to a teammate (they are told); addBlocks/addBlockedBy link tasks (a task "
        "cannot start while a task it is blocked by is open); status deleted removes it."
    )
    input_model = "taskloom.teams.inputs.task_tools:TaskUpdateInput"
    static_schema = (input_model, INPUT_SCHEMA_UPDATE)

    async def call(self, params: TaskUpdateInput, ctx: ToolContext) -> ToolResult:
        """Apply the changes by the store's rules; report what changed."""
        board = self.board(ctx)
        if board is None:
            return tool_error(NOT_IN_TEAM)
        task_id = parse_task_id(params.taskId)
        if isinstance(task_id, ToolResult):
            return task_id
        changes = _changes(params)
        if isinstance(changes, ToolResult):
            return changes
        current = board.tables.get_task(board.team, task_id)
        if current is None:
            return tool_error("Task not found")
        # A teammate starting a task claims it: the store checks, atomically, that nobody
        # else owns it (whoever owns it is named if so). The lead may set any status.
        claimant = None
        if params.status == "in_progress" and params.owner is None and board.member != LEAD_NAME:
            claimant = board.member
        if params.owner:
            # Any name: one that has not joined yet gets its assignment when it does.
            try:
                check_name("owner", params.owner)
            except TeamError as exc:
                return tool_error(f"{exc} It names the member to do the task.")
        if params.status == "completed" and current.status != "completed" and ctx.engine:
            outcome = await ctx.engine.run_hook(
                "TaskCompleted",
                None,
                task_id=str(task_id),
                task_subject=current.subject,
                task_description=current.description,
                teammate_name=board.member,
                team_name=board.team,
            )
            if outcome is not None and outcome.blocked:
                return tool_error(
                    f"TaskCompleted hook blocked completing task #{task_id}: {outcome.block_reason}"
                )
        try:
            task, changed = board.tables.update_task(
                board.team, task_id, changes, claimant=claimant, when=board.clock.time()
            )
        except (TeamTaskError, StoreError) as exc:
            return tool_error(str(exc))
        names = [_FIELD_NAMES.get(name, name) for name in changed]
        text = f"Updated task #{task_id} {', '.join(names)}" if names else (
            f"No changes to task #{task_id}"
        )  # fmt: skip
        if "status" in changed and task.status == "completed" and board.member != LEAD_NAME:
            text += COMPLETED_HINT
        if params.owner and "owner" in changed and task.owner != board.member:
            text += _assign(board, task)
        return ToolResult(
            text, data={"success": True, "taskId": str(task_id), "updatedFields": names}
        )


def _changes(params: TaskUpdateInput) -> dict[str, Any] | ToolResult:
    """The store's changes for ``params``, or a tool error for a bad task number."""
    changes: dict[str, Any] = {}
    for key, value in (
        ("subject", params.subject),
        ("description", params.description),
        ("active_form", params.activeForm),
        ("status", params.status),
        ("owner", params.owner),
        ("metadata", params.metadata),
    ):
        if value is not None:
            changes[key] = value
    for key, field, texts in (
        ("add_blocks", "addBlocks", params.addBlocks),
        ("add_blocked_by", "addBlockedBy", params.addBlockedBy),
    ):
        ids = []
        for text in texts or ():
            parsed = parse_task_id(text, field)
            if isinstance(parsed, ToolResult):
                return parsed
            ids.append(parsed)
        if ids:
            changes[key] = ids
    return changes


def _assign(board: Board, task: TaskRow) -> str:
    """Tell the new owner (after the commit); '' or a note for the model if it failed."""
    assert task.owner is not None
    payload = {
        "type": "task_assignment",
        "taskId": str(task.id),
        "subject": task.subject,
        "description": task.description,
        "assignedBy": board.member,
        "timestamp": iso_utc(board.clock.time()),
    }
    member = board.tables.member(board.team, task.owner)
    try:
        board.on_assign(board.team, task.owner, payload)
    except TaskloomError as exc:
        # The assignment is committed: say that the message did not go, rather than fail.
        return f"\n\n{task.owner} could not be told of the assignment: {exc}"
    if member is None:
        return (
            f"\n\n{task.owner} is not in the team yet: the assignment waits in their mailbox "
            f'and reaches them when you spawn a teammate named "{task.owner}".'
        )
    if not member.is_active:
        return (
            f"\n\n{task.owner} has ended and is not working: the assignment waits in their "
            f'mailbox until you spawn a teammate named "{task.owner}" again; give the task to '
            "a running member to have it done now."
        )
    return ""


def task_tools(board: BoardOf) -> list[Tool[Any]]:
    """The four task list tools over ``board``."""
    return [TaskCreateTool(board), TaskGetTool(board), TaskListTool(board), TaskUpdateTool(board)]

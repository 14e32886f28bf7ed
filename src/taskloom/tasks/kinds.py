"""Task kinds: what differs from one sort of task to another, and the registry of kinds.

The runtime, the notifications and the task tools treat every task alike and ask its kind for
what is its own: how a kill is recorded, what its notification says, what survives a resume,
how long it stays in memory after it ended, what TaskOutput and the job tools show, what
happens when it moves to the background, what crash recovery sets in its record, how a
listing names it, and whether it is an agent or a process of its own. Code above the task
layer asks the same questions and tests no state class (``tests/test_architecture.py``
checks it). A kind registers itself, for its :class:`TaskType`,
from its own module; :class:`TaskKind` itself serves every type no kind has claimed (the
defaults are what any task needs and nothing more).

The built-in kinds (:mod:`taskloom.tasks.shell_kind`, :mod:`taskloom.tasks.agent`,
:mod:`taskloom.tasks.teammate`) are registered when the ``taskloom.tasks`` package is imported,
so that a state read back from the store finds its kind even if nothing in the process has run
a task of that kind yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, NamedTuple, Protocol, runtime_checkable

from taskloom.tasks.types import Priority, TaskState, TaskStatus, TaskType, use_state_class
from taskloom.tasks.usage import Reported

_NO_CHANGES: Mapping[str, object] = {}


class ShownField(NamedTuple):
    """One field a task tool shows for a task.

    Attributes:
        key: Its key in the tool result's data.
        value: Its value there.
        xml: Its line in the text the model reads.
    """

    key: str
    value: object
    xml: str


class Shown(NamedTuple):
    """What TaskOutput shows for a task, and what reading it changes in the task's state.

    Attributes:
        fields: The fields shown, in order.
        changes: State fields to record once shown (e.g. how far the output was consumed).
    """

    fields: tuple[ShownField, ...]
    changes: Mapping[str, object] = {}


class Progress(NamedTuple):
    """What a live task has done so far, as a UI row shows it (None: the kind keeps no count).

    Attributes:
        tool_uses: Tool calls made.
        tokens: Tokens used.
        activity: The last thing it did, in a few words ('' if nothing is known).
        subtree_tool_uses: Tool calls of it and every agent it started (None: not counted).
        subtree_tokens: Tokens of it and every agent it started.
        subtree_cost_usd: What it and every agent it started cost so far (None: not priced).
    """

    tool_uses: int | None = None
    tokens: int | None = None
    activity: str = ""
    subtree_tool_uses: int | None = None
    subtree_tokens: int | None = None
    subtree_cost_usd: float | None = None


class AgentFacts(NamedTuple):
    """What a result's ``agentUsage`` says of an agent-like task besides the ledger's figures.

    Attributes:
        agent_type: Its agent type.
    """

    agent_type: str


class TaskHandle(Protocol):
    """The live side of a task (a process, an agent loop): what the runtime can ask of it."""

    async def kill(self) -> None:
        """Stop the task and record its terminal state through the runtime."""
        ...

    async def detach(self) -> None:
        """Let the task run on without this session (exit policy ``detach``)."""
        ...


@runtime_checkable
class Backgroundable(Protocol):
    """A task handle that wants to know when its task moves to the background."""

    def on_background(self) -> None:
        """The task was moved to the background (no caller waits on it any more)."""
        ...


def answer_shown(result: str | None, error: str | None) -> Shown:
    """What the task tools show of an agent-like task: its answer, else its error, if any."""
    answer = result if result is not None else error
    if answer is None:
        return Shown(())
    return Shown((ShownField("result", answer, f"<result>\n{answer}\n</result>"),))


class TaskKind:
    """The behaviour of one sort of task; subclasses override what is their own.

    Attributes:
        task_type: The type served; None only for the fallback serving unclaimed types.
        noun: What notifications call such a task (``Background command``, ``Agent``).
        eviction_grace: Seconds an ended, notified task stays in memory, for a UI showing it.
        owns_tasks: Whether such a task starts tasks of its own under its id (an agent does).
        state_class: The state class of its type, for a type that has none built in: its
            records are read back (after eviction, on resume) as this class.
        outlives_session: Whether such a task with exit policy ``detach`` goes on without
            any process of its session and is taken up again by the next one (a remote
            agent): a crash or the end of the session leaves it running, and a resumed
            session holds it again (its handle is attached then).
        is_agent: Whether such a task is an agent (a model's loop, here or elsewhere): when
            the session's budget runs out, every one is stopped.
        is_process: Whether such a task is a process of its own, tagged with the task's id
            (a command): it ends with that process, the agent that started it takes it
            along when it ends, and the session's end kills what is left of it by its tag,
            even when the store cannot be read.
        shows_owner: Whether a listing says whom the task works for, when that is not the
            session itself (a teammate works for its team: it says no).
    """

    task_type: ClassVar[TaskType | None] = None
    noun: ClassVar[str] = "Agent"  # the types without a kind of their own are agent-like
    eviction_grace: ClassVar[float] = 0.0
    owns_tasks: ClassVar[bool] = False
    state_class: ClassVar[type[TaskState] | None] = None
    outlives_session: ClassVar[bool] = False
    is_agent: ClassVar[bool] = False
    is_process: ClassVar[bool] = False
    shows_owner: ClassVar[bool] = True

    # -- life cycle ---------------------------------------------------------------------------

    def killed(self, state: TaskState) -> TaskState:
        """The state recorded when the runtime kills the task (unchanged once ended)."""
        return state if state.terminal else state.replace(status=TaskStatus.KILLED)

    def told_by_stop(self, state: TaskState) -> TaskState:
        """The state before its owner stops it with a tool whose result tells of the stop.

        Default: unchanged, so the end is still notified (an agent's notification carries
        what it had done). A kind whose stop says all there is to say marks it notified.
        """
        return state

    def started_by(self, state: TaskState, agent_id: str) -> bool:
        """Whether ``agent_id`` started the task (and so its end ends the task too)."""
        return state.owner == agent_id

    def resume_changes(self, existing: TaskState, resumed: TaskState) -> dict[str, object]:
        """Fields of ``existing`` that the resumed state (same id) must carry on with."""
        return {}

    def end_changes(self, state: TaskState, now: float) -> Mapping[str, object]:
        """Fields stamped on the terminal transition, besides the end time."""
        return _NO_CHANGES

    def settle_changes(self, status: TaskStatus) -> Mapping[str, object]:
        """Fields of its stored record that crash recovery sets when it ends it with ``status``.

        Its session's process is gone: ``killed`` when what ran it was swept with it,
        ``completed`` when it was detached and has ended since, unseen.
        """
        return _NO_CHANGES

    def evictable(self, state: TaskState, now: float) -> bool:
        """Whether an ended, notified task may leave memory now (its row stays stored)."""
        if self.eviction_grace <= 0:
            return True
        return (state.end_time or 0.0) + self.eviction_grace <= now

    def hand_off(self, state: TaskState, handle: object) -> None:
        """Tell the live side that the task now runs in the background."""
        if isinstance(handle, Backgroundable):
            handle.on_background()

    # -- notifications ------------------------------------------------------------------------

    def label(self, state: TaskState) -> str:
        """How the summary names the task."""
        return f'{self.noun} "{state.description}"'

    def summary(self, state: TaskState) -> str:
        """The one-line summary of the task's end; a stop not by TaskStop says why.

        Why (a budget that ran out, an owner that stopped waiting) is the state's
        ``stopped_reason``.
        """
        label = self.label(state)
        if state.status == TaskStatus.KILLED:
            why = state.stopped_reason
            return f"{label} was stopped: {why}" if why else f"{label} was stopped"
        if state.status == TaskStatus.FAILED:
            # Every state variant but the shell's carries an ``error``; this default serves
            # variants no kind claims, without knowing their classes.
            error = getattr(state, "error", None)
            return f"{label} failed: {error}" if error else f"{label} failed"
        return f"{label} {state.status.value}"

    def result(self, state: TaskState) -> str | None:
        """The ``<result>`` of the task's notification (None: no such element)."""
        return None

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """The ``<usage>`` figures of the task's notification (None: no such element)."""
        return None

    def priority(self, state: TaskState) -> Priority:
        """When the owner should hear of the end: ``next`` turn boundary or ``later``."""
        return "later"

    def busy(self, state: TaskState) -> bool:
        """Whether a live task is at work, so that its owner's run waits for it (default: yes).

        A teammate waiting for mail is alive but idle: a headless lead need not wait for it.
        """
        return True

    def ends_by_itself(self, state: TaskState) -> bool:
        """Whether the task has a bound of its own (default: yes).

        An agent ends with its answer, its turns or its budget; a teammate with its lead. A
        command may run forever (a server, ``tail -f``): an owner that waits for it must set
        the bound (see :mod:`taskloom.tasks.wait_bound`).
        """
        return True

    def notifies(self, state: TaskState) -> bool:
        """Whether the owner hears of the end as a ``<task-notification>`` (default: yes).

        A kind whose end is told some other way (a teammate's, through its team's mailbox
        protocol) says no: the end is then recorded as notified, and nothing is queued.
        """
        return True

    # -- what the tools and UIs show ----------------------------------------------------------

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """What TaskOutput shows; it may consume output (at most ``limit`` bytes of it)."""
        return Shown(())

    def final_output(self, state: TaskState, limit: int) -> str:
        """What ``job_output`` returns once the task has ended (at most ``limit`` bytes)."""
        return ""

    def status_note(self, state: TaskState) -> str:
        """Text after the status in a job line (`` exit=1``), or ''."""
        return ""

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Fields a ``task_updated`` stream event carries for the task, beyond the common ones."""
        return {}

    def addresses(self, state: TaskState) -> tuple[str, ...]:
        """Other names the task answers to besides its id, in the task tools (none by default)."""
        return ()

    def progress(self, state: TaskState) -> Progress:
        """What it has done so far, for a live panel (cheap: it is asked on every redraw)."""
        return Progress()

    def short_noun(self) -> str:
        """What a one-line listing calls such a task (``agent``): its noun, in lower case."""
        return self.noun.lower()

    def title(self, state: TaskState) -> str:
        """What a one-line listing names the task by: its first other name, else its description.

        A teammate is named by its agent id (``alice@team``), a command by its description,
        else its command line.
        """
        names = [name for name in self.addresses(state) if name]
        return names[0] if names else state.description

    # -- usage --------------------------------------------------------------------------------

    def usage_from_elsewhere(self, state: TaskState) -> Reported | None:
        """What another process reported the task's agent spent, if its calls are made there.

        None (default): its model calls, if any, are made by an engine of this process,
        which charges them to the session's ledger itself (see :mod:`taskloom.tasks.usage`).
        Read from a task's recorded state: a pane teammate's record, as its lead counts it;
        a remote agent's as a resumed session found it (what was counted before it).
        """
        return None

    def agent_facts(self, state: TaskState) -> AgentFacts | None:
        """Its agent type, for ``agentUsage`` (None: not an agent listed there)."""
        return None


_FALLBACK = TaskKind()
_KINDS: dict[TaskType, TaskKind] = {}


def register_kind(kind: TaskKind) -> TaskKind | None:
    """Make ``kind`` the one serving its type; returns the kind it replaces, if any.

    Raises:
        ValueError: ``kind`` names no type, or its ``state_class`` is not of that type.
    """
    if kind.task_type is None:
        raise ValueError(f"{type(kind).__name__} has no task_type")
    use_state_class(kind.task_type, kind.state_class)  # checked first: a bad one registers nothing
    previous = _KINDS.get(kind.task_type)
    _KINDS[kind.task_type] = kind
    return previous


def unregister_kind(task_type: TaskType) -> TaskKind | None:
    """Stop serving ``task_type`` with its registered kind; returns that kind, if any."""
    use_state_class(task_type, None)
    return _KINDS.pop(task_type, None)


def kind_for(task_type: TaskType) -> TaskKind:
    """The kind serving ``task_type`` (the defaults of :class:`TaskKind` if none is)."""
    return _KINDS.get(task_type, _FALLBACK)


def kind_of(state: TaskState) -> TaskKind:
    """The kind serving ``state``'s type."""
    return _KINDS.get(state.type, _FALLBACK)


def kind_of_record(record: Mapping[str, object]) -> TaskKind:
    """The kind serving a stored record's type (the defaults for a type unknown here)."""
    try:
        return kind_for(TaskType(str(record.get("type"))))
    except ValueError:  # written by a newer taskloom
        return _FALLBACK


def outlives_session(state: TaskState | Mapping[str, object]) -> bool:
    """Whether a task (its state, or its stored record) goes on without its session.

    That is a detached task of a kind that outlives its session (see
    ``TaskKind.outlives_session``): nothing ends it when its session's process goes.
    """
    if isinstance(state, TaskState):
        return state.exit_policy == "detach" and kind_of(state).outlives_session
    return state.get("exit_policy") == "detach" and kind_of_record(state).outlives_session


def registered_kinds() -> dict[TaskType, TaskKind]:
    """Every registered kind by its type."""
    return dict(_KINDS)


__all__ = [
    "AgentFacts",
    "Backgroundable",
    "Shown",
    "ShownField",
    "TaskHandle",
    "TaskKind",
    "kind_for",
    "kind_of",
    "kind_of_record",
    "outlives_session",
    "register_kind",
    "registered_kinds",
    "unregister_kind",
]

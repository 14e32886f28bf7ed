"""Task types, statuses, the status machine and the frozen state variants.

States are plain immutable data (no process handles, no callbacks): they are persisted as JSON
in the store, compared for no-op updates and handed to UIs. Live resources belong to the
runtime's handle table instead.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Self, TypeVar

from taskloom._dataclass import dataclass, declared_frozen, when_written
from taskloom.errors import InvalidTransition

_log = logging.getLogger(__name__)
_St = TypeVar("_St", bound="TaskState")


class TaskType(enum.StrEnum):
    """What a task runs; each type's state class is built in or comes with its kind."""

    LOCAL_BASH = "local_bash"
    LOCAL_AGENT = "local_agent"
    REMOTE_AGENT = "remote_agent"
    IN_PROCESS_TEAMMATE = "in_process_teammate"
    LOCAL_WORKFLOW = "local_workflow"
    MONITOR_MCP = "monitor_mcp"
    DREAM = "dream"


class TaskStatus(enum.StrEnum):
    """Where a task is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"


TERMINAL: frozenset[TaskStatus] = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.KILLED}
)

# A pending task may also end without ever running: it failed to start or was stopped first.
_ALLOWED: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.PENDING: frozenset({TaskStatus.RUNNING, TaskStatus.FAILED, TaskStatus.KILLED}),
    TaskStatus.RUNNING: TERMINAL,
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.KILLED: frozenset(),
}

ExitPolicy = Literal["cancel", "wait", "detach"]
EXIT_POLICIES: tuple[ExitPolicy, ...] = ("cancel", "wait", "detach")

#: When an owner hears of a task: at the ``next`` turn boundary, or ``later``.
Priority = Literal["next", "later"]


def is_terminal(status: TaskStatus | str) -> bool:
    """Tell whether ``status`` is one a task never leaves (except by resume)."""
    return TaskStatus(status) in TERMINAL


def can_transition(old: TaskStatus, new: TaskStatus, *, resume: bool = False) -> bool:
    """Tell whether ``old -> new`` is allowed; ``resume`` admits terminal -> running."""
    if old == new:
        return True
    if resume and old in TERMINAL and new == TaskStatus.RUNNING:
        return True
    return new in _ALLOWED[old]


def check_transition(
    task_id: str, old: TaskStatus, new: TaskStatus, *, resume: bool = False
) -> None:
    """Raise :class:`InvalidTransition` unless ``old -> new`` is allowed."""
    if not can_transition(old, new, resume=resume):
        raise InvalidTransition(task_id, old.value, new.value)


# Only its variants are made (each type's own class): the methods a dataclass generates for
# the base itself would all be replaced by theirs, and generating them costs import time.
@dataclass(frozen=True, kw_only=True, slots=True, init=False, repr=False, eq=False)
class TaskState:
    """Fields common to every task.

    Attributes:
        id: Type-prefixed task id.
        type: The variant tag.
        status: Current status.
        description: Short human-readable label.
        owner: The agent id or session id that started the task; only it (or its session)
            reads, stops and is notified of it.
        session_id: The session whose runtime holds the task.
        tool_use_id: The ``tool_use`` block that started it, if any.
        start_time: Wall-clock start (seconds since the epoch).
        end_time: Wall-clock end, set on the terminal transition.
        output_file: Path of the task's output file ('' when it has none).
        output_offset: How far a reader has consumed the output (bytes).
        notified: Whether the terminal notification was handed to the queue (or waived).
        exit_policy: What happens to the task when its owner closes.
        is_backgrounded: False while a caller waits on it in the foreground.
        stopped_reason: Why it was stopped, when not by TaskStop (a budget that ran out, an
            owner that stopped waiting); any task can be stopped so.
    """

    TYPE: ClassVar[TaskType]

    id: str
    type: TaskType
    status: TaskStatus = TaskStatus.PENDING
    description: str = ""
    owner: str = ""
    session_id: str = ""
    tool_use_id: str | None = None
    start_time: float = 0.0
    end_time: float | None = None
    output_file: str = ""
    output_offset: int = 0
    notified: bool = False
    exit_policy: ExitPolicy = "cancel"
    is_backgrounded: bool = True
    stopped_reason: str | None = None

    def replace(self, **changes: Any) -> Self:
        """Return a copy with ``changes`` applied.

        Equivalent to ``dataclasses.replace`` (unknown names raise ``TypeError``) but several
        times faster: it copies slots directly instead of re-running ``__init__``, which
        matters on the runtime's hot path (three copies per task).
        """
        copy, setters = _COPIERS.get(type(self)) or _copier(type(self))
        new: Self = copy(self)
        try:
            for name, value in changes.items():
                setters[name](new, value)
        except KeyError:  # an unknown name: the copy is dropped, nothing was changed
            unknown = sorted(changes.keys() - setters.keys())
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(unknown)}") from None
        return new

    @property
    def terminal(self) -> bool:
        """Whether the task has ended."""
        return self.status in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a dict ready for ``json.dumps``.

        Status and type are ``str`` enums, which JSON writes as strings; a tuple field is
        given as a list.
        """
        make = _DICT_MAKERS.get(type(self)) or _dict_maker(type(self))
        return make(self)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_DICT_MAKERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_SLOTS: dict[type, dict[str, Any]] = {}
# Annotations (as written) that no tuple can satisfy: to_dict takes such a field as it is.
_SCALARS = frozenset(
    {"str", "int", "float", "bool", "None", "TaskType", "TaskStatus", "ExitPolicy", "Priority"}
)


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _scalar(annotation: object) -> bool:
    """Whether a field so annotated never holds a tuple (if in doubt: False, it is tested)."""
    if isinstance(annotation, type):
        return annotation in (str, int, float, bool)
    if not isinstance(annotation, str):
        return False
    return all(
        part in _SCALARS or part.startswith("Literal[")
        for part in (p.strip() for p in annotation.split("|"))
    )


def _as_list(value: Any) -> Any:
    return list(value) if type(value) is tuple else value


def _dict_maker(cls: type) -> Callable[[Any], dict[str, Any]]:
    """A function giving the ``to_dict`` of a ``cls`` instance.

    Generated once per class, one dict display of every field in order (as :func:`_copier`
    generates its copy): each record the store writes is built so, at every commit that
    writes it. Only a field whose annotation admits a tuple is tested for one.
    """
    made = _DICT_MAKERS.get(cls)
    if made is None:
        items = []
        for field in dataclasses.fields(cls):
            read = f"self.{field.name}"
            if not _scalar(field.type):
                read = f"as_list({read})"
            items.append(f"{field.name!r}: {read}")
        namespace: dict[str, Any] = {"as_list": _as_list}
        # Field names only: they come from the class.
        exec(f"def to_dict(self):\n    return {{{', '.join(items)}}}", namespace)
        made = _DICT_MAKERS[cls] = namespace["to_dict"]
    return made


def _slot_descriptors(cls: type) -> dict[str, Any]:
    # Slot member descriptors set a slot without going through the frozen __setattr__.
    slots = _SLOTS.get(cls)
    if slots is None:
        slots = _SLOTS[cls] = {n: inspect.getattr_static(cls, n) for n in _field_names(cls)}
    return slots


_Copier = tuple[Callable[[Any], Any], dict[str, Callable[[Any, Any], None]]]
_COPIERS: dict[type, _Copier] = {}


def _copier(cls: type) -> _Copier:
    """A function copying every slot of a ``cls`` instance, and each slot's setter.

    The copy function is generated once per class with one statement per field (as
    :mod:`dataclasses` generates ``__init__``): a loop over descriptors costs three times as
    much per copy.
    """
    made = _COPIERS.get(cls)
    if made is None:
        setters = {name: slot.__set__ for name, slot in _slot_descriptors(cls).items()}
        namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
        lines = ["def copy(self):", "    made = new(cls)"]
        for i, name in enumerate(setters):
            namespace[f"set{i}"] = setters[name]
            lines.append(f"    set{i}(made, self.{name})")
        lines.append("    return made")
        exec("\n".join(lines), namespace)  # field names only: they come from the class
        made = _COPIERS[cls] = (namespace["copy"], setters)
    return made


def _fast_init(cls: type[_St]) -> type[_St]:
    """Give a built-in state class an ``__init__`` that sets its slots directly.

    The frozen dataclass's own sets each field through ``object.__setattr__``; this one takes
    the same keyword-only arguments, with the same defaults, and costs 40 % less (a churn of
    tasks makes a state per task). It is written with the class's own methods, on the class's
    first use (see :mod:`taskloom._dataclass`).
    """
    when_written(cls, _faster_init)
    return cls


def _faster_init(cls: type) -> None:
    """Set ``cls``'s direct ``__init__``, unless a field needs more than a default."""
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or any(
        not f.init or f.default_factory is not dataclasses.MISSING for f in fields
    ):
        return
    setters = _copier(cls)[1]
    namespace: dict[str, Any] = {}
    params, lines = [], []
    for i, field in enumerate(fields):
        if field.default is dataclasses.MISSING:
            params.append(field.name)
        else:
            namespace[f"default{i}"] = field.default
            params.append(f"{field.name}=default{i}")
        namespace[f"set{i}"] = setters[field.name]
        lines.append(f"    set{i}(self, {field.name})")
    # Field names only: they come from the class.
    exec(f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(lines), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = dict(cls.__init__.__annotations__)  # type: ignore[misc]
    cls.__init__ = init  # type: ignore[misc]


@_fast_init
@dataclass(frozen=True, kw_only=True, slots=True)
class ShellTaskState(TaskState):
    """A shell command (``local_bash``).

    Attributes:
        command: The command line given to the shell.
        exit_code: The exit status once ended; 128 + N for a death by signal N, as shells say.
        interrupted: Whether it was killed or timed out rather than exiting by itself.
        pid: The shell's pid while it runs (process group leader).
        kind: ``bash`` for commands, ``monitor`` for long-lived watchers.
        agent_id: The agent that started it, for :meth:`kill_shells_for_agent`.
    """

    TYPE: ClassVar[TaskType] = TaskType.LOCAL_BASH
    type: TaskType = TaskType.LOCAL_BASH
    command: str = ""
    exit_code: int | None = None
    interrupted: bool = False
    pid: int | None = None
    kind: Literal["bash", "monitor"] = "bash"
    agent_id: str | None = None


@_fast_init
@dataclass(frozen=True, kw_only=True, slots=True)
class AgentTaskState(TaskState):
    """A subagent (``local_agent``); the loop that drives it comes with the engine.

    Attributes:
        prompt: The task given to the agent.
        agent_type: The agent definition's name.
        result: The final answer, once completed.
        error: Why it failed, once failed.
        evict_after: Earliest eviction time once ended (epoch seconds).
        total_tokens: Tokens used so far (latest input, with cache, plus output so far).
        tool_uses: Tool calls made so far.
        name: The name given at spawn (SendMessage can address it by name).
        input_tokens: Input tokens of the latest request (input plus cache).
        output_tokens: Output tokens so far.
        activities: The last few things it did ("Reading src/app.py").
        worktree_path: Its git worktree, when isolated and kept (it holds changes).
        worktree_branch: That worktree's branch.
        subtree_tokens: Tokens it and every agent it started have used so far, summed over
            their responses (input, cache reads and writes, output): what budgets count.
        subtree_tool_uses: Tool calls it and every agent it started have made so far.
        cache_read_input_tokens: Tokens read from the prompt cache so far, summed.
        cache_creation_input_tokens: Tokens written to the prompt cache so far, summed.
        cost_usd: What its own requests cost so far (by the price table).
        subtree_cost_usd: What it and every agent it started have cost so far.
        partial: Its run stopped at its turn limit (``maxTurns``): ``result`` is its last
            text, not a finished answer.
    """

    TYPE: ClassVar[TaskType] = TaskType.LOCAL_AGENT
    type: TaskType = TaskType.LOCAL_AGENT
    prompt: str = ""
    agent_type: str = "general-purpose"
    result: str | None = None
    error: str | None = None
    evict_after: float | None = None
    total_tokens: int = 0
    tool_uses: int = 0
    name: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    activities: tuple[str, ...] = ()
    worktree_path: str | None = None
    worktree_branch: str | None = None
    subtree_tokens: int = 0
    subtree_tool_uses: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    subtree_cost_usd: float = 0.0
    partial: bool = False


#: The state class of each type built in. The other types' classes come with their kinds
#: (see :func:`use_state_class`: ``remote_agent``, ``in_process_teammate``,
#: ``local_workflow``, ``monitor_mcp`` and ``dream``), registered when
#: :mod:`taskloom.tasks` is imported.
STATE_CLASSES: dict[TaskType, type[TaskState]] = {
    cls.TYPE: cls for cls in (ShellTaskState, AgentTaskState)
}
_BROUGHT: dict[TaskType, type[TaskState]] = {}


def use_state_class(task_type: TaskType, cls: type[TaskState] | None) -> None:
    """Read records of ``task_type`` back as ``cls`` (None: as the built-in class, if any).

    Called by :func:`taskloom.tasks.kinds.register_kind` for a kind that brings its state.

    Raises:
        ValueError: ``cls`` is not a state class of that type.
    """
    if cls is None:
        _BROUGHT.pop(task_type, None)
        return
    if getattr(cls, "TYPE", None) != task_type or not issubclass(cls, TaskState):
        raise ValueError(f"{cls.__name__} is not a state class of type {task_type.value!r}")
    if not declared_frozen(cls) or "__slots__" not in cls.__dict__:
        # States are shared between the runtime, the store and UIs, and copied slot by slot.
        raise ValueError(
            f"{cls.__name__} must be declared @dataclass(frozen=True, kw_only=True, slots=True)"
        )
    _BROUGHT[task_type] = cls


def state_class(task_type: TaskType) -> type[TaskState] | None:
    """The class records of ``task_type`` are read back as (None: its kind is not loaded)."""
    return _BROUGHT.get(task_type) or STATE_CLASSES.get(task_type)


def state_from_dict(data: dict[str, Any]) -> TaskState:
    """Rebuild a state from :meth:`TaskState.to_dict` output (after a JSON round trip).

    Unknown keys are ignored, so an older taskloom reads rows a newer one wrote. A field's own
    list becomes a tuple again; what it holds stays JSON data (lists, dicts).

    Raises:
        ValueError: The type is unknown, or has no state class (its kind is not loaded).
    """
    task_type = TaskType(data["type"])
    cls = state_class(task_type)
    if cls is None:
        raise ValueError(f"task type {task_type.value!r} has no state class: no kind loaded")
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            continue
        if key == "type":
            value = TaskType(value)
        elif key == "status":
            value = TaskStatus(value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)


def readable_state(data: dict[str, Any]) -> TaskState | None:
    """:func:`state_from_dict`, or None, with a warning, for a record no class here reads.

    Such a record was written by a kind this process has not registered, or by a newer
    taskloom: the runtime leaves it out (its processes are swept by their own records) rather
    than fail the session.
    """
    try:
        return state_from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        _log.warning("task %s left out: its record cannot be read (%s)", data.get("id"), exc)
        return None

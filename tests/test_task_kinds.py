"""A new task kind plugs into the runtime, the notifications and the task tools unchanged.

``TaskType`` is a closed enum (ids and store rows are keyed by it), so the toy kind here serves
``local_workflow`` (the real workflow kind is set aside while a toy is registered, and comes
back after), and brings its own state class, defined here: exactly what the real kind does.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import pytest

from helpers import TIME_FACTOR
from taskloom.process.identity import boot_id
from taskloom.settings import db_path
from taskloom.store import SessionRow, Store
from taskloom.tasks.ids import new_task_id
from taskloom.tasks.kinds import (
    Shown,
    ShownField,
    TaskKind,
    kind_for,
    kind_of,
    register_kind,
    registered_kinds,
    unregister_kind,
)
from taskloom.tasks.notifications import summarize
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import (
    Priority,
    ShellTaskState,
    TaskState,
    TaskStatus,
    TaskType,
    state_from_dict,
)
from taskloom.tasks.wait_bound import WaitBound
from taskloom.testing import FakeClock
from taskloom.tools.jobs import _line
from taskloom.tools.tasks import describe

GRACE_S = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ToyState(TaskState):
    """The toy kind's state: the common fields and an error."""

    TYPE: ClassVar[TaskType] = TaskType.LOCAL_WORKFLOW
    type: TaskType = TaskType.LOCAL_WORKFLOW
    error: str | None = None


class ToyKind(TaskKind):
    task_type = TaskType.LOCAL_WORKFLOW
    state_class = ToyState
    noun = "Toy workflow"
    eviction_grace = GRACE_S

    def killed(self, state: TaskState) -> TaskState:
        if state.terminal:
            return state
        return state.replace(status=TaskStatus.KILLED, error="halted by the toy kind")

    def summary(self, state: TaskState) -> str:
        return f"toy {state.id} ended as {state.status.value}"

    def result(self, state: TaskState) -> str | None:
        return getattr(state, "error", None)

    def priority(self, state: TaskState) -> Priority:
        return "next"

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        return Shown((ShownField("toy", "yes", "<toy>yes</toy>"),))

    def status_note(self, state: TaskState) -> str:
        return " (toy)"


class ToyHandle:
    """The live side: a loop that runs until it is killed."""

    def __init__(self, rt: TaskRuntime, task_id: str) -> None:
        self.rt, self.task_id = rt, task_id
        self.kills = 0
        self.backgrounded = 0
        self.loop = asyncio.get_running_loop().create_task(asyncio.sleep(3600))

    async def kill(self) -> None:
        self.kills += 1
        self.loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.loop

    async def detach(self) -> None:  # pragma: no cover - not used here
        pass

    def on_background(self) -> None:
        self.backgrounded += 1


_Kind = TypeVar("_Kind", bound=TaskKind)


def _registered(kind: _Kind) -> Iterator[_Kind]:
    """``kind`` registered for its type while the test runs, then whatever was before."""
    previous = register_kind(kind)
    try:
        yield kind
    finally:
        unregister_kind(TaskType.LOCAL_WORKFLOW)
        if previous is not None:
            register_kind(previous)


@pytest.fixture
def toy() -> Iterator[ToyKind]:
    yield from _registered(ToyKind())


def test_the_kind_is_registered_for_its_type(toy: ToyKind) -> None:
    assert kind_for(TaskType.LOCAL_WORKFLOW) is toy
    kinds = registered_kinds()
    assert kinds[TaskType.LOCAL_WORKFLOW] is toy
    # The built-in kinds are there without importing their modules here.
    assert {TaskType.LOCAL_BASH, TaskType.LOCAL_AGENT} <= set(kinds)
    assert kind_of(ToyState(id="w00000000")) is toy
    # Its records are read back as its own state class.
    assert state_from_dict(ToyState(id="w00000000", error="e").to_dict()) == ToyState(
        id="w00000000", error="e"
    )


def test_unregistered_types_get_the_defaults(toy: ToyKind) -> None:
    unregister_kind(TaskType.LOCAL_WORKFLOW)
    kind = kind_for(TaskType.LOCAL_WORKFLOW)
    assert type(kind) is TaskKind
    state = ToyState(id="w00000000", description="d", status=TaskStatus.KILLED)
    assert summarize(state) == 'Agent "d" was stopped'
    # With its kind gone, there is no class to read its records back as.
    with pytest.raises(ValueError, match="'local_workflow' has no state class"):
        state_from_dict(state.to_dict())


def test_a_kind_must_bring_a_state_class_of_its_own_type() -> None:
    class Misfit(ToyKind):
        state_class = ShellTaskState

    before = kind_for(TaskType.LOCAL_WORKFLOW)
    with pytest.raises(ValueError, match="not a state class of type 'local_workflow'"):
        register_kind(Misfit())
    assert kind_for(TaskType.LOCAL_WORKFLOW) is before  # nothing was registered


def test_a_kind_needs_a_type() -> None:
    with pytest.raises(ValueError, match="task_type"):
        register_kind(TaskKind())


async def test_runtime_lists_kills_notifies_and_evicts_a_new_kind(toy: ToyKind) -> None:
    clock = FakeClock()
    async with TaskRuntime(clock=clock, sweep_interval=3600) as rt:
        task_id = rt.new_id(TaskType.LOCAL_WORKFLOW)
        rt.register(
            ToyState(
                id=task_id,
                owner=rt.session_id,
                description="toy",
                status=TaskStatus.RUNNING,
                is_backgrounded=False,
            )
        )
        handle = ToyHandle(rt, task_id)
        rt.attach_handle(task_id, handle)
        rt.register(ShellTaskState(id=rt.new_id(TaskType.LOCAL_BASH), owner=rt.session_id))

        # Listed, alongside a shell, and shown by the task tools with the kind's own fields.
        listed = rt.list(types=[TaskType.LOCAL_WORKFLOW])
        assert [s.id for s in listed] == [task_id]
        assert {s.type for s in rt.list()} == {TaskType.LOCAL_WORKFLOW, TaskType.LOCAL_BASH}
        text, data = describe(rt, listed[0], "not_ready")
        assert "<toy>yes</toy>" in text and data["toy"] == "yes"
        assert _line(listed[0]) == f"{task_id} local_workflow running (toy) toy"

        # The background hand-off reaches the live side through the kind.
        assert rt.background(task_id)
        assert handle.backgrounded == 1
        assert rt.get(task_id).is_backgrounded  # type: ignore[union-attr]

        # Killed: through its handle, recorded as the kind says.
        final = await rt.kill(task_id)
        assert handle.kills == 1 and handle.loop.cancelled()
        assert final.status == TaskStatus.KILLED
        assert getattr(final, "error", None) == "halted by the toy kind"
        again = await rt.kill(task_id)  # already ended: nothing more happens
        assert again == final and handle.kills == 1

        # Notified exactly once, in the kind's words and at the kind's priority.
        notes = rt.drain()
        assert len(notes) == 1
        note = notes[0]
        assert note.task_id == task_id and note.priority == "next"
        assert f"<summary>toy {task_id} ended as killed</summary>" in note.text
        assert "<result>halted by the toy kind</result>" in note.text
        assert summarize(final) == f"toy {task_id} ended as killed"

        # Evicted only once its grace has passed (its row stays in the store).
        rt.ack(notes)
        assert task_id in {s.id for s in rt.list()}
        await clock.advance(GRACE_S - 1)
        assert rt.sweep() == 0
        await clock.advance(2)
        assert rt.sweep() == 1
        assert task_id not in {s.id for s in rt.list()}
        stored = [s for s in rt.list(include_evicted=True) if s.id == task_id]
        assert [type(s) for s in stored] == [ToyState]  # read back from its row
        assert stored[0] == final
        assert rt.drain() == []


def test_the_documented_kind_example_registers_and_reads_its_records_back() -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    doc = Path(__file__).resolve().parent.parent / "docs" / "extending.md"
    blocks = re.findall(r"^```python\n(.*?)^```", doc.read_text(), re.S | re.M)
    (example,) = [b for b in blocks if "register_kind(" in b]
    check = (
        "\nfrom taskloom.tasks.kinds import kind_for\n"
        "from taskloom.tasks.types import state_from_dict\n"
        "assert type(kind_for(TaskType.LOCAL_WORKFLOW)) is WorkflowKind\n"
        "back = state_from_dict(WorkflowState(id='w00000000', result='ok').to_dict())\n"
        "print(type(back).__name__, back.result)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", example + check], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "WorkflowState ok"


async def test_a_record_no_kind_here_reads_is_left_out_of_a_resumed_session(
    toy: ToyKind, caplog: pytest.LogCaptureFixture
) -> None:
    async with TaskRuntime() as rt:
        session_id = rt.session_id
        toy_id = rt.new_id(TaskType.LOCAL_WORKFLOW)
        rt.register(ToyState(id=toy_id, owner=session_id, status=TaskStatus.RUNNING))
        rt.update(toy_id, lambda s: s.replace(status=TaskStatus.COMPLETED))
        shell_id = rt.new_id(TaskType.LOCAL_BASH)
        rt.register(ShellTaskState(id=shell_id, owner=session_id, status=TaskStatus.RUNNING))
        rt.update(shell_id, lambda s: s.replace(status=TaskStatus.COMPLETED, exit_code=0))
        rt.ack(rt.drain())
    # The next process of the session has no kind for the toy's type (its program did not
    # register one): the session still resumes, without the record it cannot read.
    unregister_kind(TaskType.LOCAL_WORKFLOW)
    with caplog.at_level("WARNING", logger="taskloom.tasks.types"):
        async with TaskRuntime(session_id=session_id) as again:
            assert [s.id for s in again.list(include_evicted=True)] == [shell_id]
            assert again.get(toy_id) is None
            assert again.get(shell_id) is not None
    assert f"task {toy_id} left out" in caplog.text


def test_a_state_class_must_be_a_frozen_slotted_dataclass_of_its_own() -> None:
    @dataclass(frozen=True, kw_only=True)  # not slotted: it could not be copied slot by slot
    class Loose(ToyState):
        pass

    class Undeclared(ToyState):  # inherits the dataclass machinery but declares nothing
        pass

    before = kind_for(TaskType.LOCAL_WORKFLOW)
    for bad in (Loose, Undeclared):

        class Bad(ToyKind):
            state_class = bad

        with pytest.raises(ValueError, match="frozen=True, kw_only=True, slots=True"):
            register_kind(Bad())
        assert kind_for(TaskType.LOCAL_WORKFLOW) is before


class ToyCommandKind(ToyKind):
    """A toy kind whose tasks are processes of their own, as a shell's are."""

    is_process = True

    def settle_changes(self, status: TaskStatus) -> dict[str, object]:
        return {"error": f"its process went ({status.value})"}


@pytest.fixture
def toy_command() -> Iterator[ToyCommandKind]:
    yield from _registered(ToyCommandKind())


async def test_a_kind_that_is_a_process_ends_with_its_agent_and_is_settled_as_it_says(
    toy_command: ToyCommandKind, tmp_path: Path
) -> None:
    # The runtime asks the kind, not whether the task is a shell: the agent that started it
    # takes it along when it ends.
    async with TaskRuntime() as rt:
        ids = {}
        for agent in ("a1111111", "a2222222"):
            ids[agent] = rt.new_id(TaskType.LOCAL_WORKFLOW)
            rt.register(ToyState(id=ids[agent], owner=agent, status=TaskStatus.RUNNING))
        killed = await rt.kill_shells_for_agent("a1111111")
        assert [s.id for s in killed] == [ids["a1111111"]]
        assert rt.get(ids["a2222222"]).status == TaskStatus.RUNNING  # type: ignore[union-attr]
    # A crashed session's task is settled with the fields its kind gives.
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    session_id, toy_id = str(uuid.uuid4()), new_task_id(TaskType.LOCAL_WORKFLOW)
    store = Store(db_path())
    try:
        store.upsert_session(
            SessionRow(session_id, dead.pid, 1.0, str(tmp_path), 1.0, None, boot_id())
        )
        running = ToyState(
            id=toy_id, owner=session_id, session_id=session_id, status=TaskStatus.RUNNING
        )
        store.upsert_task(running.to_dict())
        async with TaskRuntime(session_id=session_id, store=store) as resumed:
            settled = resumed.get(toy_id)
            assert settled is not None and settled.status == TaskStatus.KILLED
            assert getattr(settled, "error", None) == "its process went (killed)"
    finally:
        store.close()


class ToyAgentKind(ToyKind):
    """A toy kind of agent, named in listings by a name of its own, working for no one."""

    is_agent = True
    shows_owner = False

    def short_noun(self) -> str:
        return "toy"

    def addresses(self, state: TaskState) -> tuple[str, ...]:
        return ("toy-name",)


@pytest.fixture
def toy_agent() -> Iterator[ToyAgentKind]:
    kind = ToyAgentKind()
    yield from _registered(kind)


def test_the_repl_panel_shows_a_kind_as_the_kind_says(toy_agent: ToyAgentKind) -> None:
    from taskloom.repl.panel import TaskPanel

    panel = TaskPanel("s", clock=lambda: 1.0, wall=lambda: 100.0)
    panel.update(
        ToyState(
            id="w1", owner="a-other", description="d", status=TaskStatus.RUNNING, start_time=99.0
        )
    )
    ((_, text),) = panel.lines(200)
    assert text.startswith("w1         toy      toy-name ")
    assert "(for" not in text  # it works for no one in particular


async def test_a_session_whose_budget_runs_out_stops_every_kind_of_agent(
    toy_agent: ToyAgentKind, tmp_path: Path
) -> None:
    from helpers import harness
    from taskloom.models.base import ModelRequest
    from taskloom.models.scripted import FunctionModel, Turn

    def respond(request: ModelRequest) -> Turn:
        return Turn(text="spent", usage={"input_tokens": 900, "output_tokens": 100})  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond), max_budget_tokens=500) as h:
        toy_id = h.runtime.new_id(TaskType.LOCAL_WORKFLOW)
        h.runtime.register(
            ToyState(id=toy_id, owner=h.runtime.session_id, status=TaskStatus.RUNNING)
        )
        _ = [event async for event in h.run("go")]
        assert "the token budget of the session ran out" in (h.session.engine.halted or "")
        state = await h.runtime.wait(toy_id, timeout=10)
        assert state.status == TaskStatus.KILLED


class ToyServerKind(TaskKind):
    """A toy kind with no end of its own, and every default besides (its summary too)."""

    task_type = TaskType.LOCAL_WORKFLOW
    state_class = ToyState
    noun = "Toy server"

    def ends_by_itself(self, state: TaskState) -> bool:
        return False


async def test_a_kind_s_task_stopped_by_the_wait_bound_says_why() -> None:
    # Every state can be stopped for a reason (stopped_reason is TaskState's): the bound
    # records it on a kind's state it knows nothing of, and the default summary says it.
    previous = register_kind(ToyServerKind())
    clock = FakeClock()
    try:
        async with TaskRuntime(clock=clock, sweep_interval=3600) as rt:
            task_id = rt.new_id(TaskType.LOCAL_WORKFLOW)
            rt.register(
                ToyState(
                    id=task_id, owner=rt.session_id, description="srv", status=TaskStatus.RUNNING
                )
            )
            ended = asyncio.ensure_future(rt.wait(task_id, 10 * TIME_FACTOR))
            bound = WaitBound(rt, rt.session_id, 5.0)
            parked = clock.sleepers
            bound.arm()
            await clock.wait_for_sleepers(parked + 1, 10 * TIME_FACTOR)  # the watchdog's loop
            await clock.advance(6)
            final = await ended
            assert final.status == TaskStatus.KILLED
            assert final.stopped_reason is not None and "waited 5 s" in final.stopped_reason
            assert summarize(final) == f'Toy server "srv" was stopped: {final.stopped_reason}'
    finally:
        unregister_kind(TaskType.LOCAL_WORKFLOW)
        if previous is not None:
            register_kind(previous)


class ToyRemoteKind(ToyKind):
    """A toy kind whose detached tasks go on without their session, as a remote agent's."""

    outlives_session = True


class SlowHandOver(ToyHandle):
    """A handle whose handover takes longer than the session's stopping budget."""

    def __init__(self, rt: TaskRuntime, task_id: str, takes: float) -> None:
        super().__init__(rt, task_id)
        self.takes = takes
        self.handed_over = False

    async def detach(self) -> None:
        await asyncio.sleep(self.takes)  # the work of handing over, not a synchronisation
        self.handed_over = True
        self.loop.cancel()


@pytest.fixture
def toy_remote() -> Iterator[ToyKind]:
    yield from _registered(ToyRemoteKind())


async def test_a_task_let_go_at_the_session_s_end_is_not_cut_by_the_stopping_budget(
    toy_remote: ToyKind,
) -> None:
    # Letting go is what its exit policy asks: the stopping of the others, bounded by the
    # close timeout, must not cancel a handover that takes longer (its work would be lost).
    rt = await TaskRuntime().start()
    task_id = rt.new_id(TaskType.LOCAL_WORKFLOW)
    rt.register(
        ToyState(id=task_id, owner=rt.session_id, status=TaskStatus.RUNNING, exit_policy="detach")
    )
    handle = SlowHandOver(rt, task_id, takes=0.3 * TIME_FACTOR)
    rt.attach_handle(task_id, handle)
    await rt.close(timeout=0.05)
    assert handle.handed_over and handle.kills == 0
    assert rt.get(task_id).status == TaskStatus.RUNNING  # type: ignore[union-attr]

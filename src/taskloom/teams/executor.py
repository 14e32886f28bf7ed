"""Where teammates run: the executor seam, and its in-process implementation.

The messaging layer spawns, messages, asks to shut down and kills teammates through a
:class:`TeammateExecutor`, whatever runs them. :class:`InProcessExecutor` runs each one in this
process as an ``in_process_teammate`` task of the session's runtime, driven by a
:class:`~taskloom.teams.teammate.TeammateRun`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from taskloom.errors import UsageError
from taskloom.tasks.teammate import TeammateTaskState, working
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.teams.protocol import LEAD_NAME, request_id, shutdown_request, wrap
from taskloom.teams.protocol import agent_id as member_id
from taskloom.teams.teammate import TeammateRun

if TYPE_CHECKING:
    from taskloom.engine import EngineConfig
    from taskloom.messages import Message
    from taskloom.tasks.runtime import TaskRuntime


@dataclass
class TeammateSpec:
    """What a teammate is spawned with.

    Attributes:
        name: Its name in the team.
        team: Its team's name.
        color: The colour its messages are shown in, if any.
        prompt: Its task, from the lead.
        config: How its engine runs (built by the composition root).
        model: The model it runs on, if not the session's (shown in its task state).
        plan_mode_required: Whether it must have its plan approved before it acts.
        on_end: Called once it has ended, however (its member is then inactive).
    """

    name: str
    team: str
    color: str | None
    prompt: str
    config: EngineConfig
    model: str | None = None
    plan_mode_required: bool = False
    on_end: Callable[[], None] | None = None


class TeammateExecutor(Protocol):
    """Runs a team's teammates; each is named by its agent id, ``<name>@<team>``."""

    async def spawn(self, spec: TeammateSpec) -> str:
        """Start a teammate; returns its agent id."""
        ...

    async def send(
        self, agent_id: str, body: str, *, sender: str, summary: str | None = None
    ) -> str:
        """Post ``body`` (wrapped by its sender) to a teammate; returns the row's id."""
        ...

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Ask a teammate to shut down (it may refuse); returns the request's id."""
        ...

    async def kill(self, agent_id: str) -> None:
        """Stop a teammate now, with whatever it started."""
        ...

    def is_active(self, agent_id: str) -> bool:
        """Whether the teammate runs (idle or working)."""
        ...


class InProcessExecutor:
    """Teammates as tasks of this process's runtime (see the module docstring)."""

    def __init__(self, runtime: TaskRuntime) -> None:
        """Run teammates in ``runtime``; the lead is its session (mailbox: the session id)."""
        self.runtime = runtime
        self._tasks: dict[str, str] = {}  # agent id -> task id
        self._runs: dict[str, TeammateRun] = {}

    async def resume(self, spec: TeammateSpec, task_id: str, messages: list[Message]) -> str:
        """Bring back a teammate of an earlier process under its task id, with its history.

        It waits for mail at once (what was sent to it and never delivered is pending).
        """
        return self._start(spec, task_id, messages)

    async def spawn(self, spec: TeammateSpec) -> str:
        """Register its task (owned by the session), attach its run and start it.

        Raises:
            UsageError: A teammate of that name runs in that team already.
        """
        return self._start(spec, self.runtime.new_id(TaskType.IN_PROCESS_TEAMMATE), None)

    def _start(self, spec: TeammateSpec, task_id: str, messages: list[Message] | None) -> str:
        member = member_id(spec.name, spec.team)
        if self.is_active(member):
            raise UsageError(f"teammate {member} is running already")
        runtime = self.runtime
        runtime.register(
            TeammateTaskState(
                id=task_id,
                status=TaskStatus.RUNNING,
                description=member,
                owner=runtime.session_id,
                output_file=str(runtime.output_path(task_id)),
                agent_id=member,
                agent_name=spec.name,
                team_name=spec.team,
                color=spec.color,
                prompt=spec.prompt,
                model=spec.model,
                plan_mode_required=spec.plan_mode_required,
            )
        )
        run = TeammateRun(
            runtime,
            task_id,
            agent_id=member,
            name=spec.name,
            team=spec.team,
            color=spec.color,
            config=spec.config,
            prompt=spec.prompt,
            lead=runtime.session_id,
            on_end=spec.on_end,
            messages=messages,
        )
        runtime.attach_handle(task_id, run)
        self._tasks[member] = task_id
        self._runs[member] = run
        run.start()
        return member

    async def send(
        self, agent_id: str, body: str, *, sender: str, summary: str | None = None
    ) -> str:
        """Post a ``message`` row for the teammate's address, committed; returns its id.

        Raises:
            UsageError: No such teammate runs.
            StoreError: The row could not be written (it will not arrive).
        """
        return self.deliver(agent_id, body, sender=sender, summary=summary)

    def deliver(self, agent_id: str, body: str, *, sender: str, summary: str | None = None) -> str:
        """:meth:`send`, from synchronous code: post, and count the teammate at work now.

        It is marked working in the same step as the row is posted, before its loop wakes:
        a headless lead checking "is everyone idle?" in between must not end the run.

        Raises:
            UsageError: No such teammate runs.
            StoreError: The row could not be written (it will not arrive).
        """
        task_id = self._active_task(agent_id)
        letter = self.runtime.mailbox.post(
            recipient=agent_id,
            sender=sender,
            kind="message",
            body=body,
            priority="next",
            summary=summary or "",
            commit=True,  # the sender is told it is sent
        )
        self.runtime.update(task_id, working)
        return letter.id

    async def terminate(self, agent_id: str, reason: str | None) -> str:
        """Send the lead's ``shutdown_request`` (id ``shutdown-<epoch ms>@<name>``).

        Raises:
            UsageError: No such teammate runs.
        """
        task_id = self._active_task(agent_id)
        run = self._runs[agent_id]
        now = self.runtime.clock.time()
        request = request_id("shutdown", run.name, now)
        body = wrap(shutdown_request(request, reason=reason, at=now), sender=LEAD_NAME)
        await self.send(agent_id, body, sender=member_id(LEAD_NAME, run.team))
        self.runtime.update(
            task_id,
            lambda s: s if s.terminal else s.replace(shutdown_requested=True),
        )
        return request

    async def kill(self, agent_id: str) -> None:
        """Kill the teammate's task (its run stops it and what it started).

        Raises:
            UsageError: No such teammate was spawned here.
        """
        task_id = self._tasks.get(agent_id)
        if task_id is None:
            raise UsageError(f"no teammate {agent_id}")
        await self.runtime.kill(task_id)

    def is_active(self, agent_id: str) -> bool:
        """Whether its task has not ended."""
        task_id = self._tasks.get(agent_id)
        state = self.runtime.get(task_id) if task_id is not None else None
        return state is not None and not state.terminal

    def run(self, agent_id: str) -> TeammateRun:
        """The teammate's run (the messaging layer calls its ``shutdown``).

        Raises:
            UsageError: No such teammate was spawned here.
        """
        run = self._runs.get(agent_id)
        if run is None:
            raise UsageError(f"no teammate {agent_id}")
        return run

    def task_id(self, agent_id: str) -> str | None:
        """The task id of the teammate ``agent_id`` (None: none was spawned here)."""
        return self._tasks.get(agent_id)

    def _active_task(self, agent_id: str) -> str:
        task_id = self._tasks.get(agent_id)
        if task_id is None or not self.is_active(agent_id):
            raise UsageError(f"no teammate {agent_id} is running")
        return task_id


__all__ = ["InProcessExecutor", "TeammateExecutor", "TeammateSpec"]

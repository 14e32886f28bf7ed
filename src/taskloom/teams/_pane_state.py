"""What a lead knows of each pane teammate, and whether it counts that teammate idle or at work.

A pane teammate's loop runs in a process of its own: its lead sees it only through what it
posts (an idle notification, a shutdown approval) and what its process records in the store
(its tasks, its usage). From those the lead keeps the teammate's task state — idle or working
— as the in-process run would, and charges what it spent to the lead's budgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.errors import StoreError
from taskloom.tasks.narrow import as_teammate
from taskloom.tasks.teammate import TeammateTaskState, idle, progressed, working
from taskloom.tasks.types import readable_state
from taskloom.teams.pane_usage import PaneSpending, recorded_usage

if TYPE_CHECKING:
    from taskloom.store import Store
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.executor import TeammateSpec
    from taskloom.teams.panes import Pane


@dataclass
class PaneMember:
    """One pane teammate as its lead keeps it: its pane and process, and what it last said."""

    spec: TeammateSpec
    agent_id: str
    task_id: str
    pane: Pane | None = None
    start: float = 0.0
    approved: bool = False
    killing: bool = False
    watcher: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: The session its process runs as (its own tasks are recorded under it).
    process_session: str = ""
    #: When (its process's clock) its last idle notification was posted, while the lead
    #: counts it idle or may yet; None once the lead gave it work.
    idle_at: float | None = None
    idle_summary: str = ""


def using(totals: dict[str, Any]) -> Callable[[TeammateTaskState], TeammateTaskState]:
    """The update that gives its task the usage its process recorded."""
    return lambda s: progressed(s, totals)


def _idle_saying(
    summary: str, totals: dict[str, Any]
) -> Callable[[TeammateTaskState], TeammateTaskState]:
    return lambda s: idle(s, totals, result=summary)


def review(runtime: TaskRuntime, members: Iterable[PaneMember], spending: PaneSpending) -> None:
    """Count each teammate that said it is idle idle, unless that is old news.

    It is old news once a row for it was taken after it said so, or waits to be: sent
    by the lead, or by another teammate's process (which pings only its recipient, so the
    lead looks again at every idle notification). Nor is it idle while work of its own
    runs in its process (a command in the background wakes it when it ends). A headless
    lead ends when every teammate is idle: it must not end under one at work.
    """
    for member in members:
        since = member.idle_at
        if since is None or member.ended.is_set():
            continue
        state = as_teammate(runtime.get(member.task_id))
        if state is None or state.terminal:
            continue
        tasks = its_tasks(runtime.store, member)
        at_work = tasks is None or _at_work(runtime, member, since, tasks)
        totals = recorded_usage(tasks or [])
        if at_work and state.is_idle:
            runtime.update(member.task_id, working)
        elif not at_work and not state.is_idle:
            runtime.update(member.task_id, _idle_saying(member.idle_summary, totals))
        if totals:
            runtime.update(member.task_id, using(totals))
            spending.count(member.agent_id, totals)


def its_tasks(
    store: Store, member: PaneMember, *, ended: bool = False
) -> list[dict[str, Any]] | None:
    """The tasks its process recorded: live ones (with ``ended``, all); None: unknown."""
    if not member.process_session:
        return []
    statuses = None if ended else ("pending", "running")
    try:
        return store.list_tasks(member.process_session, statuses)
    except StoreError:
        return None


def _at_work(
    runtime: TaskRuntime, member: PaneMember, since: float, tasks: list[dict[str, Any]]
) -> bool:
    states = [s for s in map(readable_state, tasks) if s is not None]
    own = next((mate for mate in map(as_teammate, states) if mate is not None), None)
    if own is not None and not own.is_idle:
        return True  # its process says it is at work (a turn that no mail of ours began)
    store = runtime.store
    try:
        if store.mail_taken_after(runtime.session_id, member.agent_id, since):
            return True
        # Its own notifications (a command of its ended) wake it in its process: taken
        # after it said it was idle, or waiting to be, it is at work.
        if own is not None and store.mail_taken_after(member.process_session, own.id, since):
            return True
    except StoreError:
        return True  # unknown: counted at work, so that a headless lead does not end early
    # Work of its own in its process (a command, an agent), besides the teammate itself.
    return any(as_teammate(s) is None and s.exit_policy != "detach" for s in states)


__all__ = ["PaneMember", "its_tasks", "review", "using"]

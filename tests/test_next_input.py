"""What starts a front end's next turn: each source of input, on a real mailbox and store."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from helpers import TIME_FACTOR
from taskloom.conversation.next_input import NextInput, OwnWork, Pending, Prompts, Taken
from taskloom.messages import Message
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import MESSAGES, Letter, Mailbox
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell

#: How long a wait that must not return is given to return all the same.
QUIET_S = 0.2 * TIME_FACTOR
#: The bound of a wait that must return.
BOUND_S = 5 * TIME_FACTOR


@pytest.fixture
async def box(home: Path) -> AsyncIterator[Mailbox]:
    store = Store(db_path(home))
    try:
        yield Mailbox(store, "s1")
    finally:
        store.close()


async def _stays_waiting(inputs: NextInput[object]) -> None:
    """``inputs`` has nothing to give: its wait does not return."""
    waiting = asyncio.ensure_future(inputs())
    done, _ = await asyncio.wait([waiting], timeout=QUIET_S)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert not done, f"returned {waiting.result()!r} with nothing to give"


async def test_prompts_come_in_order_and_end_once_closed_and_drained() -> None:
    prompts: Prompts[str] = Prompts()
    inputs: NextInput[str] = NextInput(prompts, idle_wait_s=BOUND_S)
    prompts.put("one")
    prompts.put("two")
    prompts.close()
    assert [await inputs(), await inputs(), await inputs()] == ["one", "two", None]


async def test_a_prompt_put_while_idle_wakes_the_wait_at_once() -> None:
    prompts: Prompts[str] = Prompts()
    inputs: NextInput[str] = NextInput(prompts, idle_wait_s=BOUND_S)
    waiting = asyncio.ensure_future(inputs())
    await asyncio.sleep(0)  # it waits now
    assert not waiting.done()
    prompts.put("typed")
    assert await asyncio.wait_for(waiting, BOUND_S) == "typed"
    await _stays_waiting(inputs)  # taken: it is not given twice


async def test_pending_rows_start_a_turn_that_takes_them_itself(box: Mailbox) -> None:
    inputs: NextInput[Message] = NextInput(
        Pending(box, "s1", ("notification", *MESSAGES)), idle_wait_s=BOUND_S
    )
    waiting = asyncio.ensure_future(inputs())
    await asyncio.sleep(0)
    box.post(recipient="s1", sender="t1", kind="notification", body="task t1 ended")
    assert await asyncio.wait_for(waiting, BOUND_S) == Message(role="user", content=[])
    # Not taken: the turn's engine takes it, and an interrupt before it records it gives
    # it back.
    assert [letter.body for letter in box.pending("s1")] == ["task t1 ended"]


async def test_rows_of_other_kinds_or_for_others_start_nothing(box: Mailbox) -> None:
    inputs: NextInput[Message] = NextInput(Pending(box, "s1", MESSAGES), idle_wait_s=BOUND_S)
    box.post(recipient="s1", sender="t1", kind="notification", body="not a message")
    box.post(recipient="agent-2", sender="s1", kind="message", body="someone else's")
    await _stays_waiting(inputs)


async def test_pending_rows_that_do_not_count_yet_neither_start_nor_wake(box: Mailbox) -> None:
    """Before a stream-json session's first prompt its mail waits, and so does the session.

    Its wait does not spin on the row it may not take yet: it looks a bounded number of times.
    """
    looks = 0

    def ran() -> bool:
        nonlocal looks
        looks += 1
        return False

    prompts: Prompts[str] = Prompts()
    inputs: NextInput[str | Message] = NextInput(
        prompts, Pending(box, "s1", MESSAGES, when=ran), idle_wait_s=BOUND_S
    )
    box.post(recipient="s1", sender="uds:peer", kind="message", body="early")
    await _stays_waiting(inputs)
    assert looks <= 4, f"looked {looks} times in {QUIET_S:.1f} s: a busy loop"
    prompts.put("first")
    assert await asyncio.wait_for(inputs(), BOUND_S) == "first"


async def test_taken_rows_are_the_prompt_and_are_held(box: Mailbox) -> None:
    held: list[list[Letter]] = []
    inputs: NextInput[str] = NextInput(
        Taken(box, "alice@crew", MESSAGES, held.append), idle_wait_s=BOUND_S
    )
    waiting = asyncio.ensure_future(inputs())
    await asyncio.sleep(0)
    box.post(recipient="alice@crew", sender="bob@crew", kind="message", body="hi alice")
    box.post(
        recipient="alice@crew",
        sender="team-lead@crew",
        kind="protocol",
        topic="shutdown_request",
        body="please stop",
        payload='{"type": "shutdown_request", "requestId": "r1"}',
    )
    assert await asyncio.wait_for(waiting, BOUND_S) == "hi alice\n\nplease stop"
    assert [[letter.body for letter in batch] for batch in held] == [["hi alice", "please stop"]]
    assert box.pending("alice@crew") == []  # taken: handed out once


async def test_sources_are_looked_at_in_order(box: Mailbox) -> None:
    """A teammate's messages come before its tasks' news; a typed prompt before mail."""
    held: list[list[Letter]] = []
    prompts: Prompts[str] = Prompts()
    inputs: NextInput[str | Message] = NextInput(
        prompts,
        Taken(box, "alice@crew", MESSAGES, held.append),
        Pending(box, "t9", "notification"),
        idle_wait_s=BOUND_S,
    )
    box.post(recipient="t9", sender="b1", kind="notification", body="b1 ended")
    box.post(recipient="alice@crew", sender="bob@crew", kind="message", body="hi")
    prompts.put("typed")
    assert await inputs() == "typed"
    assert await inputs() == "hi"
    assert await inputs() == Message(role="user", content=[])


# -- an ended input waits for the session's own work (a stream-json session's stdin closed) ------


def _after_end(rt: TaskRuntime, **settings: object) -> tuple[Prompts[str], NextInput[object]]:
    """A stream-json session's inputs on ``rt``, its prompts closed: only its tasks remain."""
    me = rt.session_id
    prompts: Prompts[str] = Prompts()
    inputs: NextInput[object] = NextInput(
        prompts,
        Pending(rt.mailbox, me, ("notification", *MESSAGES)),
        until=OwnWork(rt, me, dict(settings)),
        idle_wait_s=BOUND_S,
    )
    prompts.close()
    return prompts, inputs


def _deliver(rt: TaskRuntime) -> list[str]:
    """What a turn does with its notifications: take them, then acknowledge them."""
    notes = rt.drain(owner=rt.session_id)
    rt.ack(notes)
    return [note.task_id for note in notes]


async def test_an_ended_input_waits_for_a_running_task_and_its_notification(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate.fifo"
    os.mkfifo(gate)
    async with TaskRuntime() as rt:
        shell = await run_shell(rt, f"read line < {gate}", run_in_background=True)
        _, inputs = _after_end(rt)
        await _stays_waiting(inputs)  # the task still runs: no end, no turn
        waiting = asyncio.ensure_future(inputs())
        await asyncio.to_thread(gate.write_text, "go\n")
        # Its notification starts a turn (the engine takes it inside)...
        assert await asyncio.wait_for(waiting, BOUND_S) == Message(role="user", content=[])
        assert _deliver(rt) == [shell.task_id]
        # ...and once it is delivered nothing is left: the input ends.
        assert await asyncio.wait_for(inputs(), BOUND_S) is None


async def test_an_ended_input_stops_a_task_with_no_end_of_its_own_at_its_bound() -> None:
    async with TaskRuntime() as rt:
        shell = await run_shell(rt, "sleep 600", run_in_background=True)
        _, inputs = _after_end(rt, taskWaitSeconds=0)
        # Waited for no longer than taskWaitSeconds: stopped, its notification is a turn.
        assert await asyncio.wait_for(inputs(), BOUND_S) == Message(role="user", content=[])
        state = rt.get(shell.task_id)
        assert (
            state is not None
            and state.terminal
            and "taskWaitSeconds" in (state.stopped_reason or "")
        )
        assert _deliver(rt) == [shell.task_id]
        assert await asyncio.wait_for(inputs(), BOUND_S) is None


async def test_an_ended_input_with_nothing_at_work_ends_at_once() -> None:
    async with TaskRuntime() as rt:
        await run_shell(rt, "true")  # ended in the foreground: nothing to wait for
        _, inputs = _after_end(rt)
        assert await asyncio.wait_for(inputs(), BOUND_S) is None


def test_input_needs_a_source() -> None:
    with pytest.raises(ValueError, match="at least one source"):
        NextInput()

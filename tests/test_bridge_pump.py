"""The bridge listener's loop against a real inbox, in-process: slow and failing calls.

The inbox is :mod:`taskloom.remote.inbox`'s own class, called directly rather than as a Ray
actor (the end-to-end path over Ray is ``test_bridge_sessions.py``); in front of it stand the
failures a busy cluster gives: a take that answers late, a settle that fails, a dead actor.
Each test checks that the sender is answered, that the message is committed exactly once, and
whether the loop is still listening.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, needs, wait_until
from taskloom.agents.bridge import BridgeListener, pump_inbox
from taskloom.remote.cluster import Cluster
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox

pytestmark = needs("ray")

SESSION = "s1"
#: How long one call may take in these tests before it counts as failed.
CALL_S = 0.05 * TIME_FACTOR
#: The retry pauses of these tests.
RETRY_S = (0.01, 0.05)


class _Busy:
    """The real inbox, behind the failures of a busy cluster."""

    def __init__(self) -> None:
        from taskloom.remote.inbox import _Inbox

        self.inbox = _Inbox(SESSION, "/tmp")
        self.late: asyncio.Event | None = None  # a take holds its message until it is set
        self.take_errors: list[Exception] = []
        self.settle_errors: list[Exception] = []
        self.settled: list[str] = []

    async def take(self, wait: float) -> tuple[str, dict[str, Any]] | None:
        if self.take_errors:
            raise self.take_errors.pop(0)
        item = await self.inbox.take(wait)
        if item is not None and self.late is not None:
            await self.late.wait()  # taken from the queue, answered late
        return item

    async def settle(self, message_id: str, reply: dict[str, Any]) -> None:
        self.settled.append(message_id)
        if self.settle_errors:
            raise self.settle_errors.pop(0)
        await self.inbox.settle(message_id, reply)


def _dead(exc: BaseException) -> bool:
    from ray.exceptions import ActorDiedError

    return isinstance(exc, ActorDiedError)


@pytest.fixture
async def mailbox(tmp_path: Path) -> AsyncIterator[Mailbox]:
    store = Store(db_path(tmp_path))
    try:
        yield Mailbox(store, SESSION)
    finally:
        store.close()


def _request(text: str) -> dict[str, Any]:
    return {"type": "message", "from": "sender", "reply_to": None, "text": text}


async def _listening(busy: _Busy, mailbox: Mailbox, tmp_path: Path) -> asyncio.Task[None]:
    listener = BridgeListener(mailbox, SESSION, str(tmp_path), Cluster({}, env={}))
    loop = pump_inbox(
        busy, listener.commit, _dead, listener.address, call_s=CALL_S, retry_s=RETRY_S
    )
    return asyncio.ensure_future(loop)


async def _stop(pump: asyncio.Task[None]) -> None:
    pump.cancel()
    await asyncio.wait([pump])


async def test_a_late_take_is_waited_for_and_its_message_kept(
    mailbox: Mailbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    busy = _Busy()
    busy.late = asyncio.Event()
    pump = await _listening(busy, mailbox, tmp_path)
    try:
        sent = asyncio.ensure_future(busy.inbox.deliver("m1", _request("late"), 10 * TIME_FACTOR))
        await wait_until(lambda: "no message taken within" in caplog.text, what="a slow take")
        busy.late.set()
        reply = await asyncio.wait_for(sent, 10 * TIME_FACTOR)
        assert reply["ok"] is True, reply
        # Still listening: the next message comes through as well.
        busy.late = None
        again = await busy.inbox.deliver("m2", _request("next"), 10 * TIME_FACTOR)
        assert again["ok"] is True, again
        assert not pump.done()
    finally:
        await _stop(pump)
    assert [letter.body for letter in mailbox.pending(SESSION)] == ["late", "next"]


async def test_a_failed_settle_is_made_again_with_the_same_id(
    mailbox: Mailbox, tmp_path: Path
) -> None:
    busy = _Busy()
    busy.settle_errors = [RuntimeError("the cluster is busy"), TimeoutError()]
    pump = await _listening(busy, mailbox, tmp_path)
    try:
        reply = await busy.inbox.deliver("m1", _request("once"), 10 * TIME_FACTOR)
    finally:
        await _stop(pump)
    assert reply["ok"] is True, reply
    assert busy.settled == ["m1", "m1", "m1"]
    (letter,) = mailbox.pending(SESSION)  # posted once, whatever the tries
    assert letter.body == "once" and reply["id"] == letter.id


async def test_a_failed_take_is_tried_again(mailbox: Mailbox, tmp_path: Path) -> None:
    busy = _Busy()
    busy.take_errors = [RuntimeError("the cluster is busy"), ConnectionError("reset")]
    pump = await _listening(busy, mailbox, tmp_path)
    try:
        reply = await busy.inbox.deliver("m1", _request("after"), 10 * TIME_FACTOR)
        assert not pump.done()
    finally:
        await _stop(pump)
    assert reply["ok"] is True, reply
    assert busy.take_errors == []
    assert [letter.body for letter in mailbox.pending(SESSION)] == ["after"]


async def test_the_loop_ends_when_its_actor_is_dead(
    mailbox: Mailbox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ray.exceptions import ActorDiedError

    busy = _Busy()
    busy.take_errors = [RuntimeError("the cluster is busy"), ActorDiedError()]
    pump = await _listening(busy, mailbox, tmp_path)
    await asyncio.wait_for(pump, 10 * TIME_FACTOR)  # it returns by itself
    assert "stopped listening: its actor is gone" in caplog.text
    assert mailbox.pending(SESSION) == []

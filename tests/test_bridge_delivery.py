"""What a bridge: sender is told when delivery fails: whether the message may have arrived.

The recipient is :mod:`taskloom.remote.inbox`'s own inbox class, called directly rather than
as a Ray actor (as in ``test_bridge_pump.py``); a session taking and committing a message is
played by the test, as the listener's loop would (take, then settle).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers import TIME_FACTOR, needs
from taskloom.agents.bridge import MAY_HAVE_BEEN_DELIVERED, deliver_to
from taskloom.errors import ToolError

pytestmark = needs("ray")

ADDRESS = "bridge:s1"
REQUEST = {"type": "message", "from": "tester", "reply_to": None, "text": "hello"}
WAIT = 0.05 * TIME_FACTOR


def _inbox() -> Any:
    from taskloom.remote.inbox import _Inbox

    return _Inbox("s1", "/tmp")


async def _commit_next(inbox: Any, reply: dict[str, Any]) -> str:
    """Take the next message and settle it with ``reply``, as the session's loop does."""
    item = await inbox.take(10 * TIME_FACTOR)
    assert item is not None
    await inbox.settle(item[0], reply)
    return str(item[0])


async def test_a_message_not_taken_in_time_may_still_be_delivered() -> None:
    inbox = _inbox()
    with pytest.raises(ToolError) as caught:
        await deliver_to(inbox.deliver, ADDRESS, REQUEST, WAIT, grace=WAIT)
    assert "did not take the message" in str(caught.value)
    assert MAY_HAVE_BEEN_DELIVERED in str(caught.value)
    item = await inbox.take(WAIT)  # still queued: the session would take it next
    assert item is not None and item[1]["text"] == "hello"


async def test_a_message_committed_before_the_answer_was_lost_may_have_been_delivered() -> None:
    inbox = _inbox()
    committed: list[str] = []

    async def dies_after_commit(message_id: str, request: dict[str, Any], wait: float) -> Any:
        answering = asyncio.ensure_future(inbox.deliver(message_id, request, wait))
        committed.append(await _commit_next(inbox, {"ok": True, "id": "row-1"}))
        await answering
        raise RuntimeError("the actor died before answering")

    with pytest.raises(ToolError) as caught:
        await deliver_to(dies_after_commit, ADDRESS, REQUEST, 10 * TIME_FACTOR)
    assert committed and "could not be reached" in str(caught.value)
    assert MAY_HAVE_BEEN_DELIVERED in str(caught.value)


async def test_a_recipient_that_never_answers_may_have_committed() -> None:
    inbox = _inbox()
    never = asyncio.Event()

    async def silent(message_id: str, request: dict[str, Any], wait: float) -> Any:
        await inbox.deliver(message_id, request, wait)
        await never.wait()  # the answer never comes back; bounded by deliver_to's wait

    with pytest.raises(ToolError) as caught:
        await deliver_to(silent, ADDRESS, REQUEST, WAIT, grace=WAIT)
    assert "did not answer" in str(caught.value)
    assert MAY_HAVE_BEEN_DELIVERED in str(caught.value)


async def test_a_refusal_and_a_delivery_say_so_plainly() -> None:
    inbox = _inbox()
    refusing = asyncio.ensure_future(_commit_next(inbox, {"ok": False, "error": "empty text"}))
    with pytest.raises(ToolError) as caught:
        await deliver_to(inbox.deliver, ADDRESS, REQUEST, 10 * TIME_FACTOR)
    await refusing
    assert "refused the message: empty text" in str(caught.value)
    assert MAY_HAVE_BEEN_DELIVERED not in str(caught.value)
    taking = asyncio.ensure_future(_commit_next(inbox, {"ok": True, "id": "row-2"}))
    assert await deliver_to(inbox.deliver, ADDRESS, REQUEST, 10 * TIME_FACTOR) == "row-2"
    await taking

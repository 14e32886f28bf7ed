"""Task notifications: rendering, summaries and the durable exactly-once queue."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import TIME_FACTOR
from taskloom.store import Store
from taskloom.tasks.notifications import (
    RESULT_CAP_CHARS,
    Notification,
    NotificationQueue,
    cap_result,
    render_batch,
    render_notification,
    render_terminal,
    summarize,
)
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskStatus
from taskloom.testing.clock import FakeClock

EXAMPLE = """\
<task-notification>
<task-id>a1b2c3d4e</task-id>
<tool-use-id>toolu_01abc</tool-use-id>
<output-file>/h/sessions/s1/tasks/a1b2c3d4e.output</output-file>
<status>completed</status>
<summary>Agent "Investigate auth bug" completed</summary>
<result>final answer text, capped</result>
<usage><total_tokens>45230</total_tokens><tool_uses>12</tool_uses><duration_ms>34500</duration_ms></usage>
</task-notification>"""

USAGE = {"total_tokens": 45230, "tool_uses": 12, "duration_ms": 34500}


@pytest.fixture
def queue(store: Store) -> NotificationQueue:
    return NotificationQueue(store, "s1", FakeClock())


def undelivered_ids(store: Store, session: str = "s1") -> list[str]:
    return [r.id for r in store.undelivered_mail(session) if r.kind == "notification"]


# -- rendering ----------------------------------------------------------------------------------


def test_render_matches_design_layout_exactly() -> None:
    text = render_notification(
        task_id="a1b2c3d4e",
        tool_use_id="toolu_01abc",
        output_file="/h/sessions/s1/tasks/a1b2c3d4e.output",
        status="completed",
        summary='Agent "Investigate auth bug" completed',
        result="final answer text, capped",
        usage=USAGE,
    )
    assert text == EXAMPLE


def test_render_omits_absent_optional_tags() -> None:
    text = render_notification(task_id="b00000001", status="killed", summary="S")
    assert text.splitlines() == [
        "<task-notification>",
        "<task-id>b00000001</task-id>",
        "<status>killed</status>",
        "<summary>S</summary>",
        "</task-notification>",
    ]


def test_render_escapes_every_field() -> None:
    nasty = "a<b>&c"
    esc = "a&lt;b&gt;&amp;c"
    text = render_notification(
        task_id=f"id{nasty}",
        tool_use_id=f"tu{nasty}",
        output_file=f"/out{nasty}",
        status=f"st{nasty}",
        summary=f"sum{nasty}",
        result=f"res{nasty}",
        usage={"total_tokens": 1},
    )
    lines = text.splitlines()
    assert lines[1:7] == [
        f"<task-id>id{esc}</task-id>",
        f"<tool-use-id>tu{esc}</tool-use-id>",
        f"<output-file>/out{esc}</output-file>",
        f"<status>st{esc}</status>",
        f"<summary>sum{esc}</summary>",
        f"<result>res{esc}</result>",
    ]
    assert "<b>" not in text
    assert "&c" not in text


xml_text = st.text(
    st.characters(exclude_categories=("Cs", "Cc")) | st.sampled_from("<>&\"'\n"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(xml_text, xml_text, xml_text, xml_text, xml_text, xml_text)
def test_rendered_xml_parses_back_to_the_values(
    task_id: str, tool_use_id: str, output_file: str, status: str, summary: str, result: str
) -> None:
    text = render_notification(
        task_id=task_id,
        tool_use_id=tool_use_id,
        output_file=output_file,
        status=status,
        summary=summary,
        result=result,
        usage={"total_tokens": 3, "tool_uses": 2, "duration_ms": 1},
    )
    root = ET.fromstring(text)
    assert root.tag == "task-notification"
    assert [child.tag for child in root] == [
        "task-id",
        "tool-use-id",
        "output-file",
        "status",
        "summary",
        "result",
        "usage",
    ]
    values = {child.tag: child.text for child in root}
    assert values["task-id"] == task_id
    assert values["tool-use-id"] == tool_use_id
    assert values["output-file"] == output_file
    assert values["status"] == status
    assert values["summary"] == summary
    assert values["result"] == result
    usage = root.find("usage")
    assert usage is not None
    assert [(c.tag, c.text) for c in usage] == [
        ("total_tokens", "3"),
        ("tool_uses", "2"),
        ("duration_ms", "1"),
    ]


# -- summaries ----------------------------------------------------------------------------------


def shell(
    status: TaskStatus, exit_code: int | None = None, description: str = "npm test"
) -> ShellTaskState:
    return ShellTaskState(
        id="b00000001",
        status=status,
        description=description,
        command="npm test --ci",
        exit_code=exit_code,
    )


def agent(status: TaskStatus, **kw: object) -> AgentTaskState:
    return AgentTaskState(id="a00000001", status=status, description="Investigate auth bug", **kw)  # type: ignore[arg-type]


def test_summarize_shell() -> None:
    assert summarize(shell(TaskStatus.COMPLETED, 0)) == (
        'Background command "npm test" completed (exit code 0)'
    )
    assert summarize(shell(TaskStatus.FAILED, 3)) == (
        'Background command "npm test" failed with exit code 3'
    )
    assert summarize(shell(TaskStatus.FAILED, 127)) == (
        'Background command "npm test" failed with exit code 127'
    )
    assert summarize(shell(TaskStatus.KILLED, -15)) == 'Background command "npm test" was stopped'
    assert summarize(shell(TaskStatus.KILLED)) == 'Background command "npm test" was stopped'


def test_summarize_shell_without_description_uses_command() -> None:
    assert summarize(shell(TaskStatus.COMPLETED, 0, description="")) == (
        'Background command "npm test --ci" completed (exit code 0)'
    )


def test_summarize_agent() -> None:
    assert summarize(agent(TaskStatus.COMPLETED, result="done")) == (
        'Agent "Investigate auth bug" completed'
    )
    assert summarize(agent(TaskStatus.KILLED)) == 'Agent "Investigate auth bug" was stopped'
    assert summarize(agent(TaskStatus.FAILED)) == 'Agent "Investigate auth bug" failed'
    failed = summarize(agent(TaskStatus.FAILED, error="rate limited"))
    assert failed.startswith('Agent "Investigate auth bug" failed')
    assert "rate limited" in failed


def test_render_terminal_agent_matches_design() -> None:
    state = agent(
        TaskStatus.COMPLETED,
        result="final answer text, capped",
        tool_use_id="toolu_01abc",
        output_file="/h/sessions/s1/tasks/a1b2c3d4e.output",
        total_tokens=45230,
        tool_uses=12,
        start_time=1000.0,
        end_time=1034.5,
    ).replace(id="a1b2c3d4e")
    assert render_terminal(state) == EXAMPLE


def test_render_terminal_shell() -> None:
    state = shell(TaskStatus.FAILED, 2).replace(tool_use_id="toolu_9", output_file="/o/b.output")
    assert render_terminal(state) == "\n".join(
        [
            "<task-notification>",
            "<task-id>b00000001</task-id>",
            "<tool-use-id>toolu_9</tool-use-id>",
            "<output-file>/o/b.output</output-file>",
            "<status>failed</status>",
            '<summary>Background command "npm test" failed with exit code 2</summary>',
            "</task-notification>",
        ]
    )


# -- result cap ---------------------------------------------------------------------------------


def test_cap_result_keeps_short_results() -> None:
    assert cap_result("short", "/o/a.output") == "short"
    exact = "x" * RESULT_CAP_CHARS
    assert cap_result(exact, "/o/a.output") == exact


def test_cap_result_truncates_and_points_at_output_file() -> None:
    text = "y" * (RESULT_CAP_CHARS + 500)
    capped = cap_result(text, "/o/a1.output")
    assert capped.startswith("y" * RESULT_CAP_CHARS)
    assert "y" * (RESULT_CAP_CHARS + 1) not in capped
    tail = capped[RESULT_CAP_CHARS:]
    assert "/o/a1.output" in tail
    assert "500" in tail
    assert len(capped) < len(text)


def test_cap_result_small_cap_and_no_output_file() -> None:
    capped = cap_result("abcdefghij", None, cap=4)
    assert capped.startswith("abcd")
    assert "efghij" not in capped
    assert "6" in capped[4:]


def test_render_caps_long_result_with_pointer() -> None:
    result = "z" * (RESULT_CAP_CHARS * 2)
    text = render_notification(
        task_id="a00000001",
        status="completed",
        summary="s",
        result=result,
        output_file="/o/a00000001.output",
    )
    element = ET.fromstring(text).find("result")
    assert element is not None
    assert element.text is not None
    assert element.text.startswith("z" * RESULT_CAP_CHARS)
    assert element.text.count("z") == RESULT_CAP_CHARS
    assert "/o/a00000001.output" in element.text[RESULT_CAP_CHARS:]


# -- the queue ----------------------------------------------------------------------------------


def test_enqueue_pending_drain_hands_out_once(queue: NotificationQueue, store: Store) -> None:
    assert not queue.has_pending()
    n = queue.enqueue(owner="main", task_id="b00000001", text="<task-notification/>")
    assert isinstance(n, Notification)
    assert queue.has_pending()
    assert queue.has_pending("main")
    assert not queue.has_pending("a00000009")
    assert queue.pending() == [n]
    assert undelivered_ids(store) == [n.id]

    assert queue.drain() == [n]
    assert queue.drain() == []
    assert queue.pending() == []
    assert not queue.has_pending()
    # handed out but not acknowledged: still in the store
    assert undelivered_ids(store) == [n.id]


async def test_drained_notification_is_already_durable(
    queue: NotificationQueue, store: Store
) -> None:
    n = queue.enqueue(owner="main", task_id="b00000001", text="body")
    batch = queue.drain()  # no await in between: drain must commit before handing out
    assert batch == [n]
    with contextlib.closing(sqlite3.connect(store.path, timeout=10)) as conn:
        rows = conn.execute("SELECT id, body, delivered_at FROM notifications").fetchall()
    assert rows == [(n.id, "body", None)]


def test_next_sorts_before_later(queue: NotificationQueue) -> None:
    l1 = queue.enqueue(owner="main", task_id="b00000001", text="l1")
    n1 = queue.enqueue(owner="main", task_id="b00000002", text="n1", priority="next")
    l2 = queue.enqueue(owner="main", task_id="b00000003", text="l2", priority="later")
    n2 = queue.enqueue(owner="main", task_id="b00000004", text="n2", priority="next")
    assert queue.pending() == [n1, n2, l1, l2]
    assert queue.drain(priority="next") == [n1, n2]
    assert queue.pending() == [l1, l2]
    assert queue.drain() == [l1, l2]


def test_drain_by_owner(queue: NotificationQueue) -> None:
    a1 = queue.enqueue(owner="aaa", task_id="b00000001", text="a1")
    b1 = queue.enqueue(owner="bbb", task_id="b00000002", text="b1")
    a2 = queue.enqueue(owner="aaa", task_id="b00000003", text="a2", priority="next")
    assert queue.pending("aaa") == [a2, a1]
    assert queue.drain(owner="aaa") == [a2, a1]
    assert queue.drain(owner="aaa") == []
    assert queue.pending() == [b1]
    assert queue.drain(owner="ccc") == []
    assert queue.drain(owner="bbb") == [b1]


def test_render_batch_joins_texts(queue: NotificationQueue) -> None:
    queue.enqueue(owner="main", task_id="b00000001", text="<one/>")
    queue.enqueue(owner="main", task_id="b00000002", text="<two/>")
    assert render_batch(queue.drain()) == "<one/>\n<two/>"


def test_ack_marks_delivered_and_fresh_queue_replays_only_unacked(
    queue: NotificationQueue, store: Store
) -> None:
    acked: list[list[str]] = []
    queue.on_ack = acked.append
    n1 = queue.enqueue(owner="main", task_id="b00000001", text="one")
    n2 = queue.enqueue(owner="a00000001", task_id="b00000002", text="two", priority="next")
    n3 = queue.enqueue(owner="main", task_id="b00000003", text="three")
    drained = queue.drain(owner="main")
    assert drained == [n1, n3]
    queue.ack([n1])
    assert acked == [[n1.task_id]]
    assert undelivered_ids(store) == [n2.id, n3.id]
    queue.ack([n1])  # acking twice is a no-op
    assert acked == [[n1.task_id]]

    fresh = NotificationQueue(store, "s1", FakeClock())
    replayed = fresh.replay()
    assert replayed == [n2, n3]  # same ids, owners, priorities, texts and seq
    assert fresh.pending() == [n2, n3]
    assert fresh.replay() == []  # replay does not duplicate what it already holds
    later = fresh.enqueue(owner="main", task_id="b00000004", text="four")
    assert later.seq > max(n.seq for n in replayed)

    other_session = NotificationQueue(store, "s2", FakeClock())
    assert other_session.replay() == []


def test_requeue_puts_back(queue: NotificationQueue, store: Store) -> None:
    n1 = queue.enqueue(owner="main", task_id="b00000001", text="one")
    n2 = queue.enqueue(owner="main", task_id="b00000002", text="two")
    batch = queue.drain()
    assert batch == [n1, n2]
    queue.requeue(batch)
    assert queue.pending() == [n1, n2]
    assert queue.drain() == [n1, n2]
    queue.ack([n1, n2])
    queue.requeue([n1, n2])  # already acknowledged: nothing comes back
    assert queue.pending() == []
    assert undelivered_ids(store) == []


def test_discard_owner_drops_and_acknowledges(queue: NotificationQueue, store: Store) -> None:
    gone1 = queue.enqueue(owner="a00000001", task_id="b00000001", text="x")
    kept = queue.enqueue(owner="main", task_id="b00000002", text="y")
    gone2 = queue.enqueue(owner="a00000001", task_id="b00000003", text="z")
    dropped = queue.discard_owner("a00000001")
    assert sorted(n.id for n in dropped) == sorted([gone1.id, gone2.id])
    assert queue.pending() == [kept]
    assert not queue.has_pending("a00000001")
    assert undelivered_ids(store) == [kept.id]
    assert queue.discard_owner("a00000001") == []


async def test_wait_pending_wakes_on_enqueue_from_another_task(
    queue: NotificationQueue,
) -> None:
    waiter = asyncio.create_task(queue.wait_pending(owner="main", timeout=10))
    waiter_was_waiting: list[bool] = []

    async def producer() -> None:
        waiter_was_waiting.append(not waiter.done())
        queue.enqueue(owner="main", task_id="b00000001", text="t")

    # the waiter task runs first (FIFO), finds nothing and blocks; then the producer runs
    started = time.monotonic()
    result, _ = await asyncio.gather(waiter, producer())
    assert result is True
    assert waiter_was_waiting == [True]
    assert time.monotonic() - started < 5 * TIME_FACTOR


async def test_wait_pending_true_at_once_when_already_pending(queue: NotificationQueue) -> None:
    queue.enqueue(owner="main", task_id="b00000001", text="t")
    assert await queue.wait_pending(timeout=1) is True
    assert await queue.wait_pending(owner="main", timeout=1) is True


async def test_wait_pending_times_out(queue: NotificationQueue) -> None:
    started = time.monotonic()
    assert await queue.wait_pending(timeout=0.05) is False
    assert time.monotonic() - started < 2 * TIME_FACTOR
    queue.enqueue(owner="someone-else", task_id="b00000001", text="t")
    assert await queue.wait_pending(owner="main", timeout=0.05) is False
    assert await queue.wait_pending(owner="someone-else", timeout=0.05) is True


async def test_wait_pending_wakes_on_requeue(queue: NotificationQueue) -> None:
    queue.enqueue(owner="main", task_id="b00000001", text="t")
    batch = queue.drain()
    waiter = asyncio.create_task(queue.wait_pending(timeout=10))

    async def give_back() -> None:
        assert not waiter.done()
        queue.requeue(batch)

    result, _ = await asyncio.gather(waiter, give_back())
    assert result is True
    assert queue.pending() == batch

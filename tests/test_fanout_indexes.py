"""The fan-out indexes stay exact: any sequence of changes reads as a plain scan would.

The task table (states by owner, live ones by owner and by type) and the mailbox's pending rows
(by recipient and kind) are checked against a scan of every state or row after each change of
a random sequence: a task's status, owner or type changing (an end, a kill, a resume, a task
handed to another owner), a state dropped; a row added, replaced, taken.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from taskloom.tasks._pending import PendingRows
from taskloom.tasks._table import TaskTable
from taskloom.tasks.mailbox import KINDS, Letter
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskState, TaskStatus

IDS = ("t1", "t2", "t3", "t4")
OWNERS = ("main", "a1", "a2")
VARIANTS = (ShellTaskState, AgentTaskState)

_put = st.tuples(
    st.just("put"),
    st.sampled_from(IDS),
    st.sampled_from(OWNERS),
    st.sampled_from(VARIANTS),
    st.sampled_from(list(TaskStatus)),
)
_remove = st.tuples(st.just("remove"), st.sampled_from(IDS))


def _state(task_id: str, owner: str, variant: type[TaskState], status: TaskStatus) -> TaskState:
    return variant(id=task_id, type=variant.TYPE, owner=owner, status=status)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_put, _remove), max_size=30))
def test_the_task_table_reads_as_a_scan_of_its_states(ops: list[tuple[Any, ...]]) -> None:
    table = TaskTable()
    model: dict[str, TaskState] = {}
    for op in ops:
        if op[0] == "put":
            state = _state(*op[1:])
            table.put(state)
            model[state.id] = state
        else:
            assert table.remove(op[1]) is model.pop(op[1], None)
        assert len(table) == len(model) and set(table) == set(model)
        for owner in (*OWNERS, "nobody"):
            mine = [s for s in model.values() if s.owner == owner]
            assert sorted(s.id for s in table.owned(owner)) == sorted(s.id for s in mine)
            live = sorted(s.id for s in mine if not s.terminal)
            assert sorted(s.id for s in table.live_owned(owner)) == live
            assert table.has_live(owner) == bool(live)
            assert all(s is model[s.id] for s in table.owned(owner))
        counts: dict[Any, int] = {}
        for s in model.values():
            if not s.terminal:
                counts[s.type] = counts.get(s.type, 0) + 1
        assert table.live_counts() == counts
        assert table.has_live() == bool(counts)


RECIPIENTS = ("main", "a1")
_add = st.tuples(
    st.just("add"), st.sampled_from(IDS), st.sampled_from(RECIPIENTS), st.sampled_from(KINDS)
)
_pop = st.tuples(st.just("pop"), st.sampled_from(IDS))
_LOOKS: list[Any] = [None, *KINDS, ("message", "protocol"), ("notification", "held")]


def _letter(letter_id: str, recipient: str, kind: Any) -> Letter:
    return Letter(
        id=letter_id, seq=0, recipient=recipient, sender="s", kind=kind, topic="",
        priority="later", body="", summary="", created_at=0.0,
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_add, _pop), max_size=30))
def test_the_pending_rows_read_as_a_scan_of_the_rows(ops: list[tuple[Any, ...]]) -> None:
    rows: PendingRows[Letter] = PendingRows()
    model: dict[str, Letter] = {}
    for op in ops:
        if op[0] == "add":
            letter = _letter(*op[1:])
            rows.add(letter)
            model[letter.id] = letter
        else:
            assert rows.pop(op[1]) is model.pop(op[1], None)
        assert len(rows) == len(model)
        for recipient in (None, *RECIPIENTS, "nobody"):
            for kinds in _LOOKS:
                wanted = None if kinds is None else kinds if isinstance(kinds, tuple) else (kinds,)
                expected = sorted(
                    r.id
                    for r in model.values()
                    if (recipient is None or r.recipient == recipient)
                    and (wanted is None or r.kind in wanted)
                )
                assert sorted(r.id for r in rows.select(recipient, kinds)) == expected
                assert rows.any(recipient, kinds) == bool(expected)

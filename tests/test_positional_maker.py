"""The generated constructor of the runtime's frozen records (tasks/_makers.py)."""

from __future__ import annotations

import dataclasses

import pytest

from helpers import run_python
from taskloom.tasks._makers import positional_maker
from taskloom.tasks.mailbox import Letter
from taskloom.tasks.notifications import Notification


def test_a_letter_made_positionally_equals_one_made_by_init() -> None:
    fields = {
        "id": "m1",
        "seq": 4,
        "recipient": "s1",
        "sender": "b00000000",
        "kind": "notification",
        "topic": "terminal",
        "priority": "later",
        "body": "<task-notification/>",
        "summary": "",
        "created_at": 12.5,
        "payload": "",
    }
    made = positional_maker(Letter)(*fields.values())
    assert type(made) is Letter
    assert made == Letter(**fields)  # type: ignore[arg-type]
    assert hash(made) == hash(Letter(**fields))  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.body = "changed"  # type: ignore[misc]


def test_every_field_is_required_in_order() -> None:
    make = positional_maker(Notification)
    note = make("n1", 1, "s1", "b00000000", "terminal", "next", "text", 3.0)
    assert [getattr(note, f.name) for f in dataclasses.fields(Notification)] == [
        "n1",
        1,
        "s1",
        "b00000000",
        "terminal",
        "next",
        "text",
        3.0,
    ]
    with pytest.raises(TypeError):
        make("n1", 1, "s1")


@dataclasses.dataclass(slots=True)
class _Mutable:
    x: int


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    x: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    x: int

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("negative")


@pytest.mark.parametrize("cls", [_Mutable, _NoSlots, _Checked, int])
def test_a_class_it_would_get_wrong_is_refused(cls: type) -> None:
    with pytest.raises(TypeError):
        positional_maker(cls)


_FIRST_USE = """
import taskloom.tasks.mailbox as mailbox, taskloom.tasks.notifications as notes
from taskloom import _dataclass
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskType
classes = (ShellTaskState, AgentTaskState, mailbox.Letter, notes.Notification)
print([c in _dataclass._WAITING for c in classes])
shell = ShellTaskState(id="b1", type=TaskType.LOCAL_BASH, command="ls")
agent = AgentTaskState(id="a1", type=TaskType.LOCAL_AGENT, prompt="p")
print(type(shell).__init__.__globals__.get("set0") is not None, repr(shell)[:40])
print(shell == ShellTaskState(id="b1", type=TaskType.LOCAL_BASH, command="ls"), agent.prompt)
print(mailbox._make_letter is not mailbox._first_letter, notes._make_note is notes._first_note)
"""


def test_the_churn_constructors_are_written_on_first_use() -> None:
    # A fresh interpreter: importing the modules writes none of these classes (nor their
    # makers); the first state made gets the direct __init__, the same state as before.
    out = run_python(_FIRST_USE, check=True)
    assert out.stdout.splitlines() == [
        "[True, True, True, True]",
        "True ShellTaskState(id='b1', type=<TaskType.L",
        "True p",
        "False True",
    ]

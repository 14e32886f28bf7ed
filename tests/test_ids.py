"""Task ids: type prefix + 8 characters of 0-9a-z from a CSPRNG."""

from __future__ import annotations

import re
import secrets as real_secrets
from typing import TypeVar

import pytest

from taskloom.tasks import ids
from taskloom.tasks.ids import ID_ALPHABET, PREFIXES, is_task_id, new_task_id, type_of
from taskloom.tasks.types import TaskType

T = TypeVar("T")

ID_RE = re.compile(r"^[bartwmd][0-9a-z]{8}$")

EXPECTED_PREFIXES = {
    "local_bash": "b",
    "local_agent": "a",
    "remote_agent": "r",
    "in_process_teammate": "t",
    "local_workflow": "w",
    "monitor_mcp": "m",
    "dream": "d",
}


def test_design_lists_seven_types() -> None:
    assert {t.value for t in TaskType} == set(EXPECTED_PREFIXES)


def test_ten_thousand_ids_are_unique_and_well_formed() -> None:
    types = list(TaskType)
    generated = [new_task_id(types[i % len(types)]) for i in range(10_000)]
    assert len(set(generated)) == len(generated)
    bad = [g for g in generated if not ID_RE.fullmatch(g)]
    assert bad == []
    # every type was exercised
    assert {g[0] for g in generated} == set(EXPECTED_PREFIXES.values())


@pytest.mark.parametrize("task_type", list(TaskType))
def test_prefix_matches_design(task_type: TaskType) -> None:
    expected = EXPECTED_PREFIXES[task_type.value]
    assert PREFIXES[task_type] == expected
    for _ in range(50):
        task_id = new_task_id(task_type)
        assert task_id[0] == expected
        assert len(task_id) == 9
        assert type_of(task_id) is task_type
        assert is_task_id(task_id)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "b",
        "b1234567",  # too short
        "b123456789",  # too long
        "x12345678",  # unknown prefix
        "B12345678",  # upper-case prefix
        "b1234567A",  # upper-case tail
        "b1234-678",  # outside alphabet
        " b12345678",
        "worker@team",
        "b12345678\n",  # a trailing newline is not part of an id
    ],
)
def test_foreign_strings_are_not_task_ids(value: str) -> None:
    assert not is_task_id(value)
    assert type_of(value) is None


def test_known_shapes_are_task_ids() -> None:
    assert is_task_id("a1b2c3d4e")
    assert type_of("a1b2c3d4e") is TaskType.LOCAL_AGENT
    assert type_of("b00000000") is TaskType.LOCAL_BASH
    assert type_of("dzzzzzzzz") is TaskType.DREAM


class _RecordingSecrets:
    """Stands in for ``secrets``: records ``randbelow`` calls, delegates to the real one."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def randbelow(self, n: int) -> int:
        self.calls.append(n)
        return real_secrets.randbelow(n)


def test_ids_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _RecordingSecrets()
    monkeypatch.setattr(ids, "secrets", recorder)
    count = 25
    made = [new_task_id(TaskType.LOCAL_AGENT) for _ in range(count)]
    # One draw per id, over the whole id space: every one of the 36**8 tails is possible.
    assert recorder.calls == [36**8] * count
    assert all(ID_RE.fullmatch(m) for m in made)


@pytest.mark.parametrize(
    ("drawn", "tail"),
    [(0, "00000000"), (36**8 - 1, "zzzzzzzz"), (1 + 2 * 36 + 35 * 36**7, "12000000"[:7] + "z")],
)
def test_id_tail_is_exactly_what_secrets_drew(
    monkeypatch: pytest.MonkeyPatch, drawn: int, tail: str
) -> None:
    class Scripted:
        def randbelow(self, n: int) -> int:
            return drawn

    monkeypatch.setattr(ids, "secrets", Scripted())
    assert new_task_id(TaskType.LOCAL_BASH) == "b" + tail


def test_alphabet_is_0_9a_z() -> None:
    assert ID_ALPHABET == "0123456789abcdefghijklmnopqrstuvwxyz"

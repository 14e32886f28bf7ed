"""Task ids: type prefix + 8 characters of 0-9a-z from a CSPRNG."""

from __future__ import annotations

import os
import re
from typing import TypeVar

import pytest

from taskloom.tasks import ids
from taskloom.tasks.ids import ID_ALPHABET, PREFIXES, is_task_id, new_task_id, type_of
from taskloom.tasks.types import TaskType

T = TypeVar("T")
real_urandom = os.urandom

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


def test_ids_come_from_os_urandom(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []

    def urandom(n: int) -> bytes:
        reads.append(n)
        return real_urandom(n)

    monkeypatch.setattr(ids, "_POOL", ids._Pool())
    monkeypatch.setattr(ids.os, "urandom", urandom)
    made = [new_task_id(TaskType.LOCAL_AGENT) for _ in range(25)]
    # Read ahead: one read serves many ids (6 bytes each, redrawn 0.8 % of the time).
    assert reads == [ids.POOL_BYTES]
    assert all(ID_RE.fullmatch(m) for m in made)
    assert len(set(made)) == 25


@pytest.mark.parametrize(
    ("drawn", "tail"),
    [
        (0, "00000000"),
        (36**8 - 1, "zzzzzzzz"),
        (1 + 2 * 36 + 35 * 36**7, "12000000"[:7] + "z"),
        # Each digit its own, least significant first: across the pairs it is written in.
        (sum(d * 36**i for i, d in enumerate([1, 2, 3, 4, 33, 34, 35, 10])), "1234xyza"),
    ],
)
def test_id_tail_is_exactly_what_was_drawn(
    monkeypatch: pytest.MonkeyPatch, drawn: int, tail: str
) -> None:
    monkeypatch.setattr(ids, "_draw_below_space", lambda: drawn)
    assert new_task_id(TaskType.LOCAL_BASH) == "b" + tail


def test_draws_over_the_limit_are_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Six bytes over the largest multiple of 36**8 below 2**48 would bias the low ids.
    over = (ids._DRAW_LIMIT).to_bytes(6, "big")
    kept = (36**8 + 5).to_bytes(6, "big")
    monkeypatch.setattr(ids, "_POOL", ids._Pool())
    monkeypatch.setattr(ids.os, "urandom", lambda n: (over + kept).ljust(n, b"\0"))
    assert new_task_id(TaskType.LOCAL_BASH) == "b50000000"


def test_a_forked_child_does_not_repeat_its_parents_bytes() -> None:
    ids.random_hex(1)  # the pool holds bytes read ahead, which the child inherits
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        os.write(write_fd, ids.random_hex(64).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    assert len(child) == 128
    assert child != ids.random_hex(64)


def test_alphabet_is_0_9a_z() -> None:
    assert ID_ALPHABET == "0123456789abcdefghijklmnopqrstuvwxyz"


def test_new_uuid_is_a_version_4_uuid_as_the_uuid_module_writes_it() -> None:
    import uuid

    made = [ids.new_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made[:200]:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text

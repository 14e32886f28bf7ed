"""Task types, the status machine and the frozen state variants."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskloom.errors import InvalidTransition, TaskError, TaskloomError
from taskloom.tasks.types import (
    STATE_CLASSES,
    TERMINAL,
    AgentTaskState,
    DreamTaskState,
    MonitorMcpTaskState,
    RemoteAgentTaskState,
    ShellTaskState,
    TaskState,
    TaskStatus,
    TaskType,
    TeammateTaskState,
    WorkflowTaskState,
    can_transition,
    check_transition,
    is_terminal,
    state_from_dict,
)

P, R, C, F, K = (
    TaskStatus.PENDING,
    TaskStatus.RUNNING,
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.KILLED,
)
ALLOWED = {(P, R), (P, F), (P, K), (R, C), (R, F), (R, K)}
RESUME_ALLOWED = {(C, R), (F, R), (K, R)}


def expected_allowed(old: TaskStatus, new: TaskStatus, resume: bool) -> bool:
    if old == new:
        return True
    if (old, new) in ALLOWED:
        return True
    return resume and (old, new) in RESUME_ALLOWED


PAIRS = list(itertools.product(list(TaskStatus), repeat=2))


# -- status machine ---------------------------------------------------------------------------


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{o}->{n}" for o, n in PAIRS])
def test_check_transition_raises_exactly_when_not_allowed(
    old: TaskStatus, new: TaskStatus, resume: bool
) -> None:
    allowed = expected_allowed(old, new, resume)
    assert can_transition(old, new, resume=resume) is allowed
    if allowed:
        check_transition("a12345678", old, new, resume=resume)
    else:
        with pytest.raises(InvalidTransition):
            check_transition("a12345678", old, new, resume=resume)


def test_allowed_pair_count() -> None:
    # 5 self-transitions + 6 forward edges; resume adds the 3 terminal -> running edges
    plain = [p for p in PAIRS if can_transition(*p)]
    resumed = [p for p in PAIRS if can_transition(*p, resume=True)]
    assert len(plain) == 11
    assert len(resumed) == 14


@pytest.mark.parametrize(("old", "new"), [(C, F), (K, R), (R, P), (F, C), (P, C)])
def test_error_names_both_statuses_and_task_id(old: TaskStatus, new: TaskStatus) -> None:
    with pytest.raises(InvalidTransition) as info:
        check_transition("b0a1b2c3d", old, new)
    err = info.value
    text = str(err)
    assert "b0a1b2c3d" in text
    assert old.value in text
    assert new.value in text
    assert text.index(old.value) < text.rindex(new.value)
    assert (err.task_id, err.old, err.new) == ("b0a1b2c3d", old.value, new.value)
    assert isinstance(err, TaskError)
    assert isinstance(err, TaskloomError)


def test_resume_does_not_allow_other_exits_from_terminal() -> None:
    for old in TERMINAL:
        for new in (P, C, F, K):
            if new == old:
                continue
            with pytest.raises(InvalidTransition):
                check_transition("a00000000", old, new, resume=True)


@pytest.mark.parametrize("status", list(TaskStatus))
def test_is_terminal(status: TaskStatus) -> None:
    expected = status in (C, F, K)
    assert is_terminal(status) is expected
    assert is_terminal(status.value) is expected
    state = ShellTaskState(id="b00000000", status=status)
    assert state.terminal is expected


def test_terminal_set() -> None:
    assert frozenset({C, F, K}) == TERMINAL


# -- states ------------------------------------------------------------------------------------

text = st.text(max_size=30)
opt_text = st.none() | text
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
opt_float = st.none() | finite
task_ids = st.from_regex(r"\A[bartwmd][0-9a-z]{8}\Z")

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | text
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# what a message looks like: an Anthropic-shaped dict, or a bare string
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": json_values})
    | text,
    max_size=5,
).map(tuple)


def common_fields() -> dict[str, Any]:
    return {
        "id": task_ids,
        "status": st.sampled_from(list(TaskStatus)),
        "description": text,
        "owner": text,
        "session_id": text,
        "tool_use_id": opt_text,
        "start_time": finite,
        "end_time": opt_float,
        "output_file": text,
        "output_offset": st.integers(0, 2**62),
        "notified": st.booleans(),
        "exit_policy": st.sampled_from(["cancel", "wait", "detach"]),
        "is_backgrounded": st.booleans(),
    }


shell_states = st.builds(
    ShellTaskState,
    **common_fields(),
    command=text,
    exit_code=st.none() | st.integers(-64, 255),
    interrupted=st.booleans(),
    pid=st.none() | st.integers(1, 2**22),
    kind=st.sampled_from(["bash", "monitor"]),
    agent_id=opt_text,
)

agent_states = st.builds(
    AgentTaskState,
    **common_fields(),
    prompt=text,
    agent_type=text,
    result=opt_text,
    error=opt_text,
    messages=messages,
    pending_messages=messages,
    retain=st.booleans(),
    evict_after=opt_float,
    total_tokens=st.integers(0, 2**40),
    tool_uses=st.integers(0, 2**20),
)


def assert_round_trips(state: TaskState) -> None:
    data = state.to_dict()
    assert data["type"] == state.type.value
    assert data["status"] == state.status.value
    back = state_from_dict(data)
    assert type(back) is type(state)
    assert back == state
    # the store keeps it as JSON: the same must hold through a JSON round trip
    via_json = state_from_dict(json.loads(json.dumps(data)))
    assert type(via_json) is type(state)
    assert via_json == state


@settings(max_examples=200, deadline=None)
@given(shell_states)
def test_shell_state_round_trips(state: ShellTaskState) -> None:
    assert_round_trips(state)


@settings(max_examples=200, deadline=None)
@given(agent_states)
def test_agent_state_round_trips(state: AgentTaskState) -> None:
    assert isinstance(state.messages, tuple)
    assert isinstance(state.pending_messages, tuple)
    assert_round_trips(state)


def test_agent_state_with_messages_round_trips() -> None:
    state = AgentTaskState(
        id="a1b2c3d4e",
        status=R,
        messages=({"role": "user", "content": [{"type": "text", "text": "hi"}]}, "plain"),
        pending_messages=("steer left",),
    )
    data = state.to_dict()
    assert isinstance(data["messages"], list)
    assert isinstance(data["pending_messages"], list)
    assert_round_trips(state)


nested_tuples = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(nested_tuples, max_size=4).map(tuple),
    st.lists(nested_tuples, max_size=4).map(tuple),
)
def test_nested_values_come_back_as_their_json_form(
    msgs: tuple[Any, ...], pending: tuple[Any, ...]
) -> None:
    # Only a field's own container is a tuple; what it holds is JSON data (lists, dicts).
    state = AgentTaskState(id="a00000000", messages=msgs, pending_messages=pending)
    back = state_from_dict(json.loads(json.dumps(state.to_dict())))
    assert isinstance(back, AgentTaskState)
    assert back.messages == tuple(json.loads(json.dumps(list(msgs))))
    assert back.pending_messages == tuple(json.loads(json.dumps(list(pending))))
    assert back.to_dict() == json.loads(json.dumps(state.to_dict()))


OTHER_STATES: list[TaskState] = [
    ShellTaskState(
        id="b00000001",
        status=C,
        command="make",
        exit_code=2,
        pid=42,
        kind="monitor",
        agent_id="a99999999",
        tool_use_id="toolu_1",
        end_time=5.0,
    ),
    AgentTaskState(id="a00000001", status=F, prompt="p", error="boom", retain=True),
    RemoteAgentTaskState(id="r00000001", status=R, prompt="remote", result="ok"),
    TeammateTaskState(
        id="t00000001",
        status=R,
        name="alice",
        team_name="red",
        pending_messages=("hi", "yo"),
    ),
    WorkflowTaskState(id="w00000001", status=K, error="stopped", exit_policy="detach"),
    MonitorMcpTaskState(id="m00000001", status=P, server="github", notified=True),
    DreamTaskState(id="d00000001", status=C, result="consolidated", output_offset=17),
]


def test_every_type_has_a_state_class() -> None:
    assert set(STATE_CLASSES) == set(TaskType)
    assert {type(s) for s in OTHER_STATES} == set(STATE_CLASSES.values())
    for task_type, cls in STATE_CLASSES.items():
        assert cls.TYPE is task_type
        assert cls(id="x").type is task_type


@pytest.mark.parametrize("state", OTHER_STATES, ids=lambda s: type(s).__name__)
def test_every_state_class_round_trips(state: TaskState) -> None:
    assert_round_trips(state)


@pytest.mark.parametrize("state", OTHER_STATES, ids=lambda s: type(s).__name__)
def test_state_from_dict_ignores_unknown_keys(state: TaskState) -> None:
    data = state.to_dict()
    data["field_from_the_future"] = {"x": [1, 2]}
    data["another"] = "value"
    assert state_from_dict(data) == state


def test_state_from_dict_fills_defaults_for_missing_keys() -> None:
    state = state_from_dict({"id": "b00000002", "type": "local_bash"})
    assert state == ShellTaskState(id="b00000002")
    assert state.status is TaskStatus.PENDING


@pytest.mark.parametrize("state", OTHER_STATES, ids=lambda s: type(s).__name__)
def test_states_are_frozen(state: TaskState) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.status = TaskStatus.RUNNING  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.description = "changed"  # type: ignore[misc]
    assert state.description != "changed"


def test_replace_returns_a_new_state() -> None:
    state = ShellTaskState(id="b00000003", command="ls")
    running = state.replace(status=R, pid=7)
    assert running is not state
    assert (running.status, running.pid, running.command) == (R, 7, "ls")
    assert (state.status, state.pid) == (P, None)
    assert isinstance(running, ShellTaskState)

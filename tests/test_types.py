"""Task types, the status machine and the frozen state variants."""

from __future__ import annotations

import dataclasses
import inspect
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
    ShellTaskState,
    TaskState,
    TaskStatus,
    TaskType,
    can_transition,
    check_transition,
    is_terminal,
    state_class,
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
    activities=st.lists(text, max_size=5).map(tuple),
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
    assert isinstance(state.activities, tuple)
    assert_round_trips(state)


def test_agent_state_with_activities_round_trips() -> None:
    state = AgentTaskState(id="a1b2c3d4e", status=R, activities=("Reading a.py", "Running ls"))
    data = state.to_dict()
    assert isinstance(data["activities"], list)
    assert_round_trips(state)


def test_fields_of_older_records_are_ignored() -> None:
    # Records written before the mailbox held pending_messages (and UI fields): still read.
    data = AgentTaskState(id="a1b2c3d4f", status=R, prompt="p").to_dict()
    old = {**data, "pending_messages": ["steer left"], "messages": [], "retain": True}
    assert state_from_dict(json.loads(json.dumps(old))) == state_from_dict(data)


nested_tuples = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(nested_tuples, max_size=4).map(tuple))
def test_nested_values_come_back_as_their_json_form(held: tuple[Any, ...]) -> None:
    # Only a field's own container is a tuple; what it holds is JSON data (lists, dicts).
    state = AgentTaskState(id="a00000000", activities=held)
    back = state_from_dict(json.loads(json.dumps(state.to_dict())))
    assert isinstance(back, AgentTaskState)
    assert back.activities == tuple(json.loads(json.dumps(list(held))))
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
    AgentTaskState(id="a00000001", status=F, prompt="p", error="boom", activities=("hi",)),
    AgentTaskState(id="a00000002", status=K, error="stopped", exit_policy="detach"),
    AgentTaskState(id="a00000003", status=C, result="done", notified=True, output_offset=17),
]


def test_every_type_has_a_state_class_built_in_or_brought_by_its_kind() -> None:
    assert set(STATE_CLASSES) == {TaskType.LOCAL_BASH, TaskType.LOCAL_AGENT}
    brought = set(TaskType) - set(STATE_CLASSES)
    assert brought == {
        TaskType.IN_PROCESS_TEAMMATE,
        TaskType.REMOTE_AGENT,
        TaskType.LOCAL_WORKFLOW,
        TaskType.MONITOR_MCP,
        TaskType.DREAM,
    }
    for task_type in brought:
        cls = state_class(task_type)
        assert cls is not None and cls.TYPE is task_type
    assert {type(s) for s in OTHER_STATES} == set(STATE_CLASSES.values())
    for task_type, cls in STATE_CLASSES.items():
        assert cls.TYPE is task_type
        assert cls(id="x").type is task_type


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError):
        state_from_dict({"id": "x00000000", "type": "no_such_type"})


COMMON = [
    "id",
    "type",
    "status",
    "description",
    "owner",
    "session_id",
    "tool_use_id",
    "start_time",
    "end_time",
    "output_file",
    "output_offset",
    "notified",
    "exit_policy",
    "is_backgrounded",
    "stopped_reason",
]


def test_the_stored_form_of_each_state_keeps_its_fields_in_order() -> None:
    assert [f.name for f in dataclasses.fields(TaskState)] == COMMON
    shell = ["command", "exit_code", "interrupted", "pid", "kind", "agent_id"]
    agent = [
        "prompt",
        "agent_type",
        "result",
        "error",
        "evict_after",
        "total_tokens",
        "tool_uses",
        "name",
        "input_tokens",
        "output_tokens",
        "activities",
        "worktree_path",
        "worktree_branch",
        "subtree_tokens",
        "subtree_tool_uses",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "cost_usd",
        "subtree_cost_usd",
        "partial",
    ]
    assert list(ShellTaskState(id="b00000000").to_dict()) == COMMON + shell
    assert list(AgentTaskState(id="a00000000").to_dict()) == COMMON + agent


def test_states_compare_and_hash_by_class_and_value() -> None:
    shell = ShellTaskState(id="b00000009", command="ls")
    assert shell == ShellTaskState(id="b00000009", command="ls")
    assert hash(shell) == hash(ShellTaskState(id="b00000009", command="ls"))
    assert shell != shell.replace(command="pwd")
    # Same common fields, another variant: not equal.
    assert ShellTaskState(id="w00000009") != AgentTaskState(id="w00000009")
    assert repr(shell).startswith("ShellTaskState(id='b00000009', type=<TaskType.LOCAL_BASH")


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


def test_replace_refuses_an_unknown_field_naming_it() -> None:
    state = ShellTaskState(id="b00000004")
    with pytest.raises(TypeError, match="no field\\(s\\) bogus, other"):
        state.replace(status=R, other=1, bogus=2)
    assert state.status == P


@pytest.mark.parametrize("cls", [ShellTaskState, AgentTaskState])
def test_built_in_states_take_what_their_dataclass_init_takes(cls: type[TaskState]) -> None:
    fields = dataclasses.fields(cls)
    bare = cls(id="x00000000")
    assert all(getattr(bare, f.name) == f.default for f in fields if f.name != "id")
    assert list(inspect.signature(cls).parameters) == [f.name for f in fields]
    assert all(p.kind is p.KEYWORD_ONLY for p in inspect.signature(cls).parameters.values())
    given = {f.name: f"value of {f.name}" for f in fields}
    full = cls(**given)  # type: ignore[arg-type]
    assert all(getattr(full, name) == value for name, value in given.items())
    with pytest.raises(TypeError, match="id"):
        cls()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        cls(id="x00000000", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        cls("x00000000")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.status = R  # type: ignore[misc]


Names = tuple[str, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _OddState(TaskState):
    """Fields annotated in ways to_dict cannot read as scalars."""

    TYPE = TaskType.DREAM
    type: TaskType = TaskType.DREAM
    names: Names = ()
    anything: object = None
    label: str = ""


def test_to_dict_gives_a_tuple_field_as_a_list_however_it_is_annotated() -> None:
    state = _OddState(id="d00000000", names=("a", "b"), anything=(1, (2, 3)), label="l")
    data = state.to_dict()
    assert data["names"] == ["a", "b"]
    assert data["anything"] == [1, (2, 3)]  # the field's own tuple only, as before
    assert data["label"] == "l"
    assert list(data) == [f.name for f in dataclasses.fields(_OddState)]
    assert json.loads(json.dumps(data))["anything"] == [1, [2, 3]]

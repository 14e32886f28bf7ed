"""The REPL's task panel and transcript view, without a terminal (a fake clock, real states).

The end-to-end behaviour (keys, drawing in a real terminal) is tested in tmux by test_repl.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.utils import get_cwidth

from taskloom.messages import Message, TextBlock, ToolUseBlock
from taskloom.repl.panel import DEFAULT_GRACE_S, FOREGROUND_AFTER_S, TaskPanel, grace_from
from taskloom.repl.transcript import Line, TranscriptView, call_line, landed
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskState, TaskStatus
from taskloom.tools.base import ToolResult

SESSION = "sess-1"

# -- the task panel -------------------------------------------------------------------------------


class Clock:
    """Monotonic and wall time that move together, and only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.epoch = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.epoch += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_panel(clock: Clock, grace_s: float = DEFAULT_GRACE_S) -> TaskPanel:
    return TaskPanel(SESSION, grace_s=grace_s, clock=clock.monotonic, wall=clock.time)


def shell(clock: Clock, task_id: str = "b1", **fields: Any) -> ShellTaskState:
    values: dict[str, Any] = {
        "status": TaskStatus.RUNNING,
        "description": "run the tests",
        "owner": SESSION,
        "session_id": SESSION,
        "start_time": clock.time(),
        "command": "pytest -q",
    }
    values.update(fields)
    return ShellTaskState(id=task_id, **values)


def ended(clock: Clock, state: TaskState, status: TaskStatus = TaskStatus.COMPLETED) -> TaskState:
    return state.replace(status=status, end_time=clock.time())


def texts(panel: TaskPanel, width: int = 200) -> list[str]:
    return [text for _, text in panel.lines(width)]


def test_a_background_task_has_a_row_at_once(clock: Clock) -> None:
    panel = make_panel(clock)
    panel.update(shell(clock))
    assert panel.shows_rows()
    ((style, text),) = panel.lines(200)
    assert style == "running"
    assert text.startswith("b1 ") and " shell " in text and "run the tests" in text
    assert " 0s · running" in text
    clock.advance(125)
    assert " 2m05s · running" in texts(panel)[0]  # elapsed, from the task's start


def test_a_foreground_task_shows_only_after_it_has_run_two_seconds(clock: Clock) -> None:
    panel = make_panel(clock)
    panel.update(shell(clock, is_backgrounded=False))
    assert not panel.shows_rows() and panel.lines(200) == []
    assert panel.next_change() == pytest.approx(FOREGROUND_AFTER_S)
    clock.advance(FOREGROUND_AFTER_S - 0.1)
    assert panel.lines(200) == []
    assert panel.next_change() == pytest.approx(0.1)
    clock.advance(0.1)
    ((style, text),) = panel.lines(200)
    assert style == "foreground"
    assert "fg · ctrl+b to background" in text
    assert panel.next_change() == pytest.approx(1.0)  # from now on its elapsed time ticks


def test_a_foreground_call_that_ends_before_two_seconds_never_shows(clock: Clock) -> None:
    panel = make_panel(clock, grace_s=30)
    state = shell(clock, is_backgrounded=False)
    panel.update(state)
    clock.advance(1.5)
    panel.update(ended(clock, state))
    for step in (0.0, 1.0, 5.0, 25.0):  # neither at once, nor once 2 s have gone by
        clock.advance(step)
        assert panel.lines(200) == [] and not panel.shows_rows()
    clock.advance(30)
    assert panel.next_change() is None  # and it is forgotten with its grace


def test_a_foreground_task_that_ran_long_keeps_its_row_when_it_ends(clock: Clock) -> None:
    panel = make_panel(clock)
    state = shell(clock, is_backgrounded=False)
    panel.update(state)
    clock.advance(3)
    panel.update(ended(clock, state))
    ((style, text),) = panel.lines(200)
    assert style == "done" and " 3s · done" in text


def test_an_ended_task_stays_for_the_grace_and_then_goes(clock: Clock) -> None:
    panel = make_panel(clock, grace_s=10)
    state = shell(clock)
    panel.update(state)
    clock.advance(4)
    panel.update(ended(clock, state, TaskStatus.FAILED))
    assert panel.next_change() == pytest.approx(10)
    clock.advance(9.5)
    ((style, text),) = panel.lines(200)
    assert style == "failed" and " 4s · failed" in text  # its time stopped at its end
    assert panel.next_change() == pytest.approx(0.5)
    clock.advance(0.5)
    assert panel.lines(200) == [] and not panel.shows_rows()
    assert panel.next_change() is None
    assert panel.running() == []


@pytest.mark.parametrize(
    ("status", "shown"),
    [(TaskStatus.COMPLETED, "done"), (TaskStatus.FAILED, "failed"), (TaskStatus.KILLED, "stopped")],
)
def test_an_ended_row_names_its_ending(clock: Clock, status: TaskStatus, shown: str) -> None:
    panel = make_panel(clock)
    state = shell(clock)
    panel.update(state)
    panel.update(ended(clock, state, status))
    ((style, text),) = panel.lines(200)
    assert style == shown and f"· {shown}" in text


def test_a_task_first_seen_after_its_end_keeps_only_what_is_left_of_its_grace(
    clock: Clock,
) -> None:
    panel = make_panel(clock, grace_s=30)
    recent = shell(clock, "b1", status=TaskStatus.COMPLETED, end_time=clock.time() - 25)
    old = shell(clock, "b2", status=TaskStatus.COMPLETED, end_time=clock.time() - 31)
    panel.update(recent)
    panel.update(old)
    assert [t.split()[0] for t in texts(panel)] == ["b1"]
    assert panel.next_change() == pytest.approx(5)
    clock.advance(5)
    assert panel.lines(200) == []


def test_foreground_lists_only_the_sessions_own_running_foreground_tasks(clock: Clock) -> None:
    panel = make_panel(clock)
    panel.update(shell(clock, "b1", is_backgrounded=False))
    panel.update(shell(clock, "b2"))  # in the background already
    panel.update(shell(clock, "b3", is_backgrounded=False, owner="a-helper"))  # an agent's
    done = shell(clock, "b4", is_backgrounded=False)
    panel.update(done)
    panel.update(ended(clock, done))
    assert [s.id for s in panel.foreground()] == ["b1"]
    assert [s.id for s in panel.running()] == ["b1", "b2", "b3"]


def test_rows_are_cut_to_the_width(clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "b1.out"
    out.write_text("y" * 300 + "\n")  # its last line is the row's activity
    panel = make_panel(clock)
    panel.update(shell(clock, description="", command="x" * 300, output_file=str(out)))
    (wide,) = texts(panel, 400)
    assert "…" not in wide and len(wide) > 300
    assert "x" * 28 + " " in wide  # the label has a column of its own, cut to 28
    for width in (20, 40, 79, 300):
        (text,) = texts(panel, width)
        assert len(text) == width and text.endswith("…")
        assert wide.startswith(text[:-1])


def test_rows_with_wide_characters_are_cut_to_the_width_in_cells(
    clock: Clock, tmp_path: Path
) -> None:
    out = tmp_path / "b1.out"
    out.write_text("测试" * 100 + "\n")
    panel = make_panel(clock)
    panel.update(shell(clock, output_file=str(out)))
    for width in (40, 80, 120):
        (text,) = texts(panel, width)
        assert get_cwidth(text) <= width


def test_more_rows_than_the_limit_show_foreground_work_first_and_say_how_many_more(
    clock: Clock,
) -> None:
    panel = make_panel(clock)
    for n in range(8):
        panel.update(shell(clock, f"b{n}", description=f"job {n}"))
    panel.update(shell(clock, "b8", description="ended", status=TaskStatus.COMPLETED))
    panel.update(shell(clock, "b9", description="waited on", is_backgrounded=False))
    clock.advance(FOREGROUND_AFTER_S + 0.1)
    assert len(panel.lines(200)) == 10  # no limit: every row
    shown = panel.lines(200, limit=4)
    assert len(shown) == 4
    assert "waited on" in shown[0][1] and "job 0" in shown[1][1] and "job 1" in shown[2][1]
    assert shown[3] == ("note", "… 7 more (6 running, 1 ended) · /tasks lists them")


def test_a_shell_row_shows_the_last_line_its_command_printed(clock: Clock, tmp_path: Path) -> None:
    out = tmp_path / "b1.out"
    out.write_text("collecting\n\n12 passed\n   \n")
    panel = make_panel(clock)
    panel.update(shell(clock, output_file=str(out)))
    (text,) = texts(panel)
    assert text.endswith("· running · 12 passed")


def test_an_agent_row_shows_tool_uses_tokens_and_its_last_activity(clock: Clock) -> None:
    panel = make_panel(clock)
    agent = AgentTaskState(
        id="a1",
        status=TaskStatus.RUNNING,
        description="review the diff",
        owner=SESSION,
        session_id=SESSION,
        start_time=clock.time(),
        tool_uses=7,
        total_tokens=12_345,
        activities=("Reading src/app.py", "Running pytest"),
    )
    panel.update(agent)
    (text,) = texts(panel)
    assert " agent " in text and "review the diff" in text
    assert "· 7 tool uses · 12.3k tokens · Running pytest" in text
    assert "Reading src/app.py" not in text


def test_a_row_of_another_owners_task_says_whom_it_is_for(clock: Clock) -> None:
    panel = make_panel(clock)
    panel.update(shell(clock, owner="a-helper"))
    (text,) = texts(panel)
    assert text.endswith("(for a-helper)")


@pytest.mark.parametrize(
    ("settings", "seconds"),
    [
        ({"panelGraceMs": 5000}, 5.0),
        ({"panelGraceMs": 0}, 0.0),
        ({"panelGraceMs": 1500.5}, 1.5005),
        ({}, DEFAULT_GRACE_S),
        ({"panelGraceMs": True}, DEFAULT_GRACE_S),
        ({"panelGraceMs": False}, DEFAULT_GRACE_S),
        ({"panelGraceMs": -1}, DEFAULT_GRACE_S),
        ({"panelGraceMs": "5000"}, DEFAULT_GRACE_S),
        ({"panelGraceMs": None}, DEFAULT_GRACE_S),
        ({"panelGraceMs": [5000]}, DEFAULT_GRACE_S),
    ],
)
def test_grace_from_reads_panel_grace_ms_and_falls_back_on_bad_values(
    settings: dict[str, Any], seconds: float
) -> None:
    assert DEFAULT_GRACE_S == 30.0
    assert grace_from(settings) == pytest.approx(seconds)


# -- the transcript view --------------------------------------------------------------------------


@pytest.fixture
def emitted() -> list[Line]:
    return []


@pytest.fixture
def view(emitted: list[Line]) -> TranscriptView:
    return TranscriptView(emitted.extend)


def assistant(text: str, *calls: tuple[str, dict[str, Any]]) -> Message:
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    blocks += [ToolUseBlock(id=f"t{i}", name=n, input=p) for i, (n, p) in enumerate(calls)]
    return Message(role="assistant", content=blocks)


def test_deltas_emit_whole_lines_as_they_complete_and_keep_the_partial(
    view: TranscriptView, emitted: list[Line]
) -> None:
    view.delta("Hel")
    assert emitted == [] and view.partial == "Hel"
    view.delta("lo\nwor")
    assert emitted == [("assistant", "Hello")] and view.partial == "wor"
    view.delta("ld\n\nand mo")
    assert emitted == [("assistant", "Hello"), ("assistant", "world"), ("assistant", "")]
    assert view.partial == "and mo"


def test_an_answer_after_deltas_emits_only_the_rest_and_one_line_per_call(
    view: TranscriptView, emitted: list[Line]
) -> None:
    view.delta("Let me look.\nRunning")
    view.delta(" them")
    emitted.clear()
    view.answer(
        assistant(
            "Let me look.\nRunning them",
            ("Bash", {"command": "pytest -q", "description": "run tests"}),
            ("Read", {"file_path": "src/app.py"}),
        )
    )
    assert emitted == [
        ("assistant", "Running them"),
        ("tool", "→ Bash(pytest -q)"),
        ("tool", "→ Read(src/app.py)"),
    ]
    assert view.partial == ""
    # The next answer came without deltas: it is emitted whole.
    emitted.clear()
    view.answer(assistant("All\ngreen."))
    assert emitted == [("assistant", "All"), ("assistant", "green.")]


def test_an_answer_without_deltas_emits_the_whole_text(
    view: TranscriptView, emitted: list[Line]
) -> None:
    view.answer(assistant("one\ntwo", ("Agent", {"description": "explore", "prompt": "go"})))
    assert emitted == [("assistant", "one"), ("assistant", "two"), ("tool", "→ Agent(explore)")]


def test_an_answer_with_nothing_to_show_emits_nothing(
    view: TranscriptView, emitted: list[Line]
) -> None:
    view.answer(assistant("  \n "))
    assert emitted == []


def test_a_result_shows_its_first_line_and_how_many_more(
    view: TranscriptView, emitted: list[Line]
) -> None:
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "pytest"})
    view.result(call, ToolResult("\n  12 passed  \nwarnings\n\nsummary\n"))
    view.result(call, ToolResult("one line"))
    view.result(call, ToolResult("Exit code 1\nboom", is_error=True))
    view.result(call, ToolResult("   "))
    view.result(call, ToolResult("y" * 300))
    assert emitted[:4] == [
        ("result", "  ← 12 passed (+2 lines)"),
        ("result", "  ← one line"),
        ("error", "  ✗ Exit code 1 (+1 lines)"),
        ("result", "  ← (no output)"),
    ]
    style, text = emitted[4]
    assert style == "result" and text == "  ← " + "y" * 99 + "…"


@pytest.mark.parametrize(
    ("name", "params", "line"),
    [
        ("Bash", {"command": "pytest -q", "description": "tests"}, "Bash(pytest -q)"),
        ("Bash", {"command": "echo a &&\n   echo b"}, "Bash(echo a && echo b)"),
        ("Read", {"file_path": "/src/app.py", "offset": 10}, "Read(/src/app.py)"),
        ("Agent", {"prompt": "look around", "description": "explore"}, "Agent(explore)"),
        ("Mystery", {"n": 3, "empty": "", "query": "cats"}, "Mystery(cats)"),
        ("Mystery", {"n": 3}, "Mystery"),
        ("Mystery", {}, "Mystery"),
    ],
)
def test_call_line_shows_the_field_that_matters(
    name: str, params: dict[str, Any], line: str
) -> None:
    assert call_line(name, params) == line


def test_call_line_cuts_long_values() -> None:
    line = call_line("Bash", {"command": "z" * 500})
    assert line == "Bash(" + "z" * 99 + "…)"
    assert call_line("Bash", {"command": "z" * 100}) == "Bash(" + "z" * 100 + ")"


def test_landed_names_the_task_its_summary_and_its_output_file(clock: Clock) -> None:
    state = shell(
        clock,
        "b7",
        status=TaskStatus.COMPLETED,
        exit_code=3,
        end_time=clock.time(),
        output_file="/tmp/b7.out",
    )
    assert landed(state) == (
        '● b7: Background command "run the tests" completed (exit code 3) · output: /tmp/b7.out'
    )
    assert landed(state.replace(output_file="")).endswith("(exit code 3)")


def test_an_agent_row_shows_its_agents_work_too(clock: Clock) -> None:
    panel = make_panel(clock)
    agent = AgentTaskState(
        id="a1",
        status=TaskStatus.RUNNING,
        description="boss",
        owner=SESSION,
        session_id=SESSION,
        start_time=clock.time(),
        tool_uses=2,
        total_tokens=1500,
        subtree_tool_uses=9,
        subtree_tokens=12_400,
    )
    panel.update(agent)
    (text,) = texts(panel)
    assert "2 tool uses" in text and "with its agents 12.4k tokens" in text, text
    panel.update(agent.replace(id="a2", subtree_tool_uses=2, subtree_tokens=1500))
    assert "with its agents" not in texts(panel)[1]  # none of its own: nothing more to say
    assert "$" not in texts(panel)[0]  # nothing priced: no cost shown
    panel.update(agent.replace(subtree_cost_usd=0.1234))
    assert "$0.12" in texts(panel)[0]  # what it and its agents have cost so far


def test_a_workflow_s_row_shows_its_agents_done_of_all(clock: Clock) -> None:
    from taskloom.tasks.workflow import WorkflowTaskState

    panel = make_panel(clock)
    flow = WorkflowTaskState(
        id="w1", status=TaskStatus.RUNNING, description="fan out", owner=SESSION,
        start_time=clock.time(), total=50, done=12, failed=1, running=8,
    )  # fmt: skip
    panel.update(flow)
    ((style, text),) = panel.lines(200)
    assert style == "running" and "12/50 done, 1 failed, 8 running" in text
    panel.update(flow.replace(done=13, running=7))  # each change is asked of its kind again
    assert "13/50 done, 1 failed, 7 running" in texts(panel)[0]

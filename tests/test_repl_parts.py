"""The REPL's pure parts, without a terminal: the task panel, the transcript view, the queue of
permission questions, "always allow" rules, and the recorder's note of an interrupt.

The end-to-end behaviour (keys, drawing in a real terminal) is tested in tmux by test_repl.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.utils import get_cwidth

import taskloom

# Imported for their kinds (registered on import), which the panel asks for each row's progress.
import taskloom.tasks.agent
import taskloom.tasks.shell_kind
from helpers import wait_until
from taskloom.conversation.recorder import INTERRUPTED_BY_USER, INTERRUPTED_FOR_TOOL_USE
from taskloom.errors import UsageError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.permissions import (
    Decision,
    PermissionPolicy,
    PermissionRequest,
    PromptAnswer,
    PromptError,
    parse_rule,
)
from taskloom.repl.asks import LOCAL_SETTINGS, PermissionAsks, save_allow_rule
from taskloom.repl.panel import DEFAULT_GRACE_S, FOREGROUND_AFTER_S, TaskPanel, grace_from
from taskloom.repl.transcript import Line, TranscriptView, call_line, landed
from taskloom.session import transcript_path
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskState, TaskStatus
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.base import ToolResult
from taskloom.transcript import load_messages, repair

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


# -- permission questions -------------------------------------------------------------------------


def request(n: int) -> PermissionRequest:
    return PermissionRequest("Bash", "execute", f"cmd {n}", Path("/"), {"command": f"cmd {n}"})


DECISION = Decision("ask", "Bash needs approval in default mode", suggestion="Bash(cmd:*)")


def describe(agent_id: str | None) -> str:
    return f"agent {agent_id}" if agent_id else ""


class Asks:
    """A PermissionAsks, and what it showed each time it said the queue changed."""

    def __init__(self) -> None:
        self.changes: list[tuple[str | None, int]] = []
        self.asks = PermissionAsks(self._changed, describe)

    def _changed(self) -> None:
        current = self.asks.current
        self.changes.append((current.title if current is not None else None, self.asks.waiting))

    def ask(self, n: int, agent_id: str | None = None) -> asyncio.Task[PromptAnswer]:
        return asyncio.create_task(
            self.asks.ask(request(n), DECISION, tool_use_id=f"t{n}", agent_id=agent_id)
        )

    async def queued(self, count: int) -> None:
        # The tasks join the queue when they first run; nothing tells when that is.
        await wait_until(lambda: self.asks.waiting + (self.asks.current is not None) == count)


async def test_concurrent_asks_queue_in_order_and_each_gets_its_answer() -> None:
    q = Asks()
    asks = q.asks
    assert asks.current is None and asks.waiting == 0
    first, second, third = q.ask(1), q.ask(2, "a-helper"), q.ask(3)
    await q.queued(3)
    assert asks.current is not None
    assert asks.current.title == "Bash(cmd 1)" and asks.current.who == ""
    assert asks.current.rule == "Bash(cmd:*)"
    assert asks.waiting == 2

    answered = asks.answer(PromptAnswer(allow=True))
    assert answered is not None and answered.request == request(1)
    assert await first == PromptAnswer(allow=True)
    assert asks.current is not None and asks.current.title == "Bash(cmd 2)"
    assert asks.current.who == "agent a-helper" and asks.waiting == 1

    asks.answer(PromptAnswer(allow=False, message="no"))
    assert await second == PromptAnswer(allow=False, message="no")
    assert asks.current is not None and asks.current.title == "Bash(cmd 3)"
    assert asks.waiting == 0

    asks.answer(PromptAnswer(allow=True, updated_input={"command": "cmd 33"}))
    assert (await third).updated_input == {"command": "cmd 33"}
    assert asks.current is None and asks.waiting == 0
    assert asks.answer(PromptAnswer(allow=True)) is None  # nothing to answer: no error
    # Told each time the queue changed: the call shown, and how many wait behind it.
    assert q.changes == [
        ("Bash(cmd 1)", 0),
        ("Bash(cmd 1)", 1),
        ("Bash(cmd 1)", 2),
        ("Bash(cmd 2)", 1),
        ("Bash(cmd 3)", 0),
        (None, 0),
    ]


async def test_a_cancelled_ask_leaves_the_queue() -> None:
    q = Asks()
    asks = q.asks
    first, second, third = q.ask(1), q.ask(2), q.ask(3)
    await q.queued(3)
    second.cancel()  # one waiting behind the one shown
    with pytest.raises(asyncio.CancelledError):
        await second
    assert asks.current is not None and asks.current.title == "Bash(cmd 1)"
    assert asks.waiting == 1
    assert q.changes[-1] == ("Bash(cmd 1)", 1)
    first.cancel()  # the one shown: the next is shown
    with pytest.raises(asyncio.CancelledError):
        await first
    assert asks.current is not None and asks.current.title == "Bash(cmd 3)"
    assert asks.waiting == 0
    assert q.changes[-1] == ("Bash(cmd 3)", 0)
    asks.answer(PromptAnswer(allow=True))
    assert (await third).allow
    assert asks.current is None


async def test_close_denies_every_waiting_call_and_every_later_one() -> None:
    q = Asks()
    asks = q.asks
    waiting = [q.ask(1), q.ask(2), q.ask(3)]
    await q.queued(3)
    asks.close("the session ended")
    for task in waiting:
        with pytest.raises(PromptError, match="the session ended"):
            await task
    assert asks.current is None and asks.waiting == 0
    with pytest.raises(PromptError, match="the session ended"):
        await asyncio.wait_for(
            asks.ask(request(4), DECISION, tool_use_id="t4", agent_id=None), timeout=5
        )
    assert asks.current is None
    assert q.changes[-1] == (None, 0)


# -- "always allow" rules -------------------------------------------------------------------------


def settings_file(root: Path) -> Path:
    return root / LOCAL_SETTINGS


def test_save_allow_rule_creates_the_local_settings_with_the_rule(tmp_path: Path) -> None:
    path = save_allow_rule(tmp_path, "Bash(npm test:*)")
    assert path == tmp_path / ".taskloom" / "settings.local.json"
    assert json.loads(path.read_text()) == {"permissions": {"allow": ["Bash(npm test:*)"]}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.local.json"]


def test_save_allow_rule_keeps_the_other_keys_and_rules_and_adds_a_rule_once(
    tmp_path: Path,
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    permissions = {"allow": ["Read"], "deny": ["Bash(rm:*)"], "defaultMode": "default"}
    before = {"env": {"A": "1"}, "permissions": permissions, "model": "sonnet"}
    path.write_text(json.dumps(before))
    save_allow_rule(tmp_path, "Write")
    save_allow_rule(tmp_path, "Write")
    save_allow_rule(tmp_path, "Read")
    after = json.loads(path.read_text())
    assert after == {**before, "permissions": {**permissions, "allow": ["Read", "Write"]}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.local.json"]


def test_save_allow_rule_takes_an_empty_file_for_no_settings(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    path.write_text("")
    save_allow_rule(tmp_path, "Write")
    assert json.loads(path.read_text()) == {"permissions": {"allow": ["Write"]}}


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe not utf-8",
        b"[1, 2]",
        b"null",
        b'"text"',
        b'{"permissions": []}',
        b'{"permissions": {"allow": "Read"}}',
        b'{"permissions": {"allow": {"Read": true}}}',
    ],
)
def test_save_allow_rule_refuses_a_malformed_file_and_leaves_it_as_it_was(
    tmp_path: Path, content: bytes
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(UsageError) as caught:
        save_allow_rule(tmp_path, "Write")
    assert str(path) in str(caught.value) and "Write" in str(caught.value)
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.local.json"]


def test_a_failed_write_leaves_the_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    path.write_text('{"permissions": {"allow": ["Read"]}}')
    before = path.read_bytes()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("taskloom.repl.asks.json.dump", full)
    with pytest.raises(OSError, match="No space"):
        save_allow_rule(tmp_path, "Write")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.local.json"]


# -- rules added while the session runs -----------------------------------------------------------


def test_a_rule_added_to_a_policy_applies_to_its_copies_and_theirs_to_it(tmp_path: Path) -> None:
    policy = PermissionPolicy("default", [], tmp_path)
    copy = policy.with_mode("acceptEdits")
    npm = PermissionRequest("Bash", "execute", "npm test", tmp_path, {"command": "npm test"})
    assert policy.decide(npm).behavior == "ask" and copy.decide(npm).behavior == "ask"

    policy.add_rule(parse_rule("Bash(npm test:*)", "allow", "test"))
    assert copy.decide(npm).behavior == "allow"
    assert policy.decide(npm).behavior == "allow"

    target = str(tmp_path / "a.txt")
    write = PermissionRequest("Write", "edit", target, tmp_path, {"file_path": target})
    assert copy.decide(write).behavior == "allow"  # acceptEdits allows edits in the cwd
    copy.add_rule(parse_rule("Write", "deny", "test"))
    assert policy.decide(write).behavior == "deny"
    assert copy.decide(write).behavior == "deny"
    # Both see both rules (in whatever order ``rules`` lists them).
    assert sorted(str(r) for r in policy.rules) == ["Bash(npm test:*)", "Write"]
    assert sorted(str(r) for r in copy.rules) == ["Bash(npm test:*)", "Write"]

    # The modes stay their own.
    assert str(policy.mode) == "default" and str(copy.mode) == "acceptEdits"
    policy.switch_mode("plan")
    assert str(copy.mode) == "acceptEdits"
    copy.switch_mode("bypassPermissions")
    assert str(policy.mode) == "plan"


# -- the note of an interrupt ---------------------------------------------------------------------


def assert_api_accepts(messages: list[Message]) -> None:
    """Roles alternate from a user message; each call is answered, results first, in the next."""
    assert messages and messages[0].role == "user"
    for before, after in itertools.pairwise(messages):
        assert before.role != after.role, f"two {before.role} messages in a row"
    for i, message in enumerate(messages):
        calls = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
        if not calls:
            continue
        assert i + 1 < len(messages), "the conversation ends on unanswered calls"
        following = messages[i + 1].content
        results = [b.tool_use_id for b in following if isinstance(b, ToolResultBlock)]
        assert sorted(results) == sorted(calls)
        kinds = [isinstance(b, ToolResultBlock) for b in following]
        assert kinds == sorted(kinds, reverse=True), "text before a tool result"


def wire(messages: list[Message]) -> list[dict[str, Any]]:
    """What the API is sent of the messages (a transcript does not keep every field)."""
    return [m.wire() for m in messages]


def texts_of(message: Message) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextBlock)]


async def interrupt_cutting_a_call(h: Any) -> None:
    """Run a prompt whose answer calls a tool; interrupt it as the call is about to run."""
    events = h.run("run the slow thing")
    async for event in events:
        if isinstance(event, taskloom.AssistantTurn):
            break  # the user pressed Esc
    await events.aclose()
    h.session.recorder.interrupted()


async def interrupt_before_the_answer(h: Any) -> None:
    """Run a prompt; interrupt it while the model is asked (no call to cut short)."""
    events = h.run("hi")
    async for event in events:
        if isinstance(event, taskloom.UserTurn):
            break
    await events.aclose()
    h.session.recorder.interrupted()


def cutting_model() -> ScriptedModel:
    return ScriptedModel(
        [
            Turn(text="Running it.", tool_calls=(ToolCall("Bash", {"command": "sleep 30"}, "tc"),)),
            Turn(text="Trying again."),
        ]
    )


async def test_an_interrupt_that_cut_a_call_short_answers_it_and_tells_the_model(
    tmp_path: Path,
) -> None:
    model = cutting_model()
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        await interrupt_cutting_a_call(h)
        messages = h.session.engine.messages
        assert_api_accepts(messages)
        last = messages[-1]
        assert last.role == "user"
        (result,) = [b for b in last.content if isinstance(b, ToolResultBlock)]
        assert result.tool_use_id == "tc" and result.is_error
        assert texts_of(last) == [INTERRUPTED_FOR_TOOL_USE]

        # The transcript has it: a session resumed now continues from the same conversation.
        path = transcript_path(h.session_id, h.runtime.home)
        assert INTERRUPTED_FOR_TOOL_USE in path.read_text()
        resumed, added = repair(load_messages(path))
        assert added == []
        assert wire(resumed) == wire(messages)

        # The next prompt joins the note's message: one user message, which the API accepts.
        rest = [e async for e in h.run("try again")]
        assert isinstance(rest[-1], taskloom.Finished)
        sent = list(model.requests[-1].messages)
        assert_api_accepts(sent)
        assert [b.tool_use_id for b in sent[-1].content if isinstance(b, ToolResultBlock)] == ["tc"]
        assert texts_of(sent[-1]) == [INTERRUPTED_FOR_TOOL_USE, "try again"]
        await h.end()


async def test_an_interrupt_with_no_call_cut_says_the_request_was_interrupted(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Turn(text="Hello.")])
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        await interrupt_before_the_answer(h)
        messages = h.session.engine.messages
        assert_api_accepts(messages)
        assert [m.role for m in messages] == ["user"]
        assert texts_of(messages[-1]) == ["hi", INTERRUPTED_BY_USER]
        path = transcript_path(h.session_id, h.runtime.home)
        recorded = path.read_text()
        assert INTERRUPTED_BY_USER in recorded and INTERRUPTED_FOR_TOOL_USE not in recorded
        assert wire(repair(load_messages(path))[0]) == wire(messages)

        rest = [e async for e in h.run("hello?")]
        assert isinstance(rest[-1], taskloom.Finished)
        sent = list(model.requests[-1].messages)
        assert_api_accepts(sent)
        assert texts_of(sent[-1]) == ["hi", INTERRUPTED_BY_USER, "hello?"]
        await h.end()


@pytest.mark.parametrize("cut", [True, False], ids=["call-cut", "no-call-cut"])
async def test_a_resumed_conversation_holds_the_note_and_the_next_prompt_once(
    tmp_path: Path, cut: bool
) -> None:
    model = cutting_model() if cut else ScriptedModel([Turn(text="Hello.")])
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        await (interrupt_cutting_a_call(h) if cut else interrupt_before_the_answer(h))
        _ = [e async for e in h.run("next")]
        live = list(model.requests[-1].messages)  # what the model was sent: right
        path = transcript_path(h.session_id, h.runtime.home)
        await h.end()
    resumed, _ = repair(load_messages(path))
    assert_api_accepts(resumed)
    joined = resumed[-2]
    assert wire([joined]) == wire(live[-1:])
    expected = [INTERRUPTED_FOR_TOOL_USE, "next"] if cut else ["hi", INTERRUPTED_BY_USER, "next"]
    assert texts_of(joined) == expected


async def test_a_question_takes_its_keys_only_on_an_empty_input_once_it_has_been_up(
    tmp_path: Path,
) -> None:
    from taskloom.options import Options
    from taskloom.repl.app import Repl

    repl = Repl(Options(cwd=tmp_path))
    asked = asyncio.create_task(
        repl.asks.ask(request(1), DECISION, tool_use_id="t1", agent_id=None)
    )
    await wait_until(lambda: repl.asks.current is not None)
    assert not repl.asks.settled and not repl.asking  # just shown: keys are still input
    await wait_until(lambda: repl.asks.settled, timeout=5)
    assert repl.asking
    repl.buffer.text = "pl"  # the user is typing a prompt: 1, 2 and 3 go into it
    assert not repl.asking
    repl.buffer.text = ""
    assert repl.asking
    repl.ask_reason()
    assert repl.reasoning and not repl.asking
    repl.interrupt()  # Esc or Ctrl+C: the reason being typed is dropped with the turn
    assert not repl.reasoning
    repl.asks.close("the session ended")
    with pytest.raises(PromptError):
        await asked
    assert not repl.reasoning and not repl.asking

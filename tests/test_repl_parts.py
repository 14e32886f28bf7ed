"""The REPL's other pure parts, without a terminal: the queue of permission questions, "always
allow" rules, rules shared by a policy's copies, the recorder's note of an interrupt.

The end-to-end behaviour (keys, drawing in a real terminal) is tested in tmux by test_repl.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import TIME_FACTOR, wait_until
from taskloom.conversation.recorder import INTERRUPTED_BY_USER, INTERRUPTED_FOR_TOOL_USE
from taskloom.errors import StoreError, UsageError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.pairing import repair
from taskloom.permissions import (
    Decision,
    PermissionPolicy,
    PermissionRequest,
    PromptAnswer,
    PromptError,
    parse_rule,
)
from taskloom.repl.asks import LOCAL_SETTINGS, PermissionAsks, save_allow_rule
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.transcript import load_messages, transcript_path

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
        path = transcript_path(h.session_id, h.runtime.home, h.runtime.cwd)
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
        path = transcript_path(h.session_id, h.runtime.home, h.runtime.cwd)
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
        path = transcript_path(h.session_id, h.runtime.home, h.runtime.cwd)
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


class _FailsThenHolds:
    """A source of input whose reads fail twice (a store that is locked), then hold an item.

    A source of our own making: a real store's failure cannot be made to pass on cue.
    """

    def __init__(self) -> None:
        self.reads = 0

    def take(self) -> str | None:
        self.reads += 1
        if self.reads <= 2:
            raise StoreError("database is locked")
        return "notification"

    def listening(self) -> bool:
        return True

    async def wait(self, timeout: float) -> bool:
        raise AssertionError("not reached: take holds an item once it reads")


async def test_a_failed_read_of_the_next_input_is_tried_again_soon_without_a_prompt() -> None:
    # What arrives while the REPL is idle starts a turn by itself: after a failed read the
    # REPL must not wait for the user to type (an hour at most) to look again.
    from taskloom.conversation.next_input import NextInput, Prompts
    from taskloom.repl._turns import next_input

    prompts: Prompts[str] = Prompts()
    source = _FailsThenHolds()
    said: list[str] = []
    inputs: NextInput[str] = NextInput(prompts, source)
    got = await asyncio.wait_for(next_input(inputs, prompts, said.append), 10 * TIME_FACTOR)
    assert got == "notification" and source.reads == 3
    assert said == ["Error: database is locked"]  # said once, not at every try


def _typed_while_printing(stdin: Any, master: int, make: Any) -> tuple[bytes, bytes]:
    """A line typed on ``master`` while lines print above the live area of input ``make()``
    (the terminal as ``run_in_terminal`` leaves it then): what the input reads, what was echoed.
    """
    import os
    import select

    terminal = make()
    with terminal.raw_mode():  # the running application's
        with terminal.cooked_mode():  # run_in_terminal's, around the print
            os.write(master, b"/exit\r")
            # The kernel takes typed bytes in as they arrive, asynchronously: wait for them.
            assert select.select([stdin], [], [], 5 * TIME_FACTOR)[0]
        typed = os.read(stdin.fileno(), 100)  # raw again, as the application reads
    echoed = os.read(master, 100) if select.select([master], [], [], 0.2)[0] else b""
    return typed, echoed


def test_a_line_typed_while_lines_are_printed_keeps_its_enter_and_is_not_echoed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os
    import pty
    import sys

    from prompt_toolkit.input.vt100 import Vt100Input

    from taskloom.repl.screen import terminal_input

    master, slave = pty.openpty()
    try:
        with open(slave, closefd=False) as stdin:
            # prompt_toolkit's own input: the Enter became Ctrl+J, the line stayed unsent.
            typed, echoed = _typed_while_printing(stdin, master, lambda: Vt100Input(stdin))
            assert typed == b"/exit\n" and b"/exit" in echoed
            monkeypatch.setattr(sys, "stdin", stdin)
            typed, echoed = _typed_while_printing(stdin, master, terminal_input)
            assert typed == b"/exit\r"
            assert echoed == b""
    finally:
        os.close(master)
        os.close(slave)


# -- completing a command's name ------------------------------------------------------------------


def test_tab_completes_a_command_name_or_names_the_candidates() -> None:
    from taskloom.repl.commands import complete

    assert complete("/comp") == ("/compact ", ["compact"])
    assert complete("/COMP") == ("/compact ", ["compact"])
    # Several fit: completed as far as they agree, and named.
    assert complete("/c") == ("/c", ["compact", "clear"])
    assert complete("/re") == ("/resume ", ["resume"])
    assert complete("/") == ("/", ["help", "tasks", "stop", "agents", "team", "resume", "model",
                                   "compact", "clear", "memory", "dream", "exit"])  # fmt: skip
    # Not a command's name being typed: left as it is.
    assert complete("/compact now") == ("/compact now", [])
    assert complete("hello") == ("hello", [])
    assert complete("/zz") == ("/zz", [])

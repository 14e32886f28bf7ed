"""Compaction, in process: the summary replaces the conversation, its last turns kept, and the
session goes on — what lives outside the conversation (running tasks, their notifications,
the transcript) intact.

The model is a FunctionModel that answers the summary request (``metadata["purpose"]``) with a
summary, and reports the usage a test needs to fill the window.
"""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from helpers import harness
from taskloom.context.compaction import CONTINUED, CompactionRefused, kept_turns, too_long
from taskloom.engine import Compacted, Finished, UserTurn
from taskloom.errors import ModelError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.todo import TodoList
from taskloom.transcript import load_messages, transcript_path

SUMMARY = "<analysis>went through it</analysis>\n<summary>1. The user asked for X.</summary>"


def is_summary_request(request: ModelRequest) -> bool:
    return request.metadata.get("purpose") == "compact"


def last_text(request: ModelRequest) -> str:
    blocks = request.messages[-1].content
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


class Recording:
    """A model that answers by a function and keeps every request it was sent."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[ModelRequest] = []
        self.model = FunctionModel(self._respond, name="claude-sonnet-4-5")
        self._answer = answer

    async def _respond(self, request: ModelRequest) -> Turn | str:
        self.requests.append(request)
        if is_summary_request(request):
            return SUMMARY
        result = self._answer(request)
        return await result if asyncio.iscoroutine(result) else result

    @property
    def summaries(self) -> list[ModelRequest]:
        return [r for r in self.requests if is_summary_request(r)]

    @property
    def turns(self) -> list[ModelRequest]:
        return [r for r in self.requests if not is_summary_request(r)]


def full(tokens: int) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=10)


async def test_a_manual_compaction_keeps_the_last_turns_and_records_a_boundary(
    tmp_path: Path,
) -> None:
    answers = iter(
        [
            Turn(text="looking", tool_calls=(ToolCall("Bash", {"command": "echo one"}),)),
            Turn(text="again", tool_calls=(ToolCall("Bash", {"command": "echo two"}),)),
            "first done",
            "second done",
        ]
    )
    model = Recording(lambda _: next(answers))
    async with harness(tmp_path, model.model) as h:
        [e async for e in h.run("do X")]
        event = await h.compact("focus on the commands")
        assert isinstance(event, Compacted) and event.trigger == "manual"
        events = [e async for e in h.run("and now?")]
        messages = h.session.engine.messages
        path = transcript_path(h.session_id, cwd=tmp_path, search=True)
    [summary_request] = model.summaries
    # The summary request is the conversation's own (its cached prefix), one instruction added.
    assert summary_request.system == model.turns[0].system
    assert "focus on the commands" in last_text(summary_request)
    assert "<summary>" in last_text(summary_request)
    head = messages[0].content[0]
    assert isinstance(head, TextBlock) and head.text.startswith(CONTINUED)
    assert "1. The user asked for X." in head.text and "<analysis>" not in head.text
    # The last two turns stay as they were: the second call, its result, the answer.
    kept_calls = [b for m in messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert [c.input["command"] for c in kept_calls] == ["echo two"]
    assert isinstance(events[-1], Finished) and events[-1].result == "second done"
    after = model.turns[-1]
    assert after.messages[0].content[0] == head and "and now?" in last_text(after)
    # The transcript: a boundary, and a resume reads from it.
    records = [json.loads(line) for line in path.read_text().splitlines()]
    boundary = [r for r in records if r.get("subtype") == "compact_boundary"]
    assert len(boundary) == 1 and boundary[0]["compactMetadata"]["trigger"] == "manual"
    assert boundary[0]["parentUuid"] is None and boundary[0]["logicalParentUuid"]
    assert [r for r in records if r.get("isCompactSummary")]
    resumed = load_messages(path)
    assert resumed[0].content[0] == head
    assert [m.role for m in resumed] == [m.role for m in messages]


async def test_a_filling_window_compacts_before_the_next_request(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> Turn | str:
        n = len(model.turns)
        if n < 4:  # each answer says the window is fuller (85% of 200,000 is 170,000)
            call = ToolCall("Bash", {"command": f"echo {n}"})
            return Turn(text=f"step {n}", tool_calls=(call,), usage=full(60_000 + 40_000 * n))
        return "all done"

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        events = [e async for e in h.run("work")]
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert len(compactions) == 1 and compactions[0].trigger == "auto"
    assert compactions[0].pre_tokens >= 170_000
    assert len(model.summaries) == 1
    after = model.turns[model.requests.index(model.summaries[0]) :][0]
    head = after.messages[0].content[0]
    assert isinstance(head, TextBlock) and "1. The user asked for X." in head.text
    assert "Continue with the last task" in head.text  # automatic: it goes on working
    assert isinstance(events[-1], Finished) and events[-1].result == "all done"


async def test_prompt_too_long_compacts_once_and_retries(tmp_path: Path) -> None:
    refused: list[int] = []

    def answer(request: ModelRequest) -> Turn | str:
        if len(model.turns) == 2 and not refused:
            refused.append(1)
            raise ModelError(
                "Anthropic: prompt is too long: 210000 tokens > 200000 maximum",
                status=400,
                error_type="invalid_request_error",
            )
        if len(model.turns) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo hi"}),))
        return "finished"

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        events = [e async for e in h.run("go")]
    assert refused and len(model.summaries) == 1
    assert [type(e).__name__ for e in events].count("Compacted") == 1
    assert isinstance(events[-1], Finished) and events[-1].result == "finished"


async def test_a_second_refusal_is_the_run_s_error(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> Turn | str:
        if len(model.turns) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo hi"}),))
        raise ModelError("prompt is too long: 300000 tokens > 200000 maximum", status=400)

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        with pytest.raises(ModelError, match="prompt is too long"):
            [e async for e in h.run("go")]
    assert len(model.summaries) == 1  # one compaction, one retry: never a loop


async def test_a_task_running_across_a_compaction_is_listed_and_notifies_after(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"

    def answer(request: ModelRequest) -> Turn | str:
        n = len(model.turns)
        if n == 1:
            command = f"while [ ! -e {gate} ]; do sleep 0.05; done; echo released"
            call = ToolCall("Bash", {"command": command, "run_in_background": True})
            todo = {"content": "Wait for it", "status": "in_progress", "activeForm": "Waiting"}
            return Turn(tool_calls=(call, ToolCall("TodoWrite", {"todos": [todo]})))
        if n == 2:  # the window is full: compacted before the next request
            return Turn(
                tool_calls=(ToolCall("Bash", {"command": "echo mid"}),), usage=full(190_000)
            )
        return "waiting" if n == 3 else "saw it"

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        events = []
        async for event in h.run("start it"):
            events.append(event)
            if isinstance(event, Compacted):
                head = event.messages[0].content
                assert any("<task-statuses>" in b.text for b in head if isinstance(b, TextBlock))
                # The todo list is found again in what a resume would load.
                found = TodoList.from_messages(list(event.messages))
                assert [t.content for t in found.items] == ["Wait for it"]
                gate.touch()
    compacted = [e for e in events if isinstance(e, Compacted)]
    assert compacted, "the window filled: it compacted before the request after"
    delivered = [e for e in events if isinstance(e, UserTurn) and e.notifications]
    assert delivered and "released" in str(delivered[-1].message.content)
    assert isinstance(events[-1], Finished) and events[-1].result == "saw it"
    seen = model.turns[-1].messages
    assert any("<task-notification>" in str(m.content) for m in seen)


async def test_pre_compact_hooks_block_or_add_instructions(tmp_path: Path) -> None:
    model = Recording(lambda _: "ok")
    script = tmp_path / "guard.sh"
    script.write_text(
        '#!/bin/sh\ninput=$(cat)\ncase "$input" in *BLOCK*) echo "not now" >&2; exit 2;; esac\n'
        'echo "$input" > "$(dirname "$0")/seen.json"\necho "keep the file names"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    start = tmp_path / "start.sh"
    start.write_text('#!/bin/sh\ncat > /dev/null\necho "context after compaction"\n')
    start.chmod(start.stat().st_mode | stat.S_IEXEC)

    def command(path: Path) -> dict[str, Any]:
        return {"type": "command", "command": str(path)}

    hooks = {
        "PreCompact": [{"matcher": "manual", "hooks": [command(script)]}],
        "SessionStart": [{"matcher": "compact", "hooks": [command(start)]}],
    }
    settings = json.dumps({"hooks": hooks})
    async with harness(tmp_path, model.model, settings=settings) as h:
        [e async for e in h.run("hello")]
        with pytest.raises(CompactionRefused, match="PreCompact hook: not now"):
            await h.compact("BLOCK it")
        assert not model.summaries and len(h.session.engine.messages) == 2  # nothing changed
        event = await h.compact("be brief")
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["hook_event_name"] == "PreCompact" and seen["trigger"] == "manual"
    assert seen["custom_instructions"] == "be brief"
    ask = last_text(model.summaries[0])
    assert "be brief" in ask and "keep the file names" in ask
    head = "\n".join(b.text for b in event.messages[0].content if isinstance(b, TextBlock))
    assert "context after compaction" in head


async def test_a_compact_prompt_compacts_without_a_turn(tmp_path: Path) -> None:
    model = Recording(lambda _: "answer")
    async with harness(tmp_path, model.model) as h:
        [e async for e in h.run("hello")]
        events = [e async for e in h.run("/compact keep it short")]
    assert [type(e).__name__ for e in events] == ["Compacted", "Finished"]
    assert len(model.turns) == 1 and "keep it short" in last_text(model.summaries[0])


async def test_nothing_to_compact_is_said(tmp_path: Path) -> None:
    model = Recording(lambda _: "answer")
    async with harness(tmp_path, model.model) as h:
        with pytest.raises(CompactionRefused, match="Not enough messages"):
            await h.compact()


def test_the_kept_turns_start_at_an_answer_and_fit_their_budget() -> None:
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "ls"})
    messages = [
        Message.user("go"),
        Message(role="assistant", content=[call]),
        Message(role="user", content=[ToolResultBlock(tool_use_id="t1", content="x" * 4000)]),
        Message(role="assistant", content=[TextBlock(text="done")]),
    ]
    assert kept_turns(messages, 10_000) == messages[1:]
    assert kept_turns(messages, 100) == messages[3:]  # the big result does not fit
    assert kept_turns(messages, 1) == []
    assert kept_turns([Message.user("go")], 10_000) == []


def test_too_long_knows_the_providers_words() -> None:
    assert too_long(ModelError("prompt is too long: 201000 tokens > 200000 maximum"))
    assert too_long(ModelError("This model's maximum context length is 8192 tokens"))
    assert too_long(ModelError("context_length_exceeded"))
    assert too_long(
        ModelError("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000")
    )
    assert not too_long(ModelError("overloaded"))
    assert not too_long(ValueError("prompt is too long"))


async def test_a_filling_window_clears_old_results_first_without_a_model_call(
    tmp_path: Path,
) -> None:
    big = "x" * 25_000  # inline (Bash saves 30,000 characters or more), 6,250 tokens

    def answer(request: ModelRequest) -> Turn | str:
        n = len(model.turns)
        if n <= 5:  # each turn prints a big output; the window reaches 70 % (past 60 %)
            call = ToolCall("Bash", {"command": f"printf '{big}'; echo {n}"})
            return Turn(tool_calls=(call,), usage=full(20_000 + 24_000 * n))
        return "done"

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        events = [e async for e in h.run("work")]
        saved = sorted((h.runtime.home / "sessions" / h.session_id).rglob("*.txt"))
    assert not model.summaries and not [e for e in events if isinstance(e, Compacted)]
    last = model.turns[-1].messages
    results = [b for m in last for b in m.content if isinstance(b, ToolResultBlock)]
    stubs = [r.text() for r in results if r.text().startswith("[Old tool result cleared")]
    # The oldest results are stubs naming a file with the whole output; the last 3 are whole.
    assert stubs and all(big not in s for s in stubs)
    assert all(big in r.text() for r in results[-3:])
    path = Path(stubs[0].rsplit(" is in ", 1)[1].rstrip("]"))
    assert path in saved and path.read_text().startswith(big)


async def test_a_subagent_compacts_its_own_context(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> Turn | str:
        if request.agent_id is None:
            if not any(isinstance(b, ToolResultBlock) for m in request.messages for b in m.content):
                return Turn(tool_calls=(ToolCall("Agent", {"description": "d", "prompt": "dig"}),))
            return "main done"
        mine = [r for r in model.turns if r.agent_id == request.agent_id]
        if len(mine) <= 2:
            call = ToolCall("Bash", {"command": f"echo {len(mine)}"})
            return Turn(tool_calls=(call,), usage=full(100_000 + 40_000 * len(mine)))
        return "agent done"

    model = Recording(answer)
    async with harness(tmp_path, model.model) as h:
        events = [e async for e in h.run("go")]
    [summary] = model.summaries
    assert summary.agent_id is not None  # the agent's own conversation was summarized
    after = [r for r in model.turns if r.agent_id == summary.agent_id][-1]
    head = after.messages[0].content[0]
    assert isinstance(head, TextBlock) and head.text.startswith(CONTINUED)
    main = [r for r in model.turns if r.agent_id is None]
    assert all(not str(r.messages[0].content).startswith(CONTINUED) for r in main)
    assert isinstance(events[-1], Finished) and events[-1].result == "main done"


async def test_a_scripted_session_compacts_without_spending_its_script(tmp_path: Path) -> None:
    from taskloom.testing import ScriptedModel

    step = ToolCall("Bash", {"command": "echo step"})
    model = ScriptedModel(
        [
            Turn(tool_calls=(step,), usage=full(100_000)),
            Turn(tool_calls=(step,), usage=full(110_000)),  # past 85 % of 128,000
            "scripted end",
        ]
    )
    async with harness(tmp_path, model) as h:
        events = [e async for e in h.run("count the steps")]
    [compacted] = [e for e in events if isinstance(e, Compacted)]
    assert compacted.pre_tokens > 110_000  # the last request's, and what came after it
    assert len(model.summary_requests) == 1 and model.remaining == 0
    head = compacted.messages[0].content[0]
    assert isinstance(head, TextBlock) and "- count the steps" in head.text
    assert isinstance(events[-1], Finished) and events[-1].result == "scripted end"


async def test_a_compaction_and_a_turn_never_overlap(tmp_path: Path) -> None:
    hold = asyncio.Event()
    asked = asyncio.Event()

    async def answer(request: ModelRequest) -> Turn | str:
        if "third" in last_text(request):  # only once the compaction is over
            assert hold.is_set() and request.messages[0].content[0].text.startswith(CONTINUED)
        if is_summary_request(request) or "second" in last_text(request):
            asked.set()
            await hold.wait()
        return SUMMARY if is_summary_request(request) else "ok"

    model = FunctionModel(answer, name="claude-sonnet-4-5")
    async with harness(tmp_path, model) as h:
        [e async for e in h.run("first")]
        # A turn under way: no compaction now (it would lose what the turn adds).
        turn = asyncio.ensure_future(_drain(h.run("second")))
        await asyncio.wait_for(asked.wait(), 10)
        with pytest.raises(CompactionRefused, match="A turn is running"):
            await h.compact()
        hold.set()
        await asyncio.wait_for(turn, 10)
        # A compaction under way: the next turn starts from what it leaves.
        hold.clear()
        asked.clear()
        compaction = asyncio.ensure_future(h.compact())
        await asyncio.wait_for(asked.wait(), 10)
        third = asyncio.ensure_future(_drain(h.run("third")))
        hold.set()
        event = await asyncio.wait_for(compaction, 10)
        await asyncio.wait_for(third, 10)
        messages = h.session.engine.messages
    assert messages[0] == event.messages[0]  # the third turn extended the compacted conversation
    assert "third" in str(messages[-2].content)


async def _drain(events: Any) -> list[Any]:
    return [e async for e in events]


async def test_a_refused_automatic_compaction_is_not_tried_on_every_request(
    tmp_path: Path,
) -> None:
    script = tmp_path / "refuse.sh"
    log = tmp_path / "hook.log"
    script.write_text(
        f'#!/bin/sh\ncat > /dev/null\necho ran >> {log}\necho "not now" >&2\nexit 2\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    hooks = {"PreCompact": [{"hooks": [{"type": "command", "command": str(script)}]}]}
    runs = tmp_path / "runs"

    def answer(request: ModelRequest) -> Turn | str:
        n = len(model.turns)
        if n <= 4:  # 180,000 and more: past 85 %, growing by 1,000 a turn
            call = ToolCall("Bash", {"command": f"echo x >> {runs}"})
            return Turn(tool_calls=(call,), usage=full(180_000 + 1_000 * n))
        return "done"

    model = Recording(answer)
    settings = json.dumps({"hooks": hooks})
    async with harness(tmp_path, model.model, settings=settings) as h:
        [e async for e in h.run("go")]
    # Refused once; the context grew less than 5 % of the window after: not asked again.
    assert log.read_text().count("ran") == 1 and not model.summaries
    assert len(model.turns) == 5 and runs.read_text().count("x") == 4  # the session went on

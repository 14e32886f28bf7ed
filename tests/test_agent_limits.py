"""Spawning limits, the fan-out guard, agents stopped at maxTurns and stuck agents (issue 29).

The acceptance runs go through ``taskloom -p --output-format stream-json`` against the fake
model server; the settings' edges and the patterns are checked in process.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, harness, main_context
from taskloom.agents.agent_tool import render
from taskloom.agents.limits import asked_for, limit
from taskloom.agents.service import SpawnRequest
from taskloom.agents.stuck import StuckPatterns
from taskloom.errors import ToolError
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.models import scripted
from taskloom.models.base import ModelRequest
from taskloom.tasks.types import AgentTaskState, TaskStatus
from team_scenario import events_of

# -- through taskloom -p ----------------------------------------------------------------------


def _first(body: dict[str, Any]) -> str:
    return " ".join(texts(body["messages"][0]["content"]))


def _is_job(first: str) -> bool:
    return re.search(r"\bjob \d+\.", first) is not None


def _turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def _seen(body: dict[str, Any]) -> str:
    """Everything the requester was told after its prompt."""
    return "\n".join(
        t for m in body["messages"][1:] if m["role"] == "user" for t in texts(m["content"])
    )


def _results(body: dict[str, Any]) -> list[tuple[bool, str]]:
    """The tool results of the request's last message: (is_error, text)."""
    return [
        (bool(b.get("is_error")), "".join(texts(b.get("content") or [])))
        for b in body["messages"][-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def _run(
    tmp_path: Path, responder: Any, prompt: str, settings: dict[str, Any] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    if settings is not None:
        (tmp_path / ".claude").mkdir(exist_ok=True)
        (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings))
    with FakeAnthropicServer(responder=responder) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", prompt, "--output-format", "stream-json",
             "--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"],
            capture_output=True, text=True, timeout=120 * TIME_FACTOR, cwd=tmp_path, env=env,
        )  # fmt: skip
        bodies = [r.body for r in server.requests]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, bodies


class Crowd:
    """The lead starts 21 background agents at once; each works until the lead has heard."""

    def __init__(self, cwd: Path, count: int) -> None:
        self.release = cwd / "release"
        self.count = count
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first, turns = _first(body), _turns(body)
            if _is_job(first):
                if turns == 0:  # alive until the lead has every spawn's answer
                    wait = f"while [ ! -e {self.release} ]; do sleep 0.1; done"
                    return Turn(tool_calls=(ToolCall("Bash", {"command": wait}),))
                return Turn(text="done")
            if turns == 0:
                return Turn(tool_calls=tuple(
                    ToolCall("Agent", {"description": f"agent {n}", "prompt": f"job {n}.",
                                       "run_in_background": True})
                    for n in range(1, self.count + 1)
                ))  # fmt: skip
            self.release.touch()
            ended = _seen(body).count("<task-notification>")
            return Turn(text="All done." if ended >= self.count - 1 else "Waiting.")


@pytest.mark.e2e
def test_the_21st_concurrent_agent_is_refused(tmp_path: Path) -> None:
    proc, bodies = _run(tmp_path, Crowd(tmp_path, 21), "Start 21 agents, one per part.")
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    lead = [b for b in bodies if not _is_job(_first(b))]
    answers = _results(lead[1])
    assert len(answers) == 21
    refused = [text for is_error, text in answers if is_error]
    assert len(refused) == 1, refused
    assert "20 agents are running in this session" in refused[0]
    assert "maxConcurrentAgents" in refused[0] and "default 20" in refused[0]
    assert sum("Async agent launched" in text for _, text in answers) == 20
    assert len({_first(b) for b in bodies if _is_job(_first(b))}) == 20


class Chain:
    """Each agent starts the next level in the foreground, then says what it got."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        found = re.search(r"level (\d) job\.", _first(body))
        level = int(found.group(1)) if found else 0
        if _turns(body) == 0:
            spawn = {"description": f"level {level + 1}", "prompt": f"level {level + 1} job."}
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        return Turn(text=f"level {level} done")


@pytest.mark.e2e
def test_a_spawn_at_depth_4_is_refused(tmp_path: Path) -> None:
    proc, bodies = _run(tmp_path, Chain(), "Nest.", {"allowNestedAgents": True})
    assert events_of(proc.stdout)[-1]["result"] == "level 0 done"
    firsts = " ".join(_first(b) for b in bodies)
    assert all(f"level {n} job." in firsts for n in (1, 2, 3))
    assert "level 4 job." not in firsts
    (last,) = [b for b in bodies if "level 3 job." in _first(b) and _turns(b) == 1]
    ((is_error, text),) = _results(last)
    assert is_error and "agents may nest at most 3 deep" in text
    assert "this agent is at depth 3" in text and "maxAgentDepth" in text


def _calls_and_results(body: dict[str, Any], answer: int) -> list[tuple[bool, str]]:
    """The results of the calls of the lead's ``answer``-th answer (0: the first), in order."""
    answers = [m for m in body["messages"] if m["role"] == "assistant"]
    ids = [b["id"] for b in answers[answer]["content"] if b.get("type") == "tool_use"]
    results = {
        b["tool_use_id"]: (bool(b.get("is_error")), "".join(texts(b.get("content") or [])))
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    return [results[i] for i in ids]


class FanOut:
    """The lead asks for agents in one answer or more (``sizes``); each answers at once."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = sizes or (12,)

    def __call__(self, body: dict[str, Any]) -> Turn:
        first, turns = _first(body), _turns(body)
        if "quick job" in first:
            return Turn(text="ok")
        if turns < len(self.sizes):
            return Turn(tool_calls=tuple(
                ToolCall("Agent", {"description": f"part {turns}.{n}",
                                   "prompt": f"quick job {turns}.{n}.",
                                   "run_in_background": True})
                for n in range(1, self.sizes[turns] + 1)
            ))  # fmt: skip
        seen = _seen(body)
        heard, started = seen.count("<task-notification>"), seen.count("Async agent launched")
        return Turn(text="All done." if heard >= started else "Waiting.")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("prompt", "refused"),
    [("Review these 3 files.", 2), ("Start twelve agents, one per file.", 0)],
)
def test_one_answer_asking_for_more_agents_than_the_user_did_is_cut_at_10(
    tmp_path: Path, prompt: str, refused: int
) -> None:
    proc, bodies = _run(tmp_path, FanOut(), prompt)
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    lead = [b for b in bodies if "quick job" not in _first(b)]
    answers = _results(lead[1])
    errors = [text for is_error, text in answers if is_error]
    assert len(errors) == refused
    # The refused are the calls beyond the tenth, in the answer's order.
    assert [is_error for is_error, _ in answers] == [False] * 10 + [True] * refused + [False] * (
        2 - refused
    )
    for text in errors:
        assert "this turn asks for 12 agents, more than the 10" in text
        assert "the request asked for 3" in text and "maxAgentsPerTurn" in text
    assert len([b for b in bodies if "quick job" in _first(b)]) == 12 - refused


@pytest.mark.e2e
def test_the_fan_out_guard_counts_the_answers_of_one_user_turn(tmp_path: Path) -> None:
    """Two answers of 6 spawns after a prompt asking for 2: the 11th and 12th are refused."""
    proc, bodies = _run(tmp_path, FanOut(6, 6), "Review these 2 files.")
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    last = [b for b in bodies if "quick job" not in _first(b)][-1]
    assert [e for e, _ in _calls_and_results(last, 0)] == [False] * 6
    second = _calls_and_results(last, 1)
    assert [e for e, _ in second] == [False] * 4 + [True] * 2
    for _, text in second[4:]:
        assert "this turn asks for 12 agents, more than the 10 one turn may start" in text
        assert "the request asked for 2" in text and "maxAgentsPerTurn" in text
    assert len([b for b in bodies if "quick job" in _first(b)]) == 10


@pytest.mark.e2e
def test_a_number_that_counts_no_agents_does_not_lift_the_fan_out_guard(tmp_path: Path) -> None:
    """ "fix the 404 on line 2": neither number is a count of agents; 11 spawns, one refused."""
    proc, bodies = _run(tmp_path, FanOut(11), "fix the 404 on line 2")
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    last = [b for b in bodies if "quick job" not in _first(b)][-1]
    answers = _calls_and_results(last, 0)
    assert [e for e, _ in answers] == [False] * 10 + [True]
    assert "this turn asks for 11 agents" in answers[10][1]
    assert "the request named no count of agents" in answers[10][1]
    assert len([b for b in bodies if "quick job" in _first(b)]) == 10


class Resumer:
    """maxConcurrentAgents 2: an agent ends, two hold, the lead messages the ended one.

    The message is refused; once the two have ended the lead sends it again, and it resumes.
    """

    def __init__(self, cwd: Path) -> None:
        self.release = cwd / "release"
        self.agent_id = ""
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first, turns = _first(body), _turns(body)
            if "hold job" in first:
                if turns == 0:
                    wait = f"while [ ! -e {self.release} ]; do sleep 0.1; done"
                    return Turn(tool_calls=(ToolCall("Bash", {"command": wait}),))
                return Turn(text="held")
            if "first job." in first:
                return Turn(text="again" if turns else "first done")
            return self._lead(body, turns)

    def _lead(self, body: dict[str, Any], turns: int) -> Turn:
        if turns == 0:
            return Turn(tool_calls=(ToolCall("Agent", {"description": "first",
                                                       "prompt": "first job."}),))  # fmt: skip
        if turns == 1:
            self.agent_id = re.findall(r"agentId: (\S+)", _seen(body))[0]
            return Turn(tool_calls=tuple(
                ToolCall("Agent", {"description": f"hold {n}", "prompt": f"hold job {n}.",
                                   "run_in_background": True})
                for n in (1, 2)
            ))  # fmt: skip
        sent = json.dumps(body["messages"]).count('"name": "SendMessage"')
        if turns == 2:
            return Turn(tool_calls=(ToolCall("SendMessage", self._message()),))
        self.release.touch()
        heard = _seen(body).count("<task-notification>")
        if sent == 1 and heard >= 2:  # both holders have ended: there is room now
            return Turn(tool_calls=(ToolCall("SendMessage", self._message()),))
        return Turn(text="All done." if sent == 2 and heard >= 3 else "Waiting.")

    def _message(self) -> dict[str, str]:
        return {"to": self.agent_id, "message": "go on", "summary": "go on"}


@pytest.mark.e2e
def test_resuming_an_agent_past_max_concurrent_agents_is_refused(tmp_path: Path) -> None:
    script = Resumer(tmp_path)
    proc, bodies = _run(tmp_path, script, "Go.", {"maxConcurrentAgents": 2})
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    last = [b for b in bodies if "job" not in _first(b)][-1]
    ((is_error, text),) = _calls_and_results(last, 2)
    assert is_error, text
    assert f"Agent {script.agent_id} was not resumed: 2 agents are running" in text
    assert "(setting maxConcurrentAgents, default 20)" in text
    assert "Your message was not delivered" in text
    # Once there was room, the message sent again resumed it, and it got that one message.
    answers = [m for m in last["messages"] if m["role"] == "assistant"]
    resent = next(i for i, m in enumerate(answers) if "SendMessage" in json.dumps(m) and i > 2)
    ((is_error, text),) = _calls_and_results(last, resent)
    assert not is_error and "it was resumed in the background" in text
    (resumed,) = [b for b in bodies if "first job." in _first(b) and _turns(b) == 1]
    assert _seen(resumed).count("go on") == 1


LIMITED = "---\nname: limited\ndescription: A short-lived agent\nmaxTurns: 2\n---\n\nBe brief.\n"


class Limited:
    """A maxTurns agent runs out of turns; the lead continues it with SendMessage."""

    def __init__(self) -> None:
        self.agent_id = ""

    def __call__(self, body: dict[str, Any]) -> Turn:
        first, turns = _first(body), _turns(body)
        if "limited job." in first:
            if turns < 2:
                note = ("Reading a.", "Found b so far.")[turns]
                call = ToolCall("Bash", {"command": f"echo {turns}"})
                return Turn(text=note, tool_calls=(call,))
            return Turn(text="finished the job")
        if turns == 0:
            spawn = {"description": "limited", "prompt": "limited job.", "subagent_type": "limited"}
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        if turns == 1:
            self.agent_id = re.findall(r"agentId: (\S+)", _seen(body))[0]
            go_on = {"to": self.agent_id, "message": "go on"}
            return Turn(tool_calls=(ToolCall("SendMessage", go_on),))
        return Turn(text="All done." if "finished the job" in _seen(body) else "Waiting.")


@pytest.mark.e2e
def test_an_agent_stopped_at_max_turns_answers_partial_and_goes_on_when_told(
    tmp_path: Path,
) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "limited.md").write_text(LIMITED)
    script = Limited()
    proc, bodies = _run(tmp_path, script, "Use the limited agent.")
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    lead = [b for b in bodies if "limited job." not in _first(b)]
    ((is_error, text),) = _results(lead[1])
    assert not is_error
    assert text.startswith("Found b so far.\n\n[partial: this agent stopped at its turn limit")
    assert "(maxTurns 2)" in text and "not its final answer" in text
    assert f"SendMessage with to: '{script.agent_id}'" in text
    # Continued: its conversation kept, it finishes; the lead hears of it.
    agent = [b for b in bodies if "limited job." in _first(b)]
    assert len(agent) == 3 and "go on" in _seen(agent[-1])
    assert "Found b so far." in json.dumps(agent[-1]["messages"])


class Looper:
    """A background agent runs the same command five times before it gives up."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        first, turns = _first(body), _turns(body)
        if "loop job." in first:
            if turns < 5:
                return Turn(tool_calls=(ToolCall("Bash", {"command": "ls"}),))
            return Turn(text="gave up")
        if turns == 0:
            spawn = {"description": "looper", "prompt": "loop job.", "run_in_background": True}
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        seen = _seen(body)
        done = "looks stuck" in seen and "gave up" in seen
        return Turn(text="All done." if done else "Waiting.")


@pytest.mark.e2e
def test_an_agent_repeating_one_call_is_reported_to_its_owner(tmp_path: Path) -> None:
    proc, bodies = _run(tmp_path, Looper(), "Loop.")
    assert events_of(proc.stdout)[-1]["result"] == "All done."
    seen = _seen([b for b in bodies if "loop job." not in _first(b)][-1])
    notes = re.findall(r"<task-notification>.*?</task-notification>", seen, re.S)
    (stuck,) = [n for n in notes if "looks stuck" in n]
    assert 'Agent "looper" looks stuck: it repeats the same call' in stuck
    assert "the same call 5 times in a row: Bash" in stuck and "ls" in stuck
    assert "SendMessage to '" in stuck and "TaskStop" in stuck
    # Told, not stopped: it went on to its own end.
    assert any("gave up" in n and "<status>completed</status>" in n for n in notes)


# -- in process: the settings' edges, partial data, the stop, the patterns ---------------------


async def test_a_spawn_past_a_lowered_max_concurrent_agents_is_refused(tmp_path: Path) -> None:
    held = asyncio.Event()

    async def respond(request: ModelRequest) -> scripted.Turn | str:
        if "hold" in str(request.messages[0].content):
            await held.wait()
        return "ok"

    settings = json.dumps({"maxConcurrentAgents": 2})
    async with harness(tmp_path, scripted.FunctionModel(respond), settings=settings) as h:
        ctx = main_context(h)
        ids = [
            (await h.agents.spawn(SpawnRequest("a", "hold", run_in_background=True), ctx)).agent_id
            for _ in range(2)
        ]
        with pytest.raises(ToolError, match=r"2 agents are running .*maxConcurrentAgents"):
            await h.agents.spawn(SpawnRequest("c", "hold", run_in_background=True), ctx)
        held.set()
        for agent_id in ids:
            state = await h.runtime.wait(agent_id, timeout=10 * TIME_FACTOR)
            assert state.status == TaskStatus.COMPLETED
        # One has ended: there is room again.
        third = await h.agents.spawn(SpawnRequest("d", "go"), ctx)
    assert third.status == "completed"


def test_a_limit_that_is_not_a_whole_number_is_named() -> None:
    assert limit({}, "maxAgentDepth") == 3 and limit({"maxAgentDepth": 5}, "maxAgentDepth") == 5
    for bad in (0, "4", True, 2.5):
        with pytest.raises(ToolError, match="the setting maxAgentsPerTurn must be a whole"):
            limit({"maxAgentsPerTurn": bad}, "maxAgentsPerTurn")


async def test_a_max_turns_agent_s_data_says_partial(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "limited.md").write_text(LIMITED)

    def respond(request: ModelRequest) -> scripted.Turn | str:
        if "limited job" not in str(request.messages[0].content):
            return "main"
        call = scripted.ToolCall("Bash", {"command": "echo hi"})
        return scripted.Turn(text="still at it", tool_calls=(call,))

    async with harness(tmp_path, scripted.FunctionModel(respond)) as h:
        ctx = main_context(h)
        result = await h.agents.spawn(
            SpawnRequest("lim", "limited job", subagent_type="limited", name="lim"), ctx
        )
        background = await h.agents.spawn(
            SpawnRequest("lim2", "limited job", subagent_type="limited", run_in_background=True),
            ctx,
        )
        state = await h.runtime.wait(background.agent_id, timeout=10 * TIME_FACTOR)
    shown = render(result)
    assert shown.data is not None and shown.data["partial"] is True
    assert result.content.startswith("still at it\n\n[partial:")
    assert "SendMessage with to: 'lim'" in result.content
    assert isinstance(state, AgentTaskState) and state.partial
    assert state.result is not None and "(maxTurns 2)" in state.result


async def test_on_stuck_stop_stops_a_sleep_polling_agent(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> scripted.Turn | str:
        if "poll" not in str(request.messages[0].content):
            return "main"
        turns = sum(1 for m in request.messages if m.role == "assistant")
        command = f"sleep 0.0{turns + 1} && echo not yet"
        return scripted.Turn(tool_calls=(scripted.ToolCall("Bash", {"command": command}),))

    settings = json.dumps({"watchdog": {"agents": {"onStuck": "stop"}}})
    async with harness(tmp_path, scripted.FunctionModel(respond), settings=settings) as h:
        launched = await h.agents.spawn(
            SpawnRequest("poller", "poll", run_in_background=True), main_context(h)
        )
        state = await h.runtime.wait(launched.agent_id, timeout=20 * TIME_FACTOR)
    assert state.status == TaskStatus.KILLED
    assert isinstance(state, AgentTaskState) and state.stopped_reason is not None
    assert state.stopped_reason.startswith("it looked stuck, repeating a sleep polling loop")
    assert 3 <= state.tool_uses <= 4  # the third is the loop (a fourth may have started)


def test_the_stuck_patterns() -> None:
    known = {"b1"}
    patterns = StuckPatterns(lambda task_id: task_id in known)
    # Four of the same, then another: no loop; five in a row: one.
    for _ in range(4):
        assert patterns.saw("Read", {"file_path": "/a"}, False) is None
    assert patterns.saw("Read", {"file_path": "/b"}, False) is None
    found = [patterns.saw("Read", {"file_path": "/b"}, False) for _ in range(4)]
    assert found[:3] == [None] * 3 and found[3] is not None and found[3].pattern == "repeat"
    # Forgotten once told: the next report needs as many calls again.
    assert patterns.saw("Read", {"file_path": "/b"}, False) is None
    # Waiting on tasks that do not exist (errors for unknown ids); a known one does not count.
    assert patterns.saw("TaskOutput", {"task_id": "b1"}, True) is None
    assert patterns.saw("TaskOutput", {"task_id": "x9"}, True) is None
    assert patterns.saw("TaskStop", {"task_id": "x8"}, True) is None
    stuck = patterns.saw("TaskOutput", {"task_id": "x7"}, True)
    assert stuck is not None and stuck.pattern == "unknown task" and "x7" in stuck.what
    # A sleep in the background, or after another command, is not a polling loop.
    for command in ("echo sleep 5", "npm test; sleep 1", "sleep 5", "sleep 5"):
        background = command == "sleep 5"
        call = {"command": command, "run_in_background": background}
        assert patterns.saw("Bash", call, False) is None
    # Three sleeps among the last six calls are.
    assert patterns.saw("Bash", {"command": "sleep 1; cat out"}, False) is None
    assert patterns.saw("Bash", {"command": "sleep 2"}, False) is None
    polling = patterns.saw("Bash", {"command": "sleep 3 && cat out"}, False)
    assert polling is not None and polling.pattern == "sleep" and "sleep 3" in polling.what


def test_what_the_user_asked_for_is_the_largest_number_of_the_latest_prompt() -> None:
    def user(*blocks: Any) -> Message:
        return Message(role="user", content=list(blocks))

    note = "<task-notification><task-id>b42</task-id> 400 lines</task-notification>"
    messages = [
        user(TextBlock(text="Start 30 agents.")),
        Message(role="assistant", content=[TextBlock(text="ok")]),
        user(TextBlock(text=f"{note}\nNow review twenty-four files in 2 passes.")),
        user(ToolResultBlock(tool_use_id="t1", content="99 problems")),
    ]
    assert asked_for(messages) == 24
    assert asked_for(messages[:2]) == 30
    assert asked_for([user(TextBlock(text="Spawn a few agents."))]) == 0
    assert asked_for([user(TextBlock(text=note))]) == 0
    # Only a number counting agents or work items asks for them (two words may stand between).
    assert asked_for([user(TextBlock(text="fix the 404 on line 2"))]) == 0
    assert asked_for([user(TextBlock(text="Start 12 parallel agents, one per file."))]) == 12
    assert asked_for([user(TextBlock(text="Review these 3 test files."))]) == 3
    # Any plural noun of work counts; units of no work to share out do not.
    assert asked_for([user(TextBlock(text="Check these 20 URLs."))]) == 20
    assert asked_for([user(TextBlock(text="Analyze all 50 of the files."))]) == 50
    assert asked_for([user(TextBlock(text="Restart the port 8080 service."))]) == 0
    assert asked_for([user(TextBlock(text="Poll it 30 times, 15 seconds apart."))]) == 0

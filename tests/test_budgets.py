"""Budgets per agent subtree: the wrap-up note at 80 %, the stop of the whole subtree at 100 %."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import clean_env, harness, main_context, wait_until
from taskloom.agents.budget import AgentMeter, Budget, Budgets
from taskloom.agents.service import SpawnRequest
from taskloom.messages import TextBlock, Usage
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.tasks.notifications import render_terminal
from taskloom.tasks.types import AgentTaskState, TaskState, TaskStatus
from taskloom.tasks.usage import UsageLedger

NOTE = "Wrap up now"


def _texts(request: ModelRequest) -> str:
    return "\n".join(
        b.text for m in request.messages if m.role == "user" for b in m.content
        if isinstance(b, TextBlock)
    )  # fmt: skip


class Subtree:
    """A boss that starts two children; all three run one short command a turn, for ever.

    Each response costs 100 tokens until the budget's note is out; then nothing, until all
    three have found the note in a request; then 1000, which ends the budget.
    """

    def __init__(self) -> None:
        self.noted: set[str] = set()
        #: How many notes each member's latest request held (its history included).
        self.notes_in_last: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: ModelRequest) -> Turn:
        first = request.messages[0].content
        who = next(b.text for b in first if isinstance(b, TextBlock)).split()[0]
        with self._lock:
            seen = _texts(request)
            if NOTE in seen:
                self.noted.add(who)
            self.notes_in_last[who] = seen.count(NOTE)
            cost = 100 if not self.noted else 0 if len(self.noted) < 3 else 1000
        usage = {"input_tokens": cost - cost // 10, "output_tokens": cost // 10}
        if who == "boss" and len(request.messages) == 1:
            spawn = tuple(
                ToolCall("Agent", {"description": f"child {n}", "prompt": f"child-{n} work",
                                   "run_in_background": True})
                for n in (1, 2)
            )  # fmt: skip
            return Turn(tool_calls=spawn, usage=usage)  # type: ignore[arg-type]
        work = ToolCall("Bash", {"command": "sleep 0.05"})
        return Turn(tool_calls=(work,), usage=usage)  # type: ignore[arg-type]


async def test_a_subtree_s_token_budget_warns_every_member_then_stops_them_all(
    tmp_path: Path,
) -> None:
    script = Subtree()
    settings = '{"allowNestedAgents": true}'
    async with harness(tmp_path, FunctionModel(script), settings=settings) as h:
        rt, ctx = h.runtime, main_context(h)
        launched = await h.agents.spawn(
            SpawnRequest(
                description="boss",
                prompt="boss work",
                run_in_background=True,
                max_tokens_budget=2000,
            ),
            ctx,
        )
        boss = launched.agent_id

        def ended() -> bool:
            agents = [s for s in rt.list() if isinstance(s, AgentTaskState)]
            return len(agents) == 3 and all(s.terminal for s in agents)

        await wait_until(ended, timeout=30, what=f"the subtree's end ({script.noted})")
        agents = {s.id: s for s in rt.list() if isinstance(s, AgentTaskState)}
        # Every member found the note in a request, and was told it once.
        assert script.noted == {"boss", "child-1", "child-2"}
        assert script.notes_in_last == {"boss": 1, "child-1": 1, "child-2": 1}
        assert {s.status for s in agents.values()} == {TaskStatus.KILLED}
        top = agents[boss]
        assert top.stopped_reason is not None
        assert f"the token budget of {boss} ran out" in top.stopped_reason
        assert "of 2,000 tokens" in top.stopped_reason
        summary = render_terminal(top)
        assert "was stopped: the token budget" in summary and "tokens" in summary, summary
        used, calls = h.agents.spawner.budgets.used(boss)
        assert used >= 2000
        # Its live usage covers its children too: in its state, and so in its task events.
        assert top.subtree_tokens == used and top.subtree_tool_uses == calls > top.tool_uses
        from taskloom.tasks.kinds import kind_of

        progress = kind_of(top).event_fields(top)["progress"]
        assert progress["subtree_tokens"] == used  # type: ignore[index]


def test_a_budget_is_the_tightest_of_the_call_s_and_the_definition_s() -> None:
    assert Budget(100, None, 5.0).tightest(Budget(50, 3, None)) == Budget(50, 3, 5.0)
    assert not Budget() and Budget(tool_calls=1)


async def test_a_child_s_spending_counts_for_its_parent_and_a_tool_call_budget_stops_it() -> None:
    stopped: list[tuple[str, str]] = []

    async def stop(agent_id: str, why: str) -> None:
        stopped.append((agent_id, why))

    ledger = UsageLedger()
    budgets = Budgets("s", stop, ledger)
    parent = budgets.open("a1", "s", Budget(tool_calls=5))
    child = budgets.open("a2", "a1", Budget())

    def call(agent_id: str, meter: AgentMeter) -> str | None:
        """As an engine makes a tool call: admitted, then charged to the ledger if it runs."""
        refused = meter.admit_tool_call()
        if refused is None:
            ledger.charge_tool_call(agent_id)
        return refused

    for _ in range(3):
        assert call("a2", child) is None
    assert budgets.used("a1") == (0, 3) and budgets.used("a2") == (0, 3)
    assert call("a2", child) is None  # 4 of 5: 80 %
    assert NOTE in (parent.reminder() or "") and NOTE in (child.reminder() or "")
    assert parent.reminder() is None  # once
    assert call("a1", parent) is None  # the fifth, the last allowed, runs
    assert stopped == []
    refused = call("a2", child)  # the sixth does not, and the subtree stops
    assert refused == "the tool-call budget of a1 ran out (5 of 5 tool calls)"
    assert call("a2", child) == refused  # nor does anything after it
    await budgets.aclose()
    assert stopped == [("a1", refused)]
    assert budgets.used("a1") == (0, 5)
    assert budgets.spent("a1") is not None and budgets.spent("a2") is None


@pytest.mark.parametrize("field", ["max_tokens_budget", "max_tool_calls", "max_seconds"])
async def test_the_budget_fields_are_offered_only_when_budgets_are_on(
    tmp_path: Path, field: str
) -> None:
    from taskloom.agents.agent_tool import AgentTool

    def offered(settings: dict[str, Any]) -> bool:
        tool = next(t for t in h.session.engine.config.tools if isinstance(t, AgentTool))
        tool.service.settings.clear()
        tool.service.settings.update(settings)
        return field in tool.input_schema()["properties"]

    async with harness(tmp_path, FunctionModel(lambda r: "ok")) as h:
        assert not offered({})
        assert offered({"agentBudgets": True})


async def test_a_wall_time_budget_stops_an_agent_that_runs_on(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn:
        return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 0.2"}),))

    _, state = await _alone(tmp_path, respond, max_seconds=1.0)
    assert state.status == TaskStatus.KILLED
    assert isinstance(state, AgentTaskState) and state.stopped_reason is not None
    assert "wall-time budget" in state.stopped_reason


async def _alone(tmp_path: Path, respond: Any, **budget: Any) -> tuple[str, TaskState]:
    """One background agent answered by ``respond``, under ``budget``: its id and its end."""
    async with harness(tmp_path, FunctionModel(respond)) as h:
        launched = await h.agents.spawn(
            SpawnRequest(description="alone", prompt="alone", run_in_background=True, **budget),
            main_context(h),
        )
        return launched.agent_id, await h.runtime.wait(launched.agent_id, timeout=20)


class Session:
    """The lead starts two background agents that work for ever (100 tokens a response)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.noted: set[str] = set()
        self.after_stop = 0
        self.requests = 0

    def __call__(self, body: dict[str, Any]) -> Any:
        from fake_servers import ToolCall as Call
        from fake_servers import Turn as Answer

        first = " ".join(_wire_texts(body["messages"][0]))
        who = "lead" if "Fan out." in first else first.split()[0]
        seen = " ".join(t for m in body["messages"] for t in _wire_texts(m))
        with self.lock:
            self.requests += 1
            if NOTE in seen:
                self.noted.add(who)
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if who == "lead" and turns == 0:
            spawn = tuple(
                Call("Agent", {"description": f"w{n}", "prompt": f"worker-{n} go",
                               "run_in_background": True})
                for n in (1, 2)
            )  # fmt: skip
            return Answer(tool_calls=spawn, input_tokens=90, output_tokens=10)
        if who == "lead":
            return Answer(text="Waiting for them.", input_tokens=90, output_tokens=10)
        return Answer(
            tool_calls=(Call("Bash", {"command": "sleep 0.05"}),), input_tokens=90, output_tokens=10
        )


def _wire_texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    out = []
    for block in content:
        if block.get("type") == "text":
            out.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            out += [inner] if isinstance(inner, str) else [b.get("text", "") for b in inner or []]
    return out


def _fan_out(
    tmp_path: Path, script: Session, *flags: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``taskloom -p "Fan out."`` against ``script`` with ``flags``; the run and its env."""
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Fan out.", "--output-format",
             "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
             "--dangerously-skip-permissions", *flags],
            capture_output=True, text=True, timeout=90, cwd=tmp_path, env=env,
        )  # fmt: skip
    return proc, env


@pytest.mark.e2e
def test_a_session_token_budget_warns_everyone_then_stops_the_agents_and_the_run(
    tmp_path: Path,
) -> None:
    script = Session()
    proc, env = _fan_out(tmp_path, script, "--max-budget-tokens", "3000")
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["subtype"] == "error_max_budget_token" and result["is_error"], result
    (error,) = result["errors"]
    assert "the token budget of the session ran out" in error and "of 3,000 tokens" in error
    # The workers were told to wrap up before the end (the lead, waiting, may not have asked).
    assert {"worker-1", "worker-2"} <= script.noted
    usage = result["agentUsage"]
    spent = sum(e["inputTokens"] + e["outputTokens"] for e in usage.values())
    assert 3000 <= spent <= 3000 + 4 * 100  # what was in flight when it ran out, no more
    workers = [e for k, e in usage.items() if k != "main"]
    assert len(workers) == 2 and {e["status"] for e in workers} == {"killed"}
    # Their ends were streamed before the result.
    ends = [
        e["task_id"] for e in map(json.loads, proc.stdout.splitlines())
        if e.get("subtype") == "task_updated" and e["patch"]["status"] == "killed"
    ]  # fmt: skip
    assert {k for k in usage if k != "main"} <= set(ends), ends  # (their commands' too)
    bad = subprocess.run(
        [sys.executable, "-m", "taskloom", "-p", "x", "--max-budget-tokens", "0"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and "--max-budget-tokens" in bad.stderr


async def test_an_answer_that_crosses_the_budget_is_kept_not_stopped(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn:
        if len(request.messages) == 1:
            work = ToolCall("Bash", {"command": "echo once"})
            return Turn(tool_calls=(work,), usage={"input_tokens": 400, "output_tokens": 100})  # type: ignore[arg-type]
        return Turn(text="the report", usage={"input_tokens": 500, "output_tokens": 100})  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond)) as h:
        launched = await h.agents.spawn(
            SpawnRequest(description="last", prompt="last", max_tokens_budget=1000),
            main_context(h),
        )
        state = h.runtime.get(launched.agent_id)
    assert isinstance(state, AgentTaskState) and state.status == TaskStatus.COMPLETED
    assert state.result == "the report" and state.stopped_reason is None
    assert launched.content == "the report"


async def test_a_resumed_agent_counts_again_and_one_whose_budget_ran_out_cannot_go_on(
    tmp_path: Path,
) -> None:
    from taskloom.errors import ToolError

    def respond(request: ModelRequest) -> Turn:
        usage = {"input_tokens": 450, "output_tokens": 50}
        return Turn(text="ok", usage=usage)  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond)) as h:
        ctx = main_context(h)
        first = await h.agents.spawn(
            SpawnRequest(description="a", prompt="a", max_tokens_budget=5000, name="alpha"), ctx
        )
        budgets = h.agents.spawner.budgets
        assert budgets.used(first.agent_id) == (500, 0)
        await h.agents.send("alpha", "again", ctx)
        await h.runtime.wait(first.agent_id, timeout=20)
        assert budgets.used(first.agent_id) == (1000, 0)  # counted on top
        spent = await h.agents.spawn(
            SpawnRequest(description="b", prompt="b", max_tokens_budget=400, name="beta"), ctx
        )
        assert spent.status == "completed" and spent.content == "ok"  # its answer is kept...
        assert budgets.spent(spent.agent_id) is not None
        with pytest.raises(ToolError, match="cannot go on: the token budget"):
            await h.agents.send("beta", "more", ctx)  # ...but it goes no further


async def test_a_tool_call_budget_runs_the_last_call_allowed_and_refuses_the_next(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()

    def respond(request: ModelRequest) -> Turn:
        n = sum(1 for m in request.messages if m.role == "assistant")
        return Turn(tool_calls=(ToolCall("Bash", {"command": f"touch {marks}/{n}"}),))

    agent_id, state = await _alone(tmp_path, respond, max_tool_calls=2)
    assert state.status == TaskStatus.KILLED
    assert isinstance(state, AgentTaskState)
    assert state.stopped_reason == f"the tool-call budget of {agent_id} ran out (2 of 2 tool calls)"
    assert sorted(p.name for p in marks.iterdir()) == ["0", "1"]  # two ran, whole; not a third
    assert state.tool_uses == 2  # the one refused is not counted as a use


@pytest.mark.e2e
def test_max_budget_usd_stops_the_session_s_agents_too(tmp_path: Path) -> None:
    # A price of 100 dollars per million tokens: each 100-token response costs a cent.
    prices = {"modelPrices": {"claude-sonnet-4-5": {"input": 100, "output": 100}}}
    proc, _ = _fan_out(
        tmp_path, Session(), "--max-budget-usd", "0.3", "--settings", json.dumps(prices)
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["subtype"] == "error_max_budget_usd", result
    assert result["errors"] == ["Reached maximum budget ($0.3)"] and "result" not in result
    workers = [e for k, e in result["agentUsage"].items() if k != "main"]
    assert len(workers) == 2 and {e["status"] for e in workers} == {"killed"}
    assert 0.3 <= result["total_cost_usd"] <= 0.3 + 0.05  # what was in flight, no more


async def test_a_budget_used_to_its_end_lets_nothing_more_start_and_a_reopened_one_counts_on() -> (
    None
):
    async def stop(agent_id: str, why: str) -> None:
        pass

    ledger = UsageLedger()
    budgets = Budgets("s", stop, ledger)
    meter = budgets.open("a1", "s", Budget(tool_calls=2))
    for _ in range(2):
        assert meter.admit_tool_call() is None
        ledger.charge_tool_call("a1")
    # Its last call ran (it may be a spawn: that one starts); the next one is refused, and
    # from then on nothing starts under it.
    assert budgets.spent("a1") is None and budgets.exhausted("a1") is None
    refused = meter.admit_tool_call()
    assert refused == "the tool-call budget of a1 ran out (2 of 2 tool calls)"
    assert budgets.exhausted("a1") == refused
    budgets.open("a2", "s", Budget(seconds=0.01))
    await asyncio.sleep(0.05)  # its time is up (the budget's own clock, not a synchronisation)
    assert "the wall-time budget of a2" in (budgets.exhausted("a2") or "")
    assert budgets.exhausted("a-teammate@crew") is None  # one not counted: under the session
    # An agent of an earlier process comes back with what it had spent then.
    budgets.reopen("a9", "s", Budget(tokens=1000), (900, 3))
    assert budgets.used("a9") == (900, 3)
    assert "80% used" not in (budgets.reminder("a9") or "")
    ledger.charge("a9", "m", Usage(input_tokens=50))
    assert budgets.used("a9") == (950, 3) and "95% used" in (budgets.reminder("a9") or "")
    # Its cost too: 0.5 of a dollar then, 0.4 now, is 90 % of its dollar.
    budgets.reopen("a8", "s", Budget(usd=1.0), (0, 0), 0.5)
    ledger.charge("a8", "m", Usage(), 0.4)
    assert "the cost budget of a8 90% used" in (budgets.reminder("a8") or "")
    # A tool-call budget at its end is used up, not run out: its last call runs.
    budgets.reopen("a7", "s", Budget(tool_calls=5), (0, 3))
    ledger.charge_tool_call("a7", 2)
    assert "the tool-call budget of a7 100% used (5 of 5" in (budgets.reminder("a7") or "")
    await budgets.aclose()


async def test_a_teammate_s_spending_counts_for_the_session_and_its_stop_says_why(
    tmp_path: Path,
) -> None:
    from taskloom.tasks.kinds import kind_of
    from taskloom.tasks.teammate import TeammateTaskState

    def respond(request: ModelRequest) -> Turn | str:
        if not request.metadata.get("teammate"):
            return "lead"
        work = ToolCall("Bash", {"command": "sleep 0.05"})
        return Turn(tool_calls=(work,), usage={"input_tokens": 400, "output_tokens": 100})

    async with harness(tmp_path, FunctionModel(respond), teams=True, max_budget_tokens=2000) as h:
        tool = next(t for t in h.tools if t.name == "Agent")
        params = tool.validate({"description": "w", "prompt": "p", "name": "fay"})
        spawned = await tool.call(params, main_context(h))
        assert "agent_id: fay@" in spawned.content, spawned.content

        def mate() -> TeammateTaskState:
            (state,) = [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]
            return state

        await wait_until(lambda: mate().terminal, timeout=30, what="the teammate's stop")
        state = mate()
        assert state.status == TaskStatus.KILLED
        assert state.stopped_reason is not None
        assert "the token budget of the session ran out" in state.stopped_reason
        assert "of 2,000 tokens" in state.stopped_reason
        assert state.stopped_reason in kind_of(state).summary(state)
        # Its spending was the session's: the main thread's run is ended too.
        assert h.session.engine.halted
        assert all(s.terminal for s in h.runtime.list())


async def test_calls_counted_after_they_ran_overshoot_a_tool_call_budget_and_hide_no_other() -> (
    None
):
    stopped: list[tuple[str, str]] = []

    async def stop(agent_id: str, why: str) -> None:
        stopped.append((agent_id, why))

    ledger = UsageLedger()
    budgets = Budgets("s", stop, ledger)
    # A remote agent's calls are counted after they ran, never admitted one by one.
    budgets.open("r1", "s", Budget(tool_calls=2))
    ledger.report("r1", {}, tool_uses=3)
    # Its tool calls far over their budget must not hide its tokens' (nor the reverse).
    budgets.open("r2", "s", Budget(tokens=1000, tool_calls=2))
    ledger.report("r2", {}, tool_uses=2)
    ledger.report("r2", {"m": {"input_tokens": 2000}}, tool_uses=2)
    await budgets.aclose()
    assert dict(stopped) == {
        "r1": "the tool-call budget of r1 ran out (3 of 2 tool calls)",
        "r2": "the token budget of r2 ran out (2,000 of 1,000 tokens)",
    }
    assert budgets.exhausted("r1") and budgets.exhausted("r2")


async def test_a_session_budget_ends_a_run_that_waits_for_its_own_command(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Turn:
        usage = {"input_tokens": 450, "output_tokens": 50}
        if len(request.messages) == 1:
            serve = ToolCall("Bash", {"command": "sleep 60", "run_in_background": True})
            return Turn(tool_calls=(serve,), usage=usage)  # type: ignore[arg-type]
        return Turn(text="waiting for it", usage=usage)  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond), max_budget_tokens=900) as h:

        async def run() -> list[object]:
            return [event async for event in h.run("go")]

        # Its answer crossed the budget while the command runs: it does not wait on for it.
        events = await asyncio.wait_for(run(), 20)
        assert type(events[-1]).__name__ == "Finished"
        assert "the token budget of the session ran out" in (h.session.engine.halted or "")


async def test_an_agent_ending_with_its_answer_past_its_budget_is_stopped_if_it_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskloom.agents import spawner

    monkeypatch.setattr(spawner, "FINISH_GRACE_S", 0.5)
    hooks = {"hooks": {"SubagentStop": [{"hooks": [{"type": "command", "command": "sleep 60"}]}]}}

    def respond(request: ModelRequest) -> Turn:
        return Turn(text="the report", usage={"input_tokens": 900, "output_tokens": 200})  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond), settings=json.dumps(hooks)) as h:
        launched = await h.agents.spawn(
            SpawnRequest(
                description="d", prompt="p", run_in_background=True, max_tokens_budget=1000
            ),
            main_context(h),
        )
        state = await h.runtime.wait(launched.agent_id, timeout=20)
    assert state.status == TaskStatus.KILLED
    assert isinstance(state, AgentTaskState) and state.stopped_reason is not None
    assert "the token budget of" in state.stopped_reason


async def _resumed_in_a_new_process(
    tmp_path: Path,
) -> tuple[AgentTaskState, AgentTaskState, dict[str, Any]]:
    """An agent's state after its run, after its resume by a new process, and agentUsage then.

    Each run makes a tool call and answers: two responses of 400 input, 50 cache-read and
    50 output tokens each.
    """
    from taskloom.cli.agent_usage import agent_usage

    # A dollar per thousand input or output tokens: each run costs something.
    prices = json.dumps({"modelPrices": {"function": {"input": 1000, "output": 1000}}})

    def respond(request: ModelRequest) -> Turn:
        usage = {"input_tokens": 400, "output_tokens": 50, "cache_read_input_tokens": 50}
        if all(isinstance(b, TextBlock) for b in request.messages[-1].content):  # a prompt
            work = ToolCall("Bash", {"command": "echo hi"})
            return Turn(tool_calls=(work,), usage=usage)  # type: ignore[arg-type]
        return Turn(text="ok", usage=usage)  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond), settings=prices) as h:
        session_id = h.session_id
        first = await h.agents.spawn(
            SpawnRequest(description="a", prompt="a", name="alpha"), main_context(h)
        )
        before = h.runtime.get(first.agent_id)
    # A new process of the same session: the agent is rebuilt from its transcript.
    async with harness(tmp_path, FunctionModel(respond), settings=prices, resume=session_id) as h:
        await h.agents.send("alpha", "again", main_context(h))
        after = await h.runtime.wait(first.agent_id, timeout=20)
        usage = agent_usage(h.runtime.usage, h.runtime.list())[first.agent_id]
    assert isinstance(before, AgentTaskState) and isinstance(after, AgentTaskState)
    return before, after, usage


async def test_an_agent_of_an_earlier_process_keeps_its_figures_when_resumed(
    tmp_path: Path,
) -> None:
    before, after, _ = await _resumed_in_a_new_process(tmp_path)
    assert before.status == TaskStatus.COMPLETED
    assert (before.output_tokens, before.tool_uses) == (100, 1), before
    assert before.cache_read_input_tokens == 100 and before.cost_usd > 0, before
    assert after.status == TaskStatus.COMPLETED, after
    # Its figures then, and this run's (one more tool call and answer) on top.
    assert (after.output_tokens, after.tool_uses) == (200, 2), after
    assert after.cache_read_input_tokens == 200, after
    assert after.cost_usd == pytest.approx(2 * before.cost_usd), after


async def test_agent_usage_counts_what_this_process_counted_tool_calls_too(
    tmp_path: Path,
) -> None:
    before, _, usage = await _resumed_in_a_new_process(tmp_path)
    # This process's run only, every figure alike: its tokens, its cost, its tool calls.
    assert usage["outputTokens"] == 100 and usage["cacheReadInputTokens"] == 100, usage
    assert usage["costUSD"] == pytest.approx(before.cost_usd), usage
    assert usage["toolUses"] == 1, usage


async def test_an_in_process_teammate_s_subagents_are_in_its_subtree(tmp_path: Path) -> None:
    from taskloom.cli.agent_usage import agent_usage
    from taskloom.tasks.teammate import TeammateTaskState

    def respond(request: ModelRequest) -> Turn | str:
        first = request.messages[0].content
        if any(isinstance(b, TextBlock) and b.text == "sub-work" for b in first):
            return Turn(text="done", usage={"input_tokens": 400, "output_tokens": 100})  # type: ignore[arg-type]
        if not request.metadata.get("teammate"):
            return "lead"
        usage = {"input_tokens": 900, "output_tokens": 100}
        if len(request.messages) == 1:
            work = ToolCall("Agent", {"description": "sub", "prompt": "sub-work"})
            return Turn(tool_calls=(work,), usage=usage)  # type: ignore[arg-type]
        return Turn(text="fay idle", usage=usage)  # type: ignore[arg-type]

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        tool = next(t for t in h.tools if t.name == "Agent")
        params = tool.validate({"description": "w", "prompt": "p", "name": "fay"})
        await tool.call(params, main_context(h))

        def mate() -> TeammateTaskState:
            (state,) = [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]
            return state

        await wait_until(lambda: mate().is_idle, timeout=30, what="the teammate's idle")
        (sub,) = [s for s in h.runtime.list() if isinstance(s, AgentTaskState)]
        assert sub.status == TaskStatus.COMPLETED, sub
        ledger, fay = h.runtime.usage, mate().agent_id
        assert ledger.parent(sub.id) == fay
        # Its own two responses and its subagent's one.
        assert ledger.subtree(fay).tokens == 2 * 1000 + 500
        assert h.agents.spawner.budgets.used(fay)[0] == 2 * 1000 + 500
        # agentUsage says so too: its subagent's parent is it, and its subtree holds both.
        usage = agent_usage(ledger, h.runtime.list())
        assert usage[sub.id]["parentAgentId"] == fay, usage
        assert usage[fay]["subtree"]["outputTokens"] == 3 * 100, usage

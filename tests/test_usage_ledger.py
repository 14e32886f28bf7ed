"""The usage ledger: responses and tool calls charged per agent and per model, subtree totals,
and reports from other processes (a remote agent's worker, a pane teammate's process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskloom.messages import Usage
from taskloom.tasks.usage import (
    REPORT_KEY,
    Figures,
    Tokens,
    UsageLedger,
    report_fields,
    report_in,
)


def _per_million(dollars_in: float, dollars_out: float):  # type: ignore[no-untyped-def]
    def price(model: str, usage: Usage) -> float | None:
        if model.startswith("free"):
            return None
        return (usage.input_tokens * dollars_in + usage.output_tokens * dollars_out) / 1e6

    return price


def test_responses_are_charged_per_agent_and_per_model() -> None:
    ledger = UsageLedger(_per_million(3.0, 15.0))
    spent = ledger.charge("main", "sonnet", Usage(input_tokens=1000, output_tokens=100))
    assert spent.tokens == 1100 and spent.usd == pytest.approx((3000 + 1500) / 1e6)
    ledger.charge("main", "free-model", Usage(input_tokens=10, cache_read_input_tokens=5))
    ledger.charge("a1", "sonnet", Usage(input_tokens=1, output_tokens=2))
    ledger.charge_tool_call("a1")
    ledger.charge_tool_call("a1", 2)

    main = ledger.own("main")
    assert (main.input_tokens, main.output_tokens, main.cache_read_input_tokens) == (1010, 100, 5)
    assert main.tokens == 1115 and main.tool_uses == 0
    assert main.cost_usd == pytest.approx(0.0045)
    assert ledger.own("a1") == Figures(1, 2, 0, 0, 3, pytest.approx(33 / 1e6), 0)  # type: ignore[arg-type]

    per_model = ledger.models("main")
    assert set(per_model) == {"sonnet", "free-model"}
    assert per_model["free-model"].cost_usd == 0.0
    # A charge priced by its charger keeps its cost (the engine prices by the settings).
    assert ledger.charge("a2", "sonnet", Usage(input_tokens=1), usd=0.5).usd == 0.5
    assert ledger.own("a2").cost_usd == 0.5
    session = ledger.models()
    assert session["sonnet"].usage == Tokens(input_tokens=1002, output_tokens=102)
    assert ledger.total().tool_uses == 3 and ledger.total().tokens == 1119
    parts = (ledger.own(a).cost_usd for a in ("main", "a1", "a2"))
    assert ledger.cost() == pytest.approx(sum(parts))


def test_a_response_without_usage_is_counted_as_unreported() -> None:
    ledger = UsageLedger()
    assert ledger.charge("a1", "m", None).tokens == 0
    assert ledger.own("a1").unreported == 1 and ledger.own("a1").tokens == 0
    assert ledger.models()["m"].unreported == 1  # listed: a response of it was counted


def test_the_latest_response_of_each_agent_is_kept_whole() -> None:
    ledger = UsageLedger()
    assert ledger.latest("a1") is None  # nothing counted yet
    ledger.charge("a1", "opus", Usage(input_tokens=100, output_tokens=7))
    ledger.charge("a1", "sonnet", Usage(input_tokens=120, cache_read_input_tokens=3))
    ledger.charge("a2", "haiku", Usage(input_tokens=1))
    # Its own last response, not the sum, and not another agent's.
    assert ledger.latest("a1") == ("sonnet", Tokens(120, 0, 0, 3))
    ledger.charge("a1", "sonnet", None)
    assert ledger.latest("a1") == ("sonnet", None)  # reported none


def test_subtree_totals_are_an_agents_own_and_its_descendants() -> None:
    ledger = UsageLedger()
    ledger.link("a1", None)
    ledger.link("a2", "a1")
    ledger.link("a3", "a2")
    ledger.link("b1", None)
    for agent, tokens in (("a1", 1), ("a2", 10), ("a3", 100), ("b1", 1000)):
        ledger.charge(agent, "m", Usage(output_tokens=tokens))
        ledger.charge_tool_call(agent)
    assert ledger.subtree("a1").output_tokens == 111 and ledger.subtree("a1").tool_uses == 3
    assert ledger.subtree("a2").output_tokens == 110
    assert ledger.subtree("a3") == ledger.own("a3")
    assert ledger.parent("a3") == "a2" and ledger.parent("a1") is None
    assert ledger.agents() == ["a1", "a2", "a3", "b1"]


def test_a_report_from_elsewhere_counts_what_grew() -> None:
    ledger = UsageLedger(_per_million(1.0, 1.0))
    first = ledger.report("r1", {"m": {"input_tokens": 100, "output_tokens": 10}}, tool_uses=2)
    assert first.tokens == 110 and first.tool_calls == 2
    again = ledger.report("r1", {"m": {"input_tokens": 100, "output_tokens": 10}}, tool_uses=2)
    assert again == (0, 0, 0.0)  # cumulative figures: nothing new
    grown = ledger.report("r1", {"m": {"input_tokens": 150, "output_tokens": 15}}, tool_uses=5)
    assert (grown.tokens, grown.tool_calls) == (55, 3)
    assert grown.usd == pytest.approx(55 / 1e6)
    own = ledger.own("r1")
    assert (own.input_tokens, own.output_tokens, own.tool_uses) == (150, 15, 5)
    # A new process counting from zero again: what it reports is all new.
    ledger.restart("r1")
    ledger.report("r1", {"m": {"input_tokens": 7, "output_tokens": 1}}, tool_uses=1)
    assert ledger.own("r1").input_tokens == 157 and ledger.own("r1").tool_uses == 6
    # Figures that went back without a restart: a new process too.
    ledger.report("r1", {"m": {"input_tokens": 3}})
    assert ledger.own("r1").input_tokens == 160


def test_a_baseline_is_not_counted_again() -> None:
    ledger = UsageLedger()
    earlier = {"m": {"input_tokens": 1000, "output_tokens": 100}}
    ledger.baseline("r1", earlier, tool_uses=4)  # counted by the process it ran for
    assert ledger.report("r1", earlier, tool_uses=4) == (0, 0, 0.0)
    assert ledger.models() == {}
    ledger.report("r1", {"m": {"input_tokens": 1500, "output_tokens": 150}}, tool_uses=6)
    assert (ledger.own("r1").input_tokens, ledger.own("r1").tool_uses) == (500, 2)


def test_marks_give_what_was_counted_since() -> None:
    ledger = UsageLedger()
    ledger.charge("main", "m", Usage(input_tokens=10))
    ledger.charge("main", "n", Usage(input_tokens=1))
    mark = ledger.mark()
    ledger.charge("a1", "m", Usage(input_tokens=5), usd=0.25)
    since = ledger.models(since=mark)
    assert list(since) == ["m"] and since["m"].usage.input_tokens == 5
    assert ledger.cost(since=mark) == 0.25


def test_reports_travel_under_one_key_and_bad_entries_are_left_out() -> None:
    fields = report_fields({"m": {"input_tokens": 3, "output_tokens": 1}})
    assert list(fields) == [REPORT_KEY]
    event = {"type": "progress", **fields}
    assert report_in(event) == {"m": {"input_tokens": 3, "output_tokens": 1}}
    bad = {REPORT_KEY: {"m": {"input_tokens": "3", "output_tokens": True, "x": 1}, "n": 4}}
    assert report_in(bad) == {"m": {}}
    assert report_in({"type": "progress"}) is None
    assert report_in({REPORT_KEY: ["m"]}) is None
    ledger = UsageLedger()
    ledger.charge("t1", "m", Usage(input_tokens=2, output_tokens=1))
    assert report_in(report_fields(ledger.report_of("t1")))["m"]["input_tokens"] == 2  # type: ignore[index]


async def test_an_engine_charges_every_response_and_tool_call_to_the_runtimes_ledger(
    tmp_path: Path,
) -> None:
    from taskloom.engine import Engine, EngineConfig
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.testing import ScriptedModel, ToolCall, Turn
    from taskloom.tools.bash import BashTool

    script = [
        Turn(tool_calls=(ToolCall("Bash", {"command": "true"}),), usage=Usage(input_tokens=7)),
        Turn(text="done", usage=Usage(input_tokens=9, output_tokens=2)),
    ]
    async with TaskRuntime() as rt:
        for agent_id in (None, "a00000001"):
            config = EngineConfig(
                model=ScriptedModel(list(script)),
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=tmp_path,
                agent_id=agent_id,
                # A dollar per input or output token: priced as the engine's responses are.
                settings={"modelPrices": {"scripted": {"input": 1e6, "output": 1e6}}},
            )
            engine = Engine(config, rt)
            _ = [event async for event in engine.run("go")]
            own = rt.usage.own(engine.ledger_key)
            assert (own.input_tokens, own.output_tokens, own.tool_uses) == (16, 2, 1)
            assert own.cost_usd == pytest.approx(16 + 2)
        assert rt.usage.agents() == ["main", "a00000001"]


def test_the_kinds_say_whose_usage_arrives_from_another_process() -> None:
    from taskloom.tasks.kinds import kind_of
    from taskloom.tasks.remote import RemoteAgentTaskState
    from taskloom.tasks.teammate import TeammateTaskState
    from taskloom.tasks.types import AgentTaskState

    by_model = {"m": {"input_tokens": 5, "output_tokens": 1}}
    remote = RemoteAgentTaskState(id="r00000001", tool_uses=2, **report_fields(by_model))
    assert kind_of(remote).usage_from_elsewhere(remote) == ("r00000001", by_model, 2)
    assert kind_of(remote).usage_from_elsewhere(RemoteAgentTaskState(id="r00000002")) is None
    pane = TeammateTaskState(id="t00000001", agent_id="al@t", backend="tmux",
                             **report_fields(by_model))  # fmt: skip
    assert kind_of(pane).usage_from_elsewhere(pane) == ("al@t", by_model, 0)
    here = pane.replace(backend="in-process")  # its engine charges this process's ledger
    assert kind_of(here).usage_from_elsewhere(here) is None
    local = AgentTaskState(id="a00000001")
    assert kind_of(local).usage_from_elsewhere(local) is None


async def test_the_repl_status_line_shows_the_ledger_s_figures(tmp_path: Path) -> None:
    # Its tokens and cost are the session's ledger's: every response, priced by modelPrices.
    from taskloom.options import Options
    from taskloom.repl.app import Repl
    from taskloom.testing import ScriptedModel, Turn

    model = ScriptedModel([Turn(text="hello", usage=Usage(input_tokens=4000, output_tokens=600))])
    prices = json.dumps({"modelPrices": {"scripted": {"input": 1.0, "output": 10.0}}})
    repl = Repl(Options(cwd=tmp_path, model=model, settings=prices, skip_permissions=True))
    await repl._open(repl.options)
    try:
        _ = [event async for event in repl.harness.run("hi")]
        spent = repl.harness.runtime.usage.total()
        assert (spent.input_tokens, spent.output_tokens) == (4000, 600)
        assert spent.cost_usd == pytest.approx((4000 * 1.0 + 600 * 10.0) / 1e6)
        status = repl.status_text(200)
        assert "4.6k tokens" in status and "$0.01" in status, status
    finally:
        await repl._close()


async def test_budgets_count_what_the_ledger_is_charged() -> None:
    from taskloom.agents.budget import Budget, Budgets

    stopped: list[tuple[str, str]] = []

    async def stop(agent_id: str, why: str) -> None:
        stopped.append((agent_id, why))

    ledger = UsageLedger()
    budgets = Budgets("s", stop, ledger)
    budgets.open("a1", "s", Budget(tokens=1000))
    child = budgets.open("a2", "a1", Budget())
    assert ledger.parent("a2") == "a1" and ledger.parent("a1") is None
    ledger.charge("a2", "m", Usage(input_tokens=300, output_tokens=100))
    assert child.admit_tool_call() is None  # admitted: counted once the ledger is charged
    assert budgets.used("a2") == (400, 0)
    ledger.charge_tool_call("a2")
    ledger.report("r1", {"m": {"input_tokens": 50}})  # one not counted here: the session's
    ledger.charge("main", "m", Usage(output_tokens=5))  # the main thread: the session's
    assert budgets.used("a1") == (400, 1) and budgets.used("s") == (455, 1)
    assert ledger.subtree("a1").tokens == 400 and ledger.subtree("a1").tool_uses == 1
    ledger.charge("a2", "m", Usage(input_tokens=700))  # a1's budget runs out
    await budgets.aclose()
    assert stopped == [("a1", "the token budget of a1 ran out (1,100 of 1,000 tokens)")]


def test_the_kinds_say_which_tasks_agent_usage_lists_as_agents() -> None:
    from taskloom.tasks.kinds import kind_of
    from taskloom.tasks.remote import RemoteAgentTaskState
    from taskloom.tasks.teammate import TeammateTaskState
    from taskloom.tasks.types import AgentTaskState

    local = AgentTaskState(id="a00000001", agent_type="Explore")
    remote = RemoteAgentTaskState(id="r00000001", agent_type="general-purpose")
    assert kind_of(local).agent_facts(local) == ("Explore",)
    assert kind_of(remote).agent_facts(remote) == ("general-purpose",)
    mate = TeammateTaskState(id="t00000001", agent_id="al@t")
    assert kind_of(mate).agent_facts(mate) is None


def test_the_task_layer_runs_without_pydantic() -> None:
    # The ledger's counts are plain dataclasses: a process that only runs commands (the task
    # runtime) does not pay for importing pydantic.
    import subprocess
    import sys

    code = "import sys, taskloom.tasks.runtime; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr

"""One run of an agent: a subagent's and a teammate's keep the same books.

Their task states report the same usage fields, read from the session's ledger, and their
output files get the same lines (an answer's text, an arrow per tool call).
"""

from __future__ import annotations

from pathlib import Path

from helpers import harness, main_context, wait_until
from taskloom.messages import Usage
from taskloom.models.base import ModelRequest
from taskloom.tasks.teammate import TeammateTaskState
from taskloom.tasks.types import AgentTaskState
from taskloom.testing import FunctionModel, ToolCall, Turn

FIELDS = (
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "tool_uses",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cost_usd",
)


def respond(request: ModelRequest) -> Turn | str:
    first = request.messages[0].text()
    if "job." not in first:  # the lead
        return "lead"
    if len(request.messages) == 1:
        usage = Usage(input_tokens=1000, output_tokens=50, cache_read_input_tokens=200)
        return Turn(text="on it", tool_calls=(ToolCall("Bash", {"command": "true"}),),
                    usage=usage)  # fmt: skip
    return Turn(text="done", usage=Usage(input_tokens=1300, output_tokens=70,
                                         cache_creation_input_tokens=30))  # fmt: skip


async def test_a_subagent_and_a_teammate_report_the_same_fields_from_the_ledger(
    tmp_path: Path,
) -> None:
    settings = '{"modelPrices": {"function": {"input": 1.0, "output": 10.0}}}'
    async with harness(tmp_path, FunctionModel(respond), teams=True, settings=settings) as h:
        agent = next(t for t in h.tools if t.name == "Agent")
        await agent.call(agent.validate({"description": "a", "prompt": "agent job."}),
                         main_context(h))  # fmt: skip
        await agent.call(agent.validate({"description": "t", "prompt": "mate job.",
                                         "name": "mate"}), main_context(h))  # fmt: skip
        rt = h.runtime

        def idle() -> bool:
            mates = [s for s in rt.list() if isinstance(s, TeammateTaskState)]
            return len(mates) == 1 and mates[0].is_idle

        await wait_until(idle, what="the teammate's first turn to end")
        (sub,) = [s for s in rt.list() if isinstance(s, AgentTaskState)]
        (mate,) = [s for s in rt.list() if isinstance(s, TeammateTaskState)]
        for state in (sub, mate):
            figures = {name: getattr(state, name) for name in FIELDS}
            # The latest request's input, with its cache; the output and cache summed.
            assert figures == {
                "input_tokens": 1330,
                "output_tokens": 120,
                "total_tokens": 1450,
                "tool_uses": 1,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 30,
                "cost_usd": figures["cost_usd"],
            }, state.id
            key = state.agent_id if isinstance(state, TeammateTaskState) else state.id
            own = rt.usage.own(key)
            assert state.cost_usd == own.cost_usd > 0  # type: ignore[union-attr]
            assert state.tool_uses == own.tool_uses
            lines = Path(rt.output_path(state.id)).read_text().splitlines()
            assert lines[0] == "on it" and lines[-1] == "done", lines

"""Fork subagents: the parent's exact prefix, a directive, and no forks of forks."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import harness
from taskloom.agents.fork import MARKER, NESTED_FORK_ERROR
from taskloom.engine import Finished
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn


async def test_a_fork_continues_the_parents_exact_prefix_and_cannot_fork_again(
    tmp_path: Path,
) -> None:
    main_requests: list[ModelRequest] = []
    fork_requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Turn | str:
        if request.agent_id is None:
            main_requests.append(request)
            if len(main_requests) == 1:
                return Turn(
                    text="Forking a researcher.",
                    tool_calls=(
                        ToolCall(
                            "Agent", {"description": "research", "prompt": "find the config loader"}
                        ),
                    ),
                )
            return "The fork reported back."
        fork_requests.append(request)
        if len(fork_requests) == 1:
            return Turn(tool_calls=(ToolCall("Agent", {"description": "again", "prompt": "x"}),))
        return "Scope: config loader\nResult: it is in settings.py"

    model = FunctionModel(respond)
    forking = json.dumps({"forkSubagent": True})
    append = "PARENT SYSTEM PROMPT"
    async with harness(tmp_path, model, settings=forking, append_system_prompt=append) as h:
        events = [e async for e in h.run("please research")]
        engine = h.session.engine
    assert isinstance(events[-1], Finished)
    first_main, first_fork = main_requests[0], fork_requests[0]
    parent_prefix = [*first_main.messages, engine.messages[1]]  # the prompt, then the fork call
    # Byte-identical prefix: same system prompt, same tools, same messages, then the directive.
    assert first_fork.system == first_main.system == engine.config.system_prompt
    assert first_main.system.endswith("\n\nPARENT SYSTEM PROMPT")
    assert [t.name for t in first_fork.tools] == [t.name for t in first_main.tools]
    n = len(parent_prefix)
    assert [m.full() for m in first_fork.messages[:n]] == [m.full() for m in parent_prefix]
    directive = first_fork.messages[n]
    assert isinstance(directive.content[0], ToolResultBlock)
    text = directive.content[-1]
    assert isinstance(text, TextBlock) and text.text.startswith(MARKER)
    assert text.text.endswith("find the config loader")
    refused = fork_requests[1].messages[-1].content[0]
    assert isinstance(refused, ToolResultBlock) and refused.is_error
    assert NESTED_FORK_ERROR in refused.text()
    delivered = " ".join(
        b.text for m in engine.messages for b in m.content if isinstance(b, TextBlock)
    )
    assert "Scope: config loader" in delivered

"""A workflow's script form, in process: its permission is a Bash command's, its input checked.

The runs through ``taskloom -p`` (agents, failure, TaskStop) are in
``test_workflow_script_e2e.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import harness, main_context
from taskloom.agents.inputs.workflow_tool import WorkflowInput
from taskloom.agents.workflow_tool import plan
from taskloom.errors import ToolError
from taskloom.gate import permit
from taskloom.permissions import PermissionPolicy
from taskloom.permissions.rules import parse_rule
from taskloom.testing import ScriptedModel

SCRIPT = "print('hi')\n"


async def _no_hooks(*args: Any, **kwargs: Any) -> None:
    return None


async def _decide(tmp_path: Path, mode: str, rules: list[tuple[str, str]], **call: Any) -> str:
    """What the gate makes of a Workflow call under ``mode`` and ``rules``: allow or why not."""
    policy = PermissionPolicy(
        mode, [parse_rule(text, how, "test") for text, how in rules], tmp_path
    )
    async with harness(tmp_path, ScriptedModel([])) as h:
        tool = next(t for t in h.tools if t.name == "Workflow")
        params = tool.validate(call)
        assert isinstance(params, WorkflowInput), params
        verdict = await permit(
            tool,
            params,
            main_context(h),
            call,
            policy=policy,
            prompter=None,
            headless=True,
            run_hook=_no_hooks,
            agent_id=None,
        )
    if verdict.params is not None:
        return "allow"
    assert verdict.result is not None
    return str(verdict.result.content)


async def test_a_script_needs_what_a_bash_command_needs(tmp_path: Path) -> None:
    script = {"description": "d", "script": SCRIPT}
    listed = {"description": "d", "items": [1], "prompt": "{item}"}
    # Nobody to ask and no rule: refused as Bash would be; the list form needs nothing.
    refused = await _decide(tmp_path, "default", [], **script)
    assert refused != "allow" and "Bash" in refused
    assert await _decide(tmp_path, "default", [], **listed) == "allow"
    # Bash rules decide it: python allowed, Bash denied, plan mode runs no command.
    assert await _decide(tmp_path, "default", [("Bash(python:*)", "allow")], **script) == "allow"
    denied = await _decide(tmp_path, "bypassPermissions", [("Bash", "deny")], **script)
    assert "denied" in denied
    assert "plan mode" in await _decide(tmp_path, "plan", [], **script)
    # A Workflow rule does not let a script through.
    assert await _decide(tmp_path, "default", [("Workflow", "allow")], **script) != "allow"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        ({"script": SCRIPT, "items": [1], "prompt": "{item}"}, "either `script`"),
        ({"script": SCRIPT, "reduce": "combine"}, "either `script`"),
        ({"items": [1]}, "prompt missing"),
        ({}, "items and prompt missing"),
    ],
)
def test_the_two_forms_do_not_mix(call: dict[str, Any], says: str) -> None:
    params = WorkflowInput.model_validate({"description": "d", **call})
    with pytest.raises(ToolError, match=says):
        plan(params, {})


def test_the_client_imports_nothing_of_taskloom() -> None:
    code = (
        "import sys, taskloom.workflow_client as c; "
        "print(sorted(m for m in sys.modules if m.startswith('taskloom')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['taskloom', 'taskloom._version', 'taskloom.workflow_client']"


def test_the_client_outside_a_workflow_says_so() -> None:
    code = "from taskloom.workflow_client import spawn; spawn('x')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert "not run as a workflow script (TASKLOOM_WORKFLOW_FDS=''" in out.stderr


REFUSED_TYPES = """
from taskloom.workflow_client import WorkflowError, spawn, wait

for kind in ("Explore", "Plan", "no-such-type"):
    try:
        spawn("look", subagent_type=kind)
    except WorkflowError as exc:
        print(f"{kind} refused: {exc}")
    else:
        print(f"{kind} started")
print("allowed:", wait(spawn("look")))
"""


async def test_a_script_may_not_spawn_a_type_the_rules_deny_nor_an_unknown_one(
    tmp_path: Path,
) -> None:
    from helpers import TIME_FACTOR
    from taskloom.tasks.kinds import kind_of
    from taskloom.tasks.types import TaskStatus
    from taskloom.testing import FunctionModel, Turn

    (tmp_path / ".claude").mkdir()
    settings = {"permissions": {"deny": ["Agent(Explore)"]}}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings))
    model = FunctionModel(lambda r: Turn(text="looked"))
    async with harness(tmp_path, model, disallowed_tools=["Agent(Plan)"]) as h:
        tool = next(t for t in h.tools if t.name == "Workflow")
        params = tool.validate({"description": "types", "script": REFUSED_TYPES})
        assert isinstance(params, WorkflowInput), params
        result = await tool.call(params, main_context(h))
        assert not result.is_error, result.content
        flow = result.data["taskId"]
        state = await h.runtime.wait(flow, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED, state
        text = kind_of(state).result(state) or ""
        assert (
            "Explore refused: ToolError: spawn refused: Agent type 'Explore' has been denied by "
            "permission rule 'Agent(Explore)'"
        ) in text
        assert "Plan refused: ToolError: spawn refused: Agent type 'Plan' has been denied" in text
        assert "(--disallowedTools)" in text
        assert "no-such-type refused: ToolError: Agent type 'no-such-type' not found" in text
        assert "allowed: looked" in text
        # Only the allowed one ran: the refused ones started nothing.
        agents = [s for s in h.runtime.list(include_evicted=True) if s.owner == flow]
        assert [kind_of(a).noun for a in agents].count("Agent") == 1
        # The list form is decided alike, before anything starts.
        listed = tool.validate(
            {"description": "d", "items": [1], "prompt": "{item}", "subagent_type": "Explore"}
        )
        assert isinstance(listed, WorkflowInput)
        refused = await tool.call(listed, main_context(h))
        assert refused.is_error and "Not started: Agent type 'Explore' has been denied" in (
            refused.content
        )
        await h.end()


NON_OBJECTS = """
import json, os

request_fd, reply_fd = (int(fd) for fd in os.environ["TASKLOOM_WORKFLOW_FDS"].split(","))
out, back = os.fdopen(request_fd, "w"), os.fdopen(reply_fd)
for line in ('[1]', 'null', '"str"', '{not json', '{"id": 7, "op": "spawn"}'):
    out.write(line + "\\n")
    out.flush()
    print("reply:", back.readline().strip())
"""


async def _script_result(tmp_path: Path, script: str) -> tuple[str, Any, float]:
    """Run ``script`` as a workflow: its result text, its final state and how long it took."""
    import time

    from helpers import TIME_FACTOR
    from taskloom.tasks.kinds import kind_of
    from taskloom.testing import FunctionModel, Turn

    model = FunctionModel(lambda r: Turn(text="looked"))
    async with harness(tmp_path, model) as h:
        tool = next(t for t in h.tools if t.name == "Workflow")
        params = tool.validate({"description": "raw", "script": script})
        assert isinstance(params, WorkflowInput), params
        started = time.monotonic()
        result = await tool.call(params, main_context(h))
        assert not result.is_error, result.content
        state = await h.runtime.wait(result.data["taskId"], 60 * TIME_FACTOR)
        took = time.monotonic() - started
        text = kind_of(state).result(state) or kind_of(state).error(state) or ""
        await h.end()
    return text, state, took


async def test_every_request_line_gets_a_reply_even_one_that_is_not_an_object(
    tmp_path: Path,
) -> None:
    text, state, _ = await _script_result(tmp_path, NON_OBJECTS)
    assert state.status.value == "completed", text
    for shown in ("list: '[1]'", "NoneType: 'null'", "str: '\\\"str\\\"'"):
        assert f'"error": "ValueError: a request is a JSON object, got {shown}' in text, text
    assert 'reply: {"error": "JSONDecodeError' in text
    assert 'reply: {"error": "KeyError: \'prompt\'", "id": 7}' in text


LEAVES_A_CHILD = """
import os, sys, time

pid = os.fork()
if pid == 0:  # the child keeps the request pipe open, and would outlive the script
    time.sleep(600)
    os._exit(0)
print("child", pid)
"""


async def test_the_workflow_ends_when_its_script_exits_and_kills_what_it_left(
    tmp_path: Path,
) -> None:
    import re

    from helpers import TIME_FACTOR, alive

    text, state, took = await _script_result(tmp_path, LEAVES_A_CHILD)
    assert state.status.value == "completed", text
    found = re.search(r"child (\d+)", text)
    assert found is not None, text
    assert not alive(int(found.group(1)))  # killed, verified, before the workflow ended
    assert took < 30 * TIME_FACTOR  # not the child's 600 s

"""The team tools (TaskCreate/Get/List/Update, TeamCreate/Delete), texts exactly; taskloom teams."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from taskloom.settings import db_path
from taskloom.store import Store, TeamTables
from taskloom.tasks.runtime import TaskRuntime
from taskloom.teams import Roster
from taskloom.teams.task_tools import (
    Board,
    TaskCreateTool,
    TaskGetTool,
    TaskListTool,
    TaskUpdateTool,
    task_tools,
)
from taskloom.teams.team_tools import TeamCreateTool, TeamDeleteTool
from taskloom.testing import FakeClock
from taskloom.tools.base import Tool, ToolContext, ToolResult, generated_schema, input_key

HINT = (
    "\n\nTask completed. Call TaskList now to find your next available task or see if your "
    "work unblocked others."
)
NOT_IN_TEAM = (
    "<tool_use_error>Not in a team. Create one with TeamCreate, or spawn a teammate with Agent "
    "and a name.</tool_use_error>"
)


@dataclass
class Outcome:
    blocked: bool
    block_reason: str = ""


@dataclass
class FakeEngine:
    """Answers run_hook as the engine does: None (no hooks) or an outcome."""

    block: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def run_hook(self, event: str, target: str | None, **payload: Any) -> Outcome | None:
        self.calls.append((event, payload))
        if event in self.block:
            return Outcome(True, self.block[event])
        return None


@dataclass
class Team:
    tables: TeamTables
    assigned: list[tuple[str, str, dict[str, Any]]]
    ctx: dict[str, ToolContext]

    def board(self, ctx: ToolContext) -> Board | None:
        names = {"lead": "team-lead", "alice": "alice", "bob": "bob"}
        name = names.get(ctx.owner)
        if name is None:
            return None
        return Board(
            "alpha",
            name,
            self.tables,
            lambda *args: self.assigned.append(args),
            FakeClock(start=1_700_000_000.5),
        )


@pytest.fixture
async def team(store: Store, tmp_path: Path) -> AsyncIterator[Team]:
    async with TaskRuntime() as rt:
        ctxs = {
            who: ToolContext(runtime=rt, owner=who, cwd=tmp_path)
            for who in ("lead", "alice", "bob", "x")
        }
        # The team "alpha" with alice and bob (an owner may also be a name not joined yet).
        roster = Roster(store, "lead-session")
        roster.create("alpha", "")
        for name in ("alice", "bob"):
            roster.join(
                "alpha", name, agent_type="t", model=None, prompt="", plan_mode_required=False,
                cwd="", mode=None,
            )  # fmt: skip
        yield Team(TeamTables(store), [], ctxs)


async def run(tool: Tool[Any], ctx: ToolContext, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await tool.call(params, ctx)


def tools(team: Team) -> tuple[TaskCreateTool, TaskGetTool, TaskListTool, TaskUpdateTool]:
    create, get, list_, update = task_tools(team.board)
    assert isinstance(create, TaskCreateTool) and isinstance(get, TaskGetTool)
    assert isinstance(list_, TaskListTool) and isinstance(update, TaskUpdateTool)
    return create, get, list_, update


def test_static_schemas_are_the_generated_ones() -> None:
    for cls in (
        TaskCreateTool, TaskGetTool, TaskListTool, TaskUpdateTool, TeamCreateTool, TeamDeleteTool
    ):  # fmt: skip
        assert cls.static_schema is not None
        model, schema = cls.static_schema
        assert model == input_key(cls)
        dumps = json.dumps
        assert dumps(schema) == dumps(generated_schema(cls.Input)), cls.name


async def test_outside_a_team_every_task_tool_says_so(team: Team) -> None:
    create, get, list_, update = tools(team)
    x = team.ctx["x"]
    for tool, raw in (
        (create, {"subject": "s", "description": "d"}),
        (get, {"taskId": "1"}),
        (list_, {}),
        (update, {"taskId": "1", "status": "completed"}),
    ):
        result = await run(tool, x, **raw)
        assert (result.content, result.is_error) == (NOT_IN_TEAM, True)


async def test_create_get_list_texts(team: Team) -> None:
    create, get, list_, _ = tools(team)
    lead = team.ctx["lead"]
    assert (await run(list_, lead)).content == "No tasks found"
    result = await run(create, lead, subject="Write the parser", description="In parser.py")
    assert (result.content, result.is_error) == (
        "Task #1 created successfully: Write the parser",
        False,
    )
    blank = await run(create, lead, subject="  ", description="")
    assert blank.content == (
        "<tool_use_error>The subject is blank. Call TaskCreate again with a short title in "
        "`subject`.</tool_use_error>"
    )
    await run(create, lead, subject="Test it", description="")
    got = await run(get, lead, taskId="#1")
    assert got.content == "Task #1: Write the parser\nStatus: pending\nDescription: In parser.py"
    assert (await run(get, lead, taskId="9")).content == "Task not found"
    bad = await run(get, lead, taskId="one")
    assert bad.is_error and "taskId" in bad.content
    assert (await run(list_, lead)).content == "#1 [pending] Write the parser\n#2 [pending] Test it"


async def test_update_texts_claims_blockers_and_the_completion_hint(team: Team) -> None:
    create, get, list_, update = tools(team)
    lead, alice = team.ctx["lead"], team.ctx["alice"]
    for subject in ("a", "b", "c"):
        await run(create, lead, subject=subject, description="")
    linked = await run(update, lead, taskId="1", addBlocks=["2", "#3"])
    assert linked.content == "Updated task #1 blocks"
    assert (await run(update, lead, taskId="3", addBlockedBy=["2"])).content == (
        "Updated task #3 blockedBy"
    )
    assert (await run(get, lead, taskId="3")).content == (
        "Task #3: c\nStatus: pending\nDescription: \nBlocked by: #1, #2"
    )
    assert (await run(get, lead, taskId="1")).content.endswith("\nBlocks: #2, #3")
    assert (await run(list_, lead)).content == (
        "#1 [pending] a\n#2 [pending] b [blocked by #1]\n#3 [pending] c [blocked by #1, #2]"
    )
    blocked = await run(update, alice, taskId="2", status="in_progress")
    assert blocked.content == "<tool_use_error>Task #2 is blocked by #1</tool_use_error>"
    claimed = await run(update, alice, taskId="1", status="in_progress")
    assert claimed.content == "Updated task #1 status, owner"
    # Owned already: another teammate starting it is told whose it is, and nothing changes.
    second = await run(update, team.ctx["bob"], taskId="1", status="in_progress")
    assert second.content == "<tool_use_error>Task #1 is already owned by alice</tool_use_error>"
    # A name nobody joined under yet is an owner all the same: its assignment waits for it.
    early = await run(update, lead, taskId="1", owner="zed")
    assert early.content == (
        "Updated task #1 owner\n\nzed is not in the team yet: the assignment waits in their "
        'mailbox and reaches them when you spawn a teammate named "zed".'
    )
    assert team.assigned[-1][:2] == ("alpha", "zed")
    bad = await run(update, lead, taskId="1", owner="no one")
    assert bad.is_error and 'owner "no one" is invalid' in bad.content
    taken = await run(update, team.ctx["bob"], taskId="1", owner="bob", status="in_progress")
    assert taken.content == "Updated task #1 owner"  # an explicit owner is an assignment
    await run(update, lead, taskId="1", owner="alice")
    done = await run(update, alice, taskId="1", status="completed")
    assert done.content == "Updated task #1 status" + HINT
    assert (await run(list_, lead)).content == (
        "#1 [completed] a (alice)\n#2 [pending] b\n#3 [pending] c [blocked by #2]"
    )
    lead_done = await run(update, lead, taskId="2", status="completed")
    assert lead_done.content == "Updated task #2 status"  # the lead gets no hint
    removed = await run(update, lead, taskId="2", status="deleted")
    assert removed.content == "Updated task #2 deleted"
    assert (await run(get, lead, taskId="3")).content.endswith("Blocked by: #1")
    assert (await run(update, lead, taskId="3", subject="c")).content == "No changes to task #3"
    bad = await run(update, lead, taskId="3", addBlocks=["x"])
    assert bad.is_error and "addBlocks" in bad.content
    assert (await run(update, lead, taskId="7", subject="z")).content == (
        "<tool_use_error>Task not found</tool_use_error>"
    )


async def test_a_claim_that_loses_the_race_names_the_owner(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    create, _, _, update = tools(team)
    lead, alice, bob = team.ctx["lead"], team.ctx["alice"], team.ctx["bob"]
    await run(create, lead, subject="a", description="")
    stale = team.tables.get_task("alpha", 1)
    await run(update, alice, taskId="1", status="in_progress")
    # Bob read the task while it was unowned: the store's atomic check refuses his claim.
    monkeypatch.setattr(team.tables, "get_task", lambda *_: stale)
    result = await run(update, bob, taskId="1", status="in_progress")
    assert result.content == "<tool_use_error>Task #1 is already owned by alice</tool_use_error>"


async def test_assigning_sends_a_task_assignment(team: Team) -> None:
    create, _, _, update = tools(team)
    lead = team.ctx["lead"]
    await run(create, lead, subject="Fix it", description="The bug in x")
    result = await run(update, lead, taskId="1", owner="bob")
    assert result.content == "Updated task #1 owner"
    assert team.assigned == [
        (
            "alpha",
            "bob",
            {
                "type": "task_assignment",
                "taskId": "1",
                "subject": "Fix it",
                "description": "The bug in x",
                "assignedBy": "team-lead",
                "timestamp": "2023-11-14T22:13:20.500Z",
            },
        )
    ]
    await run(update, team.ctx["bob"], taskId="1", status="in_progress")  # already bob's
    await run(update, team.ctx["alice"], taskId="1", owner="alice")  # taking it: no message
    assert len(team.assigned) == 1


async def test_the_task_created_hook_can_block_a_task(team: Team) -> None:
    create, _, list_, _ = tools(team)
    alice = team.ctx["alice"]
    engine = FakeEngine(block={"TaskCreated": "needs a ticket number"})
    alice.engine = engine
    result = await run(create, alice, subject="Refactor", description="all of it")
    assert result.content == (
        "<tool_use_error>TaskCreated hook blocked the task: needs a ticket number</tool_use_error>"
    )
    assert engine.calls == [
        (
            "TaskCreated",
            {
                "task_id": "1",
                "task_subject": "Refactor",
                "task_description": "all of it",
                "teammate_name": "alice",
                "team_name": "alpha",
            },
        )
    ]
    assert (await run(list_, alice)).content == "No tasks found"
    engine.block.clear()
    # The refused task's number stays used: no later message can mean another task by it.
    assert (await run(create, alice, subject="Refactor", description="")).content.startswith(
        "Task #2 created"
    )


async def test_the_task_completed_hook_can_block_completion(team: Team) -> None:
    create, get, _, update = tools(team)
    alice = team.ctx["alice"]
    await run(create, alice, subject="a", description="d")
    engine = FakeEngine(block={"TaskCompleted": "tests fail"})
    alice.engine = engine
    result = await run(update, alice, taskId="1", status="completed")
    assert result.content == (
        "<tool_use_error>TaskCompleted hook blocked completing task #1: tests fail</tool_use_error>"
    )
    assert (await run(get, alice, taskId="1")).content.splitlines()[1] == "Status: pending"
    assert engine.calls[0][0] == "TaskCompleted"
    assert engine.calls[0][1]["teammate_name"] == "alice"
    engine.block.clear()
    assert (await run(update, alice, taskId="1", status="completed")).content.startswith(
        "Updated task #1 status"
    )


async def test_team_create_and_delete(store: Store, tmp_path: Path) -> None:
    roster = Roster(store, "feedfacecafe")
    is_lead = {"lead": True, "mate": False}
    create = TeamCreateTool(roster, lambda ctx: is_lead[ctx.owner])
    delete = TeamDeleteTool(roster, lambda ctx: is_lead[ctx.owner])
    async with TaskRuntime() as rt:
        lead = ToolContext(runtime=rt, owner="lead", cwd=tmp_path)
        mate = ToolContext(runtime=rt, owner="mate", cwd=tmp_path)
        only = "<tool_use_error>Only the team lead can create or delete a team.</tool_use_error>"
        assert (await run(create, mate, team_name="x")).content == only
        assert (await run(delete, mate)).content == only
        assert (await run(delete, lead)).content == "No team to delete."
        made = await run(create, lead, team_name="alpha", description="ship it")
        assert made.content == (
            'Team "alpha" created. You are its lead (team-lead@alpha). Spawn teammates with '
            "Agent and a name; they join this team."
        )
        assert made.data == {
            "team_name": "alpha",
            "team_file_path": None,
            "lead_agent_id": "team-lead@alpha",
        }
        again = await run(create, lead, team_name="beta")
        assert again.is_error and 'Already leading team "alpha"' in again.content
        roster.join(
            "alpha", "alice", agent_type="worker", model=None, prompt="", plan_mode_required=False,
            cwd=str(tmp_path), mode=None,
        )  # fmt: skip
        refused = await run(delete, lead)
        assert refused.content == (
            '<tool_use_error>Cannot delete team "alpha": 1 member(s) still active (alice). '
            "Shut them down first.</tool_use_error>"
        )
        roster.set_active("alpha", "alice", False)
        assert (await run(delete, lead)).content == 'Team "alpha" deleted.'
        assert roster.team() is None


@pytest.mark.e2e
def test_taskloom_teams_json(home: Path) -> None:
    store = Store(db_path())
    try:
        roster = Roster(store, "s-json")
        roster.create("alpha", "the team", cwd="/work")
        roster.join(
            "alpha", "alice", agent_type="worker", model="sonnet", prompt="p",
            plan_mode_required=True, cwd="/work", mode="plan",
        )  # fmt: skip
        TeamTables(store).create_task("alpha", "one", "", None, None, 1.0)
        expected = {"teams": [t.to_json() for t in [roster.team()] if t is not None]}
    finally:
        store.close()
    env = {**os.environ, "TASKLOOM_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-m", "taskloom", "teams", "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip
    data = json.loads(out)
    assert data == expected
    assert [m["name"] for m in data["teams"][0]["members"]] == ["team-lead", "alice"]
    plain = subprocess.run(
        [sys.executable, "-m", "taskloom", "teams"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert plain.splitlines()[0] == "alpha: the team  (lead session s-json)"
    assert plain.splitlines()[-1] == "  1 task: 1 pending"

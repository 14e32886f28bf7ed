"""Team orders as models improvise them, and teammates built from their type (issue 29).

Through ``taskloom -p --teams --output-format stream-json`` against the fake model server:

- a spawn naming another ``team_name`` after TaskCreate made the session's team joins it;
- a task given to a name before anyone joined under it reaches that teammate's first request;
- an ``Explore`` teammate has Explore's tools plus the team's, and its Write is refused (both
  backends);
- two ``isolation: "worktree"`` teammates edit the same file, each in its own worktree, and the
  lead's tree is untouched.

And in one process: a worktree teammate's member records its worktree, which its end removes
when clean; what a teammate cannot be (an unknown type, a remote one) is refused, leaving
nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import clean_env, harness, main_context, wait_until
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel
from team_scenario import events_of, team_argv

FINAL = "Team done."
_MEMBER = re.compile(r'You are ([\w-]+), a member of the agent team "([\w-]+)"')
_WORKDIR = re.compile(r"Working directory: (.+)")
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
#: The team's own tools, which every teammate has whatever its type.
TEAM_TOOLS = {"SendMessage", "TaskCreate", "TaskGet", "TaskList", "TaskUpdate"}
#: What no teammate has of the lead's tools.
NEVER = {
    "AskUserQuestion", "EnterPlanMode", "ExitPlanMode", "TaskOutput", "EnterWorktree",
    "ExitWorktree", "TeamCreate", "TeamDelete", "StructuredOutput",
}  # fmt: skip


def _calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        b
        for m in messages
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


def _seen(messages: list[dict[str, Any]]) -> str:
    return "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))


class Script:
    """Answers the lead with ``lead(messages)`` and teammate NAME with ``mate(name, body)``.

    Every request is kept: the lead's in order, each teammate's by name.
    """

    def __init__(
        self,
        lead: Callable[[list[dict[str, Any]]], Turn],
        mate: Callable[[str, dict[str, Any]], Turn],
    ) -> None:
        self.lead = lead
        self.mate = mate
        self.lead_requests: list[dict[str, Any]] = []
        self.mates: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        found = _MEMBER.search(system_text(body))
        with self._lock:
            if found is not None:
                self.mates.setdefault(found.group(1), []).append(body)
                return self.mate(found.group(1), body)
            self.lead_requests.append(body)
            return self.lead(body["messages"])


def _run(
    tmp_path: Path, script: Script, *extra: str, cwd: Path | None = None, tmux: Any = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        if tmux is not None:  # teammates in panes of the test's own tmux server
            tmux.start()
            env["TMUX"] = f"{tmux.socket_path},{tmux.pid},0"
            extra = (*extra, "--teammate-mode", "tmux")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", *team_argv(), *extra],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=cwd or tmp_path,
            env=env,
        )
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL, proc.stderr
    return proc, events


def _results(events: list[dict[str, Any]], tool: str) -> list[tuple[str, bool]]:
    """The lead's results of its calls of ``tool``: (text, is_error) each, in order."""
    names = {
        b["id"]: b["name"]
        for e in events
        if e.get("type") == "assistant" and not e.get("parent_tool_use_id")
        for b in e["message"]["content"]
        if b.get("type") == "tool_use"
    }
    return [
        ("\n".join(texts(b.get("content") or [])), bool(b.get("is_error")))
        for e in events
        if e.get("type") == "user" and not e.get("parent_tool_use_id")
        for b in e["message"]["content"]
        if isinstance(b, dict)
        and b.get("type") == "tool_result"
        and names.get(b["tool_use_id"]) == tool
    ]


def _after(messages: list[dict[str, Any]], step: list[ToolCall]) -> Turn:
    """The lead's next step: the first of ``step`` it has not called yet, then done."""
    called = [c["name"] for c in _calls(messages)]
    for call in step:
        if call.name not in called:
            return Turn(tool_calls=(call,))
    return Turn(text=FINAL)


def _idle(name: str, body: dict[str, Any]) -> Turn:
    return Turn(text=f"{name} idle")


@pytest.mark.e2e
def test_a_spawn_naming_another_team_joins_the_leads_team(tmp_path: Path) -> None:
    steps = [
        ToolCall("TaskCreate", {"subject": "Fix the parser", "description": "in parse.py"}),
        ToolCall(
            "Agent",
            {"description": "a", "prompt": "Check A.", "name": "alice", "team_name": "t1"},
        ),
    ]

    def mate(name: str, body: dict[str, Any]) -> Turn:
        if not _calls(body["messages"]):
            report = {"to": "team-lead", "message": f"report from {name}", "summary": "ok"}
            return Turn(tool_calls=(ToolCall("SendMessage", report),))
        return _idle(name, body)

    def lead(messages: list[dict[str, Any]]) -> Turn:
        if "Agent" in [c["name"] for c in _calls(messages)] and "report from" not in _seen(
            messages
        ):
            return Turn(text="Waiting for alice.")
        return _after(messages, steps)

    script = Script(lead, mate)
    _proc, events = _run(tmp_path, script)
    ((spawned, failed),) = _results(events, "Agent")
    assert not failed, spawned
    team = re.search(r"agent_id: alice@(session-\w{8})\n", spawned)
    assert team is not None, spawned
    assert f"team_name: {team.group(1)} (alice joined your team" in spawned
    assert '"t1" was not made' in spawned
    found = _MEMBER.search(system_text(script.mates["alice"][0]))
    assert found is not None and found.group(2) == team.group(1)
    # She is in the lead's team: her message reached the lead.
    assert "report from alice" in _seen(script.lead_requests[-1]["messages"])


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["in-process", "tmux"])
def test_a_task_given_before_its_owner_joins_is_in_its_first_request(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    steps = [
        ToolCall("TaskCreate", {"subject": "Fix the parser", "description": "in parse.py"}),
        ToolCall("TaskUpdate", {"taskId": "1", "owner": "alice"}),
        ToolCall("Agent", {"description": "a", "prompt": "Work on your task.", "name": "alice"}),
        ToolCall("TaskList", {}),
    ]
    script = Script(lambda messages: _after(messages, steps), _idle)
    tmux = request.getfixturevalue("tmux") if backend == "tmux" else None
    _proc, events = _run(tmp_path, script, tmux=tmux)
    ((updated, failed),) = _results(events, "TaskUpdate")
    assert not failed and updated.startswith("Updated task #1 owner"), updated
    assert "alice is not in the team yet" in updated
    first = script.mates["alice"][0]["messages"]
    assert len(first) == 1  # her first request: her prompt, and the assignment with it
    shown = texts(first[0]["content"])
    assert "Work on your task." in shown[0]
    (assignment,) = [t for t in shown if "task_assignment" in t]
    payload = json.loads(assignment.split("\n", 1)[1].rsplit("\n", 1)[0])
    assert payload["type"] == "task_assignment" and payload["taskId"] == "1"
    assert payload["subject"] == "Fix the parser" and payload["assignedBy"] == "team-lead"
    ((listed, _),) = _results(events, "TaskList")
    assert listed == "#1 [pending] Fix the parser (alice)"
    # Delivered once: nothing for her is left in the mailbox.
    with contextlib.closing(sqlite3.connect(tmp_path / "home" / "taskloom.db")) as conn:
        rows = conn.execute(
            "SELECT delivered_at FROM mailbox WHERE recipient LIKE 'alice@%'"
        ).fetchall()
    assert len(rows) == 1 and rows[0][0] is not None


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["in-process", "tmux"])
def test_an_explore_teammate_keeps_its_tools_and_cannot_write(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    steps = [
        ToolCall("Agent", {"description": n, "prompt": "Write a note.", "name": n} | extra)
        for n, extra in (("scout", {"subagent_type": "Explore"}), ("maker", {}))
    ]

    def mate(name: str, body: dict[str, Any]) -> Turn:
        if not _calls(body["messages"]):
            note = {"file_path": str(tmp_path / f"{name}.txt"), "content": name}
            return Turn(tool_calls=(ToolCall("Write", note),))
        return _idle(name, body)

    def lead(messages: list[dict[str, Any]]) -> Turn:
        if len([c for c in _calls(messages) if c["name"] == "Agent"]) < 2:
            return Turn(tool_calls=tuple(steps))
        return Turn(text=FINAL)

    script = Script(lead, mate)
    tmux = request.getfixturevalue("tmux") if backend == "tmux" else None
    _run(tmp_path, script, tmux=tmux)
    lead_tools = {t["name"] for t in script.lead_requests[0]["tools"]}
    scout = script.mates["scout"]
    scout_tools = {t["name"] for t in scout[0]["tools"]}
    read_only = {"Write", "Edit", "NotebookEdit", "Agent"}
    assert scout_tools == (lead_tools - read_only - NEVER) | TEAM_TOOLS
    assert {"Read", "Grep", "Glob", "Bash"} <= scout_tools
    maker_tools = {t["name"] for t in script.mates["maker"][0]["tools"]}
    assert {"Write", "Edit", "Agent"} <= maker_tools
    # Built as an Explore subagent is: its prompt and its model, with the team's section.
    assert "read-only code explorer" in system_text(scout[0])
    assert "haiku" in scout[0]["model"] and "haiku" not in script.mates["maker"][0]["model"]
    refused = [
        b
        for b in scout[1]["messages"][-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    assert len(refused) == 1 and refused[0].get("is_error") is True
    assert not (tmp_path / "scout.txt").exists()
    assert (tmp_path / "maker.txt").read_text() == "maker"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, timeout=30
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "shared.txt").write_text("original\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "init")
    yield root
    for line in _git(root, "worktree", "list").splitlines()[1:]:  # leave nothing behind
        _git(root, "worktree", "remove", "--force", line.split()[0])


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["in-process", "tmux"])
def test_two_worktree_teammates_edit_one_file_apart(
    tmp_path: Path, repo: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    names = ("ann", "ben")

    def mate(name: str, body: dict[str, Any]) -> Turn:
        found = _WORKDIR.search(system_text(body))
        assert found is not None
        path = f"{found.group(1)}/shared.txt"
        done = len(_calls(body["messages"]))
        if done == 0:  # read before writing, as Write requires of a file that exists
            return Turn(tool_calls=(ToolCall("Read", {"file_path": path}),))
        if done == 1:
            edit = {"file_path": path, "content": f"{name} was here\n"}
            return Turn(tool_calls=(ToolCall("Write", edit),))
        return _idle(name, body)

    def lead(messages: list[dict[str, Any]]) -> Turn:
        if not _calls(messages):
            spawn = tuple(
                ToolCall(
                    "Agent",
                    {"description": n, "prompt": "Edit shared.txt.", "name": n,
                     "isolation": "worktree"},
                )
                for n in names
            )  # fmt: skip
            return Turn(tool_calls=spawn)
        return Turn(text=FINAL)

    script = Script(lead, mate)
    tmux = request.getfixturevalue("tmux") if backend == "tmux" else None
    _proc, events = _run(tmp_path, script, cwd=repo, tmux=tmux)
    spawned = _results(events, "Agent")
    assert len(spawned) == 2 and not any(failed for _, failed in spawned)
    trees = {}
    for text, _ in spawned:
        name = re.search(r"\nname: (\w+)\n", text)
        where = re.search(r"\nworktree: (.+)", text)
        assert name is not None and where is not None, text
        trees[name.group(1)] = Path(where.group(1))
    assert set(trees) == set(names) and trees["ann"] != trees["ben"]
    for name in names:
        tree = trees[name]
        assert tree.parent == repo / ".taskloom" / "worktrees"
        # It worked there (its prompt said so), and its change is kept there.
        assert f"Working directory: {tree}\n" in system_text(script.mates[name][0])
        assert (tree / "shared.txt").read_text() == f"{name} was here\n"
        writes = script.mates[name][2]["messages"][-1]["content"]
        assert not any(b.get("is_error") for b in writes if isinstance(b, dict))
    assert (repo / "shared.txt").read_text() == "original\n"
    assert _git(repo, "status", "--porcelain") == ""


async def test_a_worktree_teammate_is_on_the_roster_and_its_clean_worktree_goes(
    repo: Path,
) -> None:
    seen: dict[str, str] = {}

    def respond(request: ModelRequest) -> str:
        member = request.metadata.get("teammate")
        if member:
            seen[str(member)] = request.system
        return "ok"

    async with harness(repo, FunctionModel(respond), teams=True) as h:
        agent = next(t for t in h.tools if t.name == "Agent")

        async def spawn(**extra: Any) -> Any:
            params = {"description": "c", "prompt": "Look.", "name": "cleo"} | extra
            return await agent.call(agent.validate(params), main_context(h))

        unknown = await spawn(subagent_type="Nope", isolation="worktree")
        assert unknown.is_error and "Agent type 'Nope' not found" in unknown.content
        remote = await spawn(isolation="remote")
        assert remote.is_error and 'only "worktree" isolates it' in remote.content
        elsewhere = await spawn(cwd=str(repo))
        assert elsewhere.is_error and "no cwd" in elsewhere.content
        team = h.agents.teams.roster.team()
        assert team is None or team.member("cleo") is None  # none of those joined
        assert not (repo / ".taskloom" / "worktrees").exists() or not any(
            p.is_dir() for p in (repo / ".taskloom" / "worktrees").iterdir() if p.name != ".meta"
        )
        spawned = await spawn(isolation="worktree")
        assert not spawned.is_error, spawned.content
        member = h.agents.teams.roster.team().member("cleo")
        assert member is not None and member.worktree_path is not None
        tree = Path(member.worktree_path)
        assert tree.parent == repo / ".taskloom" / "worktrees" and tree.is_dir()
        assert member.cwd == str(tree) and member.to_json()["worktreePath"] == str(tree)
        await wait_until(lambda: "cleo@" in "".join(seen), what="cleo's first request")
        assert f"Working directory: {tree}\n" in next(iter(seen.values()))
        stop = next(t for t in h.tools if t.name == "TaskStop")
        stopped = await stop.call(stop.validate({"task_id": "cleo"}), main_context(h))
        assert not stopped.is_error, stopped.content
        # Nothing in it would be lost: it is removed, as a clean subagent worktree is.
        await wait_until(lambda: not tree.exists(), what="cleo's worktree to be removed")
    assert _git(repo, "worktree", "list").count("\n") == 1


async def test_a_teammate_of_a_custom_type_has_its_prompt_tools_and_mode(tmp_path: Path) -> None:
    seen: dict[str, ModelRequest] = {}

    def respond(request: ModelRequest) -> str:
        member = request.metadata.get("teammate")
        if member:
            seen[str(member).split("@")[0]] = request
        return "ok"

    reviewer = {
        "description": "Reviews changes.",
        "prompt": "You review code and never change it.",
        "tools": ["Read", "Grep"],
        "permissionMode": "plan",
    }
    async with harness(
        tmp_path, FunctionModel(respond), teams=True, agents=json.dumps({"reviewer": reviewer})
    ) as h:
        agent = next(t for t in h.tools if t.name == "Agent")
        params = {"description": "r", "prompt": "Review.", "name": "rex"}
        spawned = await agent.call(
            agent.validate(params | {"subagent_type": "reviewer"}), main_context(h)
        )
        assert not spawned.is_error, spawned.content
        await wait_until(lambda: "rex" in seen, what="rex's first request")
        run = h.agents.teams.executor.local_run(next(iter(h.agents.teams.executor.local.members())))
        assert run is not None and run.engine.config.permissions is not None
        assert str(run.engine.config.permissions.mode) == "plan"
        member = h.agents.teams.roster.team().member("rex")
        assert member is not None and member.agent_type == "reviewer"
    request = seen["rex"]
    assert {t.name for t in request.tools} == {"Read", "Grep"} | TEAM_TOOLS
    assert request.system.startswith("You review code and never change it.")
    assert 'You are rex, a member of the agent team "' in request.system
    assert "You start in plan mode" in request.system  # its type's mode, told as such


async def test_a_teammate_starts_only_the_agent_types_its_type_names(tmp_path: Path) -> None:
    """``Agent(Explore)`` in a type's tools limits its teammates' Agent tool, as a subagent's."""
    seen: dict[str, list[ModelRequest]] = {}

    from taskloom import testing

    def respond(request: ModelRequest) -> testing.Turn | str:
        member = request.metadata.get("teammate")
        if not member or request.metadata.get("agent_type") != "teammate":
            return "done"  # the lead, or a subagent
        mine = seen.setdefault(str(member).split("@")[0], [])
        mine.append(request)
        if len(mine) == 1:
            spawn = {"description": "gp", "prompt": "Job.", "subagent_type": "general-purpose"}
            return testing.Turn(tool_calls=(testing.ToolCall("Agent", spawn),))
        return "idle"

    scout = {
        "description": "Looks around.",
        "prompt": "You look around.",
        "tools": ["Read", "Agent(Explore)"],
    }
    async with harness(
        tmp_path, FunctionModel(respond), teams=True, agents=json.dumps({"scout": scout})
    ) as h:
        agent = next(t for t in h.tools if t.name == "Agent")
        params = {"description": "s", "prompt": "Go.", "name": "sam", "subagent_type": "scout"}
        spawned = await agent.call(agent.validate(params), main_context(h))
        assert not spawned.is_error, spawned.content
        await wait_until(lambda: len(seen.get("sam", [])) >= 2, what="sam's second request")
    first, second = seen["sam"][:2]
    described = next(t.description for t in first.tools if t.name == "Agent")
    assert "- Explore:" in described and "- general-purpose:" not in described
    (result,) = [b for b in second.messages[-1].content if b.type == "tool_result"]
    assert result.is_error and "general-purpose" in result.text(), result.text()


async def test_a_task_given_to_a_teammate_that_ended_says_it_waits(tmp_path: Path) -> None:
    from taskloom.tasks.teammate import TeammateTaskState

    async with harness(tmp_path, FunctionModel(lambda request: "ok"), teams=True) as h:
        tools = {t.name: t for t in h.tools}

        async def call(name: str, params: dict[str, Any]) -> Any:
            tool = tools[name]
            return await tool.call(tool.validate(params), main_context(h))

        spawned = await call("Agent", {"description": "b", "prompt": "Go.", "name": "bob"})
        assert not spawned.is_error, spawned.content
        bob = lambda: [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]  # noqa: E731
        await wait_until(lambda: bool(bob()) and bob()[0].is_idle, what="bob idle")
        stopped = await call("TaskStop", {"task_id": "bob"})
        assert not stopped.is_error, stopped.content
        roster = h.agents.teams.roster
        await wait_until(lambda: not roster.team().member("bob").is_active, what="bob ended")
        await call("TaskCreate", {"subject": "Fix it", "description": "now"})
        updated = await call("TaskUpdate", {"taskId": "1", "owner": "bob"})
    assert not updated.is_error and updated.content.startswith("Updated task #1 owner")
    assert "bob has ended and is not working" in updated.content, updated.content

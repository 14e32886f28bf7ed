"""Worktree-isolated subagents with real git."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers import harness, main_context
from taskloom import Harness
from taskloom.agents.service import SpawnRequest
from taskloom.errors import ToolError
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, timeout=30
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "shared.txt").write_text("original\n")
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")
    yield root
    listed = git(root, "worktree", "list")
    for line in listed.splitlines()[1:]:  # leave nothing behind, even on failure
        git(root, "worktree", "remove", "--force", line.split()[0])
    assert len(git(root, "worktree", "list").splitlines()) == 1


def scripted(commands: dict[str, list[str]]) -> FunctionModel:
    """Each agent (by description) runs its commands one per turn, then answers."""

    def respond(request: ModelRequest) -> Turn | str:
        steps = commands[request.metadata["description"]]
        done = sum(1 for m in request.messages if m.role == "assistant")
        if done < len(steps):
            return Turn(tool_calls=(ToolCall("Bash", {"command": steps[done]}),))
        return f"finished {request.metadata['description']}"

    return FunctionModel(respond)


def session(repo: Path, model: FunctionModel, **options: Any) -> Harness:
    """A session in ``repo`` in bypassPermissions mode."""
    return harness(repo, model, **options)  # type: ignore[no-any-return]


def request(name: str) -> SpawnRequest:
    return SpawnRequest(description=name, prompt="work", isolation="worktree")


async def test_clean_worktree_agent_leaves_nothing(repo: Path) -> None:
    async with session(repo, scripted({"look": ["cat shared.txt"]})) as h:
        svc, ctx = h.agents, main_context(h)
        result = await svc.spawn(request("look"), ctx)
    assert result.status == "completed" and "worktreePath" not in result.extra
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert git(repo, "branch", "--list", "taskloom/*").strip() == ""


async def test_work_is_kept_and_named_and_parallel_agents_are_isolated(repo: Path) -> None:
    model = scripted(
        {
            "commit": [
                "echo from-a > shared.txt && git -c user.name=a -c user.email=a@l "
                "commit -qam 'a change'",
                "cat shared.txt",
            ],
            "untracked": ["echo from-b > shared.txt; echo new > notes.txt", "cat shared.txt"],
        }
    )
    async with session(repo, model) as h:
        svc, ctx = h.agents, main_context(h)
        a, b = await asyncio.gather(
            svc.spawn(request("commit"), ctx), svc.spawn(request("untracked"), ctx)
        )
    for result, mark in ((a, "from-a"), (b, "from-b")):
        path = Path(result.extra["worktreePath"])
        assert path.is_dir() and result.extra["worktreeBranch"].startswith("taskloom/agent-")
        assert f"[worktree kept: {path}" in result.content
        assert (path / "shared.txt").read_text() == f"{mark}\n"  # each saw only its own edit
    assert "notes.txt" in b.content and "shared.txt" in a.content
    assert (repo / "shared.txt").read_text() == "original\n"  # the main tree is untouched
    assert not (repo / "notes.txt").exists()


async def test_worktree_creation_failure_is_a_tool_error_and_nothing_runs(repo: Path) -> None:
    model = scripted({"doomed": ["touch ran-anyway"]})
    async with session(repo, model) as h:
        svc, rt, ctx = h.agents, h.runtime, main_context(h)
        taken = rt.new_id  # the next agent id is known: take its branch name first

        def fixed_id(task_type: Any) -> str:
            return "abranch01"

        rt.new_id = fixed_id  # type: ignore[method-assign]
        git(repo, "branch", "taskloom/agent-abranch0")
        with pytest.raises(ToolError, match="Worktree isolation failed"):
            await svc.spawn(request("doomed"), ctx)
        rt.new_id = taken  # type: ignore[method-assign]
        assert model.requests == []
    assert not (repo / "ran-anyway").exists()
    git(repo, "branch", "-D", "taskloom/agent-abranch0")


async def test_file_tools_are_confined_to_the_worktree(repo: Path) -> None:
    outside = repo / "shared.txt"

    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Read", {"file_path": str(outside)}),))
        return "done"

    async with session(repo, FunctionModel(respond)) as h:
        svc, ctx = h.agents, main_context(h)
        await svc.spawn(request("reader"), ctx)
        run = next(iter(svc.runs.values()))
        refused = run.engine.messages[2].content[0]
        assert refused.is_error and "inside this agent's worktree" in refused.text()  # type: ignore[union-attr]


async def test_a_failed_agent_still_reports_its_kept_worktree(repo: Path) -> None:
    from taskloom.errors import ModelError

    def respond(request: ModelRequest) -> Turn:
        if len(request.messages) == 1:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo work > work.txt"}),))
        raise ModelError("overloaded")

    async with session(repo, FunctionModel(respond)) as h:
        svc, ctx = h.agents, main_context(h)
        with pytest.raises(ToolError) as err:
            await svc.spawn(request("doomed"), ctx)
    message = str(err.value)
    assert "overloaded" in message and "[worktree kept:" in message and "work.txt" in message


async def test_setup_failure_after_the_worktree_removes_it_and_ends_the_task(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with session(repo, scripted({"x": []})) as h:
        svc, rt, ctx = h.agents, h.runtime, main_context(h)

        def broken_tools(*args: Any) -> list[Any]:
            raise RuntimeError("tool registry exploded")

        # The session's subagent tools are made from the registry at each spawn.
        monkeypatch.setattr("taskloom.tools.registry.core_tools", broken_tools)
        with pytest.raises(RuntimeError):
            await svc.spawn(request("x"), ctx)
        assert [s.status for s in rt.list()] == ["failed"]
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert git(repo, "branch", "--list", "taskloom/*").strip() == ""


async def test_ignored_work_keeps_the_worktree_but_caches_do_not(repo: Path) -> None:
    (repo / ".gitignore").write_text(".env\n__pycache__/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    model = scripted(
        {
            "caches": ["mkdir -p __pycache__ && echo x > __pycache__/m.pyc"],
            "secrets": ["echo KEY=1 > .env"],
        }
    )
    async with session(repo, model) as h:
        svc, ctx = h.agents, main_context(h)
        caches = await svc.spawn(request("caches"), ctx)
        secrets = await svc.spawn(request("secrets"), ctx)
    assert "worktreePath" not in caches.extra
    assert ".env" in secrets.content and "ignored by git, kept" in secrets.content
    assert (Path(secrets.extra["worktreePath"]) / ".env").read_text() == "KEY=1\n"


async def test_resuming_a_worktree_agent_stays_isolated(repo: Path) -> None:
    def respond(request: ModelRequest) -> Turn | str:
        texts = " ".join(
            b.text
            for m in request.messages[-1:]
            for b in m.content
            if getattr(b, "type", "") == "text"
        )
        if "write it" in texts:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "echo later > later.txt"}),))
        return "ok"

    async with session(repo, FunctionModel(respond)) as h:
        svc, rt, ctx = h.agents, h.runtime, main_context(h)
        first = await svc.spawn(request("resumable"), ctx)
        assert "worktreePath" not in first.extra  # clean: removed
        await svc.send(first.agent_id, "now write it", ctx)
        state = await rt.wait(first.agent_id, timeout=20)
        assert state.status == "completed"
        kept = Path(state.worktree_path)  # type: ignore[attr-defined]
        assert (kept / "later.txt").read_text() == "later\n"
    assert not (repo / "later.txt").exists()


async def test_a_fork_refuses_isolation(repo: Path, tmp_path: Path) -> None:
    import json

    async with session(repo, scripted({}), settings=json.dumps({"forkSubagent": True})) as h:
        svc, parent = h.agents, h.session.engine
        ctx = dataclasses.replace(main_context(h), engine=parent)
        with pytest.raises(ToolError, match="A fork works in its parent's directory"):
            await svc.spawn(SpawnRequest(description="f", prompt="p", isolation="worktree"), ctx)


async def test_an_agent_in_a_worktree_reads_its_own_saved_output(repo: Path) -> None:
    # A long output is saved under the session's directory, outside the worktree; the preview
    # tells the agent to read it there, and it may (but not write there).
    import re

    from taskloom.messages import ToolResultBlock

    seen: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        n = sum(1 for m in request.messages if m.role == "assistant")
        last = request.messages[-1].content
        seen.extend(b.text() for b in last if isinstance(b, ToolResultBlock))
        if n == 0:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "seq 1 20000"}),))
        if n == 1:
            path = re.search(r"saved to: (\S+)", seen[-1]).group(1)  # type: ignore[union-attr]
            read = {"file_path": path, "offset": 19990, "limit": 5}
            return Turn(tool_calls=(ToolCall("Read", read),))
        return "done"

    async with session(repo, FunctionModel(respond)) as h:
        await h.agents.spawn(request("reader"), main_context(h))
    assert "19990" in seen[-1] and "<tool_use_error>" not in seen[-1], seen[-1]


async def test_an_agent_in_a_worktree_reads_its_background_commands_output(repo: Path) -> None:
    # Its background command's output file is under the session's directory: readable too.
    import re

    from taskloom.messages import ToolResultBlock

    seen: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        n = sum(1 for m in request.messages if m.role == "assistant")
        last = request.messages[-1].content
        seen.extend(b.text() for b in last if isinstance(b, ToolResultBlock))
        if n == 0:
            bg = {"command": "echo from-the-background", "run_in_background": True}
            return Turn(tool_calls=(ToolCall("Bash", bg),))
        if n == 1:
            path = re.search(r"written to: (\S+?)\.? ", seen[-1]).group(1)  # type: ignore[union-attr]
            return Turn(tool_calls=(ToolCall("Read", {"file_path": path}),))
        return "done"

    async with session(repo, FunctionModel(respond)) as h:
        await h.agents.spawn(request("reader"), main_context(h))
    assert "<tool_use_error>" not in seen[1], seen[1]

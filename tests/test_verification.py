"""The verification agent (reads and runs, never writes) and the nudge to spawn it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import taskloom
from taskloom.agents.builtins import builtin
from taskloom.agents.verification import NUDGE
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.permissions import PermissionPolicy, PermissionRequest
from taskloom.testing import ScriptedModel, ToolCall, Turn


def todos(*statuses: str) -> ToolCall:
    items = [
        {"content": f"Step {i}", "status": s, "activeForm": f"Doing step {i}"}
        for i, s in enumerate(statuses, 1)
    ]
    return ToolCall("TodoWrite", {"todos": items})


def nudged(request: ModelRequest) -> int:
    """How many times the last user message of ``request`` carries the nudge."""
    last = request.messages[-1]
    return sum(b.text.count(NUDGE) for b in last.content if isinstance(b, TextBlock))


async def run(tmp_path: Path, turns: list[Any], **options: Any) -> ScriptedModel:
    model = ScriptedModel(turns, subagents=options.pop("subagents", None))
    async with taskloom.Harness(model=model, cwd=tmp_path, **options) as h:
        [e async for e in h.run("do the three steps")]
        await h.end()
    return model


async def test_the_nudge_comes_after_the_third_completed_task_and_not_before(
    tmp_path: Path,
) -> None:
    model = await run(
        tmp_path,
        [
            Turn(tool_calls=[todos("completed", "in_progress", "pending")]),
            # Step 1 sent again as done: it was done already, so 2 tasks now, not 3.
            Turn(tool_calls=[todos("completed", "completed", "in_progress")]),
            Turn(tool_calls=[todos("completed", "completed", "completed")]),
            Turn(tool_calls=[todos("pending")]),  # the next request: no second nudge
            "All three steps are done.",
        ],
    )
    counts = [nudged(r) for r in model.requests]
    assert counts == [0, 0, 0, 1, 0]
    # It is a reminder beside the tool result, not the result itself.
    after = model.requests[3].messages[-1].content
    assert isinstance(after[0], ToolResultBlock) and NUDGE not in str(after[0].content)


async def test_a_new_turn_counts_again_from_zero(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Turn(tool_calls=[todos("completed", "completed", "pending")]),
            "Two done.",
            Turn(tool_calls=[todos("completed", "completed", "completed")]),
            "Third done.",
        ]
    )
    async with taskloom.Harness(model=model, cwd=tmp_path) as h:
        [e async for e in h.run("first")]
        [e async for e in h.run("second")]
        await h.end()
    # The second turn completed one task (the others were done before it): no nudge.
    assert [nudged(r) for r in model.requests] == [0, 0, 0, 0]


async def test_spawning_the_verifier_in_the_turn_means_no_nudge(tmp_path: Path) -> None:
    spawn = ToolCall(
        "Agent",
        {"description": "Verify", "prompt": "Check steps", "subagent_type": "verification"},
    )
    model = await run(
        tmp_path,
        [
            Turn(tool_calls=[spawn]),
            Turn(tool_calls=[todos("completed", "completed", "completed")]),
            "Waiting for the verdict.",
            "Verified: PASS.",
        ],
        subagents={"verification": "VERDICT: PASS\nAll three steps check out."},
    )
    assert sum(nudged(r) for r in model.requests) == 0
    told = [r.messages[-1].model_dump_json() for r in model.requests]
    assert any("VERDICT: PASS" in text for text in told)


async def test_the_setting_turns_the_nudge_off(tmp_path: Path) -> None:
    model = await run(
        tmp_path,
        [Turn(tool_calls=[todos("completed", "completed", "completed")]), "Done."],
        settings=json.dumps({"verificationNudge": False}),
    )
    assert [nudged(r) for r in model.requests] == [0, 0]


async def test_team_tasks_marked_completed_count_too(tmp_path: Path) -> None:
    create = [ToolCall("TaskCreate", {"subject": f"T{i}", "description": "x"}) for i in (1, 2, 3)]
    done = [ToolCall("TaskUpdate", {"taskId": str(i), "status": "completed"}) for i in (1, 2, 3)]
    model = await run(
        tmp_path,
        [
            Turn(tool_calls=[ToolCall("TeamCreate", {"team_name": "crew"})]),
            Turn(tool_calls=create),
            Turn(tool_calls=done[:2]),
            Turn(tool_calls=done[2:]),
            "Done.",
        ],
        teams=True,
    )
    assert [nudged(r) for r in model.requests] == [0, 0, 0, 0, 1]


async def test_the_verification_agent_cannot_write(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("original\n")
    attempts = [
        ToolCall("Write", {"file_path": str(tmp_path / "new.txt"), "content": "x"}),
        ToolCall("Bash", {"command": "echo changed > keep.txt"}),
        ToolCall("Bash", {"command": "rm keep.txt"}),
        ToolCall("Bash", {"command": "sh -c 'touch made.txt'"}),
        ToolCall("Bash", {"command": "cat keep.txt"}),
    ]
    model = await run(
        tmp_path,
        [
            Turn(
                tool_calls=[
                    ToolCall(
                        "Agent",
                        {"description": "Verify", "prompt": "Try", "subagent_type": "verification"},
                    )
                ]
            ),
            "Started the verifier.",
            "Got its verdict.",
        ],
        # Even where every call is allowed, the verifier's writes are not.
        skip_permissions=True,
        subagents={"verification": [Turn(tool_calls=[a]) for a in attempts] + ["VERDICT: FAIL"]},
    )
    assert (tmp_path / "keep.txt").read_text() == "original\n"
    assert not (tmp_path / "new.txt").exists() and not (tmp_path / "made.txt").exists()
    offered = {t.name for t in model.agent_requests[0].tools}
    assert {"Bash", "Read", "Grep"} <= offered
    assert not offered & {"Write", "Edit", "NotebookEdit", "Agent"}
    results = [
        block
        for r in model.agent_requests[1:]
        for block in r.messages[-1].content
        if isinstance(block, ToolResultBlock)
    ]
    assert len(results) == len(attempts)
    assert all(r.is_error for r in results[:4])
    assert "read-only" in str(results[1].content) and "keep.txt" in str(results[1].content)
    assert "rm keep.txt" in str(results[2].content)
    assert "touch made.txt" in str(results[3].content)
    assert not results[4].is_error and "original" in str(results[4].content)


def test_the_read_only_policy_refuses_writes_in_every_mode_and_lets_reads_through(
    tmp_path: Path,
) -> None:
    policy = PermissionPolicy("bypassPermissions", (), tmp_path).read_only()

    def decide(tool: str, kind: str, command: str | None) -> str:
        request = PermissionRequest(tool, kind, command, tmp_path)  # type: ignore[arg-type]
        return policy.decide(request).behavior

    assert decide("Bash", "execute", "pytest -q 2>&1 | tail -5") == "allow"
    assert decide("Bash", "execute", "git diff && git status") == "allow"
    assert decide("Bash", "execute", "cat > /tmp/check.py <<'EOF'\nprint(1 > 0)\nEOF") == "allow"
    assert decide("Bash", "execute", "echo x >> notes.md") == "deny"
    assert decide("Bash", "execute", "git commit -am wip") == "deny"
    assert decide("Bash", "execute", "x=$(sed -i s/a/b/ f)") == "deny"
    assert decide("mcp__fs__write", "edit", "/x") == "deny"
    # A copy made from it (an agent's memory directory) stays read-only.
    assert policy.with_directories([tmp_path]).is_read_only
    # The built-in is the one that is read-only (and runs in the background, in red).
    agent = builtin("verification")
    assert agent.read_only and agent.background and agent.color == "red"

"""The verification agent (reads and runs, never writes) and the nudge to spawn it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import taskloom
from taskloom.agents.builtins import builtin
from taskloom.agents.filter import SPAWNING
from taskloom.agents.verification import NUDGE, can_spawn_verifier
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
    told = [json.dumps(r.messages[-1].full()) for r in model.requests]
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
    assert decide("mcp__fs__write", "execute", None) == "deny"  # not declared read-only
    # A copy made from it (an agent's memory directory) stays read-only.
    assert policy.with_directories([tmp_path]).is_read_only
    # The built-in is the one that is read-only (and runs in the background, in red).
    agent = builtin("verification")
    assert agent.read_only and agent.background and agent.color == "red"


#: Commands that write files and only show it once the shell's own syntax is seen through.
WRITES = [
    "(rm x)",
    "! rm x",
    "{ rm x; }",
    "if true; then rm x; fi",
    "if false; then :; else rm x; fi",
    "for f in a; do rm $f; done",
    "while true; do rm x; break; done",
    "until false; do rm x; done",
    "case a in a) rm x;; esac",
    "f() { rm x; }",
    "echo 'rm -rf x' | sh",
    "echo x | bash",
    "bash <<'EOF'\nrm x\nEOF",
    "eval 'echo hi > f'",
    "env -C d rm x",
    "env -S 'rm x'",
    "nice -n 5 rm x",
    "timeout 10 rm x",
    "sudo -u someone rm x",
    "xargs rm",
    "xargs -0 rm -f",
    "find . -name '*.pyc' | xargs -I{} mv {} old/",
    "git -C d commit -m x",
    "git -C . add .",
    "git --git-dir=d/.git commit -m x",
    "git --git-dir d/.git --work-tree . commit -m x",
    "git -c core.x=y commit -m x",
    "git --work-tree=. checkout -- f",
    "git --no-pager stash",
    "find . -delete",
    "find . -fprint out",
    "find . -fprintf out '%p'",
    "find . -exec rm {} +",
    "find . -exec sh -c 'touch made' \\;",
    "tar xf a.tar",
    "tar -xzf a.tgz",
    "tar czf out.tgz src",
    "tar --extract -f a.tar",
    "unzip a.zip",
    "curl -o out http://x",
    "curl -sSLo out http://x",
    "curl -O http://x/f",
    "curl --output=out http://x",
    "wget http://x",
    "wget -O out http://x",
    "python -c \"open('x','w').write('1')\"",
    "python3 -c 'print(1)'",
    "python3.11 -Ic 'print(1)'",
    "python - <<'EOF'\nopen('x','w')\nEOF",
    "uv run python -c 'print(1)'",
    'node -e \'require("fs").writeFileSync("x", "")\'',
    "perl -e 'open F, \">x\"'",
    "perl -ne 'print' f",
    'ruby -e \'File.write("x", "")\'',
    "cp a b",
    "cp a /tmp/../etc/x",
    "mv /tmp/a here",
    "echo x | tee out",
]

#: Commands that only read or test, or write only under the temporary directory.
READS = [
    "ls -la && git status",
    "git -C d log --oneline -3",
    "git --no-pager diff",
    "git -c color.ui=never show HEAD",
    "python -m pytest -q",
    "timeout 60 python -m pytest -x",
    "env PYTHONPATH=src python -m pytest",
    "python tests/check.py",
    "python /tmp/check.py",
    "bash /tmp/check.sh",
    "python --version && node --version",
    "cd sub && pytest -q",
    "for f in *.py; do wc -l $f; done",
    "if [ -f x ]; then cat x; fi",
    "(cd sub && git status)",
    "grep -r 'rm -rf' . | head",
    "echo 'git commit' | grep commit",
    "find . -name '*.py' -exec grep -l todo {} +",
    "echo a b | xargs -n 1 echo",
    "cat f | sh -c 'grep x'",
    "tar tf a.tar",
    "tar -tzf a.tgz",
    "unzip -l a.zip",
    "curl -s http://x",
    "curl -sSL -o /tmp/page.html http://x",
    "wget -qO- http://x",
    "cp a /tmp/a.bak",
    "cp -r src tests /tmp/copy/",
    "mkdir -p /tmp/verify && cp a /tmp/verify/",
    "rm -f /tmp/check.py",
    "echo x | tee /tmp/log",
]


def _decision(tmp_path: Path, command: str) -> tuple[str, str]:
    policy = PermissionPolicy("bypassPermissions", (), tmp_path).read_only()
    decision = policy.decide(PermissionRequest("Bash", "execute", command, tmp_path))
    return decision.behavior, decision.reason


@pytest.mark.parametrize("command", WRITES)
def test_the_read_only_policy_sees_writes_through_the_shells_syntax(
    tmp_path: Path, command: str
) -> None:
    behavior, reason = _decision(tmp_path, command)
    assert behavior == "deny", reason
    assert "read-only" in reason


@pytest.mark.parametrize("command", READS)
def test_the_read_only_policy_lets_reads_tests_and_temp_writes_through(
    tmp_path: Path, command: str
) -> None:
    behavior, reason = _decision(tmp_path, command)
    assert behavior == "allow", reason


def test_inline_interpreter_code_is_refused_with_what_to_do_instead(tmp_path: Path) -> None:
    _, reason = _decision(tmp_path, "python -c 'print(1)'")
    assert "inline python code (-c)" in reason
    assert "python -m pytest" in reason
    # Nothing steers it to a script of its own, which the policy could not judge.
    assert "/tmp" not in reason and "temporary" not in reason and "by its path" not in reason
    _, reason = _decision(tmp_path, "git -C d commit -m x")
    assert "'git commit -m x'" in reason
    _, reason = _decision(tmp_path, "echo 'rm x' | sh")
    assert "on its input" in reason and "/tmp" not in reason and "by its path" not in reason
    _, reason = _decision(tmp_path, "echo x > notes.md")
    assert "notes.md" in reason and "/tmp" not in reason and "temporary" not in reason


def _spawn_verifier() -> Turn:
    spawn = {"description": "Verify", "prompt": "Try", "subagent_type": "verification"}
    return Turn(tool_calls=[ToolCall("Agent", spawn)])


async def test_a_read_only_agent_is_offered_no_spawning_tool_even_with_nesting_allowed(
    tmp_path: Path,
) -> None:
    model = await run(
        tmp_path,
        [_spawn_verifier(), "Started the verifier.", "Got its verdict."],
        settings=json.dumps({"allowNestedAgents": True, "workflows": True}),
        subagents={"verification": ["VERDICT: PASS"]},
    )
    offered = {t.name for t in model.agent_requests[0].tools}
    assert "Bash" in offered
    assert not offered & SPAWNING
    # The main thread (not read-only) keeps its Agent tool.
    assert "Agent" in {t.name for t in model.requests[0].tools}


async def test_a_hook_allowing_a_write_does_not_lift_the_read_only_refusal(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep.txt").write_text("original\n")
    allow = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
    hook = tmp_path / "allow.sh"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(allow)}'\n")
    hook.chmod(0o755)
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": str(hook)}]}]
    }
    attempts = [
        ToolCall("Bash", {"command": "rm keep.txt"}),
        ToolCall("Bash", {"command": "cat keep.txt"}),
    ]
    model = await run(
        tmp_path,
        [_spawn_verifier(), "Started the verifier.", "Got its verdict."],
        settings=json.dumps({"hooks": hooks}),
        subagents={"verification": [Turn(tool_calls=[a]) for a in attempts] + ["VERDICT: FAIL"]},
    )
    assert (tmp_path / "keep.txt").read_text() == "original\n"
    results = [
        block
        for r in model.agent_requests[1:]
        for block in r.messages[-1].content
        if isinstance(block, ToolResultBlock)
    ]
    assert len(results) == 2
    assert results[0].is_error and "read-only" in str(results[0].content)
    # The hook's allow still skips the prompt for what only reads (default mode would ask).
    assert not results[1].is_error and "original" in str(results[1].content)


@pytest.mark.parametrize(
    "settings",
    [
        {"permissions": {"deny": ["Agent(verification)"]}},
        {"permissions": {"deny": ["Agent"]}},
    ],
)
async def test_no_nudge_when_the_verifier_cannot_be_spawned(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    model = await run(
        tmp_path,
        [Turn(tool_calls=[todos("completed", "completed", "completed")]), "Done."],
        settings=json.dumps(settings),
    )
    assert [nudged(r) for r in model.requests] == [0, 0]


async def test_no_nudge_without_the_agent_tool(tmp_path: Path) -> None:
    model = await run(
        tmp_path,
        [Turn(tool_calls=[todos("completed", "completed", "completed")]), "Done."],
        disallowed_tools=["Agent"],
    )
    assert "Agent" not in {t.name for t in model.requests[0].tools}
    assert [nudged(r) for r in model.requests] == [0, 0]


def test_can_spawn_verifier_needs_an_agent_tool(tmp_path: Path) -> None:
    assert not can_spawn_verifier([], None, tmp_path)

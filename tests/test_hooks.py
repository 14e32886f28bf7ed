"""Hooks: Claude Code's settings format, matchers, and real shell hooks run to the end."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from helpers import TIME_FACTOR, alive, run_processes, wait_until
from taskloom.engine import Engine, EngineConfig, ToolDone
from taskloom.hooks import (
    MAX_CAPTURE_BYTES,
    CallerGone,
    CommandHook,
    HookConfig,
    HookEvent,
    HookOutcome,
    run_hooks,
)
from taskloom.permissions import PermissionPolicy, PermissionRequest
from taskloom.permissions.prompter import PromptAnswer
from taskloom.process.spawn import TASK_ENV
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.bash import BashTool


def cfg(
    event: str, *entries: tuple[str | None, list[str]], timeout: float | None = None
) -> HookConfig:
    """A config with one entry per (matcher, commands) pair."""
    items = []
    for matcher, commands in entries:
        hooks = []
        for command in commands:
            hook: dict[str, Any] = {"type": "command", "command": command}
            if timeout is not None:
                hook["timeout"] = timeout
            hooks.append(hook)
        entry: dict[str, Any] = {"hooks": hooks}
        if matcher is not None:
            entry["matcher"] = matcher
        items.append(entry)
    return HookConfig.from_settings({"hooks": {event: items}})


def commands(config: HookConfig, event: str, target: str | None) -> list[str]:
    return [h.command for h in config.matching(event, target)]


async def fire(
    config: HookConfig,
    event: str,
    cwd: Path,
    target: str | None = "Bash",
    payload: dict[str, Any] | None = None,
) -> HookOutcome:
    return await run_hooks(
        config,
        event,
        payload if payload is not None else {"tool_name": target},
        target=target,
        cwd=cwd,
        session_id="s-1",
        transcript_path=str(cwd / "transcript.jsonl"),
    )


def script(tmp_path: Path, name: str, body: str) -> str:
    """Write an executable hook script and return the command that runs it."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def hook_processes() -> list[psutil.Process]:
    """This run's live processes carrying a hook tag (what a hook leaves behind)."""
    return run_processes(lambda p: (p.info["environ"] or {}).get(TASK_ENV, "").startswith("hook-"))


# --- configuration ---------------------------------------------------------------------------


def test_matcher_exact_name_does_not_match_longer_names() -> None:
    config = cfg("PreToolUse", ("Bash", ["a"]), ("Edit", ["b"]))
    assert commands(config, "PreToolUse", "Bash") == ["a"]
    assert commands(config, "PreToolUse", "Edit") == ["b"]
    assert commands(config, "PreToolUse", "NotebookEdit") == []
    assert commands(config, "PreToolUse", "BashOutput") == []


def test_matcher_pipe_list() -> None:
    config = cfg("PostToolUse", ("Edit|Write", ["fmt"]))
    assert commands(config, "PostToolUse", "Edit") == ["fmt"]
    assert commands(config, "PostToolUse", "Write") == ["fmt"]
    assert commands(config, "PostToolUse", "Read") == []


def test_matcher_regex_is_a_full_match() -> None:
    config = cfg("PreToolUse", ("mcp__.*__write", ["m"]), ("Notebook.*", ["n"]))
    assert commands(config, "PreToolUse", "mcp__fs__write") == ["m"]
    assert commands(config, "PreToolUse", "mcp__fs__write_all") == []
    assert commands(config, "PreToolUse", "NotebookEdit") == ["n"]
    assert commands(config, "PreToolUse", "MyNotebookEdit") == []


@pytest.mark.parametrize("matcher", [None, "", "*"])
def test_matcher_empty_or_star_matches_all(matcher: str | None) -> None:
    config = cfg("PreToolUse", (matcher, ["all"]))
    assert commands(config, "PreToolUse", "Anything") == ["all"]
    assert commands(config, "PreToolUse", None) == ["all"]


def test_subagent_events_match_agent_type_and_others_ignore_matchers() -> None:
    config = HookConfig.from_settings(
        {
            "hooks": {
                "SubagentStop": [
                    {"matcher": "Explore|Plan", "hooks": [{"type": "command", "command": "s"}]}
                ],
                "Stop": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "t"}]}],
            }
        }
    )
    assert commands(config, HookEvent.SUBAGENT_STOP, "Plan") == ["s"]
    assert commands(config, HookEvent.SUBAGENT_STOP, "general-purpose") == []
    assert commands(config, "Stop", None) == ["t"]
    assert commands(config, "SubagentStart", "Plan") == []
    assert commands(config, "NoSuchEvent", "Bash") == []


def test_defaults_dedup_merge_and_disable() -> None:
    config = cfg("PreToolUse", ("Bash", ["x", "y"]), ("*", ["x"]))
    assert config.matching("PreToolUse", "Bash") == [CommandHook("x", 60.0), CommandHook("y", 60.0)]
    agent = cfg("PreToolUse", ("Bash", ["agent-only"]), timeout=5)
    both = config.merged(agent)
    assert commands(both, "PreToolUse", "Bash") == ["x", "y", "agent-only"]
    assert both.matching("PreToolUse", "Bash")[-1].timeout == 5.0
    assert commands(config, "PreToolUse", "Bash") == ["x", "y"]  # merged() made a new config
    assert not HookConfig.from_settings({})
    assert not HookConfig.from_settings(
        {
            "disableAllHooks": True,
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]},
        }
    )


def test_malformed_entries_are_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    good = {"type": "command", "command": "ok"}
    settings = {
        "hooks": {
            "PreToolUse": [
                "not an object",
                {"matcher": "Bash", "hooks": "not a list"},
                {"matcher": 3, "hooks": [good]},
                {"matcher": "([", "hooks": [good]},
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "prompt", "prompt": "is this ok?"},
                        {"type": "command"},
                        {"type": "command", "command": "t", "timeout": -1},
                        {"type": "command", "command": "t", "timeout": True},
                        good,
                    ],
                },
            ],
            "Stop": {"not": "a list"},
            "PostToolBatch": [{"hooks": [good]}],
        }
    }
    with caplog.at_level(logging.WARNING, logger="taskloom.hooks"):
        config = HookConfig.from_settings(settings)
    assert commands(config, "PreToolUse", "Bash") == ["ok"]
    assert commands(config, "Stop", None) == []
    text = caplog.text
    for where in (
        "PreToolUse[0]",
        "PreToolUse[1]",
        "PreToolUse[2]",
        "PreToolUse[3]",
        "PreToolUse[4].hooks[0]",
        "PreToolUse[4].hooks[1]",
        "PreToolUse[4].hooks[2]",
        "PreToolUse[4].hooks[3]",
    ):
        assert where in text
    assert "'prompt'" in text
    assert "Stop" in text and "PostToolBatch" in text
    assert all(r.name == "taskloom.hooks" for r in caplog.records)


# --- running ---------------------------------------------------------------------------------


async def test_no_matching_hook_spawns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"

    async def no_spawn(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a process was spawned")

    monkeypatch.setattr(asyncio.get_running_loop(), "subprocess_exec", no_spawn)
    config = cfg("PreToolUse", ("Write", [f"touch {marker}"]))
    outcome = await fire(config, "PreToolUse", tmp_path, target="Bash")
    assert outcome == HookOutcome()
    outcome = await fire(HookConfig(), "Stop", tmp_path, target=None)
    assert outcome == HookOutcome()
    assert not marker.exists()
    # The guard works: a matching hook does reach the spawn.
    with pytest.raises(ExceptionGroup):
        await fire(config, "PreToolUse", tmp_path, target="Write")


async def test_only_matching_hooks_run(tmp_path: Path) -> None:
    config = cfg(
        "PreToolUse",
        ("Bash", [f"touch {tmp_path}/exact"]),
        ("Edit|Write", [f"touch {tmp_path}/pipe"]),
        ("Wr.*", [f"touch {tmp_path}/regex"]),
        ("*", [f"touch {tmp_path}/star"]),
    )
    outcome = await fire(config, "PreToolUse", tmp_path, target="Write")
    assert not outcome.errors and not outcome.blocked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "regex", "star"]


async def test_stdin_json_and_environment(tmp_path: Path) -> None:
    out = tmp_path / "stdin.json"
    env_out = tmp_path / "env.txt"
    work = tmp_path / "project"
    work.mkdir()
    command = (
        f"cat > {out}; "
        f'printf "%s\\n%s\\n%s" "$TASKLOOM_PROJECT_DIR" "$CLAUDE_PROJECT_DIR" "$PWD" > {env_out}'
    )
    payload = {
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "agent_id": "a12345678",
        "agent_type": "Explore",
        "cwd": "/must/not/override",
    }
    outcome = await fire(
        cfg("PreToolUse", ("Bash", [command])), "PreToolUse", work, payload=payload
    )
    assert outcome.results[0].exit_code == 0
    data = json.loads(out.read_text())
    assert data == {
        "session_id": "s-1",
        "transcript_path": str(work / "transcript.jsonl"),
        "cwd": str(work),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "agent_id": "a12345678",
        "agent_type": "Explore",
    }
    assert env_out.read_text().split("\n") == [str(work)] * 3


async def test_exit_2_blocks_with_stderr_as_reason(tmp_path: Path) -> None:
    config = cfg(
        "PreToolUse",
        ("Bash", ["echo 'rm -rf is not allowed' >&2; exit 2", "echo fine; exit 0"]),
    )
    outcome = await fire(config, "PreToolUse", tmp_path)
    assert outcome.blocked
    assert outcome.block_reason == "rm -rf is not allowed"
    assert not outcome.errors
    assert [r.exit_code for r in outcome.results] == [2, 0]


async def test_subagent_stop_exit_2_gives_the_next_input(tmp_path: Path) -> None:
    config = cfg("SubagentStop", ("Explore", ["echo 'also check the tests' >&2; exit 2"]))
    payload = {"agent_id": "a1", "agent_type": "Explore", "agent_transcript_path": "/t.jsonl"}
    outcome = await fire(config, "SubagentStop", tmp_path, target="Explore", payload=payload)
    assert outcome.blocked and outcome.block_reason == "also check the tests"


async def test_other_exit_codes_are_non_blocking_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = cfg("PostToolUse", ("*", ["echo oops >&2; exit 1", "echo '{not json'"]))
    with caplog.at_level(logging.WARNING, logger="taskloom.hooks"):
        outcome = await fire(config, "PostToolUse", tmp_path)
    assert not outcome.blocked
    assert len(outcome.errors) == 2
    assert "exit code 1: oops" in outcome.errors[0]
    assert "invalid JSON" in outcome.errors[1]
    assert outcome.results[0].stderr == "oops\n"
    assert "oops" in caplog.text


def _json_hook(tmp_path: Path, name: str, obj: dict[str, Any]) -> str:
    return script(tmp_path, name, f"cat <<'EOF'\n{json.dumps(obj)}\nEOF\n")


def _decision(decision: str, reason: str = "", **extra: Any) -> dict[str, Any]:
    specific = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    if reason:
        specific["permissionDecisionReason"] = reason
    specific.update(extra)
    return {"hookSpecificOutput": specific}


async def test_permission_decisions_aggregate_deny_over_ask_over_allow(tmp_path: Path) -> None:
    allow = _json_hook(tmp_path, "allow", _decision("allow", "safe"))
    ask = _json_hook(tmp_path, "ask", _decision("ask", "unsure"))
    deny = _json_hook(tmp_path, "deny", _decision("deny", "secret file"))
    cases = [
        ([allow], "allow", "safe"),
        ([allow, ask], "ask", "unsure"),
        ([allow, deny, ask], "deny", "secret file"),
        ([deny, allow], "deny", "secret file"),
    ]
    for hooks, want, reason in cases:
        outcome = await fire(cfg("PreToolUse", ("Bash", hooks)), "PreToolUse", tmp_path)
        assert (outcome.permission_decision, outcome.permission_reason) == (want, reason), hooks
        assert not outcome.blocked and not outcome.errors


async def test_json_fields(tmp_path: Path) -> None:
    first = _json_hook(
        tmp_path,
        "first",
        _decision(
            "allow", updatedInput={"command": "ls -la", "timeout": 5}, additionalContext="ctx one"
        ),
    )
    second = _json_hook(
        tmp_path,
        "second",
        {
            "continue": False,
            "stopReason": "budget spent",
            "systemMessage": "heads up",
            "hookSpecificOutput": {"updatedInput": {"timeout": 9}, "additionalContext": "ctx two"},
        },
    )
    outcome = await fire(cfg("PreToolUse", ("Bash", [first, second])), "PreToolUse", tmp_path)
    assert outcome.updated_input == {"command": "ls -la", "timeout": 9}
    assert outcome.additional_context == ["ctx one", "ctx two"]
    assert outcome.stop and outcome.stop_reason == "budget spent"
    assert outcome.system_messages == ["heads up"]
    assert outcome.permission_decision == "allow"


async def test_json_decision_block_and_plain_stdout_context(tmp_path: Path) -> None:
    block = _json_hook(tmp_path, "block", {"decision": "block", "reason": "tests are failing"})
    outcome = await fire(cfg("Stop", (None, [block])), "Stop", tmp_path, target=None, payload={})
    assert outcome.blocked and outcome.block_reason == "tests are failing"
    config = cfg("UserPromptSubmit", (None, ["echo 'branch: main'"]))
    outcome = await fire(
        config, "UserPromptSubmit", tmp_path, target=None, payload={"prompt": "hi"}
    )
    assert outcome.additional_context == ["branch: main"] and not outcome.blocked
    # Plain stdout of a tool hook is only shown in a transcript, never given to the model.
    outcome = await fire(cfg("PostToolUse", ("*", ["echo done"])), "PostToolUse", tmp_path)
    assert outcome.additional_context == [] and outcome.results[0].stdout == "done\n"


@pytest.mark.parametrize(
    "body",
    [
        "sleep 30\n",
        "trap '' TERM\nwhile :; do sleep 1; done\n",
        "setsid sleep 30 &\nsleep 30\n",
    ],
    ids=["sleep", "trapped-term", "setsid-child"],
)
async def test_hanging_hook_is_killed_at_its_timeout(tmp_path: Path, body: str) -> None:
    pid_file = tmp_path / "pid"
    hang = script(tmp_path, "hang", f"echo $$ > {pid_file}\n{body}")
    config = cfg("PreToolUse", ("Bash", [hang]), timeout=0.5)
    started = time.monotonic()
    outcome = await fire(config, "PreToolUse", tmp_path)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 3.0 * TIME_FACTOR
    result = outcome.results[0]
    assert result.timed_out and not outcome.blocked
    assert outcome.errors and "timed out" in outcome.errors[0]
    assert "survived" not in result.stderr
    assert not alive(int(pid_file.read_text()))
    assert hook_processes() == []


async def test_children_left_by_a_finished_hook_are_killed(tmp_path: Path) -> None:
    # The background sleep keeps stdout open: the hook must not wait for it, nor leave it.
    outcome = await fire(
        cfg("PostToolUse", ("*", ["sleep 30 & echo started"])), "PostToolUse", tmp_path
    )
    result = outcome.results[0]
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "started\n", False)
    assert result.duration < 3.0 * TIME_FACTOR
    assert hook_processes() == []


async def test_hooks_of_one_event_run_in_parallel(tmp_path: Path) -> None:
    # Each hook says it has started, then waits (bounded) for the other to have started too:
    # run one after the other, the first would give up before the second began.
    def meets(me: str, other: str) -> str:
        tries = int(100 * TIME_FACTOR)
        return (
            f"touch {me}; for i in $(seq {tries}); do [ -e {other} ] && break; sleep 0.05;"
            f" done; [ -e {other} ] && echo met {me}"
        )

    config = cfg("PreToolUse", ("Bash", [meets("a", "b"), meets("b", "a")]))
    outcome = await fire(config, "PreToolUse", tmp_path)
    assert [r.stdout for r in outcome.results] == ["met a\n", "met b\n"]


async def test_output_is_bounded_and_never_blocks_the_hook(tmp_path: Path) -> None:
    command = f"head -c {3 * MAX_CAPTURE_BYTES} /dev/zero | tr '\\0' x; head -c 5000 /dev/zero >&2"
    outcome = await fire(cfg("PostToolUse", ("*", [command])), "PostToolUse", tmp_path)
    result = outcome.results[0]
    assert result.exit_code == 0
    assert len(result.stdout) == MAX_CAPTURE_BYTES
    assert len(result.stderr) == 5000
    # Whatever it answered was not read whole: that is said, as a non-blocking error.
    assert outcome.errors == [
        f"hook {command!r}: stdout output cut at 1 MiB: 2 MiB more were dropped"
    ]


async def test_hook_ignoring_a_large_stdin_still_finishes(tmp_path: Path) -> None:
    payload = {"tool_name": "Write", "tool_input": {"content": "x" * (4 * 1024 * 1024)}}
    config = cfg("PreToolUse", ("Write", ["exit 0"]))
    outcome = await fire(config, "PreToolUse", tmp_path, target="Write", payload=payload)
    assert outcome.results[0].exit_code == 0 and not outcome.errors


async def test_cancelling_run_hooks_kills_the_hooks(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    config = cfg("PreToolUse", ("Bash", [f"echo $$ > {pid_file}; sleep 30"]))
    task = asyncio.ensure_future(fire(config, "PreToolUse", tmp_path))
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", what="pid")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(int(pid_file.read_text()))
    assert hook_processes() == []


async def test_unstartable_hook_is_a_non_blocking_error(tmp_path: Path) -> None:
    outcome = await fire(
        cfg("PreToolUse", ("Bash", ["true"])), "PreToolUse", tmp_path / "missing-dir"
    )
    assert outcome.results[0].exit_code is None
    assert outcome.errors and "cannot start" in outcome.errors[0]
    assert not os.path.exists(tmp_path / "missing-dir")


class _Gone:
    """A program whose input has ended: no hook function of it can be asked."""

    async def call(self, callback_id: str, data: dict[str, Any], tool_use_id: str | None) -> Any:
        raise CallerGone("the program's input ended")


@pytest.mark.parametrize(
    ("event", "blocked"), [("PreToolUse", True), ("UserPromptSubmit", True), ("PostToolUse", False)]
)
async def test_a_gating_hook_function_that_cannot_be_asked_blocks(
    tmp_path: Path, event: str, blocked: bool
) -> None:
    hooks = {event: [{"matcher": "", "hookCallbackIds": ["cb1"]}]}
    config = HookConfig.from_callbacks(hooks, _Gone())
    payload = {"tool_name": "Bash", "hook_event_name": event}
    outcome = await fire(config, event, tmp_path, payload=payload)
    assert outcome.blocked is blocked
    if blocked:
        assert "could not be asked" in outcome.block_reason


def test_an_on_failure_word_other_than_continue_blocks() -> None:
    hooks = {
        "PreToolUse": [
            {"hookCallbackIds": ["a"], "onFailure": "block"},
            {"hookCallbackIds": ["b"], "onFailure": "deny"},  # unknown: not a missing gate
            {"hookCallbackIds": ["c"], "onFailure": "continue"},
            {"hookCallbackIds": ["d"]},
        ]
    }
    config = HookConfig.from_callbacks(hooks, _Gone())
    found = [h for m in config.events[HookEvent.PRE_TOOL_USE] for h in m.hooks]
    assert [h.block_on_failure for h in found] == [True, True, False, False]


# --- Notification hooks of a permission question -------------------------------------------


class _Yes:
    """Answers every permission question at once: yes."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def ask(
        self, request: PermissionRequest, decision: Any, *, tool_use_id: str, agent_id: str | None
    ) -> PromptAnswer:
        self.asked.append(request.tool_name)
        return PromptAnswer(allow=True)


async def test_a_notification_hook_runs_on_after_its_question_is_answered(tmp_path: Path) -> None:
    go, told = tmp_path / "go", tmp_path / "told"
    # A slow notice: it waits for the test's word (within its own timeout), then leaves a mark.
    command = f"while [ ! -e {go} ]; do sleep 0.02; done; echo told > {told}"
    hooks = cfg("Notification", ("permission_prompt", [command]), timeout=30 * TIME_FACTOR)
    prompter = _Yes()
    out = tmp_path / "out.txt"
    call = ToolCall("Bash", {"command": f"echo ran > {out}"})
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=ScriptedModel([Turn(tool_calls=(call,)), "done"]),
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=tmp_path,
                hooks=hooks,
                permissions=PermissionPolicy("default", (), tmp_path),
                prompter=prompter,
            ),
            rt,
        )
        (result,) = [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]
        # Answered and run while the notice still waits: the answer did not wait for it.
        assert prompter.asked == ["Bash"] and not result.is_error
        assert out.read_text() == "ran\n" and not told.exists()
        go.touch()
    # Not cut off by the answer: the session's end waited for it to finish.
    assert told.read_text() == "told\n"

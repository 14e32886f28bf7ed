"""Hooks in the background (``async``, ``asyncRewake``, a first line ``{"async": true}``) and
``if`` rules: real hook scripts, a real runtime and its mailbox, the scripted model."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TIME_FACTOR, alive, clean_env, run_processes, scripted_argv, wait_until
from taskloom.engine import Engine, EngineConfig
from taskloom.hooks import Background, CommandHook, HookConfig, background_hooks, run_hooks
from taskloom.messages import Message, TextBlock
from taskloom.process.spawn import TASK_ENV
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.bash import BashTool

ASYNC_LINE = '{"async": true, "asyncTimeout": 60000}'


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable hook script; the command that runs it."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def hooks(event: str, *entries: dict[str, Any], matcher: str = "") -> HookConfig:
    return HookConfig.from_settings(
        {
            "hooks": {
                event: [{"matcher": matcher, "hooks": [{"type": "command", **e} for e in entries]}]
            }
        }
    )


def hook_processes() -> list[Any]:
    """Live processes carrying a hook tag: what a hook left running."""
    return run_processes(lambda p: (p.info["environ"] or {}).get(TASK_ENV, "").startswith("hook-"))


def engine(rt: TaskRuntime, tmp_path: Path, config: HookConfig, model: ScriptedModel) -> Engine:
    return Engine(
        EngineConfig(
            model=model, system_prompt="", tools=[BashTool()], owner=rt.session_id,
            cwd=tmp_path, hooks=config,
        ),
        rt,
    )  # fmt: skip


def user_texts(e: Engine) -> str:
    """Every text the model was given as the user's."""
    return "\n".join(
        b.text
        for m in e.messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, TextBlock)
    )


# --- configuration ---------------------------------------------------------------------------


def test_fields_are_read_and_async_rewake_implies_async() -> None:
    config = hooks(
        "PostToolUse",
        {"command": "a", "async": True, "timeout": 5},
        {"command": "b", "asyncRewake": True, "rewakeMessage": "Look:", "rewakeSummary": "S"},
        {"command": "c", "if": "Bash(git commit:*)"},
        matcher="Bash",
    )
    a, b, c = config.matching("PostToolUse", "Bash")
    assert isinstance(a, CommandHook) and a.background and not a.rewake and a.timeout == 5
    assert isinstance(b, CommandHook) and b.background and b.rewake
    assert (b.rewake_message, b.rewake_summary) == ("Look:", "S")
    assert isinstance(c, CommandHook) and str(c.condition) == "Bash(git commit:*)"


def test_one_command_under_two_if_rules_is_two_hooks_and_if_never_runs_off_tool_events() -> None:
    both = hooks(
        "PostToolUse",
        {"command": "review", "if": "Bash(git commit:*)"},
        {"command": "review", "if": "Bash(git push:*)"},
    )
    assert len(both.matching("PostToolUse", "Bash")) == 2
    stop = hooks("Stop", {"command": "x", "if": "Bash(git *)"}, {"command": "y"})
    assert [h.command for h in stop.matching("Stop") if isinstance(h, CommandHook)] == ["y"]


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"command": "x", "if": "Bash(unclosed"}, "malformed permission rule"),
        ({"command": "x", "if": 3}, "'if' must be a permission rule"),
        ({"command": "x", "async": "yes"}, "async of the wrong type"),
        ({"command": "x", "rewakeMessage": 4}, "rewakeMessage of the wrong type"),
    ],
)
def test_a_malformed_field_skips_the_hook_saying_why(
    entry: dict[str, Any], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "taskloom.hooks"):
        config = hooks("PreToolUse", entry, {"command": "kept"})
    assert [
        h.command for h in config.matching("PreToolUse", "Bash") if isinstance(h, CommandHook)
    ] == ["kept"]
    assert said in caplog.text and "PreToolUse[0].hooks[0]" in caplog.text


@pytest.mark.parametrize("kind", ["prompt", "agent"])
def test_prompt_and_agent_hooks_are_skipped_with_a_warning_naming_them(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "taskloom.hooks"):
        config = HookConfig.from_settings(
            {"hooks": {"Stop": [{"hooks": [{"type": kind, "prompt": "Is the work done?"}]}]}}
        )
    assert not config
    assert f"'{kind}' hooks are not run by taskloom" in caplog.text
    assert "Stop[0].hooks[0]" in caplog.text and "Is the work done?" in caplog.text


# --- `if` rules on real tool calls -----------------------------------------------------------


async def test_if_rules_pick_the_hooks_of_the_call_with_the_permission_matcher(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    config = hooks(
        "PreToolUse",
        {"command": f"echo commit >> {marks}", "if": "Bash(git commit:*)"},
        {"command": f"echo push >> {marks}", "if": "Bash(git push:*)"},
        {"command": f"echo any >> {marks}"},
        matcher="Bash",
    )
    # A compound command: like a deny rule, the rule matches one part of it.
    calls = (ToolCall("Bash", {"command": "true && git commit --dry-run -m x 2>/dev/null; true"}),)
    async with TaskRuntime() as rt:
        e = engine(rt, tmp_path, config, ScriptedModel([Turn(tool_calls=calls), "done"]))
        [_ async for _ in e.run("go")]
    assert sorted(marks.read_text().split()) == ["any", "commit"]


# --- a first line {"async": true} ------------------------------------------------------------


async def test_a_hook_saying_async_on_its_first_line_goes_on_in_the_background(
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    body = (
        f"echo '{ASYNC_LINE}'\n"
        f"while [ ! -e {go} ]; do sleep 0.02; done\n"
        "sleep 1\n"  # past its own timeout: the 60 s it asked for hold
        'echo \'{"metrics": {"n": 1}}\'\n'
        'echo \'{"systemMessage": "never read: not the first JSON line"}\'\n'
    )
    config = hooks("SessionStart", {"command": script(tmp_path, "h.sh", body), "timeout": 0.5})
    async with TaskRuntime() as rt:
        out = await run_hooks(
            config, "SessionStart", {"source": "startup"}, target="startup", cwd=tmp_path,
            session_id=rt.session_id, transcript_path=None,
            background=Background(background_hooks(rt), rt.session_id),
        )  # fmt: skip
        # Returned while the hook waits for the word: nothing waited for it.
        assert not out.errors and not out.results and not out.additional_context
        assert background_hooks(rt).running == 1 and hook_processes()
        go.touch()
        await wait_until(lambda: background_hooks(rt).running == 0, 10, what="the hook's end")
        assert not rt.mailbox.has_pending(rt.session_id)
        assert not any(r.exit_code for r in out.results)
    assert not hook_processes()


async def test_a_backgrounded_hook_outlives_its_own_timeout_and_its_answer_arrives(
    tmp_path: Path,
) -> None:
    body = f"echo '{ASYNC_LINE}'\nsleep 1\necho '{{\"systemMessage\": \"venv ready\"}}'\n"
    config = hooks("SessionStart", {"command": script(tmp_path, "h.sh", body), "timeout": 0.5})
    async with TaskRuntime() as rt:
        await run_hooks(
            config, "SessionStart", {}, target="startup", cwd=tmp_path,
            session_id=rt.session_id, transcript_path=None,
            background=Background(background_hooks(rt), rt.session_id),
        )  # fmt: skip
        await wait_until(lambda: rt.mailbox.has_pending(rt.session_id), 10, what="its answer")
        (letter,) = rt.mailbox.pending(rt.session_id)
        assert "venv ready" in letter.body and letter.priority == "later"


async def test_without_a_session_the_async_line_is_not_taken_for_the_answer(
    tmp_path: Path,
) -> None:
    body = f"echo '{ASYNC_LINE}'\necho '{{\"systemMessage\": \"hi\"}}'\n"
    config = hooks("SessionStart", {"command": script(tmp_path, "h.sh", body)})
    out = await run_hooks(
        config, "SessionStart", {}, target="startup", cwd=tmp_path, session_id="s",
        transcript_path=None,
    )  # fmt: skip
    assert not out.errors and out.system_messages == ["hi"]


async def test_async_output_reaches_the_model_with_its_next_turn(tmp_path: Path) -> None:
    answer = {"systemMessage": "tests passed", "hookSpecificOutput": {"additionalContext": 7}}
    body = f"sleep 0.2; echo '{json.dumps(answer)}'\n"
    config = hooks("PostToolUse", {"command": script(tmp_path, "t.sh", body), "async": True})
    calls = (ToolCall("Bash", {"command": "echo hi"}),)
    async with TaskRuntime() as rt:
        e = engine(rt, tmp_path, config, ScriptedModel([Turn(tool_calls=calls), "done", "ok"]))
        started = time.monotonic()
        [_ async for _ in e.run("go")]
        assert time.monotonic() - started < 3 * TIME_FACTOR
        await wait_until(lambda: rt.mailbox.has_pending(rt.session_id), 10, what="its answer")
        [_ async for _ in e.run(Message(role="user", content=[]))]
    said = user_texts(e)
    # systemMessage delivered; the additionalContext of the wrong type dropped.
    assert "PostToolUse hook additional context: tests passed" in said
    assert "<system-reminder>" in said and "additional context: 7" not in said
    assert not hook_processes()


# --- asyncRewake -----------------------------------------------------------------------------


async def test_an_async_rewake_hook_exiting_2_wakes_the_idle_agent(tmp_path: Path) -> None:
    go = tmp_path / "go"
    body = (
        f"while [ ! -e {go} ]; do sleep 0.02; done\n"
        'echo \'{"metrics": {}, "rewakeSummary": "Commit review found 1 issue"}\'\n'
        "echo 'SQL injection in app.py' >&2\nexit 2\n"
    )
    config = hooks(
        "PostToolUse",
        {
            "command": script(tmp_path, "r.sh", body), "if": "Bash(git commit:*)",
            "asyncRewake": True, "rewakeMessage": "Background security review:",
            "rewakeSummary": "Commit security review found issues",
        },
        {"command": f"touch {tmp_path / 'never'}", "asyncRewake": True, "if": "Bash(git push:*)"},
        matcher="Bash",
    )  # fmt: skip
    calls = (ToolCall("Bash", {"command": "git commit -m x 2>/dev/null; true"}),)
    async with TaskRuntime() as rt:
        e = engine(rt, tmp_path, config, ScriptedModel([Turn(tool_calls=calls), "done", "fixed"]))
        [_ async for _ in e.run("go")]
        assert background_hooks(rt).running == 1  # the turn ended; the review goes on
        go.touch()
        await wait_until(lambda: rt.mailbox.has_pending(rt.session_id), 10, what="the wake")
        (letter,) = rt.mailbox.pending(rt.session_id)
        assert (letter.kind, letter.priority) == ("notification", "next")
        assert letter.summary == "Commit review found 1 issue"  # the run's own, over the entry's
        [_ async for _ in e.run(Message(role="user", content=[]))]
    said = user_texts(e)
    assert "Background security review:\n\nSQL injection in app.py" in said
    assert not (tmp_path / "never").exists() and not hook_processes()


async def test_an_async_rewake_hook_exiting_0_wakes_nobody(tmp_path: Path) -> None:
    config = hooks("Stop", {"command": "echo fine >&2", "asyncRewake": True})
    async with TaskRuntime() as rt:
        e = engine(rt, tmp_path, config, ScriptedModel(["done"]))
        [_ async for _ in e.run("go")]
        await wait_until(lambda: background_hooks(rt).running == 0, 10, what="the hook's end")
        assert not rt.mailbox.has_pending(rt.session_id)


# --- bounds ----------------------------------------------------------------------------------


async def test_the_session_end_kills_background_hooks_still_running(tmp_path: Path) -> None:
    pid = tmp_path / "pid"
    body = f"echo $$ > {pid}\nsh -c 'sleep 3411; :'\n"
    config = hooks("UserPromptSubmit", {"command": script(tmp_path, "s.sh", body), "async": True})
    async with TaskRuntime() as rt:
        e = engine(rt, tmp_path, config, ScriptedModel(["done"]))
        await e.run_hook("UserPromptSubmit", None, prompt="go")
        await wait_until(pid.exists, 10, what="the hook to start")
        assert hook_processes()
    assert not hook_processes()


async def test_a_background_hook_past_its_timeout_is_killed_and_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = 'echo \'{"async": true, "asyncTimeout": 300}\'\nsleep 3411\n'
    config = hooks("SessionStart", {"command": script(tmp_path, "s.sh", body)})
    async with TaskRuntime() as rt:
        with caplog.at_level(logging.WARNING, "taskloom.hooks"):
            await run_hooks(
                config, "SessionStart", {}, target="startup", cwd=tmp_path,
                session_id=rt.session_id, transcript_path=None,
                background=Background(background_hooks(rt), rt.session_id),
            )  # fmt: skip
            await wait_until(lambda: background_hooks(rt).running == 0, 10, what="the kill")
        assert "timed out" in caplog.text and not rt.mailbox.has_pending(rt.session_id)
        assert not hook_processes()


@pytest.mark.e2e
def test_a_print_run_does_not_wait_for_a_session_start_hook_gone_async(tmp_path: Path) -> None:
    # The security-guidance plugin's SessionStart: the async line, then minutes of work.
    pid = tmp_path / "pid"
    body = f"echo $$ > {pid}\necho '{ASYNC_LINE}'\nexec sleep 3423\n"
    command = script(tmp_path, "boot.sh", body)
    settings = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": command,
                                                       "timeout": 180}]}]}}  # fmt: skip
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"turns": [{"text": "hello"}]}))
    started = time.monotonic()
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--settings", str(tmp_path / "settings.json")),
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    assert "invalid JSON" not in proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["result"] == "hello"
    # Killed at the run's end (the hook became the sleep): nothing of it is left.
    assert not alive(int(pid.read_text()))

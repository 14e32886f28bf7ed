"""``taskloom -p`` end to end, as scripts drive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env, write_turns
from helpers import json_lines as lines
from helpers import run_cli as run
from taskloom.transcript import transcript_path

pytestmark = pytest.mark.e2e


def test_stream_json_ends_with_the_result(tmp_path: Path) -> None:
    model = write_turns(
        tmp_path / "t.yaml",
        [
            {"text": "Looking.", "tool_calls": [{"name": "Glob", "input": {"pattern": "*.txt"}}]},
            {"text": "There is one text file."},
        ],
    )
    (tmp_path / "a.txt").write_text("x")
    proc = run(
        "-p",
        "what is here?",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    assert "Bash" in events[0]["tools"] and "TaskOutput" in events[0]["tools"]
    kinds = [e["type"] for e in events]
    assert kinds == ["system", "assistant", "user", "assistant", "result"]
    result = events[-1]
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["num_turns"] == 2 and result["result"] == "There is one text file."
    assert result["session_id"] == events[0]["session_id"]
    tool_result = events[2]["message"]["content"][0]
    assert tool_result["type"] == "tool_result" and "a.txt" in tool_result["content"]


def test_max_turns_gives_error_max_turns(tmp_path: Path) -> None:
    model = write_turns(
        tmp_path / "t.yaml",
        [{"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}, {"text": "done"}],
    )
    proc = run(
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        "--max-turns",
        "1",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    result = lines(proc.stdout)[-1]
    assert result["type"] == "result" and result["subtype"] == "error_max_turns"
    assert result["is_error"] is True and result["num_turns"] == 1


def test_text_and_json_formats(tmp_path: Path) -> None:
    model = write_turns(tmp_path / "t.yaml", [{"text": "Forty-two."}])
    text = run("-p", "answer", "--model", model, cwd=tmp_path)
    assert (text.returncode, text.stdout) == (0, "Forty-two.\n")
    model = write_turns(tmp_path / "t.yaml", [{"text": "Forty-two."}])
    as_json = run("-p", "answer", "--output-format", "json", "--model", model, cwd=tmp_path)
    result = json.loads(as_json.stdout)
    assert result["type"] == "result" and result["result"] == "Forty-two."
    assert result["num_turns"] == 1 and "usage" in result
    piped = run("-p", "--model", model, cwd=tmp_path, stdin="from stdin")
    assert piped.returncode == 0 and piped.stdout == "Forty-two.\n"


def test_background_command_keeps_the_run_alive_until_its_notification_is_answered(
    tmp_path: Path, home: Path
) -> None:
    model = write_turns(
        tmp_path / "t.yaml",
        [
            {
                "text": "Starting.",
                "tool_calls": [
                    {
                        "name": "Bash",
                        "input": {
                            "command": "sleep 1; echo hi",
                            "run_in_background": True,
                            "description": "say hi",
                        },
                    }
                ],
            },
            {"text": "It is running; I will wait."},
            {"text": "It printed hi."},
        ],
    )
    proc = run(
        "-p",
        "run it",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        "--allowedTools",
        "Bash",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    result = events[-1]
    assert result["result"] == "It printed hi." and result["num_turns"] == 3
    subtypes = [e.get("subtype") for e in events if e["type"] == "system"]
    assert subtypes[:2] == ["init", "task_started"] and "task_notification" in subtypes
    notified = [e for e in events if e.get("subtype") == "task_notification"]
    assert notified[0]["status"] == "completed"
    assert "completed (exit code 0)" in notified[0]["summary"]
    # The transcript holds the notification as a user message.
    transcript = transcript_path(result["session_id"], home, search=True)
    records = [json.loads(x) for x in transcript.read_text().splitlines()]
    notes = [r for r in records if r.get("taskloomOrigin") == "notifications"]
    assert len(notes) == 1 and notes[0]["type"] == "user"
    assert "<task-notification>" in notes[0]["message"]["content"][0]["text"]
    # Messages only: the prompt's last-prompt record (Claude Code's) follows it.
    assert [r["type"] for r in records if "message" in r] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def _bash(command: str, background: bool = True) -> dict[str, Any]:
    return {"name": "Bash", "input": {"command": command, "run_in_background": background}}


def _run_turns(tmp_path: Path, turns: list[Any], *flags: str) -> tuple[Any, float]:
    """``-p go`` in stream-json on these scripted turns, every call allowed; and its time."""
    model = write_turns(tmp_path / "t.yaml", turns)
    started = time.monotonic()
    proc = run(
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--model",
        model,
        "--dangerously-skip-permissions",
        *flags,
        cwd=tmp_path,
        timeout=60 * TIME_FACTOR,
    )
    return proc, time.monotonic() - started


def _background_then_answer(tmp_path: Path, command: str, *flags: str) -> tuple[Any, float]:
    """``-p`` whose model starts ``command`` in the background, answers, then answers again."""
    turns = [{"tool_calls": [_bash(command)]}, {"text": "Started; I will wait."}]
    return _run_turns(tmp_path, [*turns, {"text": "It ended."}], *flags)


def test_a_background_command_that_reads_input_does_not_keep_the_run_waiting(
    tmp_path: Path,
) -> None:
    proc, took = _background_then_answer(tmp_path, "cat")  # reads end-of-file at once
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[-1]["result"] == "It ended." and took < 20 * TIME_FACTOR
    [note] = [e for e in events if e.get("subtype") == "task_notification"]
    assert note["status"] == "completed" and "exit code 0" in note["summary"]


def test_a_one_shot_run_waits_for_an_endless_command_only_as_long_as_it_says(
    tmp_path: Path,
) -> None:
    settings = json.dumps({"taskWaitSeconds": 1})
    proc, took = _background_then_answer(tmp_path, "sleep 3711", "--settings", settings)
    assert proc.returncode == 0, proc.stderr
    assert took < 20 * TIME_FACTOR
    assert 'waiting at most 1 s for Background command "sleep 3711"' in proc.stderr
    events = lines(proc.stdout)
    assert events[-1]["result"] == "It ended."
    [note] = [e for e in events if e.get("subtype") == "task_notification"]
    assert note["status"] == "stopped"
    assert note["summary"] == (
        'Background command "sleep 3711" was stopped: the run waited 1 s for it to end '
        "(setting taskWaitSeconds); start it again if it is still needed"
    )
    shown = [
        b["text"]
        for e in events
        if e["type"] == "user"
        for b in e["message"]["content"]
        if b.get("type") == "text"
    ]
    assert any("the run waited 1 s for it to end" in text for text in shown)


def test_only_time_spent_waiting_counts_against_a_command_s_bound(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [_bash("sleep 1"), _bash("sleep 3712")]},
        {"text": "Waiting."},  # ~1 s of waiting for sleep 3712, then sleep 1 ends
        {"tool_calls": [_bash("sleep 3", False)]},  # working: not waiting
        {"text": "Waiting again."},  # the rest of its 2 s
        {"text": "Done."},
    ]
    proc, _ = _run_turns(tmp_path, turns, "--settings", json.dumps({"taskWaitSeconds": 2}))
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[-1]["result"] == "Done."
    killed = [e for e in events if e.get("subtype") == "task_notification"]
    assert [n["status"] for n in killed] == ["completed", "stopped"]
    assert "the run waited 2 s" in killed[1]["summary"]
    # The foreground command ran its 3 s to the end before the bound took the rest.
    results = [
        b
        for e in events
        if e["type"] == "user"
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 3 and not results[2].get("is_error"), results
    foreground_done = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "user" and results[2] in e["message"]["content"]
    )
    assert events.index(killed[1]) > foreground_done


def test_headless_permission_ask_is_a_denial_unless_skipped(tmp_path: Path) -> None:
    turns = [
        {"tool_calls": [{"name": "Bash", "input": {"command": "touch made-it"}}]},
        {"text": "ok"},
    ]
    model = write_turns(tmp_path / "t.yaml", turns)
    proc = run("-p", "go", "--output-format", "stream-json", "--model", model, cwd=tmp_path)
    assert proc.returncode == 0
    events = lines(proc.stdout)
    denied = events[2]["message"]["content"][0]
    assert denied["is_error"] is True and "non-interactive" in denied["content"]
    assert events[-1]["permission_denials"] == [
        {
            "tool_name": "Bash",
            "tool_use_id": denied["tool_use_id"],
            "tool_input": {"command": "touch made-it"},
        }
    ]
    assert not (tmp_path / "made-it").exists()
    model = write_turns(tmp_path / "t.yaml", turns)
    proc = run("-p", "go", "--model", model, "--dangerously-skip-permissions", cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "made-it").exists()


def test_resume_continues_the_transcript_and_replays_undelivered_notifications(
    tmp_path: Path,
) -> None:
    model = write_turns(
        tmp_path / "t.yaml",
        [
            {
                "tool_calls": [
                    {
                        "name": "Bash",
                        "input": {
                            "command": "sleep 30",
                            "run_in_background": True,
                            "description": "long",
                        },
                    }
                ]
            },
            {"text": "Waiting for it."},
        ],
    )
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskloom",
            "-p",
            "start it",
            "--output-format",
            "stream-json",
            "--model",
            model,
            "--dangerously-skip-permissions",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert first.stdout is not None
    session_id = task_id = None
    for line in first.stdout:
        event = json.loads(line)
        session_id = event["session_id"]
        if event.get("subtype") == "task_started":
            task_id = event["task_id"]
        if event["type"] == "assistant" and event["message"]["content"][0].get("text"):
            break  # it is now waiting for the task
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    first.stdout.close()
    assert session_id and task_id
    with FakeAnthropicServer() as server:
        server.add_turn(text="Resumed: the long command was stopped.")
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test-key")
        proc = run(
            "-p",
            "what happened?",
            "--output-format",
            "stream-json",
            "--resume",
            session_id,
            cwd=tmp_path,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        events = lines(proc.stdout)
        assert events[-1]["session_id"] == session_id
        notified = [e for e in events if e.get("subtype") == "task_notification"]
        assert [e["task_id"] for e in notified] == [task_id]
        sent = server.requests[0].body["messages"]
    # The model saw the old conversation, then the new prompt with the notification.
    assert sent[0]["content"][0]["text"] == "start it"
    last = sent[-1]["content"]
    assert last[0]["text"] == "what happened?"
    assert f"<task-id>{task_id}</task-id>" in last[1]["text"]
    assert "<status>killed</status>" in last[1]["text"]


def test_resume_of_an_unknown_session_is_an_error(tmp_path: Path) -> None:
    model = write_turns(tmp_path / "t.yaml", [{"text": "x"}])
    proc = run("-p", "hi", "--model", model, "--resume", "no-such-session", cwd=tmp_path)
    assert proc.returncode == 1
    assert "No conversation found with session ID: no-such-session" in proc.stderr


def test_missing_model_configuration_is_one_clear_line(tmp_path: Path) -> None:
    proc = run("-p", "hello", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        assert var in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "x", "--output-format", "yaml"],
        ["-p", "x", "--max-turns", "0"],
        ["-p", "x", "--permission-mode", "yolo"],
        ["-p", "x", "--no-such-flag"],
        ["-p"],
        ["x"],
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip()


def test_undecodable_file_names_do_not_break_the_run(tmp_path: Path) -> None:
    os.close(os.open(os.path.join(os.fsencode(tmp_path), b"bad\xff.txt"), os.O_CREAT, 0o600))
    model = write_turns(
        tmp_path / "t.yaml",
        [{"tool_calls": [{"name": "Glob", "input": {"pattern": "*.txt"}}]}, {"text": "listed"}],
    )
    proc = run("-p", "list", "--output-format", "stream-json", "--model", model, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert events[-1]["result"] == "listed"
    assert "bad" in events[2]["message"]["content"][0]["content"]


def test_a_task_update_is_printed_when_what_it_says_changes() -> None:
    import io

    from taskloom.cli.print_mode import Emitter
    from taskloom.tasks.narrow import as_teammate
    from taskloom.tasks.types import AgentTaskState, TaskStatus, state_from_dict

    out = io.StringIO()
    emitter = Emitter("stream-json", "s1", out)
    record = {"id": "t00000001", "type": "in_process_teammate", "status": "running"}
    teammate = as_teammate(state_from_dict({**record, "agent_id": "alice@team"}))
    assert teammate is not None
    agent = AgentTaskState(id="a00000001", status=TaskStatus.RUNNING, start_time=1.0)
    for state in (
        teammate,
        teammate,  # nothing new: not printed again
        teammate.replace(is_idle=True),  # it waits for mail now: its event says so
        agent,
        agent,  # only its duration grew: not printed again
        agent.replace(tool_uses=1, activities=("Reading a.py",)),
    ):
        emitter.task_event("updated", state)
    every = [json.loads(line) for line in out.getvalue().splitlines()]
    printed = [e for e in every if e["subtype"] == "task_updated"]
    assert [e["task_id"] for e in printed] == ["t00000001"] * 2 + ["a00000001"] * 2
    assert [e["teammate"]["is_idle"] for e in printed[:2]] == [False, True]
    assert [e["progress"]["tool_use_count"] for e in printed[2:]] == [0, 1]
    # A running agent's progress, as the SDKs show its row: once per change of its counts.
    progress = [e for e in every if e["subtype"] == "task_progress"]
    assert [e["task_id"] for e in progress] == ["a00000001"] * 2
    assert [e["usage"]["tool_uses"] for e in progress] == [0, 1]
    assert progress[1]["summary"] == "Reading a.py" and "summary" not in progress[0]
    assert {"total_tokens", "tool_uses", "duration_ms"} == set(progress[1]["usage"])


def test_only_a_task_s_end_is_a_task_notification_and_a_stop_says_stopped() -> None:
    from types import SimpleNamespace

    from taskloom.cli.task_events import notification_event
    from taskloom.tasks.types import ShellTaskState, TaskStatus

    running = ShellTaskState(id="b00000001", status=TaskStatus.RUNNING, start_time=1.0)
    killed = running.replace(status=TaskStatus.KILLED, end_time=2.0)
    stall = SimpleNamespace(task_id="b00000001", kind="stall")
    end = SimpleNamespace(task_id="b00000001", kind="terminal")
    # The SDKs type its status completed | failed | stopped: a stall (or a monitor's event)
    # of a running task has none of them, so it is no task_notification.
    assert notification_event(running, stall) is None
    assert notification_event(None, end) is None
    event = notification_event(killed, end)
    assert event is not None and event["status"] == "stopped" and event["kind"] == "terminal"

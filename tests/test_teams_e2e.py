"""Agent teams end to end through ``taskloom -p --teams --output-format stream-json``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env, run_processes
from team_scenario import FINAL, TEAM, TeamScript, events_of, team_argv

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, script: TeamScript) -> tuple[subprocess.CompletedProcess[str], float]:
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", *team_argv()],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )
        # From the lead's last request (its final answer) to the process's end.
        return proc, time.monotonic() - server.requests[-1].received


def _teams(tmp_path: Path) -> list[object]:
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "teams", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
    )
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["teams"])


def test_a_lead_and_two_teammates_report_and_shut_down(tmp_path: Path) -> None:
    script = TeamScript()
    proc, _ = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL
    results = [
        t
        for e in events
        if e.get("type") == "user" and not e.get("parent_tool_use_id")
        for t in texts(e["message"]["content"])
        if t.startswith("Spawned successfully.")
    ]
    assert sorted(results) == sorted(
        f"Spawned successfully.\nagent_id: {n}@{TEAM}\nname: {n}\n"
        "The agent is now running and will receive instructions via mailbox."
        for n in ("alice", "bob")
    )
    for name, prompt in (("alice", "Check module A."), ("bob", "Check module B.")):
        first = texts(script.teammate_requests[name][0]["messages"][0]["content"])
        assert first == [
            f'<teammate-message teammate_id="team-lead">\n{prompt}\n</teammate-message>'
        ]
    # The last request holds the whole conversation, each message once.
    lead_seen = "\n".join(
        t for m in script.lead_requests[-1]["messages"] for t in texts(m["content"])
    )
    for name in ("alice", "bob"):
        assert f'teammate_id="{name}"' in lead_seen and f'summary="{name} ok"' in lead_seen
        assert f"report from {name}" in lead_seen
        assert f'"from": "{name}"' in lead_seen or f'"from":"{name}"' in lead_seen
    assert lead_seen.count("idle_notification") >= 2
    assert lead_seen.count("shutdown_approved") == 2
    assert "Messages from your teammates arrived" in lead_seen
    assert _teams(tmp_path) == []
    assert not run_processes(lambda p: "alpha" in " ".join(p.info["cmdline"] or []))


def test_a_lead_that_ends_with_idle_teammates_ends_the_run(tmp_path: Path) -> None:
    script = TeamScript(shut_down=False)
    proc, elapsed = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert events_of(proc.stdout)[-1]["result"] == "Both reported; leaving them idle."
    # Its idle teammates stopped and its team removed, then it exits.
    assert elapsed < 2.0 * TIME_FACTOR
    assert _teams(tmp_path) == []


class TaskListScript(TeamScript):
    """The lead makes a task and assigns it to alice, who works it from the task list."""

    def __init__(self, *, owner_first: bool = False) -> None:
        super().__init__()
        self.owner_first = owner_first

    def _lead(self, messages: list[dict[str, object]]) -> Turn:  # type: ignore[override]
        from team_scenario import _all_text, _calls

        seen, calls = _all_text(messages), _calls(messages)  # type: ignore[arg-type]
        names = [c["name"] for c in calls]
        create = ToolCall("TaskCreate", {"subject": "Fix the parser", "description": "in parse.py"})
        spawn = ToolCall(
            "Agent", {"description": "a", "prompt": "Wait for a task.", "name": "alice"}
        )
        if not names:
            # The task may be created (and given an owner) before its teammate exists.
            return Turn(tool_calls=(create, spawn) if not self.owner_first else (spawn,))
        if "TaskUpdate" not in names:
            if self.owner_first and "TaskCreate" not in names:
                return Turn(tool_calls=(create,))
            return Turn(tool_calls=(ToolCall("TaskUpdate", {"taskId": "1", "owner": "alice"}),))
        if "done with #1" in seen and "TaskGet" not in names:
            return Turn(tool_calls=(ToolCall("TaskGet", {"taskId": "1"}), ToolCall("TaskList", {})))
        if "TaskGet" in names:
            return Turn(text=FINAL)
        return Turn(text="Waiting for alice.")

    def _teammate(self, name: str, messages: list[dict[str, object]]) -> Turn:  # type: ignore[override]
        from team_scenario import _all_text, _calls

        seen, calls = _all_text(messages), _calls(messages)  # type: ignore[arg-type]
        names = [c["name"] for c in calls]
        if '"type": "task_assignment"' not in seen:
            return Turn(text="idle, no task yet")
        if "TaskList" not in names:
            return Turn(tool_calls=(ToolCall("TaskList", {}),))
        if "TaskUpdate" not in names:
            done = {"taskId": "1", "status": "completed"}
            return Turn(tool_calls=(ToolCall("TaskUpdate", done),))
        if "SendMessage" not in names:
            return Turn(
                tool_calls=(
                    ToolCall("SendMessage", {"to": "team-lead", "message": "done with #1"}),
                )
            )
        return Turn(text="alice idle")


import pytest  # noqa: E402

from fake_servers import ToolCall, Turn  # noqa: E402


@pytest.mark.parametrize("owner_first", [False, True])
def test_the_task_list_assigns_and_completes_through_a_teammate(
    tmp_path: Path, owner_first: bool
) -> None:
    script = TaskListScript(owner_first=owner_first)
    proc, _ = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["result"] == FINAL
    shown = [t for e in events if e.get("type") == "user" for t in texts(e["message"]["content"])]
    assert "Task #1 created successfully: Fix the parser" in shown
    assert "Updated task #1 owner" in shown
    assert (
        "Task #1: Fix the parser\nStatus: completed\nDescription: in parse.py\nOwner: alice"
        in shown
    )
    assert "#1 [completed] Fix the parser (alice)" in shown
    alice_seen = json.dumps(script.teammate_requests["alice"])
    assert "task_assignment" in alice_seen and "#1 [pending] Fix the parser (alice)" in alice_seen
    assert "Updated task #1 status" in alice_seen and "Call TaskList now" in alice_seen
    assert _teams(tmp_path) == []


class KilledLeadScript(TeamScript):
    """Two teammates report while the lead sits in a long command; then the lead dies."""

    def _lead(self, messages: list[dict[str, object]]) -> Turn:  # type: ignore[override]
        from team_scenario import _all_text, _calls

        seen, calls = _all_text(messages), _calls(messages)  # type: ignore[arg-type]
        names = [c["name"] for c in calls]
        if not names:
            task = ToolCall("TaskCreate", {"subject": "Keep me", "description": "survives"})
            return Turn(tool_calls=(task,))
        if "Agent" not in names:
            # bob in plan mode (never approved): he must come back in it. alice is an
            # Explore teammate: she must come back one (no Write, no Edit).
            spawn = tuple(
                ToolCall(
                    "Agent",
                    {"description": n, "prompt": f"Report, {n}.", "name": n}
                    | ({"mode": "plan"} if n == "bob" else {"subagent_type": "Explore"}),
                )
                for n in ("alice", "bob")
            )
            return Turn(tool_calls=spawn)
        if "Bash" not in names:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 60"}),))
        if "TaskList" not in names:  # resumed: its task list and its team are still there
            ask = {"to": "*", "message": "still there?"}
            return Turn(tool_calls=(ToolCall("TaskList", {}), ToolCall("SendMessage", ask)))
        if "alice is back" in seen:
            return Turn(text=f"resumed: {seen.count('report from')} reports")
        return Turn(text="waiting for alice")

    def _teammate(self, name: str, messages: list[dict[str, object]]) -> Turn:  # type: ignore[override]
        from team_scenario import _all_text, _calls

        seen = _all_text(messages)  # type: ignore[arg-type]
        if len(messages) == 1:
            report = {"to": "team-lead", "message": f"report from {name}", "summary": name}
            return Turn(tool_calls=(ToolCall("SendMessage", report),))
        replied = any("is back" in json.dumps(c["input"]) for c in _calls(messages))  # type: ignore[arg-type]
        if "still there?" in seen and not replied:
            back = {"to": "team-lead", "message": f"{name} is back"}
            return Turn(tool_calls=(ToolCall("SendMessage", back),))
        return Turn(text=f"{name} waiting")


@pytest.mark.parametrize("mode", ["in-process", "tmux"])
def test_a_killed_lead_resumes_with_its_team_task_list_and_undelivered_messages(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest
) -> None:
    import signal
    import sqlite3

    script = KilledLeadScript()
    db = tmp_path / "home" / "taskloom.db"
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        mode_flag = ["--teammate-mode", mode]
        if mode == "tmux":  # teammates in panes of the test's own tmux server
            tmux = request.getfixturevalue("tmux")
            tmux.start()
            env["TMUX"] = f"{tmux.socket_path},{tmux.pid},0"
        lead = subprocess.Popen(
            [sys.executable, "-m", "taskloom", *team_argv(), *mode_flag],
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        assert lead.stdout is not None
        session = json.loads(lead.stdout.readline())["session_id"]

        def undelivered() -> int:
            if not db.exists():
                return 0
            with contextlib.closing(sqlite3.connect(db)) as conn:
                (n,) = conn.execute(
                    "SELECT count(*) FROM mailbox WHERE recipient = ? AND kind = 'message' "
                    "AND delivered_at IS NULL AND body LIKE '%report from%'",
                    (session,),
                ).fetchone()
            return int(n)

        def in_its_command() -> bool:
            # The lead must be inside its long command when it dies: killed before that call
            # was recorded, the resumed lead would make it again (and sleep a minute).
            return bool(run_processes(lambda p: "sleep 60" in " ".join(p.info["cmdline"] or [])))

        deadline = time.monotonic() + 30 * TIME_FACTOR
        # The store and the process table give no event another process could wait on.
        while undelivered() < 2 or not in_its_command():
            assert time.monotonic() < deadline, (
                f"reports in the store: {undelivered()}; lead in its command: {in_its_command()}"
            )
            time.sleep(0.05)
        lead.send_signal(signal.SIGKILL)
        lead.wait(timeout=10)
        lead.stdout.close()
        resumed = subprocess.run(
            [sys.executable, "-m", "taskloom", *team_argv("go on")[:1], "go on", "--resume",
             session, *team_argv()[2:], *mode_flag],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert events_of(resumed.stdout)[-1]["result"] == "resumed: 2 reports"
    last = script.lead_requests[-1]["messages"]
    shown = "\n".join(t for m in last for t in texts(m["content"]))
    assert shown.count("report from alice") == 1 and shown.count("report from bob") == 1
    assert undelivered() == 0
    results = [
        t
        for e in events_of(resumed.stdout)
        if e.get("type") == "user"
        for t in texts(e["message"]["content"])
    ]
    assert "#1 [pending] Keep me" in results
    # alice went on from her transcript: her resumed request holds her first prompt too.
    resumed_alice = json.dumps(script.teammate_requests["alice"][-1]["messages"])
    assert "Report, alice." in resumed_alice and "still there?" in resumed_alice
    # bob came back in his own mode, plan (not the lead's), as his system prompt says.
    resumed_bob = script.teammate_requests["bob"][-1]
    assert "still there?" in json.dumps(resumed_bob["messages"])
    assert "You start in plan mode" in system_text(resumed_bob)
    assert "You start in plan mode" not in system_text(script.teammate_requests["alice"][-1])
    # Each came back of its type: a pane teammate's new process is built from it too.
    tools_of = lambda r: {t["name"] for t in r["tools"]}  # noqa: E731
    assert {"Write", "Edit"} & tools_of(script.teammate_requests["alice"][0]) == set()
    assert {"Write", "Edit"} & tools_of(script.teammate_requests["alice"][-1]) == set()
    assert {"Write", "Edit"} <= tools_of(resumed_bob)
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "teams", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    teams = json.loads(listed.stdout)["teams"]
    assert teams == []  # removed at the end of the run; its task list stays in the store
    with contextlib.closing(sqlite3.connect(db)) as conn:
        subjects = [r[0] for r in conn.execute("SELECT subject FROM team_tasks")]
        backends = {
            json.loads(data).get("agent_name"): json.loads(data).get("backend")
            for (data,) in conn.execute("SELECT data FROM tasks WHERE session_id = ?", (session,))
        }
    assert subjects == ["Keep me"]
    # Brought back where new teammates start: in panes (new processes) with tmux.
    assert backends["alice"] == backends["bob"] == mode, backends

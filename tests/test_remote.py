"""Remote agents on Ray, against a real local Ray started by the session under test.

Each test drives ``taskloom -p --output-format stream-json`` against a fake Anthropic server
that plays the lead and the remote agents (told apart by their first prompt). The remote
agents run in Ray actors on this machine, each in a ``taskloom remote worker`` process of its
own, on a copy of a git repository made for the test.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, needs, run_processes
from team_scenario import events_of

pytestmark = [needs("ray"), pytest.mark.e2e, pytest.mark.slow]

FINAL = "Remote work done."


def _user_text(body: dict[str, Any]) -> str:
    return "\n".join(
        t for m in body["messages"] if m["role"] == "user" for t in texts(m["content"])
    )


def _calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


class Remote:
    """The lead spawns remote agents (one per job) in the background; each runs its job's
    Bash command and answers; the lead ends once every notification is in."""

    def __init__(self, jobs: dict[str, str], *, background: bool = True) -> None:
        self.jobs = jobs
        self.background = background
        self.lead_requests: list[dict[str, Any]] = []
        self.agent_requests: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first = texts(body["messages"][0]["content"])
            job = next((j for j in self.jobs if any(f"job {j}:" in t for t in first)), None)
            if job is not None:
                self.agent_requests.setdefault(job, []).append(body)
                return self._agent(job, body)
            self.lead_requests.append(body)
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        if not _calls(body):
            spawn = tuple(
                ToolCall("Agent", {"description": f"remote {j}", "prompt": f"job {j}: run it",
                                   "subagent_type": "general-purpose", "isolation": "remote",
                                   "run_in_background": self.background})
                for j in self.jobs
            )  # fmt: skip
            return Turn(tool_calls=spawn)
        seen = _user_text(body)
        if seen.count("<task-notification>") >= len(self.jobs):
            return Turn(text=FINAL)
        return Turn(text="Waiting for the remote agents.")

    def _agent(self, job: str, body: dict[str, Any]) -> Turn:
        if not _calls(body):
            return Turn(tool_calls=(ToolCall("Bash", {"command": self.jobs[job]}),))
        return Turn(text=f"answer {job}: {_user_text(body)[-60:]!r}")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    (repo / "dirty.txt").write_text("uncommitted\n")  # travels too
    return repo


def _run(
    tmp_path: Path,
    script: Any,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    settings: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], FakeAnthropicServer]:
    repo = _repo(tmp_path)
    with FakeAnthropicServer(responder=script) as server:
        run_env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-remote-test")
        run_env["TASKLOOM_HOME"] = str(tmp_path / "home")
        run_env.pop("RAY_ADDRESS", None)
        run_env.update(env or {})
        settings = settings or json.dumps({"remote": {"localCpus": 2}})
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "Fan out.", "--output-format",
             "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
             "--dangerously-skip-permissions", "--settings", settings],
            capture_output=True, text=True, timeout=timeout, cwd=repo, env=run_env,
        )  # fmt: skip
    return proc, server


def _notifications(script: Remote) -> str:
    return _user_text(script.lead_requests[-1])


def test_two_remote_agents_run_their_commands_on_copies_and_answer(tmp_path: Path) -> None:
    script = Remote({"a": "echo out-a; cat dirty.txt", "b": "echo out-b"})
    proc, server = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL
    seen = _notifications(script)
    ids = re.findall(r"<task-id>(r[0-9a-z]{8})</task-id>", seen)
    assert len(set(ids)) == 2, seen
    assert seen.count("<status>completed</status>") == 2, seen
    # Each ran its command on its copy (the uncommitted file travelled) and answered.
    assert "answer a:" in seen and "out-a" in seen and "uncommitted" in seen
    assert "answer b:" in seen and "out-b" in seen
    for task_id in ids:
        out = (tmp_path / "home").rglob(f"tasks/{task_id}.output")
        shown = next(out).read_text()
        assert "→ Running: echo out-" in shown, shown  # as a local agent's output shows it
    # The result counts what each spent on the cluster, and its cost is in the session's.
    result = events[-1]
    usage = result["agentUsage"]
    for task_id in set(ids):
        entry = usage[task_id]
        assert entry["status"] == "completed" and entry["agentType"] == "general-purpose", entry
        assert entry["inputTokens"] > 0 and entry["costUSD"] > 0, entry
    assert sum(e["costUSD"] for e in usage.values()) == pytest.approx(result["total_cost_usd"])
    assert result["total_cost_usd"] > usage["main"]["costUSD"] > 0
    model_in = sum(m["inputTokens"] for m in result["modelUsage"].values())
    assert sum(e["inputTokens"] for e in usage.values()) == model_in
    # The model's credentials reached the workers, in their environment only.
    assert {r.headers.get("x-api-key") for r in server.requests} == {"sk-remote-test"}
    assert "sk-remote-test" not in proc.stdout and "sk-remote-test" not in proc.stderr
    # The first remote spawn said a local Ray was started, and what it took.
    launched = _user_text(script.lead_requests[1])
    assert launched.count("a local Ray was started for this session in") == 1, launched
    # taskloom remote status lists them, from the store.
    status = subprocess.run(
        [sys.executable, "-m", "taskloom", "remote", "status", "--json"],
        capture_output=True, text=True, timeout=60, check=True,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
    )  # fmt: skip
    listed = json.loads(status.stdout)
    assert sorted(a["id"] for a in listed["agents"]) == sorted(set(ids))
    assert {a["status"] for a in listed["agents"]} == {"completed"}
    assert {a["cluster"] for a in listed["agents"]} == {"local"}
    # Nothing is left: no worker process, no Ray process of this run.
    assert run_processes(lambda p: "remote" in (p.info.get("cmdline") or [])[3:5]) == []
    left = run_processes(lambda p: "ray" in " ".join(p.info.get("cmdline") or []))
    assert left == [], [p.info.get("cmdline") for p in left]


def test_a_remote_agent_s_changes_come_back_as_a_branch_and_the_tree_is_untouched(
    tmp_path: Path,
) -> None:
    script = Remote({"c": "echo made > made.txt && echo more >> README.md"})
    proc, _ = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = _notifications(script)
    (task_id,) = set(re.findall(r"<task-id>(r[0-9a-z]{8})</task-id>", seen))
    branch = f"taskloom/remote-{task_id[1:9]}"
    assert f"branch {branch}" in seen and "made.txt" in seen, seen
    repo = tmp_path / "repo"
    shown = subprocess.run(
        ["git", "show", f"{branch}:made.txt"], cwd=repo, capture_output=True, text=True
    )
    assert shown.stdout == "made\n", shown.stderr
    # The working tree and the index are as they were.
    assert not (repo / "made.txt").exists() and (repo / "README.md").read_text() == "hello\n"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert status == "?? dirty.txt\n"
    assert (
        subprocess.run(
            ["git", "for-each-ref", "refs/taskloom"], cwd=repo, capture_output=True, text=True
        ).stdout
        == ""
    )  # the snapshot's ref is gone


def test_ray_address_pointing_nowhere_is_a_tool_error_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    script = Remote({"d": "echo never"})
    began = time.monotonic()
    proc, _ = _run(tmp_path, script, env={"RAY_ADDRESS": "127.0.0.1:9"})
    assert time.monotonic() - began < 30 * TIME_FACTOR
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [
        b
        for e in events_of(proc.stdout)
        if e.get("type") == "user"
        for b in e["message"]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    (error,) = results
    assert error["is_error"] is True
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in json.dumps(error), error
    assert "d" not in script.agent_requests


class Stopped(Remote):
    """One remote agent runs ``sleep 300.N``; once it runs, the lead stops it with TaskStop (or
    the test kills its actor from outside: ``stop=False``).

    N is the scenario's own: a test that waits for or kills "the" command must not find another
    test's (tests run side by side, and ``.ci/twice`` runs two suites on one machine).
    """

    def __init__(self, *, stop: bool, wait: bool = True) -> None:
        self.command = f"sleep 300.{secrets.randbelow(900000) + 100000}"
        super().__init__({"s": self.command})
        self.stop = stop
        #: Whether the lead waits for the remote command to run before it stops the agent.
        self.wait = wait
        self.stop_sent = 0.0
        self.told = 0.0

    def _lead(self, body: dict[str, Any]) -> Turn:
        calls = _calls(body)
        names = [c["name"] for c in calls]
        seen = _user_text(body)
        if not calls:
            return super()._lead(body)
        if "<task-notification>" in seen:
            self.told = self.told or time.monotonic()
            return Turn(text=FINAL)
        if self.stop and self.wait and "Bash" not in names:
            # The model's own wait until the remote command runs (no event reaches it); -x:
            # the whole command line, or this very command would match.
            # Up to 2 minutes times the factor: a worker's first start (no bytecode cached
            # yet, on a busy machine) has taken over 30 s in CI, and over 2 minutes with two
            # busy loops beside the suite.
            tries = int(1200 * TIME_FACTOR)
            wait = (
                f"for i in $(seq {tries}); do pgrep -fx '{self.command}' >/dev/null && exit 0;"
                " sleep 0.1; done"
            )
            limit_ms = int(150000 * TIME_FACTOR)
            return Turn(tool_calls=(ToolCall("Bash", {"command": wait, "timeout": limit_ms}),))
        if self.stop and "TaskStop" not in names:
            (task_id,) = set(re.findall(r"agentId: (r[0-9a-z]{8})", seen))
            self.stop_sent = time.monotonic()
            return Turn(tool_calls=(ToolCall("TaskStop", {"task_id": task_id}),))
        return Turn(text="Waiting.")


def _sleeps(script: Stopped) -> list[Any]:
    return run_processes(lambda p: " ".join(p.info.get("cmdline") or []).endswith(script.command))


@pytest.mark.timeout(300 * TIME_FACTOR)
def test_task_stop_kills_a_remote_agent_and_its_command_on_the_worker(tmp_path: Path) -> None:
    script = Stopped(stop=True)
    # Its wait for the command: up to 2 minutes (times the factor).
    proc, _ = _run(tmp_path, script, timeout=240 * TIME_FACTOR)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert script.stop_sent and script.told, "TaskStop never went, or nothing was told"
    assert script.told - script.stop_sent < 5.0 * TIME_FACTOR
    assert script.agent_requests.get("s"), "the remote agent never ran its command"
    seen = _notifications(script)
    assert "<status>killed</status>" in seen, seen
    assert _sleeps(script) == []


def test_task_stop_before_the_remote_agent_has_started_leaves_nothing(tmp_path: Path) -> None:
    script = Stopped(stop=True, wait=False)  # at once: its actor is being made, or not yet
    proc, _ = _run(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert script.told - script.stop_sent < 5.0 * TIME_FACTOR
    assert "<status>killed</status>" in _notifications(script)
    assert _sleeps(script) == []


def test_a_remote_agent_whose_actor_is_killed_from_outside_fails_with_a_reason(
    tmp_path: Path,
) -> None:
    import os
    import signal

    import psutil

    script = Stopped(stop=False)
    killed: list[float] = []

    def kill_the_actor() -> None:
        deadline = time.monotonic() + 60 * TIME_FACTOR
        while time.monotonic() < deadline:  # no event tells another process of it
            for sleep in _sleeps(script):
                chain = psutil.Process(sleep.pid).parents()
                actors = [p for p in chain if p.name().startswith("ray::")]
                if actors:
                    os.kill(actors[0].pid, signal.SIGKILL)
                    killed.append(time.monotonic())
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_actor)
    killer.start()
    try:
        proc, _ = _run(tmp_path, script)
    finally:
        killer.join(70)
    assert killed, "the remote agent's command never ran"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert script.told and script.told - killed[0] < 10.0 * TIME_FACTOR
    seen = _notifications(script)
    assert "<status>failed</status>" in seen and "the remote agent was lost" in seen, seen
    # Its worker saw its actor die and stopped its command.
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while _sleeps(script):
        assert time.monotonic() < deadline, _sleeps(script)
        time.sleep(0.1)


def test_an_address_that_answers_but_is_no_ray_is_a_tool_error_in_bounded_time(
    tmp_path: Path,
) -> None:
    import socket

    # A port that accepts connections and says nothing: Ray would wait for it for minutes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        script = Remote({"e": "echo never"})
        began = time.monotonic()
        proc, _ = _run(tmp_path, script, env={"RAY_ADDRESS": f"127.0.0.1:{port}"}, timeout=60)
        took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert took < 30 * TIME_FACTOR, took  # the session ended too: nothing kept it
    shown = json.dumps(events_of(proc.stdout))
    assert f"Ray at 127.0.0.1:{port} did not answer within 10 s" in shown, shown[-2000:]
    assert "e" not in script.agent_requests


class Budgeted(Remote):
    """One remote agent with a token budget works on and on (1000 tokens a response)."""

    def __init__(self) -> None:
        super().__init__({"t": "echo step"})

    def _lead(self, body: dict[str, Any]) -> Turn:
        if not _calls(body):
            spawn = {"description": "remote t", "prompt": "job t: run it", "isolation": "remote",
                     "run_in_background": True, "max_tokens_budget": 2500}  # fmt: skip
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        if "<task-notification>" in _user_text(body):
            return Turn(text=FINAL)
        return Turn(text="Waiting.")

    def _agent(self, job: str, body: dict[str, Any]) -> Turn:
        # Each step takes a moment, scaled as time bounds are: "stopped soon after" (a count of
        # requests) then allows the stop as long on a loaded machine as on an idle one.
        step = ToolCall("Bash", {"command": f"sleep {0.2 * TIME_FACTOR:g}; echo step"})
        return Turn(tool_calls=(step,), input_tokens=990, output_tokens=10)


def test_a_remote_agent_s_token_budget_stops_it(tmp_path: Path) -> None:
    script = Budgeted()
    settings = json.dumps({"remote": {"localCpus": 2}, "agentBudgets": True})
    proc, _ = _run(tmp_path, script, settings=settings)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = _notifications(script)
    assert "<status>killed</status>" in seen, seen
    assert "was stopped: the token budget of r" in seen and "of 2,500 tokens" in seen, seen
    assert len(script.agent_requests["t"]) <= 5  # stopped soon after it ran out, not later

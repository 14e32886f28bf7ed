"""Detached remote agents (setting ``remote.exitPolicy: "detach"``), on a Ray cluster of its own.

The cluster is a real Ray head started with ``ray start`` for the test (a cluster the session
does not own, as a user's would be). A first ``taskloom -p`` spawns a remote agent that waits
for a file and exits while it waits; the agent goes on; ``taskloom -p --resume`` of that
session follows it on, and gets its answer and its branch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, needs, pids_with_env, run_processes, wait_until
from team_scenario import events_of
from test_remote import FINAL, _calls, _repo, _user_text

pytestmark = [needs("ray"), pytest.mark.slow]

_CLUSTER_MARK = "TASKLOOM_TEST_RAY_CLUSTER"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_processes(mark: str) -> list[psutil.Process]:
    # Ray's agents (DashboardAgent, RuntimeEnvAgent) set their title over their environment,
    # where the mark is then no longer read: they are found as the raylet's children.
    found: dict[int, psutil.Process] = {}
    for pid in pids_with_env(_CLUSTER_MARK, mark):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for one in [proc, *proc.children(recursive=True)]:
                if one.status() != psutil.STATUS_ZOMBIE:
                    found[one.pid] = one
    return list(found.values())


@pytest.fixture
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head of the test's own (2 CPUs, no dashboard, token authentication as Ray
    advises); its address, and what a driver needs in its environment to be let in. All its
    processes carry a mark of this fixture's: they are stopped by it, and only they."""
    mark = uuid.uuid4().hex
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ray")  # short: Ray's socket paths must fit
    token = Path(temp) / "token"
    token.write_text(uuid.uuid4().hex)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = {**os.environ, **auth, _CLUSTER_MARK: mark, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    ray = str(Path(sys.executable).with_name("ray"))
    try:
        subprocess.run(
            [ray, "start", "--head", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
            env=env, check=True, capture_output=True, timeout=90,
        )  # fmt: skip
        yield f"127.0.0.1:{port}", auth
    finally:
        _stop_cluster(mark)
        shutil.rmtree(temp, ignore_errors=True)


def _stop_cluster(mark: str) -> None:
    """TERM every process of the cluster, KILL what is left 2 s later (Ray's GCS server does
    not end on TERM; waiting longer for it only costs time); again while a raylet that was
    still shutting down has started one more."""
    for _ in range(3):
        procs = _cluster_processes(mark)
        if not procs:
            return
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=2 * TIME_FACTOR)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5 * TIME_FACTOR)


class Detached:
    """Session one: the lead spawns a remote agent and ends its turn at once. The agent waits
    for a file, then makes one and answers. Session two (resumed): the lead asks TaskOutput
    for it, blocking, and ends once it has its answer."""

    def __init__(self, go: Path) -> None:
        self.go = go
        self.lead_requests: list[dict[str, Any]] = []
        self.agent_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first = texts(body["messages"][0]["content"])
            if any("job x:" in t for t in first):
                self.agent_requests.append(body)
                if not _calls(body):
                    wait = f"while [ ! -f {self.go} ]; do sleep 0.1; done; echo after-go"
                    cmd = f"{wait} && echo remote > made-remotely.txt"
                    return Turn(tool_calls=(ToolCall("Bash", {"command": cmd}),))
                return Turn(text=f"answer x: {_user_text(body)[-40:]!r}")
            self.lead_requests.append(body)
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        seen = _user_text(body)
        names = [c["name"] for c in _calls(body)]
        if "Agent" not in names:
            spawn = ToolCall(
                "Agent",
                {
                    "description": "remote x",
                    "prompt": "job x: run it",
                    "isolation": "remote",
                    "run_in_background": True,
                },
            )
            return Turn(tool_calls=(spawn,))  # fmt: skip
        if "What came of it?" not in seen:
            return Turn(text="Left it running.")
        if "TaskOutput" not in names:
            (task_id,) = set(re.findall(r"agentId: (r[0-9a-z]{8})", seen))
            wait = {"task_id": task_id, "block": True, "timeout": 60000}
            return Turn(tool_calls=(ToolCall("TaskOutput", wait),))
        return Turn(text=FINAL)


def _taskloom(
    repo: Path, env: dict[str, str], *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args, "--output-format", "stream-json",
         "--verbose", "--model", "claude-sonnet-4-5", "--dangerously-skip-permissions",
         "--settings", json.dumps({"remote": {"exitPolicy": "detach"}})],
        capture_output=True, text=True, timeout=timeout, cwd=repo, env=env,
    )  # fmt: skip


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    import sqlite3

    db = next((tmp_path / "home").rglob("*.db"))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [json.loads(r[0]) for r in conn.execute("SELECT data FROM tasks")]


def _workers() -> list[psutil.Process]:
    return run_processes(lambda p: "remote" in (p.info.get("cmdline") or [])[3:5])


@pytest.mark.e2e
def test_a_detached_remote_agent_outlives_its_session_and_a_resume_takes_it_up(
    tmp_path: Path, ray_head: tuple[str, dict[str, str]]
) -> None:
    address, auth = ray_head
    repo = _repo(tmp_path)
    go = tmp_path / "go"
    script = Detached(go)
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-remote-test")
        env.update(auth, TASKLOOM_HOME=str(tmp_path / "home"), RAY_ADDRESS=address)
        first = _taskloom(repo, env, "-p", "Fan out.")
        assert first.returncode == 0, first.stderr[-3000:]
        events = events_of(first.stdout)
        assert events[-1]["type"] == "result" and events[-1]["result"] == "Left it running."
        session = events[0]["session_id"]
        # The session has ended; its agent goes on, on the cluster (its process may still
        # be starting: no event reaches this test of it).
        deadline = time.monotonic() + 30 * TIME_FACTOR
        while not _workers():
            assert time.monotonic() < deadline, json.dumps(_records(tmp_path))
            time.sleep(0.1)
        go.write_text("")
        second = _taskloom(repo, env, "-p", "What came of it?", "--resume", session)
        assert second.returncode == 0, second.stderr[-3000:]
    events = events_of(second.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL
    output = _user_text(script.lead_requests[-1])
    (task_id,) = set(re.findall(r"agentId: (r[0-9a-z]{8})", output))
    assert "answer x:" in output and "after-go" in output, output[-2000:]
    # Its output file holds what it did in both sessions' time.
    shown = next((tmp_path / "home").rglob(f"tasks/{task_id}.output")).read_text()
    assert "→ Running: while" in shown and "after-go" in shown, shown
    # Its change came back as its branch; the snapshot's ref is gone once it is back.
    branch = f"taskloom/remote-{task_id[1:9]}"
    made = subprocess.run(
        ["git", "show", f"{branch}:made-remotely.txt"], cwd=repo, capture_output=True, text=True
    )
    assert made.stdout == "remote\n", made.stderr
    refs = subprocess.run(
        ["git", "for-each-ref", "refs/taskloom"], cwd=repo, capture_output=True, text=True
    )
    assert refs.stdout == ""
    assert not (repo / "made-remotely.txt").exists()
    # Nothing of it is left on the cluster: no worker process, no actor.
    assert _workers() == []
    actors = run_processes(lambda p: "_AgentHost" in " ".join(p.info.get("cmdline") or []))
    assert actors == [], [p.info.get("cmdline") for p in actors]
    # The credentials reached the worker in its environment only.
    assert {r.headers.get("x-api-key") for r in server.requests} == {"sk-remote-test"}
    assert "sk-remote-test" not in first.stdout + first.stderr + second.stdout + second.stderr


async def test_a_detached_actor_s_journal_follows_on_from_an_event_and_forgets_what_is_stored() -> (
    None
):
    """The actor's class alone (no Ray): events are kept until acknowledged, a follower from
    event N gets N on in order, then the end, and waits meanwhile for those still to come."""
    from taskloom.remote.actor import _RemoteAgent

    agent = _RemoteAgent(keep_events=True)
    for n in range(5):
        agent._emit({"type": "progress", "n": n})
    got: list[int] = []

    async def follow(after: int) -> None:
        async for event in agent.follow(after):
            got.append(int(event.get("n", -1)))

    follower = asyncio.ensure_future(follow(2))
    await wait_until(lambda: got == [2, 3, 4], timeout=5, what="the kept events")
    assert agent._first == 2 and len(agent._events) == 3  # the two stored before: forgotten
    agent._emit({"type": "progress", "n": 5})
    await wait_until(lambda: got[-1:] == [5], timeout=5, what="an event that came later")
    await agent.ack(5)
    assert agent._first == 5 and [e["n"] for e in agent._events] == [5]
    agent._done = True
    agent._emit({"type": "end"})
    await asyncio.wait_for(follower, 5)
    assert got == [2, 3, 4, 5, -1]
    # One that nobody can follow again keeps only what is not sent yet.
    once = _RemoteAgent(keep_events=False)
    once._emit({"type": "progress", "n": 0})
    once._done = True
    once._emit({"type": "end"})
    assert [e.get("n") async for e in once.follow(0)] == [0, None]
    assert once._events == []

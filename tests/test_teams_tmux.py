"""Teammates in tmux panes (``teammateMode: tmux``), on a real tmux server of the test's own.

Each teammate is a ``taskloom teammate`` process in a pane; the lead runs in this process (a
:class:`taskloom.Harness`) or as ``taskloom -p``. The model is a fake Anthropic server whose
responder answers from what each conversation shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import tmux_driver
from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, harness, main_context, run_processes, wait_until
from taskloom.tasks.teammate import TeammateTaskState
from taskloom.teams.protocol import wrap
from team_scenario import FINAL, TEAM, TeamScript, events_of, team_argv

MODEL = "claude-sonnet-4-5"


def _tmux_env(server: tmux_driver.TmuxServer) -> str:
    """``$TMUX`` naming the test's server (as inside one of its sessions)."""
    return f"{server.socket_path},{server.pid},0"


def _panes(server: tmux_driver.TmuxServer) -> list[dict[str, str]]:
    fields = ["id", "dead", "colour", "title", "session", "command"]
    out = server.run(
        "list-panes", "-a", "-F",
        "#{pane_id}\t#{pane_dead}\t#{@taskloom-colour}\t#{pane_title}\t#{@taskloom-session}"
        "\t#{pane_start_command}",
        check=False,
    )  # fmt: skip
    return [dict(zip(fields, line.split("\t"), strict=True)) for line in out.splitlines() if line]


def _teammate_processes() -> list[psutil.Process]:
    def is_teammate(proc: psutil.Process) -> bool:
        argv = proc.info.get("cmdline") or []
        return "taskloom" in argv and "teammate" in argv and "--join" in argv

    return run_processes(is_teammate)


def _all_text(body: dict[str, Any]) -> str:
    return "\n".join(
        t for m in body["messages"] if m["role"] == "user" for t in texts(m["content"])
    )


def _calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


class Echo:
    """Teammates say they are ready, answer every ``ping N`` with ``pong N``, and approve a
    shutdown; the lead (when it runs) spawns alice and bob, then holds its request open."""

    def __init__(self, background: str | None = None) -> None:
        self.lead_holding = threading.Event()
        self._lock = threading.Lock()
        #: A command each teammate starts in the background before it says it is ready.
        self.background = background

    def __call__(self, body: dict[str, Any]) -> Turn:
        system = system_text(body)
        with self._lock:
            for name in ("alice", "bob"):
                if f"You are {name}, a member of the agent team" in system:
                    return self._teammate(name, body)
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        seen = _all_text(body)
        if not _calls(body):
            spawn = tuple(
                ToolCall("Agent", {"description": n, "prompt": f"Work as {n}.", "name": n,
                                   "team_name": TEAM})
                for n in ("alice", "bob")
            )  # fmt: skip
            return Turn(tool_calls=spawn)
        if "ready alice" in seen and "ready bob" in seen:
            self.lead_holding.set()
            return Turn(stall_at=0)  # the lead waits in its request until it is killed
        return Turn(text="Waiting.")

    @staticmethod
    def _say(message: str | dict[str, Any]) -> Turn:
        return Turn(tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": message}),))

    def _teammate(self, name: str, body: dict[str, Any]) -> Turn:
        seen, calls = _all_text(body), _calls(body)
        sent = [c["input"].get("message") for c in calls if c["name"] == "SendMessage"]
        if "shutdown_request" in seen and not any(isinstance(m, dict) for m in sent):
            request = seen.split('"requestId": "', 1)[1].split('"', 1)[0]
            answer = {"type": "shutdown_response", "request_id": request, "approve": True}
            return self._say(answer)
        started = any(c["name"] == "Bash" for c in calls)
        if self.background is not None and not started:
            job = {"command": self.background, "run_in_background": True, "description": "job"}
            return Turn(tool_calls=(ToolCall("Bash", job),))
        if not sent:
            return self._say(f"ready {name}")
        pings = seen.count("ping ")
        pongs = sum(1 for m in sent if isinstance(m, str) and m.startswith("pong"))
        if pings > pongs:
            return self._say(f"pong {pongs + 1} from {name}")
        return Turn(text=f"{name} idle")


@contextlib.contextmanager
def _model(responder: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropicServer]:
    for key in [k for k in os.environ if k.startswith(("ANTHROPIC_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    with FakeAnthropicServer(responder=responder) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        yield server


def _states(h: Any) -> dict[str, TeammateTaskState]:
    return {s.agent_name: s for s in h.runtime.list() if isinstance(s, TeammateTaskState)}


async def _spawn(h: Any, name: str) -> None:
    tool = next(t for t in h.tools if t.name == "Agent")
    params = {"description": name, "prompt": f"Work as {name}.", "name": name, "team_name": TEAM}
    result = await tool.call(tool.validate(params), main_context(h))
    assert result.content.startswith("Spawned successfully."), result.content


# -- 1. the team flow -----------------------------------------------------------------------


class PanesSeen(TeamScript):
    """The team scenario, noting the panes once both teammates have reported."""

    def __init__(self, server: tmux_driver.TmuxServer) -> None:
        super().__init__()
        self.server = server
        self.panes: list[dict[str, str]] = []

    def _lead(self, messages: list[dict[str, Any]]) -> Turn:
        seen = "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))
        if not self.panes and "report from alice" in seen and "report from bob" in seen:
            self.panes = _panes(self.server)
        return super()._lead(messages)


@pytest.mark.e2e
def test_the_team_flow_with_teammates_in_tmux_panes(
    tmp_path: Path, tmux: tmux_driver.TmuxServer
) -> None:
    tmux.start()
    script = PanesSeen(tmux)
    key = "sk-ant-flow-7c1f93"
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY=key)
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        env["TMUX"] = _tmux_env(tmux)
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", *team_argv(), "--teammate-mode", "tmux"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL
    # Two panes, each with its teammate's colour and name, while they worked.
    by_title = {p["title"]: p for p in script.panes}
    assert set(by_title) == {f"alice@{TEAM}", f"bob@{TEAM}"}, script.panes
    assert by_title[f"alice@{TEAM}"]["colour"] == "blue"
    assert by_title[f"bob@{TEAM}"]["colour"] == "green"
    assert all(p["dead"] == "0" and p["session"] == events[-1]["session_id"] for p in script.panes)
    # The lead's API key reached the teammates' processes, but not their panes' command lines
    # (tmux shows those to whoever asks).
    assert all(key not in p["command"] and "taskloom" in p["command"] for p in script.panes)
    assert {r.headers.get("x-api-key") for r in server.requests} == {key}
    # Nor does a file keep it: each spec was removed once its process had read it.
    assert list((tmp_path / "home").rglob("teammates/*.json")) == []
    # Each teammate ran in its own process: its requests carried its own conversation.
    for name, prompt in (("alice", "Check module A."), ("bob", "Check module B.")):
        first = texts(script.teammate_requests[name][0]["messages"][0]["content"])
        assert first == [
            f'<teammate-message teammate_id="team-lead">\n{prompt}\n</teammate-message>'
        ]
    lead_seen = "\n".join(
        t for m in script.lead_requests[-1]["messages"] for t in texts(m["content"])
    )
    assert lead_seen.count('"backendType": "tmux"') == 2
    assert "report from alice" in lead_seen and "report from bob" in lead_seen
    # What they spent in their processes is in the result, and it adds up.
    result = events[-1]
    usage = result["agentUsage"]
    for name in ("alice", "bob"):
        assert usage[f"{name}@{TEAM}"]["inputTokens"] > 0, usage
    assert sum(e["costUSD"] for e in usage.values()) == pytest.approx(result["total_cost_usd"])
    model_in = sum(m["inputTokens"] for m in result["modelUsage"].values())
    assert sum(e["inputTokens"] for e in usage.values()) == model_in
    # After the shutdown: no pane, no teammate process, no team.
    assert _panes(tmux) == []
    assert _teammate_processes() == []
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "teams", "--json"],
        capture_output=True, text=True, timeout=30,
        env=clean_env(TASKLOOM_HOME=env["TASKLOOM_HOME"]),
    )  # fmt: skip
    assert json.loads(listed.stdout)["teams"] == []


class Relay:
    """bob starts and idles; then alice, spawned, sets bob to work, waits 2.5 s in a command,
    tells the lead she is here and idles. bob starts a command in the background and idles;
    once it is done he answers the lead, slowly (his model streams for some 2.5 s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        system = system_text(body)
        with self._lock:
            if "You are alice, a member of the agent team" in system:
                return self._alice(body)
            if "You are bob, a member of the agent team" in system:
                return self._bob(body)
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        seen, calls = _all_text(body), _calls(body)
        spawned = [c["input"]["name"] for c in calls if c["name"] == "Agent"]
        if not spawned:
            return Turn(tool_calls=(_spawn_call("bob"),))
        if "bob done" in seen:
            return Turn(text=FINAL)
        if spawned == ["bob"] and '"idle_notification"' in seen:
            return Turn(tool_calls=(_spawn_call("alice"),))
        return Turn(text="Waiting.")

    @staticmethod
    def _alice(body: dict[str, Any]) -> Turn:
        names = [c["name"] for c in _calls(body)]
        if not names:
            job = {"to": "bob", "message": "start the job", "summary": "job"}
            return Turn(tool_calls=(ToolCall("SendMessage", job),))
        if "Bash" not in names:
            return Turn(tool_calls=(ToolCall("Bash", {"command": "sleep 2.5"}),))
        if names.count("SendMessage") == 1:
            here = {"to": "team-lead", "message": "alice here", "summary": "here"}
            return Turn(tool_calls=(ToolCall("SendMessage", here),))
        return Turn(text="alice idle")

    @staticmethod
    def _bob(body: dict[str, Any]) -> Turn:
        seen, calls = _all_text(body), _calls(body)
        if "start the job" not in seen:
            return Turn(text="bob idle")
        if not any(c["name"] == "Bash" for c in calls):
            job = {"command": "sleep 1.5", "run_in_background": True, "description": "job"}
            return Turn(tool_calls=(ToolCall("Bash", job),))
        if "<task-notification>" in seen and not any(c["name"] == "SendMessage" for c in calls):
            done = {"to": "team-lead", "message": "bob done", "summary": "done"}
            return Turn(tool_calls=(ToolCall("SendMessage", done),), delay=0.4)
        return Turn(text="bob waits for his job")


def _spawn_call(name: str) -> ToolCall:
    return ToolCall(
        "Agent", {"description": name, "prompt": f"Work as {name}.", "name": name,
                  "team_name": TEAM},
    )  # fmt: skip


@pytest.mark.e2e
def test_a_headless_lead_waits_for_a_teammate_another_set_to_work_and_its_background_job(
    tmp_path: Path, tmux: tmux_driver.TmuxServer
) -> None:
    # The lead hears nothing of alice's message to bob (her process pings only his), and bob
    # said he was idle before it; then he idles with a command running in his own process;
    # then, that command done, he works on its notification (his process's mail, not the
    # team's) while alice's message and idleness reach the lead. Counting him idle any of
    # these times, the headless lead would end before "bob done".
    tmux.start()
    script = Relay()
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        env["TMUX"] = _tmux_env(tmux)
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", *team_argv(), "--teammate-mode", "tmux"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert events[-1]["type"] == "result" and events[-1]["result"] == FINAL, events[-1]
    # bob's process acknowledged alice's row itself, as his transcript took it (not the
    # lead's cleanup at his end): a crash of his would not hand it to him twice.
    import sqlite3

    db = sqlite3.connect(tmp_path / "home" / "taskloom.db")
    try:
        rows = db.execute(
            "SELECT recipient, body, created_at, delivered_at FROM mailbox WHERE kind = 'message'"
        ).fetchall()
        lead_session = events[-1]["session_id"]
        tasks = [
            json.loads(data)
            for (data,) in db.execute(
                "SELECT data FROM tasks WHERE session_id = ?", (lead_session,)
            ).fetchall()
        ]
    finally:
        db.close()
    # What bob used, as his process recorded it, is on the lead's task for him.
    bob = next(t for t in tasks if t.get("agent_name") == "bob")
    assert bob["tool_uses"] >= 2 and bob["total_tokens"] > 0, bob
    # His process wrote his progress where the lead's task for him says (TaskOutput reads it).
    shown = Path(bob["output_file"]).read_text()
    assert "→ Bash" in shown and "→ SendMessage" in shown, shown
    job = next(r for r in rows if r[0] == f"bob@{TEAM}" and "start the job" in r[1])
    done = next(r for r in rows if "bob done" in r[1])
    assert job[3] is not None and job[3] < done[2], (job, done)
    assert _panes(tmux) == []
    assert _teammate_processes() == []


# -- 3. crashes -------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_killed_teammate_process_is_seen_within_1_s_and_the_other_goes_on(
    tmp_path: Path, tmux: tmux_driver.TmuxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmux.start()
    monkeypatch.setenv("TMUX", _tmux_env(tmux))
    job = "sleep 6123"  # each teammate's, in the background, in its own process group

    def jobs() -> list[psutil.Process]:
        return run_processes(lambda p: job in " ".join(p.info.get("cmdline") or []))

    with _model(Echo(background=job), monkeypatch):
        async with harness(tmp_path, MODEL, teams=True, teammate_mode="tmux") as h:
            await _spawn(h, "alice")
            await _spawn(h, "bob")
            mailbox = h.runtime.mailbox

            def ready() -> bool:
                said = " ".join(m.body for m in mailbox.pending(h.session_id, "message"))
                return "ready alice" in said and "ready bob" in said

            # Their jobs run: they are at work for the lead, not idle.
            await wait_until(ready, 30, "both teammates ready")
            assert len(jobs()) == 2
            alice, bob = _states(h)["alice"], _states(h)["bob"]
            assert not alice.is_idle and not bob.is_idle
            assert alice.backend == "tmux" and alice.pid > 0 and alice.pane_id.startswith("%")
            os.kill(alice.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert await mailbox.wait(5.0, h.session_id, "notification")
            assert time.monotonic() - killed < 1.0 * TIME_FACTOR
            (note,) = h.runtime.notifications.pending(h.session_id)
            assert note.task_id == alice.id and "<status>failed</status>" in note.text
            # How it ended, read while its process was a zombie (tmux may not record it).
            assert f'"alice@{TEAM}"' in note.text and f"its process {alice.pid} ended" in note.text
            assert "signal 9" in note.text, note.text
            state = _states(h)["alice"]
            assert state.status.value == "failed" and alice.pane_id in (state.error or ""), state
            team = h.team.roster.team()
            members = {m.name: m for m in team.members}
            assert not members["alice"].is_active and members["bob"].is_active
            # Its pane stays, dead, with its last output for the user.
            assert any(p["id"] == alice.pane_id and p["dead"] == "1" for p in _panes(tmux))
            # What it started is swept at once (bob's job runs on).
            await wait_until(lambda: len(jobs()) == 1, 5, "alice's job swept")
            # bob goes on: a message reaches his process and his answer comes back.
            body = wrap("ping 1", sender="team-lead")
            h.team.executor.deliver(bob.agent_id, body, sender=f"team-lead@{TEAM}")
            await wait_until(
                lambda: any(
                    "pong 1 from bob" in letter.body
                    for letter in mailbox.pending(h.session_id, "message")
                ),
                20,
                "bob's answer",
            )
    assert _teammate_processes() == []


@pytest.mark.e2e
def test_a_killed_lead_s_teammates_stop_within_2_s_and_leave_nothing(
    tmp_path: Path, tmux: tmux_driver.TmuxServer
) -> None:
    tmux.start()
    job = "sleep 6124"
    script = Echo(background=job)
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        env["TMUX"] = _tmux_env(tmux)
        argv = [sys.executable, "-m", "taskloom", *team_argv(), "--teammate-mode", "tmux"]
        lead = subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            assert script.lead_holding.wait(60), "the teammates never reported"
            mates = _teammate_processes()
            assert len(mates) == 2
            lead.send_signal(signal.SIGKILL)
            lead.wait(10)
            killed = time.monotonic()
            # Ended (reaped or not).
            alive = tmux_driver.wait_processes(mates, timeout=2.0 * TIME_FACTOR)
            assert not alive, f"still running {time.monotonic() - killed:.2f} s later: {alive}"
        finally:
            if lead.poll() is None:
                lead.kill()
                lead.wait(10)
            assert lead.stderr is not None
            lead.stderr.close()
    assert _teammate_processes() == []
    ours = run_processes(lambda p: str(tmp_path) in " ".join(p.info.get("cmdline") or []))
    assert [p for p in ours if p.pid != tmux.pid] == []  # the test's tmux server aside
    # Nor what they started; and their panes closed with them (nobody would read them).
    assert run_processes(lambda p: job in " ".join(p.info.get("cmdline") or [])) == []
    await_panes = time.monotonic() + 5 * TIME_FACTOR
    while _panes(tmux):  # tmux closes a pane a moment after its command ended: no event
        assert time.monotonic() < await_panes, _panes(tmux)
        time.sleep(0.05)


# -- 5. the mode ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_teammate_mode_tmux_without_tmux_on_path_is_an_error_naming_why(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"), PATH=str(bare), ANTHROPIC_API_KEY="x")
    env.pop("TMUX", None)
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "-p", "hi", "--teams", "--teammate-mode", "tmux",
         "--model", MODEL],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "teammateMode tmux: tmux is not installed (no tmux on PATH)" in proc.stderr


def test_the_mode_comes_from_the_flag_the_environment_or_the_setting() -> None:
    from taskloom.errors import UsageError
    from taskloom.teams.mode import pane_server, teammate_mode

    assert teammate_mode(None, {}, {}) == "in-process"
    assert teammate_mode(None, {"teammateMode": "tmux"}, {}) == "tmux"
    assert teammate_mode(None, {"teammateMode": "tmux"}, {"TASKLOOM_TEAMMATE_MODE": "auto"}) == (
        "auto"
    )
    assert teammate_mode("in-process", {}, {"TASKLOOM_TEAMMATE_MODE": "tmux"}) == "in-process"
    with pytest.raises(UsageError, match="TASKLOOM_TEAMMATE_MODE: 'panes' is not a teammate"):
        teammate_mode(None, {}, {"TASKLOOM_TEAMMATE_MODE": "panes"})
    # auto outside tmux: in-process; inside tmux: tmux, on that server, beside the lead's pane.
    assert pane_server("auto", {"PATH": os.environ["PATH"]}) is None
    assert pane_server("auto", {"PATH": "/nonexistent", "TMUX": "/s,1,0"}) is None
    inside = pane_server("auto", {"PATH": os.environ["PATH"], "TMUX": "/s,1,0", "TMUX_PANE": "%4"})
    assert inside is not None and inside.socket == "/s" and inside.lead_pane == "%4"
    with pytest.raises(UsageError, match="no tmux on PATH"):
        pane_server("tmux", {"PATH": "/nonexistent"})


async def test_auto_outside_tmux_runs_teammates_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TMUX", raising=False)
    with _model(Echo(), monkeypatch):
        async with harness(tmp_path, MODEL, teams=True, teammate_mode="auto") as h:
            await _spawn(h, "alice")
            await wait_until(lambda: _states(h)["alice"].is_idle, 20, "alice idle")
            assert _states(h)["alice"].backend == "in-process"
            assert h.team.executor.local_run(f"alice@{TEAM}") is not None
    assert _teammate_processes() == []


# -- 6. the sweep -----------------------------------------------------------------------------


@pytest.mark.e2e
async def test_the_sweep_removes_a_crashed_session_s_panes_and_processes_only(
    tmp_path: Path, tmux: tmux_driver.TmuxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskloom.process.identity import boot_id, process_start_time
    from taskloom.settings import db_path
    from taskloom.store import ProcessRow, SessionRow, Store
    from taskloom.teams.panes import TmuxPanes

    tmux.start()
    monkeypatch.setenv("TMUX", _tmux_env(tmux))
    panes = TmuxPanes(tmux_driver.TMUX or "tmux", socket=str(tmux.socket_path))
    # A session whose process died (a pid that ran and is gone), and a live one (this process).
    dead = subprocess.Popen(["true"])
    dead.wait()
    home = Path(os.environ["TASKLOOM_HOME"])
    store = Store(db_path(home))
    me = os.getpid()
    made: dict[str, Any] = {}
    # This session's own id, as a resumed session has it: its panes from before are old.
    own = str(uuid.uuid4())
    # The sweep kills whatever on the machine carries a dead owner's tag: this run's own tags,
    # or a concurrent run of this test (.ci/twice) would have its panes killed.
    tags = {sid: f"t-{sid}-{uuid.uuid4().hex[:8]}" for sid in ("crashed", "live", "elsewhere", own)}
    try:
        for sid, pid in (("crashed", dead.pid), ("live", me)):
            store.upsert_session(
                SessionRow(id=sid, pid=pid, pid_start=process_start_time(me) or 0.0, cwd="/",
                           started_at=time.time(), ended_at=None, boot_id=boot_id())
            )  # fmt: skip
        # "elsewhere": a session this store does not know (another TASKLOOM_HOME's).
        for sid in ("crashed", "live", "elsewhere", own):
            made[sid] = await panes.create(
                team=sid, session_id=sid, title=sid, argv=["sleep", "600"], cwd=str(tmp_path),
                env={"PATH": os.environ["PATH"], "TASKLOOM_TASK_ID": tags[sid]},
            )  # fmt: skip
        crashed = made["crashed"]
        # The crashed session's teammate process, recorded as its (the sweep finds it so).
        store.add_process(
            ProcessRow(pid=crashed.pid, pid_start=process_start_time(crashed.pid) or 0.0,
                       pgid=os.getpgid(crashed.pid), session_id="crashed", task_id=tags["crashed"],
                       owner_pid=dead.pid, owner_start=process_start_time(me) or 0.0,
                       boot_id=boot_id())
        )  # fmt: skip
        # The live session's, recorded as its (its owner, this process, runs): never swept.
        live = made["live"]
        store.add_process(
            ProcessRow(pid=live.pid, pid_start=process_start_time(live.pid) or 0.0,
                       pgid=os.getpgid(live.pid), session_id="live", task_id=tags["live"],
                       owner_pid=me, owner_start=process_start_time(me) or 0.0,
                       boot_id=boot_id())
        )  # fmt: skip
        store.flush()
        crashed_proc = psutil.Process(crashed.pid)
        with _model(Echo(), monkeypatch):
            async with harness(tmp_path, MODEL, teams=True, teammate_mode="tmux", session_id=own):
                left = {p["session"] for p in _panes(tmux)}
                assert left == {"live", "elsewhere"}
                assert not crashed_proc.is_running() or crashed_proc.status() == "zombie"
        assert psutil.Process(made["live"].pid).is_running()
        assert psutil.Process(made["elsewhere"].pid).is_running()
        assert [r.task_id for r in store.list_processes()] == [tags["live"]]
    finally:
        for pane in made.values():
            await panes.kill(pane.id)
        store.close()


# -- 4. permissions ---------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_pane_teammates_permission_request_is_asked_in_the_lead_s_repl(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    from test_repl import enter, leave, scripted, start

    tmux.start()
    target = tmp_path / "from_alice.txt"
    spawn = {"description": "writer", "prompt": "Write the file.", "name": "alice"}
    lead = [{"text": "Spawning alice.", "tool_calls": [{"name": "Agent", "input": spawn}]}]
    lead += [{"text": f"Lead turn {n}."} for n in range(2, 8)]
    alice = [
        {"tool_calls": [{"name": "Write", "input": {"file_path": str(target), "content": "hi"}}]},
        {"text": "Wrote it."},
        {"text": "Still here."},
    ]
    model = scripted(tmp_path / "t.yaml", lead, subagents={"teammate": alice})
    pane = start(
        tmux, tmp_path, "--model", model, "--teams", "--teammate-mode", "tmux", width=250,
        TMUX=_tmux_env(tmux),
    )  # fmt: skip
    enter(pane, "get alice to write")
    # The question is the lead's (its pane), naming the teammate in the other process.
    pane.wait_for(re.compile(rf"Allow Write\({re.escape(str(target))}\) \(teammate alice@\S+\)\?"))
    (mate,) = [p for p in _panes(tmux) if p["title"].startswith("alice@")]
    assert mate["dead"] == "0"
    assert not target.exists()
    pane.wait_for("1 yes ·")  # its answer keys work now
    pane.send_keys("1")
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while not target.exists():
        assert time.monotonic() < deadline, pane.capture()
        time.sleep(0.05)  # the file appears when alice's call runs: no event reaches the test
    assert target.read_text() == "hi"
    # alice's idle notice gives the lead a turn once she is done: leave after it (a /exit
    # typed as that turn starts was seen lost, the REPL left running).
    pane.wait_for("Lead turn 3.")
    leave(pane)
    assert _teammate_processes() == []
    assert [p for p in _panes(tmux) if p["title"].startswith("alice@")] == []


class Spender:
    """alice says she is ready, then answers each ping; each of her responses is 1000 tokens."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        seen, calls = _all_text(body), _calls(body)
        sent = [c["input"].get("message") for c in calls if c["name"] == "SendMessage"]
        spend = {"input_tokens": 900, "output_tokens": 100}
        if "You are alice, a member of the agent team" not in system_text(body):
            return Turn(text="lead", **spend)
        pongs = sum(1 for m in sent if isinstance(m, str) and m.startswith("pong"))
        if not sent or seen.count("ping ") > pongs:
            said = "ready alice" if not sent else f"pong {pongs + 1}"
            call = ToolCall("SendMessage", {"to": "team-lead", "message": said})
            return Turn(tool_calls=(call,), **spend)
        return Turn(text="alice idle", **spend)


@pytest.mark.e2e
async def test_a_pane_teammate_s_spending_counts_for_the_lead_s_session_budget(
    tmp_path: Path, tmux: tmux_driver.TmuxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmux.start()
    monkeypatch.setenv("TMUX", _tmux_env(tmux))
    with _model(Spender(), monkeypatch):
        async with harness(
            tmp_path, MODEL, teams=True, teammate_mode="tmux", max_budget_tokens=3000
        ) as h:
            await _spawn(h, "alice")
            budgets = h.agents.spawner.budgets
            # Its first turn (two responses) is counted when it says it is idle.
            await wait_until(lambda: budgets.used(h.session_id)[0] >= 2000, 30, "2000 counted")
            alice = _states(h)["alice"]
            assert alice.spent_tokens == 2000 and alice.cost_usd > 0
            assert not alice.terminal  # under the session's budget: it goes on
            body = wrap("ping 1", sender="team-lead")
            h.team.executor.deliver(alice.agent_id, body, sender=f"team-lead@{TEAM}")
            # Its next turn takes the session past its 3000 tokens: it is stopped, saying why.
            await wait_until(lambda: _states(h)["alice"].terminal, 30, "alice stopped")
            state = _states(h)["alice"]
            assert state.status.value == "killed", state
            assert "the token budget of the session ran out" in (state.stopped_reason or "")
            assert budgets.used(h.session_id)[0] >= 3000
            assert h.session.engine.halted
    assert _teammate_processes() == []


class DelegatingSpender:
    """alice has a subagent do the work (500 tokens), then says she is ready (1000 each)."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        first = texts(body["messages"][0]["content"])
        if "sub-work" in first:  # her subagent, in her process
            return Turn(text="done", input_tokens=400, output_tokens=100)
        spend = {"input_tokens": 900, "output_tokens": 100}
        if "You are alice, a member of the agent team" not in system_text(body):
            return Turn(text="lead", **spend)
        names = [c["name"] for c in _calls(body)]
        if "Agent" not in names:
            call = ToolCall("Agent", {"description": "sub", "prompt": "sub-work"})
            return Turn(tool_calls=(call,), **spend)
        if "SendMessage" not in names:
            call = ToolCall("SendMessage", {"to": "team-lead", "message": "ready alice"})
            return Turn(tool_calls=(call,), **spend)
        return Turn(text="alice idle", **spend)


@pytest.mark.e2e
async def test_a_pane_teammate_s_subagents_count_for_its_lead(
    tmp_path: Path, tmux: tmux_driver.TmuxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmux.start()
    monkeypatch.setenv("TMUX", _tmux_env(tmux))
    with _model(DelegatingSpender(), monkeypatch):
        async with harness(tmp_path, MODEL, teams=True, teammate_mode="tmux") as h:
            await _spawn(h, "alice")
            ledger = h.runtime.usage
            # What her process reported is counted at once when she says she is idle.
            await wait_until(lambda: ledger.total().tokens >= 3000, 30, "alice counted")
            # Her three responses, and her subagent's one, made in her process.
            assert ledger.total().tokens == 3 * 1000 + 500
    assert _teammate_processes() == []

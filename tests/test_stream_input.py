"""``--input-format stream-json`` at its edges: input that ends at once, a signal while idle,
lines that are not the protocol, and tool output too large for one protocol line; and the
control protocol: ``stop_task``, ``set_permission_mode``, the agents of ``initialize`` and
``can_use_tool`` (``--permission-prompt-tool stdio``)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from helpers import TIME_FACTOR, alive, clean_env, run_processes
from read_files import png
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox

pytestmark = pytest.mark.e2e


def start(
    tmp_path: Path,
    turns: list[Any],
    *args: str,
    subagents: dict[str, Any] | None = None,
    skip_permissions: bool = True,
) -> subprocess.Popen[str]:
    script = tmp_path / "turns.yaml"
    script.write_text(yaml.safe_dump({"turns": turns, "subagents": subagents or {}}))
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--model", f"scripted:{script}"]
    argv += ["--dangerously-skip-permissions"] if skip_permissions else []
    argv += args
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def test_input_that_ends_before_any_line_ends_the_session(tmp_path: Path) -> None:
    proc = start(tmp_path, [])
    out, err = proc.communicate("", timeout=30)
    assert proc.returncode == 0, err
    assert out == ""


def test_a_signal_while_no_turn_runs_ends_the_session_at_once(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"text": "one"}])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(user("hi"))
    proc.stdin.flush()
    lines = []
    while not lines or json.loads(lines[-1])["type"] != "result":
        lines.append(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)  # idle now, its input still open
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert out == ""  # no second result: no turn was running


def test_lines_that_are_not_the_protocol_are_reported_and_skipped(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"text": "still here"}])
    text = "not json\n" + json.dumps({"type": "bogus"}) + "\n" + user("hi")
    out, err = proc.communicate(text, timeout=30)
    assert proc.returncode == 0, err
    assert "stdin line 1 is not JSON" in err and "unknown message type 'bogus'" in err
    assert json.loads(out.splitlines()[-1])["result"] == "still here"


def test_huge_tool_results_still_fit_the_protocols_line_limit(tmp_path: Path) -> None:
    # Each result is bounded (a long one is saved to a file), but one message holds the
    # results of all the calls of a turn: ten results of 120,000 characters make 1.2 MB.
    settings = tmp_path / "settings.json"
    # 1.2 MB would fill the scripted model's window: compaction is another test's subject.
    settings.write_text(json.dumps({"bashMaxOutputChars": 150_000, "autoCompact": False}))
    call = {"name": "Bash", "input": {"command": "head -c 120000 /dev/zero | tr '\\0' x"}}
    turns = [{"tool_calls": [call] * 10}, {"text": "read it"}]
    proc = start(tmp_path, turns, "--settings", str(settings))
    out, err = proc.communicate(user("read"), timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert max(len(line.encode()) for line in lines) < 1024 * 1024  # the SDK's default buffer
    events = [json.loads(line) for line in lines]
    assert events[-1]["result"] == "read it"
    (message,) = [e for e in events if e["type"] == "user"]
    shown = message["message"]["content"]
    assert len(shown) == 10
    assert all("left out of this line" in str(block["content"]) for block in shown)


def test_an_image_over_the_line_limit_is_named_in_the_output(tmp_path: Path) -> None:
    # Read's text is capped far below the line limit; an image of 1 MB is not (1.3 MB base64):
    # the program is told which image was left out, the model got it whole.
    (tmp_path / "big.png").write_bytes(png(16, 16) + b"\0" * 1_000_000)
    turns = [{"tool_calls": [{"name": "Read", "input": {"file_path": str(tmp_path / "big.png")}}]}]
    proc = start(tmp_path, [*turns, {"text": "read it"}])
    out, err = proc.communicate(user("read"), timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert max(len(line.encode()) for line in lines) < 1024 * 1024
    (message,) = [json.loads(ln) for ln in lines if json.loads(ln)["type"] == "user"]
    (result,) = message["message"]["content"]
    parts = result["content"]
    assert [p["type"] for p in parts] == ["text", "text"]
    assert "image/png" in parts[1]["text"] and "the model saw it" in parts[1]["text"]


def test_a_signal_during_a_turn_ends_it_with_its_result_and_the_session(tmp_path: Path) -> None:
    proc = start(tmp_path, [{"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]}])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(user("wait"))
    proc.stdin.flush()
    while '"task_started"' not in proc.stdout.readline():  # the command runs now
        pass
    proc.send_signal(signal.SIGTERM)  # its input still open
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 143
    result = json.loads(out.splitlines()[-1])
    assert result["type"] == "result" and result["errors"] == ["interrupted"]


# -- the control protocol ----------------------------------------------------------------------


class Session:
    """A running stream-json session: lines to its stdin, its stdout's events with bounded waits."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.events: list[dict[str, Any]] = []  # every event read so far
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def wait_for(
        self, cond: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30
    ) -> dict[str, Any]:
        """The next event for which ``cond`` holds (those before it are kept in ``events``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what} in {timeout}s; saw {self.events}") from None
            if line is None:
                raise AssertionError(f"output ended before {what}; saw {self.events}")
            if not line.strip():
                continue
            event = json.loads(line)
            self.events.append(event)
            if cond(event):
                return event

    def result(self) -> dict[str, Any]:
        return self.wait_for(lambda e: e["type"] == "result", "a result")

    def control(self, request_id: str, subtype: str, **fields: Any) -> dict[str, Any]:
        """Send a control request; its ``control_response``'s ``response``."""
        self.send(
            {
                "type": "control_request",
                "request_id": request_id,
                "request": {"subtype": subtype, **fields},
            }
        )
        answer = self.wait_for(
            lambda e: (
                e["type"] == "control_response" and e["response"].get("request_id") == request_id
            ),
            f"the answer to {subtype}",
        )
        return dict(answer["response"])

    def close(self, timeout: float = 30) -> str:
        """End stdin and wait for the end; the stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=timeout)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        assert self.proc.returncode == 0, err
        while (line := self._lines.get(timeout=timeout)) is not None:
            if line.strip():
                self.events.append(json.loads(line))
        return err


def user_line(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool_result blocks the stream showed, in order."""
    return [
        b
        for e in events
        if e["type"] == "user" and isinstance(e["message"]["content"], list)
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]


def test_stop_task_kills_a_running_background_shell(tmp_path: Path) -> None:
    call = {"name": "Bash", "input": {"command": "sleep 417", "run_in_background": True}}
    turns = [{"tool_calls": [call]}, {"text": "it runs"}, {"text": "it was stopped"}]
    session = Session(start(tmp_path, turns))
    session.send(user_line("start it"))
    started = session.wait_for(lambda e: e.get("subtype") == "task_started", "task_started")
    task_id = started["task_id"]
    # The turn ends while the task it started runs: the request comes between turns.
    assert session.result()["result"] == "it runs"
    # Running means forked: its exec (the command line the search looks for) may come later
    # on a loaded machine, and there is no event of it to wait on.
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while not (
        shells := run_processes(lambda p: "sleep 417" in " ".join(p.info.get("cmdline") or []))
    ):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.02)
    assert all(alive(p.pid) for p in shells)

    response = session.control("stop-1", "stop_task", task_id=task_id)

    assert response["subtype"] == "success", response
    assert response["response"] == {"task_id": task_id, "status": "stopped"}
    assert not any(alive(p.pid) for p in shells)  # the kill is verified before the answer
    # Its end is told to the model in a turn of its own, with its own result.
    assert session.result()["result"] == "it was stopped"
    (note,) = [e for e in session.events if e.get("subtype") == "task_notification"]
    assert note["task_id"] == task_id and note["status"] == "stopped"  # the SDKs' word
    # A task that is not there gets an error answer, not a hang.
    missing = session.control("stop-2", "stop_task", task_id="b_nosuch")
    assert missing["subtype"] == "error"
    session.close()
    updates = [e for e in session.events if e.get("subtype") == "task_updated"]
    assert updates[-1]["task_id"] == task_id and updates[-1]["patch"]["status"] == "killed"


def test_set_permission_mode_plan_refuses_the_next_write(tmp_path: Path) -> None:
    def write(name: str) -> dict[str, Any]:
        call = {"name": "Write", "input": {"file_path": str(tmp_path / name), "content": "x"}}
        return {"tool_calls": [call]}

    turns = [write("before.txt"), {"text": "one"}, write("after.txt"), {"text": "two"}]
    session = Session(start(tmp_path, turns))  # bypassPermissions: every call runs
    session.send(user_line("write before"))
    assert session.result()["result"] == "one"
    assert session.control("mode-1", "set_permission_mode", mode="plan")["subtype"] == "success"
    # A mode that is not one is refused, and changes nothing.
    bad = session.control("mode-2", "set_permission_mode", mode="yolo")
    assert bad["subtype"] == "error" and "yolo" in bad["error"]
    session.send(user_line("write after"))
    assert session.result()["result"] == "two"
    session.close()

    assert (tmp_path / "before.txt").exists()
    assert not (tmp_path / "after.txt").exists()
    before, after = tool_results(session.events)
    assert not before.get("is_error")
    assert after["is_error"] and "not allowed in plan mode" in str(after["content"])
    # The next turn's init event says the mode it runs under.
    inits = [e for e in session.events if e.get("subtype") == "init"]
    assert [e["permissionMode"] for e in inits] == ["bypassPermissions", "plan"]


def test_set_permission_mode_accept_edits_lets_a_write_run_without_asking(
    tmp_path: Path,
) -> None:
    def write(name: str) -> dict[str, Any]:
        call = {"name": "Write", "input": {"file_path": str(tmp_path / name), "content": "x"}}
        return {"tool_calls": [call]}

    turns = [write("before.txt"), {"text": "one"}, write("after.txt"), {"text": "two"}]
    session = Session(start(tmp_path, turns, skip_permissions=False))  # default: nobody to ask
    session.send(user_line("write before"))
    assert session.result()["result"] == "one"
    answer = session.control("mode-1", "set_permission_mode", mode="acceptEdits")
    assert answer["subtype"] == "success"
    assert answer["response"] == {"mode": "acceptEdits"}
    session.send(user_line("write after"))
    assert session.result()["result"] == "two"
    # Claude Code's newer names: manual is default; auto (a classifier) runs as default, and
    # the answer says so.
    for asked in ("manual", "auto"):
        answer = session.control(f"mode-{asked}", "set_permission_mode", mode=asked)
        assert answer["subtype"] == "success" and answer["response"] == {"mode": "default"}
    session.close()

    assert not (tmp_path / "before.txt").exists()  # default mode asked; no one could answer
    assert (tmp_path / "after.txt").read_text() == "x"
    before, after = tool_results(session.events)
    assert before["is_error"]
    assert not after.get("is_error")


def test_agents_given_in_initialize_are_offered_and_can_be_spawned(tmp_path: Path) -> None:
    spawn = {
        "name": "Agent",
        "input": {
            "description": "review it",
            "prompt": "review the code",
            "subagent_type": "code-critic",
        },
    }
    subagents = {"code-critic": {"text": "critic says: ship it"}}
    proc = start(tmp_path, [{"tool_calls": [spawn]}, {"text": "relayed"}], subagents=subagents)
    session = Session(proc)
    agents = {
        "code-critic": {
            "description": "Reviews code harshly",
            "prompt": "You are a harsh code critic.",
            "tools": ["Read"],
        }
    }
    answer = session.control("init-1", "initialize", hooks=None, agents=agents)
    assert answer["subtype"] == "success", answer
    offered = {a["name"]: a["description"] for a in answer["response"]["agents"]}
    assert offered.get("code-critic") == "Reviews code harshly"

    session.send(user_line("get a review"))
    init = session.wait_for(lambda e: e.get("subtype") == "init", "the init event")
    assert "code-critic" in init["agents"]
    assert session.result()["result"] == "relayed"
    session.close()
    (result,) = tool_results(session.events)
    assert not result.get("is_error")
    assert "critic says: ship it" in str(result["content"])
    started = [e for e in session.events if e.get("subtype") == "task_started"]
    assert [e["task_type"] for e in started] == ["local_agent"]


def test_can_use_tool_carries_its_call_and_an_updated_input_is_what_runs(
    tmp_path: Path,
) -> None:
    call = {"name": "Bash", "input": {"command": "echo original-ran"}, "id": "toolu_asked_1"}
    turns = [{"tool_calls": [call]}, {"text": "done"}]
    proc = start(tmp_path, turns, "--permission-prompt-tool", "stdio", skip_permissions=False)
    session = Session(proc)
    session.send(user_line("run it"))
    asked = session.wait_for(lambda e: e["type"] == "control_request", "can_use_tool")
    request = asked["request"]
    assert request["subtype"] == "can_use_tool"
    assert request["tool_name"] == "Bash"
    assert request["input"] == {"command": "echo original-ran"}
    assert request["tool_use_id"] == "toolu_asked_1"
    (suggestion,) = request["permission_suggestions"]
    assert suggestion["type"] == "addRules" and suggestion["behavior"] == "allow"
    assert suggestion["rules"][0]["toolName"] == "Bash"

    session.send(
        {
            "type": "control_response",
            "response": {
                "subtype": "success",
                "request_id": asked["request_id"],
                "response": {"behavior": "allow", "updatedInput": {"command": "echo replaced-ran"}},
            },
        }
    )
    assert session.result()["result"] == "done"
    session.close()
    (result,) = tool_results(session.events)
    assert not result.get("is_error")
    assert "replaced-ran" in str(result["content"])
    assert "original-ran" not in str(result["content"])


def test_a_message_waiting_before_the_first_prompt_leaves_the_session_idle(
    tmp_path: Path,
) -> None:
    """Mail may not start a turn before the program's first prompt, and does not spin either."""
    first = start(tmp_path, [{"text": "hi"}])
    out, err = first.communicate(user("hello"), timeout=60)
    assert first.returncode == 0, err
    session_id = json.loads(out.splitlines()[-1])["session_id"]
    # A message sent to it while no process served it: the next one finds it waiting.
    store = Store(db_path(tmp_path / "home"))
    try:
        mailbox = Mailbox(store, session_id)
        mailbox.post(
            recipient=session_id, sender="uds:peer", kind="message", body="ping", commit=True
        )
    finally:
        store.close()
    turns = [{"text": "answered"}, {"text": "and the message"}]
    session = Session(start(tmp_path, turns, "--resume", session_id))
    try:
        assert session.control("init-1", "initialize")["subtype"] == "success"  # up, idle
        proc = psutil.Process(session.proc.pid)
        window = 1.0 * TIME_FACTOR
        before = sum(proc.cpu_times()[:2])
        time.sleep(window)  # a window to measure over, not a wait for anything
        used = sum(proc.cpu_times()[:2]) - before
        assert used < 0.1 * window, f"{used:.2f} s of CPU in {window:.1f} s idle: a busy loop"
        assert not [e for e in session.events if e["type"] == "result"]  # no turn of its own
        session.send(user_line("go"))
        assert session.result()["subtype"] == "success"
    except BaseException:
        session.proc.kill()  # a failed check: the session must not outlive the test
        session.proc.wait(timeout=30)
        raise
    session.close()

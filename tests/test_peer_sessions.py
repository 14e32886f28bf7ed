"""Two taskloom processes on one machine: a message over ``uds:<socket>`` (``--listen``)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env
from taskloom.agents.peers import socket_path
from taskloom.transcript import transcript_path

pytestmark = pytest.mark.e2e


def _gate_command(gate: Path) -> str:
    return f"for i in $(seq 3000); do [ -e '{gate}' ] && exit 0; sleep 0.01; done; exit 1"


def _stale_socket(path: Path) -> None:
    """A socket file nobody listens on (its listener is gone)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def test_a_message_to_another_session_reaches_its_model_and_a_dead_socket_fails_fast(
    tmp_path: Path,
) -> None:
    gate, stale = tmp_path / "gate", tmp_path / "s.sock"
    _stale_socket(stale)
    target: dict[str, str] = {}

    def respond(body: dict[str, Any]) -> Turn:
        messages = body["messages"]
        first = " ".join(texts(messages[0]["content"]))
        if first.startswith("FIRST"):
            if len(messages) == 1:
                return Turn(tool_calls=(ToolCall("Bash", {"command": _gate_command(gate)}),))
            return Turn(text="first done")
        if len(messages) == 1:
            calls = (
                ToolCall("SendMessage", {"to": f"uds:{stale}", "message": "lost?"}),
                ToolCall("SendMessage", {"to": f"uds:{target['path']}", "message": "hello peer"}),
            )
            return Turn(tool_calls=calls)
        return Turn(text="second done")

    home = tmp_path / "home"
    with FakeAnthropicServer(responder=respond) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(home)
        base = [sys.executable, "-m", "taskloom", "--model", "claude-sonnet-4-5"]
        flags = ["--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
        first = subprocess.Popen(
            [*base, "-p", "FIRST: wait", "--listen", *flags],
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=env,
        )
        try:
            assert first.stdout is not None
            init = json.loads(first.stdout.readline())
            assert init["subtype"] == "init"
            target["path"] = init["peer_socket"]
            assert target["path"] == str(socket_path(init["session_id"], home))
            assert Path(target["path"]).stat().st_mode & 0o777 == 0o600
            second = subprocess.run(
                [*base, "-p", "SECOND: tell the first", *flags],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=tmp_path,
                env=env,
            )
            assert second.returncode == 0, second.stderr
            results = [
                b
                for line in second.stdout.splitlines()
                if (e := json.loads(line)).get("type") == "user"
                for b in e["message"]["content"]
                if b.get("type") == "tool_result"
            ]
            dead, delivered = results
            assert dead["is_error"] and f"nobody listens at {stale}" in json.dumps(dead)
            assert not delivered.get("is_error") and "Message delivered" in json.dumps(delivered)
            gate.touch()
            out, _ = first.communicate(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(timeout=10)
        assert first.returncode == 0
    mine = [r for r in server.requests if "FIRST" in json.dumps(r.body["messages"][0])]
    theirs = [r for r in server.requests if "SECOND" in json.dumps(r.body["messages"][0])]
    # The dead socket cost the second session well under 2 s (both sends in one turn).
    assert theirs[1].received - theirs[0].received < 2.0 * TIME_FACTOR
    # The first session's next request, after its command, holds the text.
    assert len(mine) == 2
    shown = texts(mine[1].body["messages"][-1]["content"])
    peer = [t for t in shown if "hello peer" in t]
    assert peer and peer[0].startswith("Another taskloom session (session:")
    assert "lost?" not in json.dumps([r.body for r in mine])
    assert not Path(target["path"]).exists()  # the listener removed its socket at exit
    assert json.loads(out.splitlines()[-1])["result"] == "first done"


def test_an_idle_stream_json_session_is_woken_by_a_peers_message(tmp_path: Path) -> None:
    """Between prompts, a message from another session starts a turn of its own at once."""
    import asyncio

    from taskloom.agents.peers import send_to_peer

    script = tmp_path / "turns.yaml"
    script.write_text(json.dumps({"turns": [{"text": "first answer"}, {"text": "saw the peer"}]}))
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json", "--listen"]
    argv += ["--output-format", "stream-json", "--model", f"scripted:{script}"]
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(tmp_path / "home")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        prompt = {"type": "user", "message": {"role": "user", "content": "hi"}}
        proc.stdin.write(json.dumps(prompt) + "\n")
        proc.stdin.flush()
        events = [json.loads(proc.stdout.readline())]
        while events[-1]["type"] != "result":
            events.append(json.loads(proc.stdout.readline()))
        assert events[-1]["result"] == "first answer"
        path = events[0]["peer_socket"]
        asyncio.run(send_to_peer(path, sender="other-session", text="ping from afar"))
        woken = [json.loads(proc.stdout.readline())]
        while woken[-1]["type"] != "result":
            woken.append(json.loads(proc.stdout.readline()))
        assert woken[-1]["result"] == "saw the peer" and woken[-1]["num_turns"] == 1
        # The program is shown what started the turn.
        shown = [e for e in woken if e["type"] == "user"]
        assert len(shown) == 1 and "ping from afar" in json.dumps(shown[0]["message"])
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    transcript = transcript_path(events[-1]["session_id"], tmp_path / "home", search=True)
    text = transcript.read_text()
    assert "ping from afar" in text and "Another taskloom session (session:other-session)" in text

"""Sessions on one Ray cluster: messages at ``bridge:<session id>`` (``--listen``).

The cluster is a real Ray head of the test's own (the ``ray_head`` fixture of the detached
remote agents' tests: its processes are stopped by it, and only they). Two sessions listen
and exchange a message each way; a third runs without ``--listen`` and cannot be reached; a
message given twice with one id (as a sender's retry gives it) is posted once.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from helpers import TIME_FACTOR, clean_env, needs
from test_remote_detach import ray_head  # noqa: F401  (the fixture)

pytestmark = [needs("ray"), pytest.mark.e2e, pytest.mark.slow]

#: Given twice with one id to the first session, from a driver of the test's own.
_TWICE = """
import json, sys
import ray
from taskloom.remote.inbox import NAMESPACE
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
actor = ray.get_actor(sys.argv[2], namespace=NAMESPACE)
request = {"type": "message", "from": "tester", "reply_to": None, "text": sys.argv[3]}
replies = [ray.get(actor.deliver.remote("one-id", request, 10.0)) for _ in range(2)]
empty = {**request, "text": ""}
replies.append(ray.get(actor.deliver.remote("other-id", empty, 10.0)))
print(json.dumps(replies))
ray.shutdown()
"""


def _gate(gate: Path) -> ToolCall:
    wait = f"for i in $(seq 6000); do [ -e '{gate}' ] && exit 0; sleep 0.01; done; exit 1"
    return ToolCall("Bash", {"command": wait, "timeout": 120000})


class _Lines:
    """A process's stdout, one JSON event per line, read in a thread: each wait is bounded."""

    def __init__(self, stream: IO[str]) -> None:
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)

    def until(self, done: Any, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout * TIME_FACTOR
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"not seen in time; seen: {self.events}"
            event = json.loads(self._lines.get(timeout=left))
            self.events.append(event)
            if done(event):
                return event


def _tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        block
        for e in events
        if e.get("type") == "user" and isinstance(e["message"]["content"], list)
        for block in e["message"]["content"]
        if block.get("type") == "tool_result"
    ]


class Exchange:
    """A waits at its gate, then answers B's message; B messages C (which does not listen)
    and A, then waits at its gate; C only waits. Each is told apart by its first prompt."""

    def __init__(self, tmp_path: Path) -> None:
        self.gates = {name: tmp_path / f"gate-{name}" for name in ("a", "b", "c")}
        self.ids: dict[str, str] = {}

    def __call__(self, body: dict[str, Any]) -> Turn:
        messages = body["messages"]
        who = " ".join(texts(messages[0]["content"])).split(":")[0]
        turn = (len(messages) + 1) // 2
        if turn == 1 and who in ("A", "C"):
            return Turn(tool_calls=(_gate(self.gates[who.lower()]),))
        if who == "A" and turn == 2:
            seen = " ".join(texts(messages[-1]["content"]))
            (sender,) = set(re.findall(r"bridge:[\w-]+", seen))
            return Turn(tool_calls=(ToolCall("SendMessage", {"to": sender, "message": "hello B"}),))
        if who == "B" and turn == 1:
            ids = self.ids
            return Turn(tool_calls=(
                ToolCall("SendMessage", {"to": f"bridge:{ids['c']}", "message": "lost?"}),
                ToolCall("SendMessage", {"to": f"bridge:{ids['a']}", "message": "hello A"}),
            ))  # fmt: skip
        if who == "B" and turn == 2:
            return Turn(tool_calls=(_gate(self.gates["b"]),))
        return Turn(text=f"{who} done")


class Sessions:
    """The test's taskloom processes, on one fake server and one cluster; killed at the end."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, prompt: str, *listen: str) -> tuple[subprocess.Popen[str], _Lines]:
        proc = subprocess.Popen(
            [*_TASKLOOM, "--model", "claude-sonnet-4-5", "-p", prompt, *listen,
             "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"],
            stdout=subprocess.PIPE, text=True, cwd=self.cwd, env=self.env,
        )  # fmt: skip
        self.procs.append(proc)
        assert proc.stdout is not None
        return proc, _Lines(proc.stdout)

    def peers(self) -> set[str]:
        """The addresses ``taskloom peers`` lists."""
        listed = subprocess.run(
            [*_TASKLOOM, "peers", "--json"], capture_output=True, text=True, cwd=self.cwd,
            env=self.env, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        return {p["address"] for p in json.loads(listed.stdout)["peers"]}

    def give_twice(self, address: str, session_id: str, text: str) -> list[dict[str, Any]]:
        """Give ``text`` to the session twice with one id, then no text, from a driver of the
        test's own; its three answers."""
        twice = subprocess.run(
            [sys.executable, "-c", _TWICE, address, session_id, text],
            capture_output=True, text=True, env=self.env, timeout=60,
        )  # fmt: skip
        assert twice.returncode == 0, twice.stderr[-2000:]
        return list(json.loads(twice.stdout.splitlines()[-1]))

    def end(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


_TASKLOOM = [sys.executable, "-m", "taskloom"]


def _finish(proc: subprocess.Popen[str], out: _Lines, gate: Path) -> None:
    gate.touch()
    out.until(lambda e: e.get("type") == "result")
    assert proc.wait(timeout=30 * TIME_FACTOR) == 0


def test_two_sessions_exchange_a_bridge_message_once_each_way(
    tmp_path: Path,
    ray_head: tuple[str, dict[str, str]],  # noqa: F811
) -> None:
    address, auth = ray_head
    script = Exchange(tmp_path)
    ids, gates = script.ids, script.gates
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env.update(auth, TASKLOOM_HOME=str(tmp_path / "home"), RAY_ADDRESS=address)
        sessions = Sessions(tmp_path, env)
        try:
            a, a_out = sessions.start("A: wait for a message", "--listen")
            init_a = a_out.until(lambda e: e.get("subtype") == "init")
            ids["a"] = init_a["session_id"]
            assert init_a["peer_bridge"] == f"bridge:{ids['a']}"
            assert "ListPeers" in init_a["tools"]
            c, c_out = sessions.start("C: does not listen")
            init_c = c_out.until(lambda e: e.get("subtype") == "init")
            ids["c"] = init_c["session_id"]
            assert "peer_bridge" not in init_c and "ListPeers" not in init_c["tools"]
            b, b_out = sessions.start("B: tell A", "--listen")
            ids["b"] = b_out.until(lambda e: e.get("subtype") == "init")["session_id"]
            b_out.until(lambda e: len(_tool_results(b_out.events)) >= 2)
            lost, delivered = _tool_results(b_out.events)
            assert lost.get("is_error"), lost
            assert f"no taskloom session listens at bridge:{ids['c']}" in json.dumps(lost)
            assert not delivered.get("is_error"), delivered
            assert f"delivered to the session at bridge:{ids['a']}" in json.dumps(delivered)
            # Both listening sessions are listed, with their addresses, by `taskloom peers`.
            addresses = sessions.peers()
            assert {f"bridge:{ids['a']}", f"bridge:{ids['b']}"} <= addresses
            assert f"bridge:{ids['c']}" not in addresses
            # One message given twice with one id: the same row both times.
            first, again, empty = sessions.give_twice(address, ids["a"], "said twice")
            assert first["ok"] and first == again
            # What the uds: listener refuses, this one does too, naming the field.
            assert empty == {"ok": False, "error": "field 'text' must be a non-empty string"}
            _finish(a, a_out, gates["a"])
            _finish(b, b_out, gates["b"])
            _finish(c, c_out, gates["c"])
        finally:
            sessions.end()
    made = {
        who: [r for r in server.requests if f"{who}:" in json.dumps(r.body["messages"][0])]
        for who in "AB"
    }
    # B's two sends (one to nobody, one delivered and committed) took one short pause.
    sends = made["B"][1].received - made["B"][0].received
    assert sends < 5.0 * TIME_FACTOR, sends
    print(f"bridge: B's two sends took {sends:.2f} s")
    # A was shown B's message, and the one given twice, once each, and how to answer B.
    shown_a = json.dumps(made["A"][1].body["messages"][-1])
    assert shown_a.count("hello A") == 1 and shown_a.count("said twice") == 1
    assert f"bridge:{ids['b']}" in shown_a
    # B was shown A's answer once, from A's address.
    shown_b = json.dumps(made["B"][-1].body["messages"])
    assert shown_b.count("hello B") == 1 and f"bridge:{ids['a']}" in shown_b
    assert "lost?" not in json.dumps([r.body for r in made["A"]])
    # Nothing listens once the sessions are gone: their actors ended with them.
    deadline = time.monotonic() + 30 * TIME_FACTOR
    while sessions.peers():
        assert time.monotonic() < deadline, sessions.peers()
        time.sleep(0.5)

"""What a team lead is told: its prompt, and idle notices that cost it little (issue 29).

A teammate's idle notice carries its last answer and the messages it sent its teammates; it
waits for the lead's next turn instead of starting one, unless the lead asked
(``notify_when_idle``) or the whole team is idle (whatever the lead's own commands do); one
teammate's notices shown together are folded into one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer
from fake_servers import ToolCall as WireCall
from fake_servers import Turn as WireTurn
from helpers import TIME_FACTOR, clean_env, harness, main_context, wait_until
from taskloom.agents.send_message import LeadSendMessageTool, SendMessageTool
from taskloom.events import Finished
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.tasks.mailbox import HELD
from taskloom.tasks.teammate import TeammateTaskState
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.base import generated_schema, input_key
from team_scenario import _calls as wire_calls

_NOTICE = re.compile(
    r'<teammate-message teammate_id="(\w+)"[^>]*>\n(\{.*?\})\n</teammate-message>', re.S
)
_LEAD_RULES = (
    "idle after every turn",
    "costs nothing",
    "TaskUpdate `owner`",
    "SendMessage `to` its name",
    "shutdown_request",
    "Read what arrives",
    "notify_when_idle",
)


def _seen(messages: list[Message]) -> str:
    """Every text the user side of a conversation holds (text blocks and tool results)."""
    found = []
    for message in messages:
        for block in message.content if message.role == "user" else []:
            if isinstance(block, TextBlock):
                found.append(block.text)
            elif isinstance(block, ToolResultBlock):
                found.append(block.text())
    return "\n".join(found)


def notices(seen: str) -> list[dict[str, Any]]:
    """The idle notices in ``seen``, in order."""
    found = [json.loads(body) for _, body in _NOTICE.findall(seen)]
    return [n for n in found if n.get("type") == "idle_notification"]


def _teammate(request: ModelRequest) -> str | None:
    member = request.metadata.get("teammate")
    return str(member).split("@")[0] if member else None


def _calls(request: ModelRequest) -> list[str]:
    return [c.name for m in request.messages if m.role == "assistant" for c in m.tool_uses()]


def _member(h: Any, name: str) -> TeammateTaskState:
    """Teammate ``name``'s task state."""
    found = [
        s for s in h.runtime.list() if isinstance(s, TeammateTaskState) and s.agent_name == name
    ]
    assert len(found) == 1
    return found[0]


# -- the lead's prompt --------------------------------------------------------------------------


async def test_the_lead_s_prompt_names_the_rules_and_its_send_message_may_ask(
    tmp_path: Path,
) -> None:
    model = FunctionModel(lambda request: "ok")
    async with harness(tmp_path, model, teams=True) as h:
        prompt = h.session.engine.config.system_prompt
        for rule in _LEAD_RULES:
            assert rule in prompt, rule
        assert prompt.index("# Leading a team") > prompt.index("<env>")
        [send] = [t for t in h.tools if t.name == "SendMessage"]
        assert isinstance(send, LeadSendMessageTool)
        schema = send.spec().input_schema
        assert schema["properties"]["notify_when_idle"]["type"] == "boolean"
    async with harness(tmp_path, model) as h:  # no team: no section, the plain tool
        assert "Leading a team" not in h.session.engine.config.system_prompt
        [send] = [t for t in h.tools if t.name == "SendMessage"]
        assert type(send) is SendMessageTool
        assert "notify_when_idle" not in send.spec().input_schema["properties"]
    async with harness(tmp_path, model, teams=True, system_prompt="Be brief.") as h:
        assert h.session.engine.config.system_prompt == "Be brief."  # replaced: left whole
    static = LeadSendMessageTool.static_schema
    assert static is not None and static[0] == input_key(LeadSendMessageTool)
    assert json.dumps(static[1]) == json.dumps(generated_schema(LeadSendMessageTool.Input))


# -- what an idle notice carries, folded --------------------------------------------------------


async def test_held_notices_carry_the_last_answer_and_peer_summaries_folded(
    tmp_path: Path,
) -> None:
    lead_requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Turn | str:
        name, seen = _teammate(request), _seen(request.messages)
        if name is None:
            lead_requests.append(request)
            return "Status noted."
        if name == "alice" and not _calls(request):
            ask = {"to": "bob", "message": "Which schema, v1 or v2?", "summary": "schema?"}
            note = {"to": "bob", "message": "I take the parser.\nThe lexer is yours."}
            return Turn(tool_calls=(ToolCall("SendMessage", ask), ToolCall("SendMessage", note)))
        if name == "alice":
            return "alice: docs done" if "And the docs" in seen else "alice: parser done"
        return "bob: lexer done"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        ctx, tool = main_context(h), next(t for t in h.tools if t.name == "Agent")
        for name in ("alice", "bob"):
            await tool.call(tool.validate({"description": name, "prompt": "go", "name": name}), ctx)
        mailbox = h.runtime.mailbox
        # alice idles after her first turn, bob after his (woken by her messages, maybe
        # again): their notices wait, held, for the lead's next turn.
        await wait_until(lambda: len(mailbox.pending(h.session_id, HELD)) >= 2, 10, "notices")
        await wait_until(lambda: _all_idle(h), 10, "both idle")
        send = next(t for t in h.tools if t.name == "SendMessage")
        await send.call(send.validate({"to": "alice", "message": "And the docs."}), ctx)
        await wait_until(
            lambda: any("docs done" in x.body for x in mailbox.pending(h.session_id, HELD)),
            10,
            "alice's second notice",
        )
        assert lead_requests == []  # nothing woke the lead
        async for _ in h.run("Status?"):
            pass
        seen = _seen(lead_requests[0].messages)
        alice = [n for n in notices(seen) if n["from"] == "alice"]
        bob = [n for n in notices(seen) if n["from"] == "bob"]
        # Her two notices, folded: the latest answer, every peer message she sent.
        assert len(alice) == 1 and len(bob) >= 1
        assert alice[0]["result"] == "alice: docs done"
        assert (
            alice[0]["summary"]
            == "[to bob] schema?; [to bob] I take the parser. The lexer is yours."
        )
        assert alice[0]["idleReason"] == "available"
        assert bob[-1]["result"] == "bob: lexer done" and "summary" not in bob[-1]
        assert mailbox.pending(h.session_id, HELD) == []


def _all_idle(h: Any) -> bool:
    states = [s for s in h.runtime.list() if isinstance(s, TeammateTaskState)]
    return len(states) == 2 and all(s.is_idle for s in states)


# -- when a notice starts a lead turn -----------------------------------------------------------


def _lead_script(
    gate: Path, *, ask: bool, lead_requests: list[ModelRequest], h: list[Any]
) -> FunctionModel:
    """alice answers at once; bob works until ``gate`` exists.

    Without ``ask`` alice makes the gate in her turn; with it the lead asks her, with
    ``notify_when_idle``, for one more thing, and makes the gate itself once her notice
    woke it (bob still at work then).
    """
    wait = f"while [ ! -f {gate} ]; do sleep 0.05; done; echo through"

    def respond(request: ModelRequest) -> Turn | str:
        name, seen, calls = _teammate(request), _seen(request.messages), _calls(request)
        if name == "alice":
            if not ask and "Bash" not in calls:
                return Turn(tool_calls=(ToolCall("Bash", {"command": f"touch {gate}"}),))
            return "alice: one more thing done" if "one more" in seen else "alice: done"
        if name == "bob":
            if "Bash" not in calls:
                return Turn(tool_calls=(ToolCall("Bash", {"command": wait}),))
            return "bob: done"
        lead_requests.append(request)
        if not calls:
            spawn = tuple(
                ToolCall("Agent", {"description": n, "prompt": "go", "name": n})
                for n in ("alice", "bob")
            )
            return Turn(tool_calls=spawn)
        said = {n["from"] for n in notices(seen)}
        if ask and "SendMessage" not in calls:
            more = {"to": "alice", "message": "one more thing", "notify_when_idle": True}
            return Turn(tool_calls=(ToolCall("SendMessage", more),))
        if said >= {"alice", "bob"}:
            return "All done."
        if ask and "alice" in said and not gate.exists():
            assert not _member(h[0], "bob").is_idle  # bob still works
            gate.touch()
            return "alice is done; waiting for bob."
        return "Waiting for the team."

    return FunctionModel(respond)


@pytest.mark.parametrize("ask", [False, True], ids=["held", "notify_when_idle"])
async def test_an_idle_notice_starts_no_lead_turn_unless_asked(tmp_path: Path, ask: bool) -> None:
    lead_requests: list[ModelRequest] = []
    gate = tmp_path / "gate"
    holder: list[Any] = []
    model = _lead_script(gate, ask=ask, lead_requests=lead_requests, h=holder)
    async with harness(tmp_path, model, teams=True) as h:
        holder.append(h)
        started = time.monotonic()
        ends = [e async for e in h.run("Split the work.") if isinstance(e, Finished)]
        assert time.monotonic() - started < 10 * TIME_FACTOR
        assert [e.result for e in ends] == ["All done."]
    woken = [r for r in lead_requests if notices(_seen(r.messages))]
    first = {n["from"] for n in notices(_seen(woken[0].messages))}
    if ask:
        # alice's notice woke the lead while bob worked; bob's came once he was idle.
        assert first == {"alice"}
        assert len(lead_requests) == 5  # spawn, ask, waiting, alice's notice, bob's
    else:
        # Held: no turn on alice's notice alone; both came once the whole team was idle.
        assert first == {"alice", "bob"}
        assert len(lead_requests) == 3  # spawn, waiting, the team idle


async def test_notify_when_idle_is_for_teammates_only(tmp_path: Path) -> None:
    async with harness(tmp_path, FunctionModel(lambda request: "ok"), teams=True) as h:
        send = next(t for t in h.tools if t.name == "SendMessage")
        params = send.validate({"to": "nobody-here", "message": "hi", "notify_when_idle": True})
        result = await send.call(params, main_context(h))
        assert result.is_error and "nobody-here" in result.content


# -- a -p run whose lead waits for its idle team ends -------------------------------------------


class _Script:
    """The lead spawns alice and bob and waits; alice tells bob something and makes a gate
    file; bob waits for it; then the lead, told of both, answers."""

    def __init__(self, gate: Path) -> None:
        self.gate = gate
        self.lead_bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> WireTurn:
        system = system_text(body)
        messages = body["messages"]
        seen = "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))
        calls = _wire_calls(body)
        if "You are alice, a member" in system:
            if not calls:
                tell = {"to": "bob", "message": "Use the v2 schema.", "summary": "use v2"}
                touch = {"command": f"touch {self.gate}"}
                return WireTurn(tool_calls=(WireCall("SendMessage", tell), WireCall("Bash", touch)))
            return WireTurn(text="alice: parser done")
        if "You are bob, a member" in system:
            if not calls:
                wait = f"while [ ! -f {self.gate} ]; do sleep 0.05; done"
                return WireTurn(tool_calls=(WireCall("Bash", {"command": wait}),))
            return WireTurn(text="bob: lexer done")
        self.lead_bodies.append(body)
        if not calls:
            spawn = tuple(
                WireCall("Agent", {"description": n, "prompt": "go", "name": n})
                for n in ("alice", "bob")
            )
            return WireTurn(tool_calls=spawn)
        if {n["from"] for n in notices(seen)} >= {"alice", "bob"}:
            return WireTurn(text="Team done.")
        return WireTurn(text="Waiting for the team.")


def _lead_run(
    tmp_path: Path, script: object, stdin: bool
) -> tuple[subprocess.CompletedProcess[str], float]:
    """A ``-p --teams`` lead run told "Split the work." as its prompt or on its input.

    Returns the run, and how long after the server's last request it ended.
    """
    argv = [sys.executable, "-m", "taskloom", "-p"]
    argv += ["--input-format", "stream-json"] if stdin else ["Split the work."]
    argv += ["--teams", "--output-format", "stream-json", "--verbose"]
    argv += ["--model", "claude-sonnet-4-5", "--dangerously-skip-permissions"]
    line = {"type": "user", "message": {"role": "user", "content": "Split the work."}}
    with FakeAnthropicServer(responder=script) as server:
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        env["TASKLOOM_HOME"] = str(tmp_path / "home")
        proc = subprocess.run(
            argv,
            input=json.dumps(line) + "\n" if stdin else "",
            capture_output=True,
            text=True,
            timeout=60 * TIME_FACTOR,
            cwd=tmp_path,
            env=env,
        )
        return proc, time.monotonic() - server.requests[-1].received


@pytest.mark.e2e
@pytest.mark.parametrize("stdin", [False, True], ids=["prompt", "stream-json-input"])
def test_a_p_run_whose_lead_waits_for_its_idle_team_ends(tmp_path: Path, stdin: bool) -> None:
    script = _Script(tmp_path / "gate")
    proc, ended = _lead_run(tmp_path, script, stdin)
    assert proc.returncode == 0, proc.stderr
    result = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()][-1]
    assert result["type"] == "result" and result["result"] == "Team done."
    # Woken once the team was idle, not after a poll's bound; then it ends at once.
    assert ended < 3.0 * TIME_FACTOR
    bodies = script.lead_bodies
    assert len(bodies) == 3  # spawn, waiting, the idle team's notices
    last = "\n".join(t for m in bodies[-1]["messages"] for t in texts(m["content"]))
    alice = next(n for n in notices(last) if n["from"] == "alice")
    assert alice["result"] == "alice: parser done" and alice["summary"] == "[to bob] use v2"


# -- held notices do not wait behind the lead's own background command ------------------------


class _ServerScript:
    """The lead starts ``command`` in the background and spawns alice, who answers at once;
    told of her, the lead stops its command and answers."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.started = time.monotonic()
        #: When (seconds since the start) the lead's request holding alice's notice came.
        self.told_at: float | None = None
        self.lead_bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> WireTurn:
        if "You are alice, a member" in system_text(body):
            return WireTurn(text="alice: done")
        self.lead_bodies.append(body)
        seen = _wire_seen(body)
        calls = _wire_calls(body)
        if not calls:
            server = {"command": self.command, "run_in_background": True, "description": "srv"}
            spawn = {"description": "a", "prompt": "go", "name": "alice"}
            return WireTurn(tool_calls=(WireCall("Bash", server), WireCall("Agent", spawn)))
        if not notices(seen):
            return WireTurn(text="Waiting for the team.")
        if self.told_at is None:
            self.told_at = time.monotonic() - self.started
        if "TaskStop" not in calls:
            [shell] = re.findall(r"running in background with ID: (\w+)", seen)
            return WireTurn(tool_calls=(WireCall("TaskStop", {"task_id": shell}),))
        return WireTurn(text="Team done.")


def _running(command: str) -> list[int]:
    """The live processes whose command line is ``command`` (a uniquely numbered sleep)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == command.split() and proc.info["status"] != "zombie":
            found.append(proc.pid)
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("stdin", [True, False], ids=["stream-json-input", "prompt"])
def test_held_notices_do_not_wait_for_the_lead_s_own_background_command(
    tmp_path: Path, stdin: bool
) -> None:
    # The team is idle once alice is: the lead's own command (a server, say) does not hold
    # her notice back. Numbered so that the leak check below finds this run's sleep only.
    command = f"sleep {30 + (time.time_ns() % 997) / 1000:.3f}"
    script = _ServerScript(command)
    # Its input ended (stream-json) or not (a prompt: the run waits for its tasks, told).
    proc, _ = _lead_run(tmp_path, script, stdin)
    assert proc.returncode == 0, proc.stderr
    result = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()][-1]
    assert result["type"] == "result" and result["result"] == "Team done.", result
    # Told well before the 30 s command would have ended (before: only once it had).
    assert script.told_at is not None and script.told_at < 10 * TIME_FACTOR, script.told_at
    # The spawn, maybe a "waiting" answer (alice may be idle before the spawn's results are
    # sent, and her notice go with them), the TaskStop, the answer; her notice delivered once.
    assert len(script.lead_bodies) in (3, 4)
    [notice] = notices(_wire_seen(script.lead_bodies[-1]))
    assert notice["from"] == "alice" and notice["result"] == "alice: done"
    assert _running(command) == []  # the session ended; its command did not outlive it


def _wire_calls(body: dict[str, Any]) -> list[str]:
    """The names of the tools called in a wire request's conversation, in order."""
    return [call["name"] for call in wire_calls(body["messages"])]


def _wire_seen(body: dict[str, Any]) -> str:
    """Every text of the user side of a request's messages."""
    messages = body["messages"]
    return "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))

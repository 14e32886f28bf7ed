"""The interactive REPL end to end: the real ``taskloom`` in a real tmux pane (or a pty).

Each test types into the pane and reads its screen (send-keys, capture-pane) as a user would;
the model is scripted, as a ``scripted:FILE`` or as the fake Anthropic server (which records
what the model was sent).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import tmux_driver
from fake_servers import FakeAnthropicServer
from helpers import RUN_MARK, TIME_FACTOR, alive, run_processes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120 * TIME_FACTOR)]


def repl_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The whole environment of a REPL under test: no provider, a private home."""
    home = tmp / "user"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TASKLOOM_HOME": os.environ["TASKLOOM_HOME"],
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LANG": "C.UTF-8",
        RUN_MARK: os.environ[RUN_MARK],
    }
    env.update(extra)
    return env


def scripted(path: Path, turns: list[Any], **more: Any) -> str:
    path.write_text(yaml.safe_dump({"turns": turns, **more}))
    return f"scripted:{path}"


def start(
    tmux: tmux_driver.TmuxServer, cwd: Path, *args: str, width: int = 120, **env: str
) -> tmux_driver.Pane:
    """``taskloom ARGS`` in a new pane; returns once its prompt is drawn."""
    argv = [sys.executable, "-m", "taskloom", *args]
    pane = tmux.spawn(argv, cwd=cwd, env=repl_env(cwd, **env), width=width, height=45)
    pane.wait_for(re.compile(r"^ .* · (default|bypassPermissions|acceptEdits|plan) · ", re.M))
    return pane


def enter(pane: tmux_driver.Pane, text: str) -> None:
    pane.type(text)
    pane.send_keys("Enter")


def leave(pane: tmux_driver.Pane) -> None:
    """``/exit``: exit code 0."""
    enter(pane, "/exit")
    assert pane.wait_exit(20) == 0


def anthropic_env(server: FakeAnthropicServer) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}


def user_texts(request_body: dict[str, Any]) -> str:
    """Every text the request's last user message carries (tool results included)."""
    last = request_body["messages"][-1]
    assert last["role"] == "user"
    content = last["content"]
    if isinstance(content, str):
        return content
    out = []
    for block in content:
        if block.get("type") == "text":
            out.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            out.append(inner if isinstance(inner, str) else json.dumps(inner))
    return "\n".join(out)


def test_a_prompt_gets_its_answer_and_exit_leaves_nothing(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    model = scripted(tmp_path / "t.yaml", [{"text": "Hello there, line one.\nAnd line two."}])
    pane = start(tmux, tmp_path, "--model", model)
    enter(pane, "say hello")
    screen = pane.wait_for("And line two.")
    assert "> say hello" in screen
    assert "Hello there, line one." in screen
    leave(pane)
    assert not run_processes(lambda p: p.pid != tmux.pid)  # only the tmux server is left


def test_streamed_text_shows_before_the_answer_ends_and_esc_interrupts_it(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    with FakeAnthropicServer() as server:
        # Five stream events (start, ping, block start, two words), then nothing: the answer
        # never ends unless it is interrupted.
        server.add_turn(text="Streaming words that never finish", stall_at=5)
        server.add_turn(text="Second answer.")
        pane = start(tmux, tmp_path, "--model", "sonnet", **anthropic_env(server))
        enter(pane, "tell me a story")
        screen = pane.wait_for("Streaming words")
        assert "never finish" not in screen
        assert "esc to interrupt" in screen
        pressed = time.monotonic()
        pane.send_keys("Escape")
        pane.wait_for("Interrupted by the user", timeout=5)
        assert time.monotonic() - pressed < 0.5 * TIME_FACTOR
        enter(pane, "go on")
        pane.wait_for("Second answer.")
        second = server.requests[1].body
        told = user_texts(second)
        assert "[Request interrupted by user]" in told
        assert "go on" in told
        # What was streamed before the interrupt is not lost from the conversation's view.
        assert "Streaming words" in pane.history()
        leave(pane)


def test_background_shell_and_agent_show_in_the_panel_and_their_ends_start_a_turn(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    (tmp_path / ".taskloom").mkdir()
    (tmp_path / ".taskloom" / "settings.json").write_text(json.dumps({"panelGraceMs": 1500}))
    turns = [
        {
            "text": "Starting both.",
            "tool_calls": [
                {
                    "name": "Bash",
                    "input": {"command": "sleep 2; echo hi", "run_in_background": True},
                },
                {
                    "name": "Agent",
                    "input": {
                        "description": "side job",
                        "prompt": "look around",
                        "subagent_type": "general-purpose",
                        "run_in_background": True,
                    },
                },
            ],
        },
        {"text": "Both are running."},
        {"text": "Heard from the first."},
        {"text": "Heard from the second."},
    ]
    sub = {"general-purpose": [{"text": "side job done", "delay": 3.5}]}
    model = scripted(tmp_path / "t.yaml", turns, subagents=sub)
    pane = start(tmux, tmp_path, "--model", model, "--dangerously-skip-permissions")
    enter(pane, "start them")
    screen = pane.wait_for("Both are running.")
    shell_row = re.compile(r"shell +sleep 2; echo hi +\d+s · running")
    agent_row = re.compile(r"agent +side job +\d+s · running · \d+ tool uses · \S+ tokens")
    assert shell_row.search(screen) or pane.wait_for(shell_row)
    pane.wait_for(agent_row)
    # The ends land as one line each, and the model hears of them without any input.
    pane.wait_for(re.compile(r'● b\w+: Background command "sleep 2; echo hi" completed'))
    pane.wait_for(re.compile(r'● a\w+: Agent "side job" completed'), timeout=15)
    screen = pane.wait_for("Heard from the second.", timeout=15)
    assert "Heard from the first." in screen
    # Ended rows stay for the grace period (1.5 s here), then go.
    pane.wait_gone(re.compile(r"(shell|agent) +(sleep 2|side job)"), timeout=10)
    leave(pane)


def test_ctrl_b_sends_a_slow_foreground_agent_to_the_background(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    turns = [
        {
            "text": "Delegating.",
            "tool_calls": [
                {
                    "name": "Agent",
                    "input": {
                        "description": "slow research",
                        "prompt": "research it",
                        "subagent_type": "general-purpose",
                    },
                }
            ],
        },
        {"text": "It runs in the background now."},
        {"text": "The agent reported back."},
    ]
    sub = {"general-purpose": [{"text": "Found it: 42", "delay": 6}]}
    model = scripted(tmp_path / "t.yaml", turns, subagents=sub)
    pane = start(tmux, tmp_path, "--model", model, "--dangerously-skip-permissions")
    enter(pane, "research")
    pane.wait_for("→ Agent(slow research)")
    called = time.monotonic()
    pane.wait_for(re.compile(r"agent +slow research .*fg · ctrl\+b to background"))
    assert time.monotonic() - called > 1.5  # progress shows once it has run 2 s
    pane.send_keys("C-b")
    pane.wait_for(re.compile(r"a\w+ runs on in the background: slow research"))
    pane.wait_for("It runs in the background now.")
    # The prompt is usable at once: a command answers while the agent still works.
    enter(pane, "/tasks")
    screen = pane.wait_for(re.compile(r"a\w+ +local_agent +running .* background · slow research"))
    assert "The agent reported back." not in screen
    pane.wait_for(re.compile(r'● a\w+: Agent "slow research" completed'), timeout=15)
    pane.wait_for("The agent reported back.", timeout=15)
    leave(pane)


def test_write_asks_always_saves_the_rule_and_a_denial_reason_reaches_the_model(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Write", {"file_path": str(a), "content": "A"})])
        server.add_turn(tool_calls=[("Write", {"file_path": str(b), "content": "B"})])
        server.add_turn(text="Both written.")
        server.add_turn(tool_calls=[("Bash", {"command": f"rm {a}"})])
        server.add_turn(text="Kept it.")
        pane = start(tmux, tmp_path, "--model", "sonnet", **anthropic_env(server))
        enter(pane, "write two files")
        screen = pane.wait_for(f"Allow Write({a})?")
        assert "(teammate" not in screen and "(agent" not in screen  # the main thread's own
        # Its keys work once it has been up a moment, and then they are shown.
        pane.wait_for("2 yes, always allow Write (saved to .taskloom/settings.local.json)")
        pane.send_keys("2")
        # The second Write runs without a question: the rule is in force at once.
        pane.wait_for("Both written.")
        assert a.read_text() == "A" and b.read_text() == "B"
        assert "Allow Write(" not in pane.capture()
        local = json.loads((tmp_path / ".taskloom" / "settings.local.json").read_text())
        assert local == {"permissions": {"allow": ["Write"]}}
        enter(pane, "now remove one")
        pane.wait_for(f"Allow Bash(rm {a})?")
        pane.wait_for("3 no, and say why")
        pane.send_keys("3")
        pane.wait_for("reason>")
        enter(pane, "keep that file please")
        pane.wait_for("Kept it.")
        assert a.exists()
        told = user_texts(server.requests[4].body)
        assert "keep that file please" in told
        leave(pane)


def test_tasks_stop_and_resume_bring_back_the_conversation_and_its_notifications(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    background = {"command": "sleep 30", "run_in_background": True}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", background)])
        server.add_turn(text="Started the first.")
        server.add_turn(text="Noted: the first was stopped.")
        server.add_turn(tool_calls=[("Bash", background)])
        server.add_turn(text="Started the second.")
        server.add_turn(text="Welcome back.")
        pane = start(
            tmux,
            tmp_path,
            "--model",
            "sonnet",
            "--dangerously-skip-permissions",
            **anthropic_env(server),
        )
        first_session = re.search(r"session (\S+)", pane.capture())
        assert first_session is not None
        enter(pane, "start a sleeper")
        screen = pane.wait_for("Started the first.")
        found = re.search(r"background with ID: (\w+)", screen)
        assert found is not None
        task = found.group(1)
        enter(pane, "/tasks")
        pane.wait_for(re.compile(rf"{task} +local_bash +running"))
        enter(pane, f"/tasks {task}")
        pane.wait_for(f"Stop it with /stop {task}")
        sleepers = run_processes(lambda p: (p.info["cmdline"] or [])[-1:] == ["sleep 30"])
        sleepers += run_processes(lambda p: p.info["cmdline"] == ["sleep", "30"])
        assert sleepers
        enter(pane, f"/stop {task}")
        pane.wait_for(f"{task}: killed")
        assert not any(alive(p.pid) for p in sleepers)
        # The stop is notified: the idle session starts a turn for it by itself.
        pane.wait_for("Noted: the first was stopped.")
        enter(pane, "another one")
        screen = pane.wait_for("Started the second.")
        second = re.findall(r"background with ID: (\w+)", screen)[-1]
        # A new conversation closes this one: its running task is stopped, and the
        # notification of that stop waits, undelivered, in its mailbox.
        enter(pane, "/clear")
        pane.wait_for("New conversation: session")
        enter(pane, f"/resume {first_session.group(1)}")
        pane.wait_for(f"Resumed session {first_session.group(1)}")
        screen = pane.wait_for("Welcome back.")
        assert "earlier in this conversation" in screen
        assert "> start a sleeper" in screen
        told = user_texts(server.requests[-1].body)
        assert second in told and "<task-notification>" in told
        leave(pane)
        assert len(server.requests) == 6


def test_unknown_commands_are_named_with_the_known_ones(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    model = scripted(tmp_path / "t.yaml", [{"text": "unused"}])
    pane = start(tmux, tmp_path, "--model", model, width=160)  # the list on one line
    enter(pane, "/frobnicate")
    screen = pane.wait_for("Unknown command /frobnicate.")
    assert (
        "/help, /tasks, /stop, /agents, /team, /resume, /model, /compact, /clear, /memory, /dream, "
        "/exit" in screen
    )
    enter(pane, "/help")
    pane.wait_for("/stop ID")
    leave(pane)


def test_a_first_prompt_and_exit_under_a_pseudo_terminal(tmp_path: Path) -> None:
    import pty

    model = scripted(tmp_path / "t.yaml", [{"text": "The thing is done."}])
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskloom",
            "do the thing",
            "--dangerously-skip-permissions",
            "--model",
            model,
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=tmp_path,
        env={**repl_env(tmp_path), "TERM": "xterm-256color"},
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30 * TIME_FACTOR
        # The answer, then the status line drawn again below it: the REPL reads keys.
        drawn = re.compile(r"The thing is done\.(.|\n)* · bypassPermissions · ".encode())
        while not drawn.search(seen):
            assert time.monotonic() < deadline, seen.decode(errors="replace")[-2000:]
            seen += _read(master, deadline)
        os.write(master, b"/exit\r")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def _read(fd: int, deadline: float) -> bytes:
    import select

    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the program has exited and closed the terminal
        return b""


def test_without_a_terminal_and_without_p_it_says_so_and_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "hello"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env=repl_env(tmp_path),
    )
    assert proc.returncode == 2
    assert "interactive mode needs a terminal" in proc.stderr
    assert "-p/--print" in proc.stderr


def test_a_teammates_permission_request_names_the_teammate(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
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
    pane = start(tmux, tmp_path, "--model", model, "--teams", width=250)
    enter(pane, "get alice to write")
    pane.wait_for(re.compile(rf"Allow Write\({re.escape(str(target))}\) \(teammate alice@\S+\)\?"))
    pane.wait_for("1 yes ·")
    pane.send_keys("1")
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while not target.exists():
        assert time.monotonic() < deadline, pane.capture()
        time.sleep(0.05)  # the file appears when alice's call runs: no event reaches the test
    assert target.read_text() == "hi"
    enter(pane, "/team")
    pane.wait_for(re.compile(r"alice +\S+ +(idle|working)"))
    leave(pane)


def test_keys_history_and_the_model_and_agents_commands(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    turns = [{"text": "First answer."}, {"text": "Got two lines."}]
    model = scripted(tmp_path / "t.yaml", turns)
    pane = start(tmux, tmp_path, "--model", model)
    enter(pane, "the first prompt")
    pane.wait_for("First answer.")
    # Up brings the last prompt back into the input (just above the status line); Ctrl+C
    # clears it.
    pane.send_keys("Up")
    pane.wait_for(re.compile(r"^> the first prompt\n .* · default · ", re.M))
    pane.send_keys("C-c")
    pane.wait_for(re.compile(r"^>\n .* · default · ", re.M))
    # Ctrl+J (or a trailing backslash) makes a new line; Enter sends both lines as one prompt.
    pane.type("line one")
    pane.send_keys("C-j")
    pane.type("line two\\")
    pane.send_keys("Enter")
    pane.type("line three")
    pane.send_keys("Enter")
    screen = pane.wait_for("Got two lines.")
    assert re.search(r"> line one\n  line two\n  line three", screen)
    enter(pane, "/model")
    pane.wait_for(re.compile(r"Model: scripted:\S*t\.yaml"))
    enter(pane, "/agents")
    screen = pane.wait_for("Agent types:")
    assert re.search(r"general-purpose +\S", screen) and re.search(r"Explore +\S", screen)
    # Ctrl+C twice on an empty input leaves, with exit code 0.
    pane.send_keys("C-c")
    pane.wait_for("Ctrl+C again to exit")
    pane.send_keys("C-c")
    assert pane.wait_exit(20) == 0
    # The history is kept for the project: a new REPL here has it (commands too).
    again = start(tmux, tmp_path, "--model", model)
    again.send_keys("Up")
    again.wait_for(re.compile(r"^> /agents\n .* · default · ", re.M))
    again.send_keys("Up")
    again.send_keys("Up")
    again.wait_for(re.compile(r"^> line one\n  line two\n  line three\n .* · default · ", re.M))
    again.send_keys("C-c")
    leave(again)


def test_resume_lists_earlier_conversations_and_refuses_an_unknown_one_keeping_this_one(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    earlier = scripted(tmp_path / "a.yaml", [{"text": "Earlier answer."}])
    first = start(tmux, tmp_path, "--model", earlier)
    found = re.search(r"session (\S+)", first.capture())
    assert found is not None
    enter(first, "an earlier prompt")
    first.wait_for("Earlier answer.")
    leave(first)
    background = {"command": "sleep 30", "run_in_background": True}
    turns = [{"tool_calls": [{"name": "Bash", "input": background}]}, {"text": "Sleeper up."}]
    model = scripted(tmp_path / "b.yaml", turns)
    pane = start(tmux, tmp_path, "--model", model, "--dangerously-skip-permissions")
    enter(pane, "start a sleeper")
    pane.wait_for("Sleeper up.")
    enter(pane, "/resume")
    pane.wait_for("Earlier conversations here (newest first): /resume ID")
    pane.wait_for(re.compile(rf"^  {found.group(1)}  \d{{4}}-\d\d-\d\d \d\d:\d\d$", re.M))
    enter(pane, "/resume no-such-session")
    pane.wait_for("No conversation found with session ID: no-such-session")
    # Nothing was closed: the sleeper of this session still runs.
    enter(pane, "/tasks")
    pane.wait_for(re.compile(r"b\w+ +local_bash +running"))
    assert run_processes(lambda p: p.info["cmdline"] == ["sleep", "30"])
    leave(pane)
    assert not run_processes(lambda p: p.info["cmdline"] == ["sleep", "30"])


def test_a_ctrl_c_that_comes_as_a_signal_counts_as_one(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    """While lines are printed the terminal is briefly not raw: a Ctrl+C then is a SIGINT."""
    model = scripted(tmp_path / "t.yaml", [{"text": "never asked"}])
    pane = start(tmux, tmp_path, "--model", model)
    pane.wait_for("/help for commands")
    os.kill(pane.pid, signal.SIGINT)
    pane.wait_for("Ctrl+C again to exit")
    os.kill(pane.pid, signal.SIGINT)
    assert pane.wait_exit(20) == 0


@pytest.mark.parametrize("how", ["/exit", "ctrl-c twice"])
def test_leaving_while_a_foreground_command_runs_stops_it_and_exits_0(
    tmux: tmux_driver.TmuxServer, tmp_path: Path, how: str
) -> None:
    turns = [
        {
            "text": "Running a long one.",
            "tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}],
        },
        {"text": "never shown"},
    ]
    model = scripted(tmp_path / "t.yaml", turns)
    pane = start(tmux, tmp_path, "--model", model, "--dangerously-skip-permissions")
    enter(pane, "go")
    pane.wait_for("→ Bash(sleep 30)")

    def sleeping(proc: Any) -> bool:
        return proc.info["cmdline"] in (["sleep", "30"], ["/bin/sh", "-c", "sleep 30"])

    deadline = time.monotonic() + 10 * TIME_FACTOR
    while not run_processes(sleeping):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)  # the command's process appears: no event reaches the test
    if how == "/exit":
        enter(pane, "/exit")
    else:
        pane.send_keys("C-c")
        pane.wait_for("Ctrl+C again to exit")
        pane.send_keys("C-c")
    try:
        status = pane.wait_exit(20)
    except AssertionError as exc:  # seen once in CI: say what was still running
        left = [" ".join(p.info["cmdline"] or []) for p in run_processes()]
        raise AssertionError(f"{exc}\nstill running: {left}") from None
    assert status == 0
    assert "never shown" not in pane.history()
    assert not run_processes(lambda p: p.pid != tmux.pid)

"""What a user meets when something is wrong: broken settings, bad flag values, unusable
state, signals in the middle of a stalled request — one clear line and the right exit code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import TIME_FACTOR, clean_env, write_turns
from helpers import json_lines as events
from helpers import run_cli as run
from taskloom.transcript import transcript_path

pytestmark = pytest.mark.e2e

TRUNCATED = '{"permissions":{"deny":["Bash(echo:*)"]},"hooks":{'


def echo_script(tmp_path: Path) -> str:
    return write_turns(
        tmp_path / "t.yaml",
        [
            {"tool_calls": [{"name": "Bash", "input": {"command": "echo ran > marker"}}]},
            {"text": "done"},
        ],
    )


def test_a_truncated_settings_file_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    broken = tmp_path / ".claude" / "settings.json"
    broken.write_text(TRUNCATED)
    proc = run("-p", "go", "--model", echo_script(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert str(broken) in proc.stderr and "line 1, column 51" in proc.stderr
    assert "--skip-broken-settings" in proc.stderr
    assert not (tmp_path / "marker").exists()


def test_the_same_file_complete_denies_the_command(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(TRUNCATED + "}}")
    proc = run(
        "-p", "go", "--output-format", "stream-json", "--model", echo_script(tmp_path), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert [d["tool_name"] for d in events(proc.stdout)[-1]["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "marker").exists()


def test_skipping_a_broken_file_keeps_the_deny_rules_of_the_valid_layers(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(TRUNCATED)
    (tmp_path / ".taskloom").mkdir()
    (tmp_path / ".taskloom" / "settings.json").write_text(
        json.dumps({"permissions": {"deny": ["Bash(echo:*)"]}})
    )
    proc = run(
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--skip-broken-settings",
        "--model",
        echo_script(tmp_path),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipping broken settings file" in proc.stderr
    assert [d["tool_name"] for d in events(proc.stdout)[-1]["permission_denials"]] == ["Bash"]
    assert not (tmp_path / "marker").exists()


def test_a_wrong_type_where_rules_go_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text('{"permissions":{"deny":"Bash(echo:*)"}}')
    proc = run("-p", "go", "--model", echo_script(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2
    assert "permissions.deny must be a list of strings, got a string" in proc.stderr
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--settings", "missing.json"], "--settings missing.json: cannot read it"),
        (["--settings", "bad.json"], "--settings bad.json: invalid JSON at line 1"),
        (["--settings", "{bad"], "Error: --settings (inline JSON): invalid JSON at line 1"),
        (["--agents", "{bad"], "--agents: invalid JSON"),
        (["--allowedTools", "Bash(("], "malformed permission rule 'Bash(('"),
        (["--disallowedTools", "Bash)"], "malformed permission rule 'Bash)'"),
        (["--max-turns", "0"], "--max-turns"),
    ],
)
def test_bad_flag_values_are_usage_errors(tmp_path: Path, flags: list[str], expected: str) -> None:
    (tmp_path / "bad.json").write_text("{nope")
    model = write_turns(tmp_path / "t.yaml", [{"text": "never"}])
    proc = run("-p", "go", "--model", model, *flags, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", "--model"),
        ("foo:bar", "unknown model prefix 'foo'"),
        ("openai:", "--model openai: needs a model id"),
        ("scripted:", "--model scripted: needs a file"),
        ("scripted:missing.yaml", "cannot read scripted model file missing.yaml"),
    ],
)
def test_bad_model_values_are_usage_errors(tmp_path: Path, spec: str, expected: str) -> None:
    proc = run("-p", "go", "--model", spec, cwd=tmp_path, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_unknown_prefix_lists_the_known_ones(tmp_path: Path) -> None:
    proc = run("-p", "go", "--model", "foo:bar", cwd=tmp_path, timeout=30)
    for prefix in ("anthropic:", "openai:", "scripted:"):
        assert prefix in proc.stderr


def test_a_symlinked_session_directory_is_one_line(tmp_path: Path, home: Path) -> None:
    model = write_turns(tmp_path / "t.yaml", [{"text": "first"}, {"text": "second"}])
    first = run("-p", "hi", "--output-format", "json", "--model", model, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout)["session_id"]
    real = transcript_path(session, home, tmp_path).parent  # the project's, holding it
    moved = tmp_path / "elsewhere"
    real.rename(moved)
    real.symlink_to(moved, target_is_directory=True)
    proc = run("-p", "go on", "--resume", session, "--model", model, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert str(real) in proc.stderr and "symlink" in proc.stderr
    assert "Traceback" not in proc.stderr
    debug = run("-p", "go on", "--resume", session, "--model", model, "--debug", cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


class StallingServer:
    """Accepts connections and never answers: a provider that hangs before its headers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connected = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            self.connected.set()

    def close(self) -> None:
        # shutdown() wakes the accept() blocked in the thread; close() alone does not.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for conn in self._conns:
            conn.close()
        self._thread.join(timeout=5)


@pytest.fixture
def stalling() -> Iterator[StallingServer]:
    server = StallingServer()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_a_stalled_request_still_prints_the_result(
    tmp_path: Path, stalling: StallingServer, signum: int, code: int
) -> None:
    env = clean_env(
        ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{stalling.port}"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "-p", "hi", "--output-format", "stream-json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert stalling.connected.wait(timeout=30), "taskloom never made its request"
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    last = events(out)[-1]
    assert last["type"] == "result"
    assert last["subtype"] == "error_during_execution" and last["is_error"] is True
    assert last["errors"] == ["interrupted"] and "result" not in last


def test_a_signal_during_start_up_still_prints_the_result(tmp_path: Path) -> None:
    # An MCP server that never answers its handshake holds the run in its start-up.
    marker = tmp_path / "server-started"
    server = {"command": "sh", "args": ["-c", f"touch {marker}; exec sleep 60"]}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"slow": server}}))
    model_flag = ["--model", write_turns(tmp_path / "t.yaml", [{"text": "never"}])]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskloom",
            "-p",
            "hi",
            "--output-format",
            "stream-json",
            *model_flag,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 30 * TIME_FACTOR
        while not marker.exists():  # no event to wait on: the file is the server's sign
            assert time.monotonic() < deadline and proc.poll() is None, "the server never started"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    (last,) = events(out)
    assert last["type"] == "result" and last["errors"] == ["interrupted"]
    assert last["is_error"] is True and last["session_id"]


def test_a_runtime_error_before_the_first_turn_still_prints_the_result(tmp_path: Path) -> None:
    model = write_turns(tmp_path / "t.yaml", [{"text": "never"}])
    proc = run(
        "-p",
        "hi",
        "--output-format",
        "stream-json",
        "--model",
        model,
        "--resume",
        "nope",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    (last,) = events(proc.stdout)
    assert last["type"] == "result" and last["subtype"] == "error_during_execution"
    assert last["errors"] == ["Error: No conversation found with session ID: nope"]
    assert proc.stderr == "Error: No conversation found with session ID: nope\n"


def test_a_subcommand_meeting_a_symlinked_home_says_so_in_one_line(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(link)),
    )
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and str(link) in proc.stderr and "symlink" in proc.stderr


def test_a_guard_hook_under_a_misspelt_event_stops_the_run(tmp_path: Path) -> None:
    guard = {"matcher": "Bash", "hooks": [{"type": "command", "command": "exit 2"}]}
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PreTooluse": [guard], "Notification": [guard]}})
    )
    proc = run("-p", "go", "--model", echo_script(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "unknown hook event 'PreTooluse'; did you mean 'PreToolUse'?" in proc.stderr
    assert not (tmp_path / "marker").exists()
    # An event of Claude Code's that we do not run is skipped with a warning, not refused.
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PostToolBatch": [guard]}})
    )
    proc = run("-p", "go", "--model", echo_script(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "unknown hook event 'PostToolBatch' skipped" in proc.stderr


def test_a_run_that_fails_before_its_session_exists_names_no_session(tmp_path: Path) -> None:
    proc = run("-p", "hi", "--output-format", "json", cwd=tmp_path)  # no model configured
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["is_error"] is True and result["session_id"] is None
    assert "No model configured" in result["errors"][0]

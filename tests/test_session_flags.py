"""The session flags programs pass: -c, --session-id, --fork-session, --setting-sources, and
the small ones (--tools, --system-prompt-file, -v)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import clean_env


def run(
    cwd: Path, home: Path, server: FakeAnthropicServer | None, *args: str, prompt: str = "hi"
) -> subprocess.CompletedProcess[str]:
    env = clean_env(TASKLOOM_HOME=str(home), HOME=str(home / "user"))
    if server is not None:
        env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
    argv = [sys.executable, "-m", "taskloom", "-p", prompt, "--output-format", "stream-json"]
    argv += ["--model", "claude-sonnet-4-5", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def session_of(proc: subprocess.CompletedProcess[str]) -> str:
    return str(events(proc)[-1]["session_id"])


def texts(body: dict[str, Any]) -> list[str]:
    return [
        b.get("text", "")
        for m in body["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
    ]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    a, b, home = tmp_path / "a", tmp_path / "b", tmp_path / "home"
    for d in (a, b, home / "user"):
        d.mkdir(parents=True)
    return a, b, home


def test_continue_resumes_the_latest_conversation_of_this_directory(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, b, home = dirs
    with FakeAnthropicServer() as server:
        for text in ("first in a", "second in a", "only in b"):
            server.add_turn(text=text)
        run(a, home, server, prompt="one")
        latest = session_of(run(a, home, server, prompt="two"))
        run(b, home, server, prompt="three")  # newer, but another directory
        server.add_turn(text="continued")
        continued = run(a, home, server, "-c", prompt="four")
    assert session_of(continued) == latest
    assert texts(server.requests[-1].body) == ["two", "second in a", "four"]


def test_continue_with_nothing_to_continue_says_so(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    proc = run(a, home, None, "-c")
    assert proc.returncode == 1
    assert "No conversation found to continue" in proc.stderr


def test_session_id_names_the_new_session_and_must_be_a_fresh_uuid(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, _, home = dirs
    chosen = str(uuid.uuid4())
    with FakeAnthropicServer() as server:
        server.add_turn(text="ok")
        proc = run(a, home, server, "--session-id", chosen)
    assert session_of(proc) == chosen
    assert (home / "sessions" / chosen / "transcript.jsonl").is_file()
    again = run(a, home, None, "--session-id", chosen)
    assert again.returncode == 2 and f"Session ID {chosen} is already in use" in again.stderr
    bad = run(a, home, None, "--session-id", "not-a-uuid")
    assert bad.returncode == 2 and "is not a UUID" in bad.stderr


def test_fork_session_starts_a_new_id_with_the_old_history(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(text="original answer")
        original = session_of(run(a, home, server, prompt="original question"))
        before = (home / "sessions" / original / "transcript.jsonl").read_bytes()
        server.add_turn(text="forked answer")
        forked = run(a, home, server, "--resume", original, "--fork-session", prompt="fork q")
    new = session_of(forked)
    assert new != original
    assert texts(server.requests[-1].body) == ["original question", "original answer", "fork q"]
    # The original conversation is left as it was; the fork has its own transcript.
    assert (home / "sessions" / original / "transcript.jsonl").read_bytes() == before
    assert b"fork q" in (home / "sessions" / new / "transcript.jsonl").read_bytes()
    alone = run(a, home, None, "--fork-session")
    assert alone.returncode == 2 and "--fork-session needs --resume or --continue" in alone.stderr


def test_setting_sources_project_ignores_the_user_settings(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    (home / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash"]}}))
    (a / ".claude").mkdir()
    (a / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Write"]}}))
    with FakeAnthropicServer() as server:
        server.add_turn(text="all settings")
        server.add_turn(text="project only")
        every = events(run(a, home, server))[0]["tools"]
        project = events(run(a, home, server, "--setting-sources", "project"))[0]["tools"]
    assert "Bash" not in every and "Write" not in every
    assert "Bash" in project and "Write" not in project
    bad = run(a, home, None, "--setting-sources", "user,team")
    assert bad.returncode == 2 and "unknown source 'team'" in bad.stderr


def test_tools_system_prompt_file_and_version(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    (a / "prompt.txt").write_text("You answer in one word.")
    with FakeAnthropicServer() as server:
        server.add_turn(text="ok")
        proc = run(a, home, server, "--tools", "Read,Grep", "--system-prompt-file", "prompt.txt")
    assert events(proc)[0]["tools"] == ["Grep", "Read"]  # in the built-in order
    body = server.requests[0].body
    assert sorted(t["name"] for t in body["tools"]) == ["Grep", "Read"]
    system = body["system"]
    text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    assert text == "You answer in one word."
    missing = run(a, home, None, "--system-prompt-file", "nope.txt")
    assert missing.returncode == 2 and "nope.txt" in missing.stderr
    version = subprocess.run(
        [sys.executable, "-m", "taskloom", "-v"], capture_output=True, text=True, timeout=30
    )
    assert version.returncode == 0 and version.stdout.strip().endswith("(taskloom)")


def test_no_session_persistence_keeps_no_transcript(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(text="forgotten")
        proc = run(a, home, server, "--no-session-persistence")
    session = session_of(proc)
    assert events(proc)[-1]["result"] == "forgotten"
    assert not (home / "sessions" / session / "transcript.jsonl").exists()
    again = run(a, home, None, "--resume", session)
    assert again.returncode == 1 and f"No conversation found with session ID: {session}" in (
        again.stderr
    )

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
from taskloom.transcript import transcript_path

pytestmark = pytest.mark.e2e


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
    assert transcript_path(chosen, home, a).is_file()
    again = run(a, home, None, "--session-id", chosen)
    assert again.returncode == 2 and f"Session ID {chosen} is already in use" in again.stderr
    bad = run(a, home, None, "--session-id", "not-a-uuid")
    assert bad.returncode == 2 and "is not a UUID" in bad.stderr


def test_fork_session_starts_a_new_id_with_the_old_history(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(text="original answer")
        original = session_of(run(a, home, server, prompt="original question"))
        before = transcript_path(original, home, a).read_bytes()
        server.add_turn(text="forked answer")
        forked = run(a, home, server, "--resume", original, "--fork-session", prompt="fork q")
    new = session_of(forked)
    assert new != original
    assert texts(server.requests[-1].body) == ["original question", "original answer", "fork q"]
    # The original conversation is left as it was; the fork has its own transcript.
    assert transcript_path(original, home, a).read_bytes() == before
    assert b"fork q" in transcript_path(new, home, a).read_bytes()
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
    assert not transcript_path(session, home, a).exists()
    again = run(a, home, None, "--resume", session)
    assert again.returncode == 1 and f"No conversation found with session ID: {session}" in (
        again.stderr
    )


SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "stars": {"type": "integer"}},
        "required": ["name", "stars"],
    }
)


def test_json_schema_an_answer_it_accepts_is_the_structured_output(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        answer = {"name": "taskloom", "stars": 5}
        server.add_turn(tool_calls=[("StructuredOutput", answer)])
        server.add_turn(text="Done.")
        proc = run(a, home, server, "--json-schema", SCHEMA)
    result = events(proc)[-1]
    assert (result["subtype"], result["is_error"]) == ("success", False)
    assert result["structured_output"] == answer
    offered = {t["name"]: t for t in server.requests[0].body["tools"]}
    assert offered["StructuredOutput"]["input_schema"] == json.loads(SCHEMA)


def test_json_schema_an_answer_it_refuses_ends_in_a_clear_error(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("StructuredOutput", {"name": 3})])
        for _ in range(4):  # the answer after the refusal, then one per reminder
            server.add_turn(text="No.")
        proc = run(a, home, server, "--json-schema", SCHEMA, prompt="go")
    assert proc.returncode == 1
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["subtype"] == "error_max_structured_output_retries" and result["is_error"]
    assert result["errors"] == ["Failed to provide valid structured output after maximum retries"]
    assert "structured_output" not in result
    refusal = server.requests[1].body["messages"][-1]["content"][0]
    assert refusal["is_error"] and "name: 3 is not of type 'string'" in str(refusal["content"])
    assert "stars" in str(refusal["content"])  # the missing field is named too
    reminders = [texts(r.body)[-1] for r in server.requests[2:]]
    assert len(reminders) == 3 and all("StructuredOutput" in t for t in reminders)


def test_json_schema_must_be_a_json_schema(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    not_json = run(a, home, None, "--json-schema", "{nope")
    assert not_json.returncode == 2 and "--json-schema is not JSON" in not_json.stderr
    bad = run(a, home, None, "--json-schema", '{"type": 5}')
    assert bad.returncode == 2 and "not a valid JSON Schema" in bad.stderr


def test_max_budget_usd_stops_the_run_once_the_session_cost_reaches_it(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, _, home = dirs
    # A price of a dollar a token: the first answer costs more than the budget.
    prices = {"modelPrices": {"claude-sonnet-4-5": {"input": 1e6, "output": 1e6}}}
    (a / ".claude").mkdir()
    (a / ".claude" / "settings.json").write_text(json.dumps(prices))
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "touch spent-more"})])
        server.add_turn(text="never asked")
        budget = ("--max-budget-usd", "0.5", "--dangerously-skip-permissions")
        proc = run(a, home, server, *budget, prompt="go")
    assert proc.returncode == 1
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["subtype"] == "error_max_budget_usd" and result["is_error"]
    assert result["errors"] == ["Reached maximum budget ($0.5)"]
    assert result["total_cost_usd"] >= 0.5
    assert len(server.requests) == 1 and not (a / "spent-more").exists()
    bad = run(a, home, None, "--max-budget-usd", "0")
    assert bad.returncode == 2 and "must be more than 0" in bad.stderr


def test_fallback_model_takes_over_when_the_model_stays_overloaded(
    dirs: tuple[Path, Path, Path],
) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        for _ in range(5):  # the first try and its four retries
            server.add_error(529, "overloaded_error", "Overloaded", retry_after=0.01)
        server.add_turn(text="from the fallback")
        proc = run(a, home, server, "--fallback-model", "claude-haiku-4-5")
    result = events(proc)[-1]
    assert (result["subtype"], result["result"]) == ("success", "from the fallback")
    models = [r.body["model"] for r in server.requests]
    assert models == ["claude-sonnet-4-5"] * 5 + ["claude-haiku-4-5"]
    assert texts(server.requests[-1].body) == ["hi"]  # the same conversation, asked again
    assert "going on with the fallback model claude-haiku-4-5" in proc.stderr


def test_sdk_options_without_effect_are_accepted_not_refused(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(text="fine")
        flags = ["--thinking", "adaptive", "--effort", "high", "--max-thinking-tokens", "100"]
        flags += ["--betas", "x", "--plugin-url", str(a), "--task-budget", "5"]
        proc = run(a, home, server, *flags)
    assert events(proc)[-1]["result"] == "fine"


def test_a_fork_that_fails_early_names_no_session(dirs: tuple[Path, Path, Path]) -> None:
    a, _, home = dirs
    with FakeAnthropicServer() as server:
        server.add_turn(text="kept")
        original = session_of(run(a, home, server))
    # No provider configured: the fork fails before its session exists.
    env = clean_env(TASKLOOM_HOME=str(home), HOME=str(home / "user"))
    argv = [sys.executable, "-m", "taskloom", "-p", "x", "--output-format", "stream-json"]
    argv += ["--resume", original, "--fork-session"]
    proc = subprocess.run(argv, cwd=a, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["is_error"] and result["session_id"] is None  # not the session it forks

"""Transcripts where Claude Code keeps them: the Python SDK's session functions read taskloom's.

A session's transcript is ``$CLAUDE_CONFIG_DIR/projects/<project key>/<id>.jsonl`` and its
subagents' sidechains ``<id>/subagents/agent-<agent id>.jsonl`` (each test has its own
``CLAUDE_CONFIG_DIR``: see conftest). The SDK's ``list_sessions``, ``get_session_messages``,
``list_subagents`` and ``get_subagent_messages`` are plain functions reading those files;
``--resume``, ``--continue`` and ``--fork-session`` read them back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    get_session_messages,
    get_subagent_messages,
    list_sessions,
    list_subagents,
)
from claude_agent_sdk._internal.sessions import project_key_for_directory

from fake_servers import FakeAnthropicServer
from helpers import clean_env, json_lines, scripted_argv
from taskloom.errors import UsageError
from taskloom.messages import Message, TextBlock
from taskloom.transcript import (
    TranscriptWriter,
    copy_transcript,
    load_messages,
    project_key,
    sidechain_dir,
    transcript_path,
)


def run(
    cwd: Path, server: FakeAnthropicServer | None, *args: str, prompt: str = "hi", **env: str
) -> subprocess.CompletedProcess[str]:
    """``taskloom -p PROMPT`` (stream-json) against ``server``, in ``cwd``, to its end."""
    environ = clean_env(**env)
    if server is not None:
        environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
    argv = [sys.executable, "-m", "taskloom", "-p", prompt, "--output-format", "stream-json"]
    argv += ["--model", "claude-sonnet-4-5", *args]
    return subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True, timeout=60)


def session_of(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return str(json_lines(proc.stdout)[-1]["session_id"])


def sent(body: dict[str, Any]) -> list[str]:
    """The texts of a model request's messages, in order (a tool call as its name)."""
    out = []
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else [{"text": content}]:
            out.append(block.get("text") or block.get("name") or block.get("content") or "")
    return out


def said(messages: list[Any]) -> list[tuple[str, str]]:
    """What the SDK's messages say: (type, their text, or the tool called / answered)."""
    out = []
    for m in messages:
        content = m.message["content"]
        for block in content if isinstance(content, list) else [{"text": content}]:
            value = block.get("text") or block.get("name") or block.get("content")
            out.append((m.type, value if isinstance(value, str) else json.dumps(value)))
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "my project"  # a space: the key replaces it too
    path.mkdir()
    return path


@pytest.mark.e2e
def test_the_sdk_lists_a_taskloom_session_and_reads_its_messages_in_order(project: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="Let me look.", tool_calls=[("Bash", {"command": "echo hi"})])
        server.add_turn(text="It printed hi.")
        session = session_of(run(project, server, "--dangerously-skip-permissions", prompt="Q1"))
    config = Path(os.environ["CLAUDE_CONFIG_DIR"])
    expected = config / "projects" / project_key_for_directory(project) / f"{session}.jsonl"
    assert transcript_path(session, cwd=project) == expected and expected.is_file()
    assert not (
        Path(os.environ["TASKLOOM_HOME"]) / "sessions" / session / "transcript.jsonl"
    ).exists()

    [info] = list_sessions(directory=str(project))
    assert info.session_id == session and info.first_prompt == "Q1" and info.summary == "Q1"
    assert info.cwd == str(project.resolve()) and info.created_at is not None

    messages = get_session_messages(session, directory=str(project))
    assert said(messages) == [
        ("user", "Q1"),
        ("assistant", "Let me look."),
        ("assistant", "Bash"),
        ("user", "hi"),
        ("assistant", "It printed hi."),
    ]
    assert {m.session_id for m in messages} == {session}
    records = [json.loads(x) for x in expected.read_text().splitlines()]
    assert records[1] == {
        "type": "last-prompt",
        "lastPrompt": "Q1",
        "leafUuid": messages[0].uuid,
        "sessionId": session,
    }
    assert all(r["cwd"] == str(project.resolve()) for r in records if "message" in r)
    # Also found with no directory given (every project is searched).
    assert [m.uuid for m in get_session_messages(session)] == [m.uuid for m in messages]


@pytest.mark.e2e
def test_resume_and_continue_read_the_file_and_extend_its_chain(project: Path) -> None:
    with FakeAnthropicServer() as server:
        for text in ("A1", "A2", "A3"):
            server.add_turn(text=text)
        session = session_of(run(project, server, prompt="Q1"))
        assert session_of(run(project, server, "--resume", session, prompt="Q2")) == session
        assert sent(server.requests[-1].body) == ["Q1", "A1", "Q2"]
        assert session_of(run(project, server, "--continue", prompt="Q3")) == session
        assert sent(server.requests[-1].body) == ["Q1", "A1", "Q2", "A2", "Q3"]
    # One file, one chain: the SDK walks it from the last message back to the first.
    messages = get_session_messages(session, directory=str(project))
    assert said(messages) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
        ("user", "Q3"),
        ("assistant", "A3"),
    ]
    [info] = list_sessions(directory=str(project))
    # Listed by its latest prompt, as Claude Code's are (its last-prompt records).
    assert info.session_id == session and info.first_prompt == "Q1" and info.summary == "Q3"


@pytest.mark.e2e
def test_a_fork_is_a_session_of_its_own_with_the_history_copied(project: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="A1")
        server.add_turn(text="forked answer")
        original = session_of(run(project, server, prompt="Q1"))
        before = transcript_path(original, cwd=project).read_bytes()
        fork = session_of(run(project, server, "--resume", original, "--fork-session", prompt="F"))
        assert sent(server.requests[-1].body) == ["Q1", "A1", "F"]
    assert fork != original
    assert transcript_path(original, cwd=project).read_bytes() == before
    assert {s.session_id for s in list_sessions(directory=str(project))} == {original, fork}
    forked = get_session_messages(fork, directory=str(project))
    assert said(forked) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "F"),
        ("assistant", "forked answer"),
    ]
    assert {m.session_id for m in forked} == {fork}
    kept = {m.uuid for m in get_session_messages(original, directory=str(project))}
    assert not kept & {m.uuid for m in forked}  # copies, not the same records
    records = [json.loads(x) for x in transcript_path(fork, cwd=project).read_text().splitlines()]
    assert records[0]["forkedFrom"]["sessionId"] == original


@pytest.mark.e2e
def test_a_subagent_s_sidechain_is_where_claude_code_keeps_it(
    tmp_path: Path, project: Path
) -> None:
    call = {"name": "Agent", "input": {"description": "look", "prompt": "find the answer"}}
    script = {
        "turns": [{"tool_calls": [call]}, {"text": "The agent found it."}],
        "subagents": {"general-purpose": {"text": "the answer is 42"}},
    }
    (tmp_path / "s.yaml").write_text(json.dumps(script))
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml"),
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    events = json_lines(proc.stdout)
    session = events[-1]["session_id"]
    [started] = [e for e in events if e.get("subtype") == "task_started"]
    agent_id = started["task_id"]

    assert list_subagents(session, directory=str(project)) == [agent_id]
    folder = sidechain_dir(transcript_path(session, cwd=project))
    assert folder == transcript_path(session, cwd=project).with_suffix("") / "subagents"
    messages = get_subagent_messages(session, agent_id, directory=str(project))
    assert said(messages) == [("user", "find the answer"), ("assistant", "the answer is 42")]
    assert {m.parent_tool_use_id for m in messages} == {started["tool_use_id"]}
    lines = [json.loads(x) for x in (folder / f"agent-{agent_id}.jsonl").read_text().splitlines()]
    assert all(r["isSidechain"] is True and r["agentId"] == agent_id for r in lines)
    meta = json.loads((folder / f"agent-{agent_id}.meta.json").read_text())
    assert meta == {
        "agentType": "general-purpose",
        "description": "look",
        "toolUseId": started["tool_use_id"],
    }
    # The main conversation is not the sidechain's: the SDK lists one session, its own.
    assert [s.session_id for s in list_sessions(directory=str(project))] == [session]
    main = said(get_session_messages(session, directory=str(project)))
    assert main[0] == ("user", "go") and main[-1] == ("assistant", "The agent found it.")


@pytest.mark.e2e
def test_the_off_setting_keeps_transcripts_in_taskloom_s_state_and_they_resume(
    project: Path, home: Path
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="A1")
        server.add_turn(text="A2")
        session = session_of(run(project, server, prompt="Q1", TASKLOOM_TRANSCRIPTS="taskloom"))
        own = home / "sessions" / session / "transcript.jsonl"
        assert own.is_file()
        assert not (Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects").exists()
        assert list_sessions(directory=str(project)) == []
        # Found where it is, whatever the setting now: the session goes on in that file.
        assert session_of(run(project, server, "--resume", session, prompt="Q2")) == session
        assert sent(server.requests[-1].body) == ["Q1", "A1", "Q2"]
    assert [m.content[0].text for m in load_messages(own)] == ["Q1", "A1", "Q2", "A2"]  # type: ignore[union-attr]
    assert not (Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects").exists()
    bad = run(project, None, TASKLOOM_TRANSCRIPTS="nowhere")
    assert bad.returncode == 2
    assert "TASKLOOM_TRANSCRIPTS='nowhere'" in bad.stderr and "'taskloom'" in bad.stderr


@pytest.mark.e2e
def test_a_symlink_below_the_config_directory_is_refused(tmp_path: Path, project: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    projects = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects"
    projects.parent.mkdir()
    projects.symlink_to(elsewhere, target_is_directory=True)
    with FakeAnthropicServer() as server:
        server.add_turn(text="never")
        proc = run(project, server)
    assert proc.returncode == 1
    assert f"{projects}: refusing a symlink" in proc.stderr and "Traceback" not in proc.stderr
    assert list(elsewhere.iterdir()) == []


# -- the files themselves (no process) ---------------------------------------------------------


@pytest.mark.parametrize("name", ["/tmp/a b/c.d", "/x/" + "deep-é/" * 40])
def test_the_project_key_is_the_sdk_s(tmp_path: Path, name: str) -> None:
    assert project_key(name) == project_key_for_directory(name)
    assert project_key(tmp_path) == project_key_for_directory(tmp_path)


def test_the_variable_takes_claude_or_taskloom_only(monkeypatch: pytest.MonkeyPatch) -> None:
    session = str(uuid.uuid4())
    monkeypatch.setenv("TASKLOOM_TRANSCRIPTS", "Claude")
    assert transcript_path(session).suffix == ".jsonl"
    monkeypatch.setenv("TASKLOOM_TRANSCRIPTS", "off")
    with pytest.raises(UsageError, match="TASKLOOM_TRANSCRIPTS='off'"):
        transcript_path(session)


def test_a_config_directory_that_cannot_be_made_leaves_them_in_taskloom_s_state(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(blocker / "claude"))
    session = str(uuid.uuid4())
    assert (
        transcript_path(session, cwd=tmp_path) == home / "sessions" / session / "transcript.jsonl"
    )
    assert "cannot be created" in caplog.text


def test_a_reopened_transcript_chains_on_from_its_last_message(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    first = TranscriptWriter(path, "s")
    one = first.append(Message(role="user", content=[TextBlock(text="one")]))
    first.close()
    with path.open("a") as f:  # what the SDK's rename_session appends
        f.write(json.dumps({"type": "custom-title", "customTitle": "t", "sessionId": "s"}) + "\n")
    second = TranscriptWriter(path, "s")
    two = second.append(Message(role="assistant", content=[TextBlock(text="two")]))
    second.close()
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert records[0]["parentUuid"] is None and records[-1]["parentUuid"] == one
    assert records[-1]["uuid"] == two and records[-1]["isSidechain"] is False
    assert [m.role for m in load_messages(path)] == ["user", "assistant"]


@pytest.mark.parametrize("entrypoint", ["sdk-ts", ""])
def test_lines_name_the_entrypoint_the_sdk_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entrypoint: str
) -> None:
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", entrypoint)
    path = tmp_path / "s.jsonl"
    writer = TranscriptWriter(path, "s")
    writer.append(Message(role="user", content=[TextBlock(text="one")]))
    writer.close()
    (record,) = [json.loads(x) for x in path.read_text().splitlines() if '"uuid"' in x]
    assert record.get("entrypoint") == (entrypoint or None)


def test_a_claude_code_transcript_loads_as_the_conversation_it_holds(tmp_path: Path) -> None:
    """Claude Code's own lines: bookkeeping records, meta messages, an answer split by block."""
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m"}
    lines = [
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s", "content": "go"},
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "message": {"role": "user", "content": "go"},
        },
        {"type": "attachment", "uuid": "a1", "parentUuid": "u1", "attachment": {"type": "date"}},
        {
            "type": "assistant",
            "uuid": "u2",
            "parentUuid": "a1",
            "message": {**answer, "content": [{"type": "text", "text": "Looking."}]},
        },
        {
            "type": "assistant",
            "uuid": "u3",
            "parentUuid": "u2",
            "message": {
                **answer,
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
                ],
            },
        },
        {
            "type": "user",
            "uuid": "u4",
            "parentUuid": "u3",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}],
            },
        },
        {
            "type": "user",
            "uuid": "u5",
            "parentUuid": "u4",
            "isMeta": True,
            "message": {"role": "user", "content": "<system-reminder>x</system-reminder>"},
        },
        {"type": "last-prompt", "lastPrompt": "go", "leafUuid": "u4", "sessionId": "s"},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"type":"user","uu')
    messages = load_messages(path)
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert [b.type for b in messages[1].content] == ["text", "tool_use"]
    copy = tmp_path / "copy.jsonl"
    copy_transcript(path, copy, "fork")
    copied = [json.loads(x) for x in copy.read_text().splitlines()]
    assert [r["type"] for r in copied] == ["user", "assistant", "assistant", "user", "user"]
    assert {r["sessionId"] for r in copied} == {"fork"}
    assert copied[0]["parentUuid"] is None and copied[1]["parentUuid"] is None  # its parent stayed
    assert copied[2]["parentUuid"] == copied[1]["uuid"]


@pytest.mark.e2e
def test_without_session_persistence_nothing_is_written_under_the_config_directory(
    tmp_path: Path, project: Path
) -> None:
    call = {"name": "Agent", "input": {"description": "look", "prompt": "find the answer"}}
    script = {
        "turns": [{"tool_calls": [call]}, {"text": "The agent found it."}],
        "subagents": {"general-purpose": {"text": "the answer is 42"}},
    }
    (tmp_path / "s.yaml").write_text(json.dumps(script))
    proc = subprocess.run(
        [*scripted_argv(tmp_path / "s.yaml"), "--no-session-persistence"],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    events = json_lines(proc.stdout)
    assert [e for e in events if e.get("subtype") == "task_started"]  # the agent did run
    assert events[-1]["result"] == "The agent found it."
    # Neither the main transcript nor the agent's sidechain or its metadata (the SDKs'
    # persistSession: false).
    config = Path(os.environ["CLAUDE_CONFIG_DIR"])
    assert not (config / "projects").exists(), sorted(config.rglob("*"))
    assert list_sessions(directory=str(project)) == []


def test_a_new_session_s_transcript_is_placed_without_listing_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    projects = Path(os.environ["CLAUDE_CONFIG_DIR"]) / "projects"
    for n in range(3):  # other projects' sessions
        (projects / f"-other-{n}").mkdir(parents=True)
        (projects / f"-other-{n}" / f"{uuid.uuid4()}.jsonl").write_text("")
    elsewhere = projects / "-started-elsewhere" / "old-session.jsonl"
    elsewhere.parent.mkdir()
    elsewhere.write_text("")

    def no_listing(*args: object) -> None:
        raise AssertionError(f"a directory was listed: {args}")

    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", no_listing)
        patched.setattr(os, "listdir", no_listing)
        new = transcript_path("new-session", cwd=tmp_path)
        assert new == projects / project_key(tmp_path) / "new-session.jsonl"
        # A session in another project is found only when it is looked for (--resume).
        assert transcript_path("old-session", cwd=tmp_path) != elsewhere
    assert transcript_path("old-session", cwd=tmp_path, search=True) == elsewhere
    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", no_listing)
        patched.setattr(os, "listdir", no_listing)
        # Once found, the session goes on in that file: its agents' sidechains beside it.
        assert transcript_path("old-session", cwd=tmp_path) == elsewhere


async def test_a_pane_teammate_in_another_directory_writes_beside_its_lead_s_transcript(
    tmp_path: Path,
) -> None:
    # A pane teammate in a worktree of its own (or whose lead was resumed elsewhere) runs in
    # another directory than the one its lead's transcript is kept under.
    from taskloom.agents.bookkeeping import sidechain_path
    from taskloom.tasks.runtime import TaskRuntime

    lead_dir, worktree = tmp_path / "lead", tmp_path / "wt"
    lead_dir.mkdir()
    worktree.mkdir()
    lead = str(uuid.uuid4())
    kept = transcript_path(lead, cwd=lead_dir)
    kept.parent.mkdir(parents=True)
    kept.write_text("")
    async with TaskRuntime(cwd=str(worktree)) as rt:
        assert sidechain_path(rt, "t1", lead) == sidechain_dir(kept) / "agent-t1.jsonl"
        # Its own session's stay where its own directory says.
        own = transcript_path(rt.session_id, cwd=worktree)
        assert sidechain_path(rt, "t2") == sidechain_dir(own) / "agent-t2.jsonl"

"""Project instructions in the real REPL, in a real tmux pane: the system prompt the provider is
sent, the nested file told after a Read in a subdirectory, and ``/memory``.

The model is the fake Anthropic server, which records what it was sent (see test_repl.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import tmux_driver
from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR
from test_repl import anthropic_env, enter, leave, start, user_texts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120 * TIME_FACTOR)]


def test_memory_lists_the_files_and_a_nested_one_arrives_after_a_read(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "CLAUDE.md").write_text("Run the tests with make check.\n")
    (repo / "AGENTS.md").write_text("Agents: keep commits small.\n@docs/style.md\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "style.md").write_text("Style: tabs.\n@../AGENTS.md\n")  # a cycle
    (repo / "sub" / "CLAUDE.md").write_text("Sub: this directory is generated.\n")
    (repo / "sub" / "gen.py").write_text("x = 1\n")
    # The pane's HOME is tmp_path/repo/user (see test_repl.repl_env): its ~/.claude is the user's.
    user = repo / "user" / ".claude"
    user.mkdir(parents=True)
    (user / "CLAUDE.md").write_text("User: be brief.\n")
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Read", {"file_path": str(repo / "sub" / "gen.py")})])
        server.add_turn(text="Read it.")
        pane = start(tmux, repo, "--model", "sonnet", **anthropic_env(server))
        enter(pane, "read sub/gen.py")
        pane.wait_for("Read it.")
        first, second = (r.body for r in server.requests[:2])
        system = first["system"][0]["text"]
        assert f"Contents of {repo / 'CLAUDE.md'} (project instructions" in system
        assert f"Contents of {repo / 'AGENTS.md'} (project instructions" in system
        assert system.count("Style: tabs.") == 1  # the cycle cut
        assert f"Contents of {user / 'CLAUDE.md'} (user's private global" in system
        assert "Sub: this directory" not in system
        assert second["system"] == first["system"]  # the cached prefix keeps its bytes
        told = user_texts(second)
        assert (
            f"<system-reminder>\nContents of {repo / 'sub' / 'CLAUDE.md'}:\n\n"
            "Sub: this directory is generated.\n</system-reminder>"
        ) in told
        enter(pane, "/memory")
        screen = pane.wait_for("Cut or left out:")
        assert "Instruction files (5;" in screen
        for name in ("CLAUDE.md  project", "AGENTS.md  project", "style.md  project"):
            assert name in screen
        assert "CLAUDE.md  user" in screen
        assert "sub/CLAUDE.md  project" in screen and "nested" in screen
        assert "imported by" in screen
        assert "AGENTS.md in " in screen and "already loaded (each file once)" in screen
        leave(pane)

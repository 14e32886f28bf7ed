"""What a plain ``taskloom -p`` has loaded when it sends its first request (issue 34).

The child is watched from outside taskloom: ``tests/startup_probe/sitecustomize.py``, loaded at
interpreter start, notes ``sys.modules`` at the moment the request's first bytes are written to
the socket, and when the store is opened. The model is the fake Anthropic server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env, run_python

pytestmark = pytest.mark.e2e

PROBE = Path(__file__).with_name("startup_probe")


def probed_run(tmp_path: Path, *args: str) -> dict[str, dict[str, Any]]:
    """Run ``taskloom -p hi --model sonnet ARGS``; the probe's events by name."""
    events = tmp_path / "probe.jsonl"
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    with FakeAnthropicServer() as server:
        server.add_turn(text="hello")
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
            TASKLOOM_HOME=str(tmp_path / "home"),
            TASKLOOM_STARTUP_PROBE=str(events),
            PYTHONPATH=os.pathsep.join(p for p in (str(PROBE), os.environ.get("PYTHONPATH")) if p),
        )
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "-p", "hi", "--model", "sonnet", *args],
            env=env, cwd=workdir, capture_output=True, text=True, timeout=60 * TIME_FACTOR,
        )  # fmt: skip
        assert len(server.requests) == 1
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello\n"
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    return {e["event"]: e for e in lines}


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return probed_run(tmp_path_factory.mktemp("plain"))


def test_the_probe_sees_the_first_request_and_the_store(
    plain_run: dict[str, dict[str, Any]],
) -> None:
    assert "taskloom" in plain_run["first_request"]["modules"]
    assert plain_run["interpreter"]["t"] < plain_run["first_request"]["t"]
    assert "store_opened" in plain_run


def test_no_command_line_library_is_loaded_before_the_first_request(
    plain_run: dict[str, dict[str, Any]],
) -> None:
    loaded = {m.split(".")[0] for m in plain_run["first_request"]["modules"]}
    assert loaded & {"click", "typer", "rich"} == set()


def test_pydantic_is_not_loaded_before_the_first_request(
    plain_run: dict[str, dict[str, Any]],
) -> None:
    loaded = {m.split(".")[0] for m in plain_run["first_request"]["modules"]}
    assert loaded & {"pydantic", "pydantic_core"} == set()


#: Modules a tool's call, an agent's spawn, resume or watch, an editor's files or terminal, or a
#: kill needs, not offering the tool or making the session's agent service and runtime: loaded
#: at first use (DESIGN §3.7, issue 34).
FIRST_USE_ONLY = frozenset(
    {
        "taskloom.agents._remote_spawn",
        "taskloom.agents.activity",
        "taskloom.agents.bookkeeping",
        "taskloom.agents.filter",
        "taskloom.agents.limits",
        "taskloom.agents.memory",
        "taskloom.agents.run",
        "taskloom.agents.structured_messages",
        "taskloom.agents.stuck",
        "taskloom.agents.watch",
        "taskloom.process.input_wait",
        "taskloom.process.kill",
        "taskloom.process.run",
        "taskloom.tasks.handoff",
        "taskloom.tasks.scratch",
        "taskloom.tasks.shell",
        "taskloom.tasks.watchdog",
        "taskloom.tools._exit_meaning",
        "taskloom.tools._fetch",
        "taskloom.tools._media",
        "taskloom.tools._notebook",
        "taskloom.tools._patch",
        "taskloom.tools._pdf",
        "taskloom.tools._walk",
        "taskloom.tools.backends",
        "taskloom.tools.grep_search",
        "taskloom.tools.prompt_shell",
        # The standard library's, imported by our modules only where a rare path needs them.
        "difflib",
        "glob",
        "secrets",
        "shlex",
        "uuid",  # and platform, which it imports (a session's ids come from tasks.ids)
        "platform",
    }
)


def test_what_only_a_call_or_a_spawn_needs_is_not_loaded_before_the_first_request(
    plain_run: dict[str, dict[str, Any]],
) -> None:
    loaded = set(plain_run["first_request"]["modules"])
    assert "taskloom.tools.grep" in loaded  # the tools are offered: they are loaded
    assert "taskloom.agents.spawner" in loaded  # and so is the agent service
    assert loaded & FIRST_USE_ONLY == set()


_FLOOR_THEN_REQUEST = """
import asyncio, sys
{imports}
before = set(sys.modules)

async def main():
    async with httpx.AsyncClient() as client:
        async with client.stream("POST", sys.argv[1] + "/v1/messages", json={{}}) as answer:
            await answer.aread()

asyncio.run(main())
print(sorted(set(sys.modules) - before))
"""


def test_the_dependency_floor_imports_what_a_first_request_loads() -> None:
    # bench/startup.py measures taskloom's first request against a floor that imports what no
    # first request over httpx avoids: after those imports, a streamed POST loads nothing new
    # (anyio, for one, imports its backend only when a connection is first made).
    saved = sys.path[:]  # the bench puts its own directory first (where acp.py would shadow acp)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        import startup  # type: ignore[import-not-found]
    finally:
        sys.path[:] = saved
    with FakeAnthropicServer() as server:
        server.add_turn(text="hello")
        script = _FLOOR_THEN_REQUEST.format(imports=startup.FLOORS["dependency_floor"])
        out = run_python(script, server.url, check=True)
    assert out.stdout.strip() == "[]"

"""MCP client support: Claude Code compatible config, and sessions with a real SDK server."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR, alive, wait_until
from taskloom.mcp.config import (
    McpConfigError,
    McpServerConfig,
    expand_vars,
    load_mcp_config,
    parse_servers,
    resolve_servers,
)
from taskloom.mcp.manager import McpManager
from taskloom.process.spawn import TASK_ENV

SERVER = Path(__file__).with_name("mcp_echo_server.py")
ECHO = McpServerConfig("echo", command=sys.executable, args=(str(SERVER),))


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def mcp_children() -> list[psutil.Process]:
    """Our descendants started as MCP servers (they carry an ``mcp-`` tag)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            tagged = proc.environ().get(TASK_ENV, "").startswith("mcp-")
            if tagged and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            pass
    return found


# --- configuration ----------------------------------------------------------------------------


def test_project_overrides_user(tmp_path: Path, home: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    user_file = write_json(
        home / "mcp.json",
        {
            "mcpServers": {
                "shared": {"command": "user-cmd"},
                "mine": {"type": "sse", "url": "http://u/sse"},
            }
        },
    )
    project_file = write_json(
        project / ".mcp.json",
        {
            "mcpServers": {
                "shared": {"command": "proj-cmd", "args": ["-x"], "env": {"K": "v"}},
                "web": {"type": "http", "url": "http://p/mcp", "headers": {"A": "b"}},
            }
        },
    )
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)

    servers = load_mcp_config(sub)

    assert set(servers) == {"shared", "mine", "web"}
    shared = servers["shared"]
    assert (shared.type, shared.command, shared.args) == ("stdio", "proj-cmd", ("-x",))
    assert dict(shared.env) == {"K": "v"} and shared.source == str(project_file)
    assert servers["mine"].type == "sse" and servers["mine"].source == str(user_file)
    web = servers["web"]
    assert (web.type, web.url, dict(web.headers)) == ("http", "http://p/mcp", {"A": "b"})


def test_missing_files_give_nothing(tmp_path: Path) -> None:
    assert load_mcp_config(tmp_path) == {}


def test_variables_expanded_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_T_CMD", "/bin/tool")
    monkeypatch.setenv("MCP_T_TOKEN", "s3cret")
    monkeypatch.setenv("MCP_T_EMPTY", "")
    monkeypatch.delenv("MCP_T_UNSET", raising=False)
    servers = parse_servers(
        {
            "local": {
                "command": "${MCP_T_CMD}",
                "args": ["--a=${MCP_T_UNSET:-dflt}", "${MCP_T_EMPTY:-notused}", "plain $HOME"],
                "env": {"TOKEN": "Bearer ${MCP_T_TOKEN}", "BLANK": "${MCP_T_UNSET:-}"},
            },
            "remote": {
                "type": "http",
                "url": "https://${MCP_T_UNSET:-example.com}/mcp",
                "headers": {"Authorization": "Bearer ${MCP_T_TOKEN}"},
            },
        },
        "inline",
    )
    local, remote = servers["local"], servers["remote"]
    assert local.command == "/bin/tool"
    # A set-but-empty variable is used as is; only an unset one takes the default.
    assert local.args == ("--a=dflt", "", "plain $HOME")
    assert dict(local.env) == {"TOKEN": "Bearer s3cret", "BLANK": ""}
    assert remote.url == "https://example.com/mcp"
    assert dict(remote.headers) == {"Authorization": "Bearer s3cret"}


def test_unset_variable_skips_that_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("MCP_T_NOPE", raising=False)
    (tmp_path / ".git").mkdir()
    path = write_json(
        tmp_path / ".mcp.json",
        {
            "mcpServers": {
                "bad": {"command": "x", "env": {"K": "${MCP_T_NOPE}"}},
                "ok": {"command": "y"},
            }
        },
    )
    with caplog.at_level(logging.WARNING, "taskloom.mcp"):
        servers = load_mcp_config(tmp_path)
    assert list(servers) == ["ok"]
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(path) in message and "'bad'" in message and "MCP_T_NOPE" in message

    with pytest.raises(McpConfigError, match=r"server 'x'.*MCP_T_NOPE"):
        expand_vars("${MCP_T_NOPE}", "f: server 'x'")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("npx server", "expected an object"),
        ({"args": ["a"]}, "needs a 'command'"),
        ({"command": "x", "args": "a b"}, "'args' must be a list of strings"),
        ({"command": "x", "env": {"N": 1}}, "'env' must be an object of strings"),
        ({"type": "websocket", "url": "ws://x"}, "unknown type 'websocket'"),
        ({"type": "http"}, "needs a 'url'"),
        ({"type": "sse", "url": "http://x", "headers": ["A: b"]}, "'headers' must be an object"),
    ],
)
def test_malformed_entry_skipped_with_warning(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture, entry: object, why: str
) -> None:
    path = write_json(
        home / "mcp.json", {"mcpServers": {"broken": entry, "fine": {"command": "c"}}}
    )
    with caplog.at_level(logging.WARNING, "taskloom.mcp"):
        servers = load_mcp_config(tmp_path)
    assert list(servers) == ["fine"]
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(path) in message and "'broken'" in message and why in message


@pytest.mark.parametrize("text", ["{not json", '["a"]', '{"mcpServers": []}'])
def test_malformed_file_skipped_with_warning(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    home.mkdir(parents=True)
    (home / "mcp.json").write_text(text)
    with caplog.at_level(logging.WARNING, "taskloom.mcp"):
        assert load_mcp_config(tmp_path) == {}
    assert str(home / "mcp.json") in caplog.text


def test_agent_server_list_resolves_names_and_inline(caplog: pytest.LogCaptureFixture) -> None:
    configured = {"echo": ECHO}
    with caplog.at_level(logging.WARNING, "taskloom.mcp"):
        servers = resolve_servers(
            ["echo", "ghost", {"inline": {"type": "sse", "url": "http://h/sse"}}],
            configured,
            "agents/reviewer.md",
        )
    assert list(servers) == ["echo", "inline"]
    assert servers["echo"] is ECHO and servers["inline"].source == "agents/reviewer.md"
    assert "ghost" in caplog.text and "agents/reviewer.md" in caplog.text


def test_config_module_does_not_import_the_sdk() -> None:
    code = (
        "import sys, taskloom.mcp, taskloom.mcp.config, taskloom.mcp.manager; "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# --- the manager with a real stdio server ----------------------------------------------------


@pytest.fixture
async def manager(tmp_path: Path) -> McpManager:  # type: ignore[misc]
    async with McpManager({"echo": ECHO}, cwd=tmp_path) as mgr:
        await mgr.start()
        yield mgr


async def test_lists_server_tools_with_their_schema(manager: McpManager) -> None:
    assert manager.status() == {"echo": "connected"}
    tools = {t.name: t for t in manager.tools()}
    assert {"mcp__echo__echo", "mcp__echo__add", "mcp__echo__crash"} <= set(tools)
    echo = tools["mcp__echo__echo"]
    assert echo.kind == "execute" and echo.description == "Return the text unchanged."
    spec = echo.spec()
    assert spec.input_schema["properties"]["text"]["type"] == "string"
    assert spec.input_schema["required"] == ["text"]
    # No local validation: whatever object the model sends goes to the server.
    params = echo.validate({"text": "x", "extra": [1]})
    assert params.arguments == {"text": "x", "extra": [1]}  # type: ignore[union-attr]
    assert echo.validate("text").is_error  # type: ignore[union-attr]


async def test_calls_return_text_and_errors(manager: McpManager) -> None:
    tools = {t.name: t for t in manager.tools()}
    echo = tools["mcp__echo__echo"]
    result = await echo.call(echo.validate({"text": "hello"}), None)  # type: ignore[arg-type]
    assert (result.content, result.is_error) == ("hello", False)
    assert (await manager.call("echo", "add", {"a": 2, "b": 40})).content == "42"
    failed = await manager.call("echo", "fail", {"message": "boom"})
    assert failed.is_error
    invalid = await manager.call("echo", "add", {"a": "x"})
    assert invalid.is_error
    assert manager.status() == {"echo": "connected"}


async def test_server_gets_our_environment_its_env_and_cwd(tmp_path: Path) -> None:
    cfg = McpServerConfig("echo", command=sys.executable, args=(str(SERVER),), env={"MCP_T": "1"})
    async with McpManager({"echo": cfg}, cwd=tmp_path) as mgr:
        assert (await mgr.call("echo", "getenv", {"name": "MCP_T"})).content == "1"
        run_mark = await mgr.call("echo", "getenv", {"name": "TASKLOOM_TEST_RUN"})
        assert run_mark.content == os.environ["TASKLOOM_TEST_RUN"]
        assert (await mgr.call("echo", "cwd", {})).content == str(tmp_path)


async def test_concurrent_calls(manager: McpManager) -> None:
    results = await asyncio.gather(
        *(manager.call("echo", "echo", {"text": str(i)}) for i in range(8))
    )
    assert [r.content for r in results] == [str(i) for i in range(8)]


async def test_crash_gives_tool_errors_naming_the_server(manager: McpManager) -> None:
    (pid,) = [p.pid for p in mcp_children()]
    crashed = await manager.call("echo", "crash", {})
    assert crashed.is_error and "'echo'" in crashed.content
    after = await manager.call("echo", "echo", {"text": "again"})
    assert after.is_error and "'echo'" in after.content
    # Seen by the call, or first by the end of the server's output (which says how it ended).
    status = manager.status()["echo"]
    assert status.startswith(("failed: disconnected", "failed: the server exited with code 3"))
    assert manager.tools() == []
    # The server exits by itself; its pipes close a moment before the kernel has it gone,
    # a moment a loaded machine stretches, and nothing tells the test when it is over.
    await wait_until(lambda: not alive(pid), timeout=10, what=f"crashed server {pid} to exit")


async def test_call_timeout_abandons_the_call_only(tmp_path: Path) -> None:
    async with McpManager({"echo": ECHO}, call_timeout=0.3) as mgr:
        started = time.monotonic()
        slow = await mgr.call("echo", "sleep", {"seconds": 30})
        assert slow.is_error and "did not answer" in slow.content
        assert time.monotonic() - started < 5 * TIME_FACTOR  # includes the server's start-up
        assert (await mgr.call("echo", "echo", {"text": "ok"})).content == "ok"


async def test_close_answers_calls_in_flight(tmp_path: Path) -> None:
    mgr = McpManager({"echo": ECHO})
    await mgr.start()
    in_flight = tmp_path / "in-flight"
    pending = asyncio.create_task(
        mgr.call("echo", "sleep", {"seconds": 30, "started": str(in_flight)})
    )
    await wait_until(in_flight.exists, what="the call to reach the server")
    started = time.monotonic()
    await mgr.aclose()
    result = await asyncio.wait_for(pending, 5)
    assert result.is_error and "'echo'" in result.content
    assert time.monotonic() - started < 5 * TIME_FACTOR
    assert mgr.status() == {"echo": "failed: closed"}
    assert mcp_children() == []


async def test_aclose_stops_every_server_process() -> None:
    servers = {
        name: McpServerConfig(name, command=sys.executable, args=(str(SERVER),))
        for name in ("one", "two")
    }
    mgr = McpManager(servers)
    await mgr.start()
    procs = mcp_children()
    assert len(procs) == 2 and mgr.status() == {"one": "connected", "two": "connected"}
    await mgr.aclose()
    assert mcp_children() == []
    for proc in procs:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    closed = await mgr.call("one", "echo", {"text": "x"})
    assert closed.is_error and "'one'" in closed.content


async def test_escaped_descendants_are_killed(caplog: pytest.LogCaptureFixture) -> None:
    # A "server" that starts a grandchild in a new session (out of its process group, so the
    # SDK's group kill misses it), then never answers.
    script = (
        "import subprocess, sys; "
        "subprocess.Popen(['sleep', '60'], start_new_session=True); sys.stdin.read()"
    )
    cfg = McpServerConfig("leaky", command=sys.executable, args=("-c", script))
    async with McpManager({"leaky": cfg}, connect_timeout=0.5) as mgr:
        await mgr.start()
        assert mgr.status()["leaky"].startswith("failed: no answer within 0.5 s")
        # The runner has already reaped what its server left behind.
        assert "outlived their session; killed" in caplog.text
        assert mcp_children() == []
        assert not [p for p in psutil.process_iter(["environ"]) if _tagged_sleep(p)]


def _tagged_sleep(proc: psutil.Process) -> bool:
    env = proc.info.get("environ") or {}
    return (
        env.get(TASK_ENV, "").startswith("mcp-")
        and env.get("TASKLOOM_TEST_RUN") == os.environ["TASKLOOM_TEST_RUN"]
        and proc.status() != psutil.STATUS_ZOMBIE
    )


async def test_starting_a_stdio_server_replaces_no_function_of_the_sdk(tmp_path: Path) -> None:
    from taskloom.mcp._sdk import load_sdk

    load_sdk()  # what a server's start imports, so that its functions can be compared after
    before = sdk_functions()
    async with McpManager({"echo": ECHO}, cwd=tmp_path) as mgr:
        assert (await mgr.call("echo", "echo", {"text": "hi"})).content == "hi"
    after = sdk_functions()
    assert [name for name, fn in before.items() if after.get(name) is not fn] == []


def sdk_functions() -> dict[str, object]:
    """Every function at the top of every loaded module of the ``mcp`` SDK, by full name."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        if name == "mcp" or name.startswith("mcp."):
            for attr, value in list(vars(module).items()):
                if inspect.isfunction(value):
                    found[f"{name}.{attr}"] = value
    return found


async def test_a_server_that_ignores_its_closed_stdin_is_killed_at_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Never answers, and goes on when its stdin closes (MCP's polite request to exit).
    stubborn = McpServerConfig(
        "stubborn", command=sys.executable, args=("-c", "import time; time.sleep(60)")
    )
    async with McpManager({"stubborn": stubborn}, connect_timeout=0.5) as mgr:
        await mgr.start()
        assert mgr.status()["stubborn"].startswith("failed: no answer within 0.5 s")
        assert mcp_children() == []
    # The transport killed it: nothing was left for the manager's sweep to find.
    assert "outlived their session" not in caplog.text


async def test_a_line_of_output_that_is_no_message_does_not_end_the_session(
    tmp_path: Path,
) -> None:
    # A server that prints a banner on stdout before it speaks the protocol.
    script = (
        "import os, sys; print('echo server 1.0 starting', flush=True); "
        f"os.execv(sys.executable, [sys.executable, {str(SERVER)!r}])"
    )
    cfg = McpServerConfig("chatty", command=sys.executable, args=("-c", script))
    async with McpManager({"chatty": cfg}, cwd=tmp_path) as mgr:
        await mgr.start()
        assert mgr.status() == {"chatty": "connected"}
        assert (await mgr.call("chatty", "add", {"a": 1, "b": 2})).content == "3"


async def test_failed_servers_are_recorded_not_raised(tmp_path: Path) -> None:
    servers = {
        "absent": McpServerConfig("absent", command=str(tmp_path / "no-such-server")),
        "dies": McpServerConfig(
            "dies", command=sys.executable, args=("-c", "import sys; sys.exit('cannot start')")
        ),
        "echo": ECHO,
    }
    async with McpManager(servers) as mgr:
        await mgr.start()
        status = mgr.status()
        assert status["echo"] == "connected"
        assert status["absent"].startswith("failed: ") and "no-such-server" in status["absent"]
        assert status["dies"].startswith("failed: ") and "cannot start" in status["dies"]
        result = await mgr.call("dies", "anything", {})
        assert result.is_error and "'dies'" in result.content
        unknown = await mgr.call("nope", "x", {})
        assert unknown.is_error and "'nope'" in unknown.content
        assert {t.name.split("__")[1] for t in mgr.tools()} == {"echo"}


async def test_wait_for_patterns(tmp_path: Path) -> None:
    # Reads its stdin to the end and never answers: a server that is slow to initialize.
    silent = McpServerConfig(
        "silent", command=sys.executable, args=("-c", "import sys; sys.stdin.read()")
    )
    async with McpManager({"echo": ECHO, "silent": silent}) as mgr:
        assert mgr.status() == {"echo": "pending", "silent": "pending"}
        assert await mgr.wait_for(["ech*"], timeout=30) == []  # started on demand
        assert mgr.status()["silent"] == "pending"

        started = time.monotonic()
        assert await mgr.wait_for(["missing*"], timeout=0.5) == ["missing*"]
        assert time.monotonic() - started < 0.5 + 0.1 * TIME_FACTOR

        started = time.monotonic()
        assert await mgr.wait_for(["sil*", "echo"], timeout=0.5) == ["sil*"]
        assert 0.4 <= time.monotonic() - started < 1.5 * TIME_FACTOR


# --- http and sse transports -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(params=["http", "sse"])
def web_server(request: pytest.FixtureRequest) -> Iterator[McpServerConfig]:
    port = free_port()
    flag = "--http" if request.param == "http" else "--sse"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), flag, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20 * TIME_FACTOR
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                time.sleep(0.05)
        path = "/mcp" if request.param == "http" else "/sse"
        yield McpServerConfig(
            "web",
            request.param,
            url=f"http://127.0.0.1:{port}{path}",
            headers={"X-Test": "1"},
        )
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_http_and_sse_servers(web_server: McpServerConfig) -> None:
    async with McpManager({"web": web_server}) as mgr:
        await mgr.start()
        assert mgr.status() == {"web": "connected"}, mgr.status()
        assert "mcp__web__add" in {t.name for t in mgr.tools()}
        assert (await mgr.call("web", "add", {"a": 1, "b": 2})).content == "3"

"""``bridge:`` addresses without a cluster, and ListPeers: refusals and listings (no Ray).

Two sessions exchanging ``bridge:`` messages over a real Ray cluster are in
test_bridge_sessions.py (end-to-end); here, what is decided before Ray would be reached: the
refusals ``uds:`` has too (structured, not the main thread), a missing cluster, and the peers
of this machine.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from helpers import harness, main_context
from taskloom import Harness
from taskloom.agents.peers import PeerListener, socket_path
from taskloom.agents.service import SpawnRequest
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox
from taskloom.testing import ScriptedModel
from taskloom.tools.base import ToolContext, ToolResult


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _harness(tmp_path: Path, **options: Any) -> Harness:
    return harness(tmp_path, ScriptedModel(["done"] * 4), **options)  # type: ignore[no-any-return]


async def _tool(h: Harness, name: str, ctx: ToolContext, **params: Any) -> ToolResult:
    tool = next(t for t in h.tools if t.name == name)
    return await tool.call(tool.validate(params), ctx)  # type: ignore[arg-type]


async def test_a_bridge_address_refuses_what_uds_refuses(tmp_path: Path) -> None:
    h = _harness(tmp_path)
    async with h:
        ctx = main_context(h)
        structured = await _tool(
            h, "SendMessage", ctx, to="bridge:s-1", message={"type": "shutdown_request"}
        )
        assert structured.content == (
            "<tool_use_error>SendMessage: structured messages cannot be sent to another "
            "process (bridge:s-1); send text</tool_use_error>"
        )
        empty = await _tool(h, "SendMessage", ctx, to="bridge:", message="hi")
        assert "has no session id; write bridge:<session id>" in empty.content
        launched = await h.agents.spawn(
            SpawnRequest(description="q", prompt="q", run_in_background=True), ctx
        )
        await h.runtime.wait(launched.agent_id, timeout=20)
        agent = ToolContext(runtime=h.runtime, owner=launched.agent_id, cwd=h.cwd)
        from_agent = await _tool(h, "SendMessage", agent, to="bridge:s-1", message="hi")
        assert from_agent.is_error
        assert "only the main session may message another session (bridge:s-1)" in (
            from_agent.content
        )


async def test_a_bridge_address_without_a_cluster_says_how_to_configure_one(
    tmp_path: Path,
) -> None:
    h = _harness(tmp_path)
    async with h:
        result = await _tool(h, "SendMessage", main_context(h), to="bridge:s-1", message="hi")
        assert result.is_error
        assert "SendMessage: to: bridge:s-1: bridge: messages travel over a Ray cluster" in (
            result.content
        )
        assert "RAY_ADDRESS or the setting remote.address" in result.content


async def test_list_peers_is_offered_to_a_listening_session_and_lists_live_sockets(
    tmp_path: Path,
) -> None:
    quiet = _harness(tmp_path)
    async with quiet:
        assert "ListPeers" not in [t.name for t in quiet.tools]
    stale = socket_path("dead-session")
    stale.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:  # a socket file whose listener is gone
        sock.bind(str(stale))
    store = Store(tmp_path / "peer.db")
    try:
        path = socket_path("peer-session")
        async with (
            _harness(tmp_path, listen=True) as h,
            PeerListener(Mailbox(store, "peer-session"), "peer-session", path),
        ):
            ctx = main_context(h)
            found = await _tool(h, "ListPeers", ctx)
            assert found.content == f"Found 1 peer(s):\nuds:{path} (peer-session)"
            assert found.data == {
                "peers": [{"address": f"uds:{path}", "name": "peer-session", "cwd": ""}]
            }
            both = await _tool(h, "ListPeers", ctx, include_self=True)
            assert f"uds:{h.listen_path} ({h.session_id})" in both.content
            assert "Found 2 peer(s)" in both.content and "dead-session" not in both.content
    finally:
        store.close()

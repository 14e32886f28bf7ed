"""A teammate of a read-only agent type (``verification``) cannot write, in process."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from helpers import TIME_FACTOR, harness, main_context, wait_until
from taskloom.messages import ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn


def _teammate(request: ModelRequest) -> str | None:
    member = request.metadata.get("teammate")
    return str(member).split("@")[0] if member else None


async def test_a_verification_teammate_cannot_write_through_any_tool(tmp_path: Path) -> None:
    keep = tmp_path / "keep.txt"
    keep.write_text("original\n")
    attempts = [
        ToolCall("Write", {"file_path": str(tmp_path / "new.txt"), "content": "x"}),
        ToolCall("Edit", {"file_path": str(keep), "old_string": "original", "new_string": "x"}),
        ToolCall("Bash", {"command": "python -c \"open('x', 'w').write('x')\""}),
        ToolCall("Bash", {"command": "cat > f.txt <<EOF\nwritten\nEOF"}),
        ToolCall("Bash", {"command": "cat keep.txt"}),  # reading is allowed
    ]
    offered: list[set[str]] = []
    results: list[ToolResultBlock] = []
    lock = threading.Lock()

    def respond(request: ModelRequest) -> Turn | str:
        if _teammate(request) != "checker":
            return "lead"
        with lock:
            offered.append({t.name for t in request.tools})
            last = request.messages[-1].content
            results.extend(b for b in last if isinstance(b, ToolResultBlock))
            step = sum(1 for m in request.messages if m.role == "assistant")
        return Turn(tool_calls=(attempts[step],)) if step < len(attempts) else "VERDICT: FAIL"

    async with harness(tmp_path, FunctionModel(respond), teams=True) as h:
        tool = next(t for t in h.tools if t.name == "Agent")
        params = {
            "description": "check",
            "prompt": "Try to change things.",
            "name": "checker",
            "subagent_type": "verification",
        }
        spawned = await tool.call(tool.validate(params), main_context(h))
        assert "agent_id: checker@" in spawned.content, spawned.content
        await wait_until(lambda: len(results) == len(attempts), timeout=30 * TIME_FACTOR)
        await h.end()
    assert keep.read_text() == "original\n"
    for made in ("new.txt", "x", "f.txt"):
        assert not (tmp_path / made).exists(), made
    assert not offered[0] & {"Write", "Edit", "NotebookEdit", "Agent"}, offered[0]
    assert "Bash" in offered[0]
    text: list[Any] = [str(r.content) for r in results]
    assert all(r.is_error for r in results[:4]), text
    # Not offered, and refused when called all the same.
    assert "No such tool available: Write" in text[0] and "No such tool available: Edit" in text[1]
    assert "inline python code" in text[2] and "read-only" in text[2], text[2]
    assert "f.txt" in text[3] and "read-only" in text[3], text[3]
    assert not results[4].is_error and "original" in text[4]

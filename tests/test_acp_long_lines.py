"""The ACP wire's long lines: a prompt with a screenshot and the editor's answer to a read of a
large file are far over asyncio's 64 KiB line limit; a line over taskloom's own cap is read
past and answered, and the agent keeps serving."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, clean_env, needs, write_turns
from read_files import png
from taskloom.acp.lines import BoundedLines, Overlong

TIMEOUT = 60 * TIME_FACTOR


def _reader(*chunks: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return reader


async def _all(lines: BoundedLines) -> list[bytes | Overlong]:
    out: list[bytes | Overlong] = []
    while (line := await lines.next()) is not None:
        out.append(line)
    return out


async def test_lines_of_any_length_under_the_cap_come_whole() -> None:
    long = b'{"a": "' + b"x" * 700_000 + b'"}\n'
    lines = BoundedLines(_reader(b"one\n", long[:1000], long[1000:], b"two\nlast"), limit=1 << 20)
    assert await _all(lines) == [b"one\n", long, b"two\n", b"last"]


async def test_a_line_over_the_cap_is_read_past_and_told_apart() -> None:
    request = b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"x":"' + b"y" * 5000
    answer = b'{"jsonrpc":"2.0","id":"c-3","result":{"content":"' + b"z" * 5000 + b'","id":9}}'
    lines = BoundedLines(_reader(request + b'"}}\n', answer + b"\n", b"next\n"), limit=1000)
    said = await _all(lines)
    assert said[0] == Overlong(len(request) + 4, 7, is_request=True)
    assert said[1] == Overlong(len(answer) + 1, "c-3", is_request=False)
    assert said[2] == b"next\n"


async def test_an_overlong_request_is_answered_and_an_answer_fails_its_call() -> None:
    from taskloom.acp.server import LineTransport

    request = b'{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":"' + b"p" * 200 + b'"}'
    answer = b'{"jsonrpc":"2.0","id":12,"result":"' + b"r" * 200 + b'"}'
    written: list[bytes] = []

    class Writer:
        def write(self, data: bytes) -> None:
            written.append(data)

        async def drain(self) -> None:
            return None

    reader = _reader(request + b"\n", answer + b"\n", b"{}\n")
    transport = LineTransport(reader, Writer(), limit=100)  # type: ignore[arg-type]
    failed = await transport.receive()  # the answer: our call 12 ends with an error
    assert failed is not None and failed["id"] == 12 and failed["error"]["code"] == -32600
    assert await transport.receive() is None
    replies = [json.loads(w) for w in written]
    assert replies[0]["id"] == 4 and replies[0]["error"]["code"] == -32600
    assert "over the limit" in replies[0]["error"]["data"]["details"]
    assert (
        replies[1]["id"] is None and "neither a request" in replies[1]["error"]["data"]["details"]
    )


@pytest.mark.e2e
@needs("acp")
async def test_a_large_image_and_a_large_editor_read_cross_the_real_wire(tmp_path: Path) -> None:
    import acp
    from acp.schema import ClientCapabilities, FileSystemCapabilities

    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i} " + "w" * 60 + "\n" for i in range(3000)))  # ~200 KB
    shown = base64.b64encode(png(16, 16) + b"\0" * 300_000).decode()  # ~400 KB of base64
    read = {"name": "Read", "input": {"file_path": str(big), "limit": 3}}
    model = write_turns(tmp_path / "turns.yaml", ["Seen.", {"tool_calls": [read]}, "Read."])
    reads: list[str] = []

    class Editor:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            return None

        async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> Any:
            reads.append(path)
            return acp.ReadTextFileResponse(content=Path(path).read_text())

        async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("nothing here writes")

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("nothing here asks")

    files = FileSystemCapabilities(read_text_file=True, write_text_file=True)
    caps = ClientCapabilities(fs=files)
    async with acp.spawn_agent_process(
        Editor(), sys.executable, "-m", "taskloom", "acp", "--model", model,
        "--dangerously-skip-permissions", cwd=tmp_path, env=clean_env(),
    ) as (conn, proc):  # fmt: skip
        await asyncio.wait_for(
            conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps),
            TIMEOUT,
        )
        session = await asyncio.wait_for(
            conn.new_session(cwd=str(tmp_path), mcp_servers=[]), TIMEOUT
        )
        blocks = [acp.text_block("look"), acp.image_block(shown, "image/png")]
        said = await asyncio.wait_for(
            conn.prompt(session_id=session.session_id, prompt=blocks), TIMEOUT
        )
        assert said.stop_reason == "end_turn"
        said = await asyncio.wait_for(
            conn.prompt(session_id=session.session_id, prompt=[acp.text_block("read")]),
            TIMEOUT,
        )
        assert said.stop_reason == "end_turn"
        assert proc.returncode is None  # still serving
    assert reads == [str(big)]

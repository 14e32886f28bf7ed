"""The request floor of bench/startup.py: the least a Python program does to send the request.

It opens a SQLite database, as a session's store, and streams one POST of a Messages request to
``$ANTHROPIC_BASE_URL/v1/messages`` with an ``httpx.AsyncClient``, as taskloom's provider does
(with httpx's command line left out, as taskloom leaves it out). It then prints ``hello`` (the
bench's result line). Unlike the import floors, its time includes what the first request
itself loads and builds: the transport's async backend and the client's TLS context.
"""

import sys
import types

cli = types.ModuleType("httpx._main")
cli.main = print  # type: ignore[attr-defined]
sys.modules["httpx._main"] = cli

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402

import httpx  # noqa: E402

BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
}


async def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        store = sqlite3.connect(os.path.join(scratch, "floor.db"))
        store.execute("CREATE TABLE t (x)")
        url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages"
        headers = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
        async with httpx.AsyncClient() as client:
            body = json.dumps(BODY).encode()
            async with client.stream("POST", url, headers=headers, content=body) as response:
                await response.aread()
        store.close()
    print("hello", flush=True)


asyncio.run(main())

"""A probe of a child's start-up, loaded at interpreter start when this directory is on
``PYTHONPATH`` and ``TASKLOOM_STARTUP_PROBE`` names a file (tests and ``bench/startup.py``).

It watches from outside taskloom, through the interpreter's own hooks: audit events for the
first import of a few packages (``import``) and for the store's opening (``sqlite3.connect``),
and the socket the first model request is written to. Each event is appended to the file as a
JSON line ``{"event", "t"}`` (``t``: ``time.monotonic()``, the clock every process shares);
the first request's line also lists every module loaded at the moment its first bytes were
sent (``modules``) and the peak RSS so far (``rss_mib``).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from typing import Any

#: Packages whose first import is an event: ``import:NAME``.
WATCHED = frozenset({"taskloom", "pydantic", "click", "typer", "rich", "sqlite3", "httpx"})
#: How a request to a model provider begins (Anthropic's Messages, Chat Completions).
REQUEST_STARTS = (b"POST /v1/messages", b"POST /v1/chat/completions")


def _install(path: str) -> None:
    seen: set[str] = set()

    def record(event: str, **extra: Any) -> None:
        if event in seen:
            return
        seen.add(event)
        line = json.dumps({"event": event, "t": time.monotonic(), **extra})
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "import" and args[0] in WATCHED:
            record(f"import:{args[0]}")
        elif event == "sqlite3.connect":
            record("store_opened")

    def sent(data: Any) -> None:
        if "first_request" not in seen and bytes(data[:32]).startswith(REQUEST_STARTS):
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            record("first_request", modules=sorted(sys.modules), rss_mib=rss)

    send, sendall = socket.socket.send, socket.socket.sendall

    def probe_send(self: socket.socket, data: Any, *flags: int) -> int:
        sent(data)
        return send(self, data, *flags)

    def probe_sendall(self: socket.socket, data: Any, *flags: int) -> None:
        sent(data)
        sendall(self, data, *flags)

    socket.socket.send = probe_send  # type: ignore[method-assign]
    socket.socket.sendall = probe_sendall  # type: ignore[method-assign]
    sys.addaudithook(audit)
    record("interpreter")


if os.environ.get("TASKLOOM_STARTUP_PROBE"):
    _install(os.environ["TASKLOOM_STARTUP_PROBE"])

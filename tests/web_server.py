"""A local HTTP server for the web tools' tests: real sockets on 127.0.0.1, never the network.

Routes map a path to a reply; every request is recorded with the ``Host`` it named, so a test
can tell ``localhost`` from ``127.0.0.1`` (two hosts for the permission rules, one server)::

    with WebServer({"/page": Page("<h1>Hi</h1>")}) as web:
        url = web.url("/page", host="localhost")
        ...
        assert web.hits("/page") == 1

``Page(..., stall=True)`` sends its headers and then nothing until the server closes (a fetch
that would run on: the tests cancel it); ``Page(status=302, location=...)`` redirects.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Page:
    """One route's reply."""

    body: str | bytes = ""
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    location: str | None = None
    stall: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    def data(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body


@dataclass(frozen=True)
class Hit:
    """One request as received."""

    path: str
    host: str
    headers: dict[str, str]


class WebServer:
    """Serves ``routes`` on 127.0.0.1 (any free port) from a thread; records every request."""

    def __init__(self, routes: dict[str, Page]) -> None:
        self.routes = dict(routes)
        self.requests: list[Hit] = []
        self.closing = threading.Event()
        self.stalled = threading.Event()  # a stalling reply has sent its headers
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append(Hit(self.path, headers.get("host", ""), headers))
                page = server.routes.get(path, Page("not found", "text/plain", 404))
                data = page.data()
                self.send_response(page.status)
                self.send_header("content-type", page.content_type)
                if page.location is not None:
                    self.send_header("location", page.location)
                for name, value in page.headers.items():
                    self.send_header(name, value)
                if not page.stall:
                    self.send_header("content-length", str(len(data)))
                self.end_headers()
                if page.stall:
                    self.wfile.write(b"<html><body>")
                    self.wfile.flush()
                    server.stalled.set()
                    server.closing.wait(60)  # bounded: the server's close ends it at once
                    return
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="WebServer")

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        """``http://HOST:PORT/PATH`` (``localhost`` and ``127.0.0.1`` reach the same server)."""
        return f"http://{host}:{self.port}{path}"

    def hits(self, path: str, host: str | None = None) -> int:
        """How many requests named ``path`` (and ``host``, given one)."""
        return sum(
            1
            for r in self.requests
            if r.path.split("?", 1)[0] == path and (host is None or r.host.split(":")[0] == host)
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)

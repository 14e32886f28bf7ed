"""Local fake Anthropic and OpenAI servers that speak the providers' real streaming wire formats.

Each server runs its own asyncio loop in a background thread, bound to ``127.0.0.1`` on a free
port, and works from sync tests, async tests and subprocesses (``taskloom -p`` pointed at it)
alike. Replies are scripted in a queue and served in order; every request is recorded::

    with FakeAnthropicServer() as server:  # or: async with
        server.add_turn(text="Let me look.", tool_calls=[("Bash", {"command": "ls"})])
        server.add_error(529, "overloaded_error", "Overloaded", retry_after=0.2)
        server.add_turn(text="Done.")
        server.add_turn(text="never finished", stall_at=3)  # or reset_at=3
        env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "test"}
        ...  # run the client
        assert server.requests[0].body["tools"][0]["name"] == "Bash"

``FakeOpenAIServer`` is the same for Chat Completions; its ``url`` ends in ``/v1`` (use it as
``OPENAI_BASE_URL``). When the queue is empty the ``responder`` (request JSON -> reply) is
asked, so tests can route by content; with neither, the server answers 400 (not retried by
clients, so a test that sends one request too many fails fast). A responder that raises
answers 400 too, and the exception is re-raised when the server is closed.

Only streamed requests (``"stream": true``) are served, which is all taskloom sends. Requests
the real API refuses, among those a client could get wrong, are refused with its 400 in its
words: tool results and calls that do not pair up, and images it would not take (a wrong media
type, bad base64, over 5 MB; on Chat Completions an ``image_url`` outside a ``user`` message).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Self

from fake_cache import PromptCache, breakpoint_problem
from fake_images import anthropic_image_problem, openai_image_problem


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call; its JSON input is streamed in ``chunks`` pieces.

    ``raw``, when set, is streamed instead of ``json.dumps(input)``: input cut short, or
    hostile (nested too deep to encode here).
    """

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    chunks: int = 3
    raw: str | None = None

    def json(self) -> str:
        """The input text as streamed."""
        return self.raw if self.raw is not None else json.dumps(self.input)


@dataclass(frozen=True)
class Turn:
    """One scripted model answer. Token counts left ``None`` are estimated from the sizes."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    stop_reason: str | None = None  # default: tool_use with tool calls, else end_turn
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation: dict[str, int] | None = None  # the writes by TTL, as the API splits them
    delay: float = 0.0  # seconds between streamed events (to test slow streams)
    # After this many stream events (0: before the response headers), send nothing more and
    # hold the connection until the client hangs up: a stalled stream.
    stall_at: int | None = None
    # After this many stream events, reset the connection (TCP RST).
    reset_at: int | None = None


@dataclass(frozen=True)
class ErrorReply:
    """An error answer: an HTTP status with the provider's JSON error body.

    With ``in_stream`` the status is 200 and the error comes as a stream event instead, after
    ``partial_text`` (if any) was streamed.
    """

    status: int
    error_type: str
    message: str
    retry_after: float | None = None
    in_stream: bool = False
    partial_text: str = ""


Reply = Turn | ErrorReply
ToolCallLike = ToolCall | tuple[str, dict[str, Any]] | dict[str, Any]
Responder = Callable[
    [dict[str, Any]], "Reply | str | dict[str, Any] | Awaitable[Reply | str | dict[str, Any]]"
]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: header names lower-cased, ``body`` parsed JSON (or ``None``)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received: float = field(default_factory=time.monotonic)  # when it arrived (monotonic)


def as_tool_call(call: ToolCallLike) -> ToolCall:
    """A ``ToolCall`` from ``("Bash", {...})``, ``{"name": ..., "input": ...}`` or itself."""
    if isinstance(call, ToolCall):
        return call
    if isinstance(call, tuple):
        return ToolCall(call[0], call[1])
    return ToolCall(**call)


def as_reply(raw: Reply | str | dict[str, Any]) -> Reply:
    """A reply from a ``Turn``/``ErrorReply``, a plain string (text) or a dict of Turn fields."""
    if isinstance(raw, Turn | ErrorReply):
        return raw
    if isinstance(raw, str):
        return Turn(text=raw)
    fields = dict(raw)
    fields["tool_calls"] = tuple(as_tool_call(c) for c in fields.get("tool_calls", ()))
    fields |= fields.pop("usage", None) or {}  # the scripted-file form: usage: {input_tokens..}
    return Turn(**fields)


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


class FakeServer:
    """Base of the fake servers: the HTTP/1.1 plumbing, the reply queue, the recording."""

    api_path = ""
    url_suffix = ""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.responder_errors: list[BaseException] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._port = 0

    # -- scripting -------------------------------------------------------------------------

    def add(self, *replies: Reply | str | dict[str, Any]) -> None:
        """Queue replies (``Turn``, ``ErrorReply``, text, or a dict of Turn fields)."""
        with self._lock:
            self._queue.extend(as_reply(r) for r in replies)

    def add_turn(
        self, text: str = "", tool_calls: Iterable[ToolCallLike] = (), **fields: Any
    ) -> None:
        """Queue a turn: ``add_turn(text="hi", tool_calls=[("Bash", {"command": "ls"})])``."""
        self.add(Turn(text=text, tool_calls=tuple(as_tool_call(c) for c in tool_calls), **fields))

    def add_error(
        self, status: int, error_type: str, message: str, *, retry_after: float | None = None
    ) -> None:
        """Queue an HTTP error answer, e.g. ``add_error(529, "overloaded_error", "Overloaded")``."""
        self.add(ErrorReply(status, error_type, message, retry_after))

    def add_stream_error(self, error_type: str, message: str, *, partial_text: str = "") -> None:
        """Queue a 200 stream that fails with an error event (after ``partial_text``, if any)."""
        self.add(ErrorReply(200, error_type, message, in_stream=True, partial_text=partial_text))

    @property
    def pending(self) -> int:
        """How many queued replies have not been served yet."""
        with self._lock:
            return len(self._queue)

    @property
    def url(self) -> str:
        """The base URL to point a client at."""
        if not self._port:
            raise RuntimeError("the fake server is not running")
        return f"http://127.0.0.1:{self._port}{self.url_suffix}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving (in a background thread); returns once the port is bound."""
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(ready)), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        if not ready.wait(10) or not self._port:
            raise RuntimeError("fake server did not start")

    def close(self) -> None:
        """Stop serving, drop open connections and join the thread; re-raise responder errors."""
        running = self._thread is not None
        self._shutdown()
        if running and self.responder_errors:  # once: closing again is a no-op
            raise self.responder_errors[0]

    def _shutdown(self) -> None:
        if self._thread is not None and self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already gone
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
            if self._thread.is_alive():
                raise RuntimeError("fake server thread did not stop")
        self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # A failing test keeps its own exception rather than a responder's.
        if exc_type is None:
            self.close()
        else:
            self._shutdown()

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        self.__exit__(exc_type)

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        connections: set[asyncio.Task[None]] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            connections.add(task)
            try:
                await self._connection(reader, writer)
            except asyncio.CancelledError:
                # Shutdown. Python 3.11's stream callback would log a cancelled task as an
                # error (a stalled answer is still holding its connection).
                pass
            finally:
                connections.discard(task)
                writer.close()

        try:
            server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
            self._port = server.sockets[0].getsockname()[1]
        finally:
            ready.set()  # start() reports a failure as "not running" instead of waiting
        await self._stop.wait()
        server.close()
        for task in list(connections):  # keep-alive connections would wait forever
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        await server.wait_closed()

    # -- HTTP ------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A client that hangs up, or sends garbage, just loses its connection.
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ValueError):
            while request_line := await reader.readline():
                method, target, _ = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                with self._lock:
                    self.requests.append(RecordedRequest(method, target, headers, body))
                if not await self._answer(reader, writer, target.split("?")[0], body):
                    return
                if headers.get("connection", "").lower() == "close":
                    return

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: Any
    ) -> bool:
        """Answer one request; False when the connection is finished with (stall, reset)."""
        if path != self.api_path:
            await self._json(writer, ErrorReply(404, "not_found_error", f"no route {path}"))
            return True
        if not isinstance(body, dict) or body.get("stream") is not True:
            bad = ErrorReply(400, "invalid_request_error", "fake server: send stream: true")
            await self._json(writer, bad)
            return True
        refusal = self._refusal(body)
        if refusal is not None:
            await self._json(writer, refusal)
            return True
        reply = await self._next_reply(body)
        if isinstance(reply, ErrorReply) and not reply.in_stream:
            await self._json(writer, reply)
            return True
        stall = reply.stall_at if isinstance(reply, Turn) else None
        reset = reply.reset_at if isinstance(reply, Turn) else None
        if stall == 0:
            return await self._hold(reader)
        sse_type = "text/event-stream; charset=utf-8"
        self._head(writer, 200, {"content-type": sse_type, "transfer-encoding": "chunked"})
        n = next(self._ids)
        if isinstance(reply, ErrorReply):
            events = self._error_stream(reply, body, n)
            delay = 0.0
        else:
            events, delay = self._stream(reply, body, n), reply.delay
        for i, event in enumerate(events):
            if i == stall:
                return await self._hold(reader)
            if i == reset:
                return self._reset(writer)
            if delay and i:
                await asyncio.sleep(delay)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    async def _hold(reader: asyncio.StreamReader) -> bool:
        # Until the client hangs up (its EOF), or the server closes (which cancels us).
        while await reader.read(65536):
            pass
        return False

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        # Linger 0: closing sends RST instead of FIN, as a dropped connection does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False

    def _refusal(self, body: dict[str, Any]) -> ErrorReply | None:
        """The error the real API answers this request with, if it refuses it (none here)."""
        return None

    async def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is None:
            return ErrorReply(400, "invalid_request_error", "fake server: no scripted reply left")
        try:
            raw = self.responder(body)
            if inspect.isawaitable(raw):  # it waits for something, serving the others meanwhile
                raw = await raw
            return as_reply(raw)
        except Exception as exc:  # surfaced by close(); the client gets a clear answer now
            self.responder_errors.append(exc)
            return ErrorReply(400, "invalid_request_error", f"fake server responder: {exc!r}")

    def _head(self, writer: asyncio.StreamWriter, status: int, headers: dict[str, str]) -> None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Overloaded" if status == 529 else "Error"
        lines = [f"HTTP/1.1 {status} {reason}", f"request-id: req_fake_{next(self._ids)}"]
        lines += [f"{k}: {v}" for k, v in {**headers, "cache-control": "no-cache"}.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def _json(self, writer: asyncio.StreamWriter, error: ErrorReply) -> None:
        data = json.dumps(self._error_body(error)).encode()
        headers = {"content-type": "application/json", "content-length": str(len(data))}
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        self._head(writer, error.status, headers)
        writer.write(data)
        await writer.drain()

    # -- provider specifics (overridden) ---------------------------------------------------

    def _error_body(self, error: ErrorReply) -> dict[str, Any]:
        raise NotImplementedError

    def _stream(self, turn: Turn, request: dict[str, Any], n: int) -> list[bytes]:
        raise NotImplementedError

    def _error_stream(self, error: ErrorReply, request: dict[str, Any], n: int) -> list[bytes]:
        raise NotImplementedError

    @staticmethod
    def _tokens(turn: Turn, request: dict[str, Any]) -> tuple[int, int]:
        inp = turn.input_tokens
        if inp is None:  # grows with the conversation, as real counts do
            inp = len(json.dumps(request.get("messages", []))) // 4 + 1
        out = turn.output_tokens
        if out is None:
            args = sum(len(c.json()) for c in turn.tool_calls)
            out = (len(turn.text) + len(turn.thinking) + args) // 4 + 1
        return inp, out


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _data(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


class FakeAnthropicServer(FakeServer):
    """A fake Anthropic Messages API (``POST /v1/messages``); ``url`` is the base URL.

    With ``caching`` it applies the API's prompt caching rules (:mod:`fake_cache`) to every
    request, reports the usage they give (a turn's own counts are ignored), and keeps each
    request's body with its usage in ``served``; ``min_cache_tokens`` and ``clock`` are the
    cache's (``PromptCache``).
    """

    api_path = "/v1/messages"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        caching: bool = False,
        min_cache_tokens: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(responder)
        self.cache = PromptCache(min_tokens=min_cache_tokens, clock=clock) if caching else None
        self.served: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def _refusal(self, body: dict[str, Any]) -> ErrorReply | None:
        """The API's 400 for tool results and calls that do not pair up, in its words.

        Every ``tool_result`` must answer a ``tool_use`` of the message just before it, and
        every ``tool_use`` must be answered in the message just after it. Cache marks the API
        refuses are refused too (:func:`fake_cache.breakpoint_problem`).
        """
        marks = breakpoint_problem(body)
        if marks is not None:
            return ErrorReply(400, "invalid_request_error", marks)
        messages = body.get("messages") or []
        for i, message in enumerate(messages):
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            if message.get("role") == "assistant":
                calls = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
                after = messages[i + 1].get("content") if i + 1 < len(messages) else None
                answered = {
                    b.get("tool_use_id")
                    for b in (after if isinstance(after, list) else [])
                    if b.get("type") == "tool_result"
                }
                missing = [c for c in calls if c not in answered]
                if missing and i + 1 < len(messages):
                    return ErrorReply(
                        400,
                        "invalid_request_error",
                        f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(missing)}. Each `tool_use` block must "
                        "have a corresponding `tool_result` block in the next message.",
                    )
                continue
            before = messages[i - 1] if i else {}
            before_content = before.get("content") if before.get("role") == "assistant" else None
            calls_before = {
                b.get("id")
                for b in (before_content if isinstance(before_content, list) else [])
                if b.get("type") == "tool_use"
            }
            for j, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in (
                    calls_before
                ):
                    return ErrorReply(
                        400,
                        "invalid_request_error",
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous "
                        "message.",
                    )
        problem = anthropic_image_problem(messages)
        return None if problem is None else ErrorReply(400, "invalid_request_error", problem)

    def _error_body(self, error: ErrorReply) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error.error_type, "message": error.message}}

    def _start(self, request: dict[str, Any], n: int, usage: dict[str, int]) -> bytes:
        message = {
            "id": f"msg_fake_{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return _sse("message_start", {"type": "message_start", "message": message})

    @staticmethod
    def _block(index: int, block: dict[str, Any], deltas: Sequence[dict[str, Any]]) -> list[bytes]:
        start = {"type": "content_block_start", "index": index, "content_block": block}
        events = [_sse("content_block_start", start)]
        for delta in deltas:
            payload = {"type": "content_block_delta", "index": index, "delta": delta}
            events.append(_sse("content_block_delta", payload))
        return events

    def _stream(self, turn: Turn, request: dict[str, Any], n: int) -> list[bytes]:
        inp, out = self._tokens(turn, request)
        usage: dict[str, Any] = {
            "input_tokens": inp,
            "cache_creation_input_tokens": turn.cache_creation_input_tokens,
            "cache_read_input_tokens": turn.cache_read_input_tokens,
            "output_tokens": 1,
        }
        if turn.cache_creation is not None:
            usage["cache_creation"] = turn.cache_creation
        if self.cache is not None:
            usage = {**self.cache.usage(request), "output_tokens": 1}
            with self._lock:  # with the output count message_delta reports
                self.served.append((request, {**usage, "output_tokens": out}))
        events = [self._start(request, n, usage), _sse("ping", {"type": "ping"})]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if turn.thinking:
            deltas = [{"type": "thinking_delta", "thinking": w} for w in _words(turn.thinking)]
            deltas.append({"type": "signature_delta", "signature": f"sig_fake_{n}"})
            blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
        if turn.text:
            deltas = [{"type": "text_delta", "text": w} for w in _words(turn.text)]
            blocks.append(({"type": "text", "text": ""}, deltas))
        for call in turn.tool_calls:
            block: dict[str, Any] = {"type": "tool_use"}
            block["id"] = call.id or f"toolu_fake_{next(self._ids):06d}"
            block |= {"name": call.name, "input": {}}
            # The real API opens with an empty partial_json; clients must cope with it.
            pieces = ["", *_pieces(call.json(), call.chunks)]
            blocks.append(
                (block, [{"type": "input_json_delta", "partial_json": p} for p in pieces])
            )
        for index, (block, deltas) in enumerate(blocks):
            events += self._block(index, block, deltas)
            events.append(
                _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            )
        stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        delta = {"stop_reason": stop, "stop_sequence": None}
        final = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": out}}
        return [
            *events,
            _sse("message_delta", final),
            _sse("message_stop", {"type": "message_stop"}),
        ]

    def _error_stream(self, error: ErrorReply, request: dict[str, Any], n: int) -> list[bytes]:
        events = [self._start(request, n, {"input_tokens": 1, "output_tokens": 1})]
        if error.partial_text:
            deltas = [{"type": "text_delta", "text": w} for w in _words(error.partial_text)]
            events += self._block(0, {"type": "text", "text": ""}, deltas)
        return [*events, _sse("error", self._error_body(error))]


class FakeOpenAIServer(FakeServer):
    """A fake OpenAI Chat Completions API; ``url`` ends in ``/v1`` like ``OPENAI_BASE_URL``.

    Thinking, when scripted, is streamed as ``reasoning_content`` (as vLLM and others do).
    With ``usage=False`` it sends no usage, whatever ``stream_options`` asks (as
    llama-cpp-python's server does).
    """

    api_path = "/v1/chat/completions"
    url_suffix = "/v1"

    def __init__(self, responder: Responder | None = None, *, usage: bool = True) -> None:
        super().__init__(responder)
        self.usage = usage

    def _refusal(self, body: dict[str, Any]) -> ErrorReply | None:
        """The API's 400s, in its words, for tool messages out of place and misplaced images.

        Tool messages must answer, right after it, every call of the assistant message that
        made them; an ``image_url`` part may only be in a ``user`` message, and must hold an
        image in one of the formats the API takes.
        """
        messages = body.get("messages") or []
        pending: list[str] = []
        for i, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                if message.get("tool_call_id") not in pending:
                    return _openai_error(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'."
                    )
                pending.remove(message["tool_call_id"])
            elif pending:
                return _openai_error(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not "
                    f"have response messages: {', '.join(pending)}"
                )
            if role == "assistant":
                pending = [c.get("id") for c in message.get("tool_calls") or []]
            problem = openai_image_problem(i, message)
            if problem is not None:
                return _openai_error(problem)
        return None

    def _includes_usage(self, request: dict[str, Any]) -> bool:
        return self.usage and bool((request.get("stream_options") or {}).get("include_usage"))

    def _error_body(self, error: ErrorReply) -> dict[str, Any]:
        return {
            "error": {
                "message": error.message,
                "type": error.error_type,
                "param": None,
                "code": None,
            }
        }

    def _chunk(
        self, request: dict[str, Any], n: int, delta: dict[str, Any], finish: str | None
    ) -> bytes:
        return _data(self._chunk_obj(request, n, delta, finish))

    def _chunk_obj(
        self, request: dict[str, Any], n: int, delta: dict[str, Any], finish: str | None
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        chunk = {
            "id": f"chatcmpl-fake{n:06d}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": request.get("model", ""),
            "system_fingerprint": "fp_fake",
            "choices": [choice],
        }
        if self._includes_usage(request):
            chunk["usage"] = None
        return chunk

    def _stream(self, turn: Turn, request: dict[str, Any], n: int) -> list[bytes]:
        events = [self._chunk(request, n, {"role": "assistant", "content": ""}, None)]
        for piece in _words(turn.thinking):
            events.append(self._chunk(request, n, {"reasoning_content": piece}, None))
        for piece in _words(turn.text):
            events.append(self._chunk(request, n, {"content": piece}, None))
        for i, call in enumerate(turn.tool_calls):
            head = {"index": i, "id": call.id or f"call_fake{next(self._ids):06d}"}
            head |= {"type": "function", "function": {"name": call.name, "arguments": ""}}
            events.append(self._chunk(request, n, {"tool_calls": [head]}, None))
            for piece in _pieces(call.json(), call.chunks):
                more = {"index": i, "function": {"arguments": piece}}
                events.append(self._chunk(request, n, {"tool_calls": [more]}, None))
        reasons = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}
        stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
        events.append(self._chunk(request, n, {}, reasons.get(stop, stop)))
        if self._includes_usage(request):
            inp, out = self._tokens(turn, request)
            usage: dict[str, Any] = {
                "prompt_tokens": inp + turn.cache_read_input_tokens,
                "completion_tokens": out,
                "total_tokens": inp + turn.cache_read_input_tokens + out,
                "prompt_tokens_details": {"cached_tokens": turn.cache_read_input_tokens},
            }
            # The usage chunk comes last and has no choices (stream_options.include_usage).
            last = self._chunk_obj(request, n, {}, None) | {"choices": [], "usage": usage}
            events.append(_data(last))
        return [*events, b"data: [DONE]\n\n"]

    def _error_stream(self, error: ErrorReply, request: dict[str, Any], n: int) -> list[bytes]:
        events = [self._chunk(request, n, {"role": "assistant", "content": ""}, None)]
        for piece in _words(error.partial_text):
            events.append(self._chunk(request, n, {"content": piece}, None))
        return [*events, _data(self._error_body(error))]


def _openai_error(message: str) -> ErrorReply:
    return ErrorReply(400, "invalid_request_error", message)

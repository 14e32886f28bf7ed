"""The HTTP transport both model providers share: retries, error mapping, SSE, tool input.

Retry policy: 408, 409, 429, 5xx (529 included) and ``overloaded_error`` — also when the
latter arrives as an SSE ``error`` event — connection failures and idle timeouts (no byte for
``streamIdleTimeout`` seconds, waiting for the headers included) are retried with jittered
exponential backoff (capped at 30 s), honouring ``retry-after`` up to 60 s; 400/401/403/404
are not, nor is a 5xx whose body says the request itself was refused as invalid (some
servers answer a validation error with a 500). Retries stop once three idle timeouts have
been lost: waiting after a try's last event until it failed, and backing off. Nothing is
retried once an event has reached the caller: a replay would duplicate what it has already
seen. A caller that asks for no deltas (``ModelRequest.deltas``) sees only the final message,
so its stream can be retried at any point before that.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import math
import os
import random
import ssl
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import field
from typing import Any, ClassVar, Self

import httpx
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse

from taskloom._dataclass import dataclass
from taskloom.errors import ModelError, UsageError
from taskloom.models._refusal import is_validation_error, summary
from taskloom.models.base import MessageComplete, StreamEvent

RETRYABLE_STATUSES = frozenset({408, 409, 429})
# Anthropic's transient error types, and OpenAI's (which only names them in stream events).
RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "server_error", "rate_limit_exceeded"}
)
# A server asking us to wait longer than this is treated as giving no hint: the caller is
# better served by our own backoff and, in the end, an error it can report.
MAX_RETRY_AFTER = 60.0
#: Seconds without a byte from the server (the wait for the response headers included)
#: before a try is abandoned; set by IDLE_TIMEOUT_ENV, else by the IDLE_TIMEOUT_SETTING.
DEFAULT_IDLE_TIMEOUT = 90.0
IDLE_TIMEOUT_ENV = "TASKLOOM_STREAM_IDLE_TIMEOUT"
IDLE_TIMEOUT_SETTING = "streamIdleTimeout"
#: Retries stop once this many idle timeouts were lost (waiting after a try's last event until
#: it failed, and backing off): a server that stalls every time costs a few timeouts, not one
#: per retry (270 s by default), while a long answer that breaks is still retried.
RETRY_WINDOW_TIMEOUTS = 3.0

_log = logging.getLogger("taskloom.models")

EventParser = Callable[[AsyncIterator[ServerSentEvent]], AsyncGenerator[StreamEvent, None]]


def env_default(value: str | None, var: str) -> str | None:
    """``value`` if given, else the environment variable ``var`` (empty counts as unset)."""
    if value is not None:
        return value
    return os.environ.get(var) or None


def is_retryable(status: int | None, error_type: str | None, headers: Mapping[str, str]) -> bool:
    """Whether an error answer is worth another try (``x-should-retry`` has the last word)."""
    hint = headers.get("x-should-retry")
    if hint in ("true", "false"):
        return hint == "true"
    if error_type in RETRYABLE_ERROR_TYPES:
        return True
    return status is not None and (status in RETRYABLE_STATUSES or status >= 500)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait in seconds (``retry-after-ms`` or ``retry-after``), if any."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            continue  # an HTTP date: rare from these APIs, and our backoff is a fine fallback
        if 0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
    return None


def error_details(payload: Any) -> tuple[str | None, str | None]:
    """``(error_type, message)`` from the error bodies providers actually send.

    Covers Anthropic (``{"type": "error", "error": {...}}``), OpenAI (``{"error": {...}}``),
    vLLM (``{"object": "error", "message": ...}``) and Ollama (``{"error": "text"}``).
    """
    if not isinstance(payload, dict):
        return None, None
    inner = payload.get("error", payload)
    if isinstance(inner, str):
        return None, inner
    if not isinstance(inner, dict):
        return None, None
    kind = inner.get("type") or inner.get("code")
    message = inner.get("message")
    return (str(kind) if kind else None), (str(message) if message is not None else None)


def _tagged(kind: str | None) -> str:
    return f" {kind}" if kind else ""


def response_error(provider: str, response: httpx.Response, url: str = "") -> ModelError:
    """The :class:`ModelError` for a non-2xx answer whose body has been read.

    A 5xx whose body says the request was refused as invalid (see
    :mod:`taskloom.models._refusal`) is not retryable: the same request would fail again.
    Its message names ``url`` and what the server refused.
    """
    try:
        kind, message = error_details(response.json())
    except ValueError:
        kind, message = None, None
    if message is None:
        message = response.text[:500] or response.reason_phrase
    status = response.status_code
    if status >= 500 and is_validation_error(message):
        return ModelError(
            f"{provider} API error {status}{_tagged(kind)}: the server at {url or 'its URL'} "
            f"refused the request as invalid (not retried): {summary(message)}",
            status=status,
            error_type=kind,
            retryable=False,
        )
    return ModelError(
        f"{provider} API error {response.status_code}{_tagged(kind)}: {message}",
        status=response.status_code,
        error_type=kind,
        retryable=is_retryable(response.status_code, kind, response.headers),
    )


def stream_error(provider: str, payload: Any) -> ModelError:
    """The :class:`ModelError` for an error reported inside a 200 event stream."""
    kind, message = error_details(payload)
    return ModelError(
        f"{provider} stream error{_tagged(kind)}: {message or payload!r}",
        error_type=kind,
        retryable=is_retryable(None, kind, {}),
    )


def load_event(provider: str, data: str) -> dict[str, Any]:
    """One SSE ``data`` field as a JSON object; garbage is a (retryable) protocol error."""
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ModelError(
            f"{provider}: malformed stream event {data[:200]!r}", retryable=True
        ) from exc
    if not isinstance(value, dict):
        raise ModelError(f"{provider}: unexpected stream event {data[:200]!r}", retryable=True)
    return value


def idle_timeout(settings: Mapping[str, Any] | None = None) -> float:
    """The stream idle timeout in seconds: the environment, else the setting, else 90.

    Raises:
        UsageError: The value is not a positive number of seconds; the message names where
            it came from.
    """
    raw: Any = os.environ.get(IDLE_TIMEOUT_ENV) or None
    source = f"the environment variable {IDLE_TIMEOUT_ENV}"
    if raw is None and settings is not None and settings.get(IDLE_TIMEOUT_SETTING) is not None:
        raw, source = settings[IDLE_TIMEOUT_SETTING], f"the setting {IDLE_TIMEOUT_SETTING}"
    if raw is None:
        return DEFAULT_IDLE_TIMEOUT
    try:
        if isinstance(raw, bool):
            raise ValueError(raw)
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{source} must be a positive number of seconds, got {raw!r}")
    return seconds


def describe(exc: BaseException) -> str:
    """``Type: details`` for a network failure, never with an empty detail.

    httpx's errors often have no text of their own: the OS error beneath (errno and text) or
    at least its type is named instead.
    """
    detail = str(exc).strip()
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for inner in chain:
        if isinstance(inner, OSError) and (inner.errno or inner.strerror):
            os_detail = f"[Errno {inner.errno}] {inner.strerror or os.strerror(inner.errno or 0)}"
            if os_detail not in detail:
                detail = f"{detail} ({os_detail})" if detail else os_detail
            break
    if not detail:
        below = [type(c).__name__ for c in chain[1:] if type(c).__name__ != type(exc).__name__]
        detail = f"connection lost ({below[0]})" if below else "connection lost, no reason given"
    return f"{type(exc).__name__}: {detail}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry.

    Attributes:
        max_retries: Retries after the first try (0 = try once).
        base_delay: First backoff in seconds; doubles each retry.
        max_delay: Cap of one backoff.
    """

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, attempt: int, hint: float | None) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): the server's hint, else backoff."""
        if hint is not None:
            return float(hint)
        # Jitter spreads out the retries of many agents hitting the same overload at once.
        return min(self.max_delay, self.base_delay * 2.0**attempt) * (1 - 0.25 * random.random())


#: Most seconds the exit waits for a TLS context still being built.
_TLS_JOIN_AT_EXIT_S = 5.0


class _TlsPrefetch:
    """httpx's default TLS context, built on a thread while the rest of start-up goes on.

    Loading the CA bundle takes tens of milliseconds, spent in OpenSSL with the GIL released:
    on another core it costs the first request nothing. The context is the one httpx would
    build itself (``httpx.create_ssl_context()``: certifi, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``).
    """

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._thread = threading.Thread(target=self._build, name="taskloom-tls", daemon=True)
        self._thread.start()
        # A daemon thread still inside OpenSSL when the interpreter finalises crashes it
        # (SIGSEGV): a run that fails right after start-up must wait the few ms it has left.
        atexit.register(self._thread.join, _TLS_JOIN_AT_EXIT_S)

    def _build(self) -> None:
        # On failure the client builds the context itself, and raises where it always did.
        with contextlib.suppress(Exception):
            self._context = httpx.create_ssl_context()

    def take(self) -> ssl.SSLContext | bool:
        """The context, or True (httpx's default: build one) if it could not be built."""
        self._thread.join()
        return self._context if self._context is not None else True


_tls_prefetch: _TlsPrefetch | None = None


def prefetch_tls_context() -> None:
    """Start building a TLS context for the next client created (one at a time)."""
    global _tls_prefetch
    if _tls_prefetch is None:
        _tls_prefetch = _TlsPrefetch()


def _take_tls_context() -> ssl.SSLContext | bool:
    """The prefetched context (each is used by one client only), else httpx's default."""
    global _tls_prefetch
    pending, _tls_prefetch = _tls_prefetch, None
    return pending.take() if pending is not None else True


@dataclass(slots=True)
class HttpTransport:
    """A lazily created, shared :class:`httpx.AsyncClient` plus the retry loop.

    The client is created on first use, with a TLS context built beforehand on a thread (see
    :class:`_TlsPrefetch`), and bound to that event loop; :meth:`aclose` closes it unless it
    was passed in. Every request carries the idle timeout, so a client passed in is bounded
    the same way.
    """

    provider: str
    policy: RetryPolicy
    idle_timeout: float
    client: httpx.AsyncClient | None = None
    owns_client: bool = field(default=False, init=False)

    def get_client(self) -> httpx.AsyncClient:
        """The client, created on first call."""
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=self.timeouts(), verify=_take_tls_context())
            self.owns_client = True
        return self.client

    def timeouts(self) -> httpx.Timeout:
        """Per-operation limits: a read (headers or body) waits at most the idle timeout."""
        # No pool limit: waiting for one of our own connections (many agents streaming at
        # once) is not the server stalling.
        connect = min(30.0, self.idle_timeout)
        return httpx.Timeout(self.idle_timeout, connect=connect, pool=None)

    async def aclose(self) -> None:
        """Close the client if we created it."""
        if self.owns_client and self.client is not None:
            await self.client.aclose()
            self.client = None
            self.owns_client = False

    async def stream(
        self,
        url: str,
        headers: dict[str, str],
        body: dict[str, Any],
        parse: EventParser,
        *,
        deltas: bool = True,
    ) -> AsyncGenerator[StreamEvent, None]:
        """POST ``body`` and yield ``parse``'s events, retrying per the policy.

        With ``deltas=False`` only the final :class:`MessageComplete` is yielded.

        Raises:
            ModelError: A non-retryable answer, a failure after events were yielded, or the
                last retryable failure once the retries or their time are spent
                (``retryable=True``).
        """
        loop = asyncio.get_running_loop()
        # The retry window bounds the time lost, not the time taken: the waits after a try's
        # last event until it failed, plus the backoffs. A server that stalls every time is
        # given up on after a few idle timeouts; a long answer that breaks after minutes is
        # still retried.
        started = loop.time()
        lost = 0.0
        attempt = 0
        while True:
            progress = loop.time()
            yielded = False
            hint: float | None = None
            try:
                # aconnect_sse adds its headers to the dict it gets: give it a copy.
                async with aconnect_sse(
                    self.get_client(),
                    "POST",
                    url,
                    headers=dict(headers),
                    json=body,
                    timeout=self.timeouts(),
                ) as source:
                    response = source.response
                    if not response.is_success:
                        await response.aread()
                        hint = retry_after(response.headers)
                        raise response_error(self.provider, response, url)
                    async with aclosing(self._guard(parse(source.aiter_sse()))) as events:
                        async for event in events:
                            progress = loop.time()
                            if not deltas and not isinstance(event, MessageComplete):
                                continue
                            yielded = True
                            yield event
                    return
            except ModelError as exc:
                if yielded or not exc.retryable:
                    raise
                error = exc
            except SSEError as exc:  # 200 but not an event stream: a misconfigured base URL
                raise ModelError(f"{self.provider}: {exc}", status=200) from exc
            except httpx.TransportError as exc:
                error = ModelError(self._failure(exc, url), retryable=True)
                if yielded:
                    raise error from exc
            delay = self.policy.delay(attempt, hint)
            now = loop.time()
            lost += now - progress
            window = RETRY_WINDOW_TIMEOUTS * self.idle_timeout
            if attempt >= self.policy.max_retries or lost + delay > window:
                tries = "1 attempt" if attempt == 0 else f"{attempt + 1} attempts"
                raise ModelError(
                    f"{error} (gave up after {tries} in {now - started:.1f} s)",
                    status=error.status,
                    error_type=error.error_type,
                    retryable=True,
                ) from error
            await asyncio.sleep(delay)
            lost += delay
            attempt += 1

    def _failure(self, exc: httpx.TransportError, url: str) -> str:
        if isinstance(exc, httpx.ReadTimeout):
            return (
                f"{self.provider}: no data from {url} for {self.idle_timeout:g} s (stream idle "
                f"timeout; set {IDLE_TIMEOUT_ENV} or the {IDLE_TIMEOUT_SETTING} setting)"
            )
        if isinstance(exc, httpx.TimeoutException):  # connecting, or sending the request
            limits = self.timeouts()
            limit = limits.connect if isinstance(exc, httpx.ConnectTimeout) else limits.write
            kind = type(exc).__name__
            return f"{self.provider}: request to {url} timed out after {limit:g} s ({kind})"
        return f"{self.provider}: request to {url} failed: {describe(exc)}"

    async def _guard(
        self, events: AsyncGenerator[StreamEvent, None]
    ) -> AsyncGenerator[StreamEvent, None]:
        """``events``, with any failure to make sense of the stream as a :class:`ModelError`.

        A provider can send events of any shape; a parser's TypeError on one must end the
        request as a (retryable) protocol error, not the run as an internal error. The answer a
        parser assembled passes the checks of data from outside here, as its blocks were built
        unchecked: a null or numeric id or name is such an error too.
        """
        async with aclosing(events):
            try:
                async for event in events:
                    if isinstance(event, MessageComplete):
                        event.message.checked()
                    yield event
            except (ModelError, SSEError, httpx.TransportError):
                raise
            except Exception as exc:
                raise ModelError(
                    f"{self.provider}: unreadable stream event: {type(exc).__name__}: {exc}",
                    retryable=True,
                ) from exc


class HttpModel:
    """What the HTTP providers share: the transport, and closing it.

    Attributes:
        provider: Name used in error messages.
    """

    provider: ClassVar[str] = "HTTP"
    name: str
    base_url: str

    def _init_transport(
        self,
        max_retries: int,
        retry_base_delay: float,
        idle: float | None,
        client: httpx.AsyncClient | None,
    ) -> None:
        idle = idle_timeout() if idle is None else idle
        if not (math.isfinite(idle) and idle > 0):
            raise ValueError(f"idle_timeout must be a positive number of seconds, got {idle!r}")
        if client is None:
            prefetch_tls_context()  # our client will need one: build it while start-up goes on
        self._transport = HttpTransport(
            self.provider, RetryPolicy(max_retries, retry_base_delay), idle, client
        )
        self._told_no_usage: set[str] = set()

    def _no_usage(self, model: str) -> None:
        """Say once per model that the server reported no usage for a response."""
        if model in self._told_no_usage:
            return
        self._told_no_usage.add(model)
        _log.warning(
            "%s server at %s reported no token usage for %s: its responses count as 0 tokens "
            "and 0 USD (results say usage_unknown)",
            self.provider,
            self.base_url,
            model,
        )

    @property
    def idle_timeout(self) -> float:
        """Seconds without a byte from the server before a try is abandoned."""
        return self._transport.idle_timeout

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

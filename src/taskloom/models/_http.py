"""The HTTP transport both model providers share: retries, error mapping, SSE, tool input.

Retry policy: 408, 409, 429, 5xx (529 included) and ``overloaded_error`` — also when the
latter arrives as an SSE ``error`` event — and connection failures are retried with jittered
exponential backoff (capped at 30 s), honouring ``retry-after`` up to 60 s; 400/401/403/404
are not. Nothing is retried once an event has reached the caller: a replay would duplicate
what it has already seen.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import httpx
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse
from pydantic_core import from_json

from taskloom.errors import ModelError
from taskloom.models.base import INVALID_INPUT_KEY, StreamEvent

RETRYABLE_STATUSES = frozenset({408, 409, 429})
# Anthropic's transient error types, and OpenAI's (which only names them in stream events).
RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "server_error", "rate_limit_exceeded"}
)
# A server asking us to wait longer than this is treated as giving no hint: the caller is
# better served by our own backoff and, in the end, an error it can report.
MAX_RETRY_AFTER = 60.0

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


def response_error(provider: str, response: httpx.Response) -> ModelError:
    """The :class:`ModelError` for a non-2xx answer whose body has been read."""
    try:
        kind, message = error_details(response.json())
    except ValueError:
        kind, message = None, None
    if message is None:
        message = response.text[:500] or response.reason_phrase
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


def parse_tool_input(raw: str, tool: str) -> dict[str, Any]:
    """A tool call's accumulated JSON input; empty means ``{}``.

    Input cut short (``max_tokens`` mid-call) is recovered as far as it goes, as the official
    SDKs do, so the tool's own validation can tell the model which field is missing.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        try:
            value = from_json(raw, allow_partial=True)
        except ValueError:
            value = None
    if not isinstance(value, dict):
        # Keep what the model sent: the tool reports it as a tool error the model can fix,
        # instead of the whole run failing on one bad call.
        return {INVALID_INPUT_KEY: raw[:2000]}
    return value


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


@dataclass(slots=True)
class HttpTransport:
    """A lazily created, shared :class:`httpx.AsyncClient` plus the retry loop.

    The client is created on first use (building its TLS context costs time at start-up) and
    bound to that event loop; :meth:`aclose` closes it unless it was passed in.
    """

    provider: str
    policy: RetryPolicy
    timeout: float
    client: httpx.AsyncClient | None = None
    owns_client: bool = field(default=False, init=False)

    def get_client(self) -> httpx.AsyncClient:
        """The client, created on first call."""
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=30.0))
            self.owns_client = True
        return self.client

    async def aclose(self) -> None:
        """Close the client if we created it."""
        if self.owns_client and self.client is not None:
            await self.client.aclose()
            self.client = None
            self.owns_client = False

    async def stream(
        self, url: str, headers: dict[str, str], body: dict[str, Any], parse: EventParser
    ) -> AsyncGenerator[StreamEvent, None]:
        """POST ``body`` and yield ``parse``'s events, retrying per the policy.

        Raises:
            ModelError: A non-retryable answer, a failure after events were yielded, or the
                last retryable failure once the retries are spent (``retryable=True``).
        """
        attempt = 0
        while True:
            yielded = False
            hint: float | None = None
            try:
                # aconnect_sse adds its headers to the dict it gets: give it a copy.
                async with aconnect_sse(
                    self.get_client(), "POST", url, headers=dict(headers), json=body
                ) as source:
                    response = source.response
                    if not response.is_success:
                        await response.aread()
                        hint = retry_after(response.headers)
                        raise response_error(self.provider, response)
                    async with aclosing(parse(source.aiter_sse())) as events:
                        async for event in events:
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
                error = ModelError(
                    f"{self.provider}: request failed: {type(exc).__name__}: {exc}", retryable=True
                )
                if yielded:
                    raise error from exc
            if attempt >= self.policy.max_retries:
                raise ModelError(
                    f"{error} (gave up after {attempt + 1} attempts)",
                    status=error.status,
                    error_type=error.error_type,
                    retryable=True,
                ) from error
            await asyncio.sleep(self.policy.delay(attempt, hint))
            attempt += 1


class HttpModel:
    """What the HTTP providers share: the transport, and closing it.

    Attributes:
        provider: Name used in error messages.
    """

    provider: ClassVar[str] = "HTTP"
    name: str

    def _init_transport(
        self,
        max_retries: int,
        retry_base_delay: float,
        timeout: float,
        client: httpx.AsyncClient | None,
    ) -> None:
        self._transport = HttpTransport(
            self.provider, RetryPolicy(max_retries, retry_base_delay), timeout, client
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it."""
        await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

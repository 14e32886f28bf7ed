"""OpenTelemetry traces of a session: its agents, model requests and tool calls, as spans.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, or
the setting ``telemetry.otlpEndpoint``, and ``OTEL_SDK_DISABLED`` is not ``true``; the spans go
over OTLP/HTTP (protobuf). OpenTelemetry is imported only then (``pip install
'taskloom[otel]'``); without it installed the session runs, with a warning.

Spans: ``taskloom.session`` (the root), ``taskloom.agent`` per agent (the child of the agent that
started it, or of the session), ``taskloom.model_request`` per request and ``taskloom.tool``
per tool call (children of the agent making them, or of the session for the main thread).
Events, with their fields, on the span they concern: ``agent_tool_selected`` and
``agent_tool_terminated`` (on the agent's), ``agent_memory_loaded`` (on the agent's),
``team_created`` and ``team_deleted`` (on the session's) — see :mod:`taskloom.signals`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskloom import signals
from taskloom.models.base import MessageComplete, ModelRequest

if TYPE_CHECKING:
    from taskloom.events import EngineObserver

log = logging.getLogger(__name__)

_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_endpoint(settings: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """Where spans go, as configured (None: telemetry is off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get(_ENDPOINT_VARS[0]):
        return env[_ENDPOINT_VARS[0]]  # the traces endpoint, as given
    base = env.get(_ENDPOINT_VARS[1])
    if not base:
        raw = settings.get("telemetry")
        base = raw.get("otlpEndpoint") if isinstance(raw, Mapping) else None
    if not isinstance(base, str) or not base:
        return None
    return base.rstrip("/") + "/v1/traces"


class Telemetry:
    """A session's tracer (see the module docstring); also an engine observer."""

    partial_messages = False

    def __init__(self, endpoint: str, session_id: str, *, model: str = "") -> None:
        """Start exporting to ``endpoint``, with the session's span open.

        Raises:
            ImportError: OpenTelemetry's SDK or OTLP exporter is not installed.
        """
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import set_span_in_context

        self._in = set_span_in_context
        self.session_id = session_id
        resource = Resource.create({"service.name": "taskloom", "session.id": session_id})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5))
        )
        self.tracer = self.provider.get_tracer("taskloom")
        self.session = self.tracer.start_span(
            "taskloom.session", attributes={"session.id": session_id, "model": model}
        )
        self._agents: dict[str, Any] = {}
        self._requests: dict[str | None, Any] = {}
        self._tools: dict[tuple[str | None, str], Any] = {}
        self._stop_listening = signals.listen(self._signal)

    def _parent(self, agent_id: str | None) -> Any:
        span = self._agents.get(agent_id) if agent_id is not None else None
        return self._in(span or self.session)

    # -- named events --------------------------------------------------------------------------

    def _signal(self, name: str, fields: dict[str, Any]) -> None:
        if fields.get("session_id") not in (None, self.session_id):
            return  # another harness of this process
        attrs = {k: v for k, v in fields.items() if isinstance(v, str | bool | int | float)}
        attrs.pop("session_id", None)
        raw_id = fields.get("agent_id")
        agent_id = raw_id if isinstance(raw_id, str) else None
        if name == "agent_tool_selected" and agent_id is not None:
            started = self.tracer.start_span(
                "taskloom.agent", context=self._parent(fields.get("parent_id")), attributes=attrs
            )
            self._agents[agent_id] = started
            started.add_event(name, attrs)
            return
        span = self._agents.get(agent_id) if agent_id is not None else None
        (span or self.session).add_event(name, attrs)
        if name == "agent_tool_terminated" and span is not None and agent_id is not None:
            for key in [k for k in self._tools if k[0] == agent_id]:
                self._tools.pop(key).end()
            if agent_id in self._requests:
                self._requests.pop(agent_id).end()
            span.set_attributes(attrs)
            span.end()
            self._agents.pop(agent_id, None)

    # -- EngineObserver ------------------------------------------------------------------------

    def model_event(self, agent_id: str | None, event: Any) -> None:
        """A request starts its span; its complete answer ends it, with its usage."""
        if isinstance(event, ModelRequest):
            previous = self._requests.pop(agent_id, None)
            if previous is not None:
                previous.end()  # the last one failed before its answer
            self._requests[agent_id] = self.tracer.start_span(
                "taskloom.model_request",
                context=self._parent(agent_id),
                attributes={"model": event.model, "messages": len(event.messages)},
            )
        elif isinstance(event, MessageComplete):
            span = self._requests.pop(agent_id, None)
            if span is not None:
                usage = event.message.usage
                if usage is not None:
                    span.set_attributes(
                        {
                            "input_tokens": usage.input_tokens,
                            "output_tokens": usage.output_tokens,
                            "cache_read_input_tokens": usage.cache_read_input_tokens,
                            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                        }
                    )
                span.end()

    def tool_event(self, agent_id: str | None, call: Any, result: Any) -> None:
        """A tool call starts (``result`` None) or ends: its span."""
        key = (agent_id, str(call.id))
        if result is None:
            self._tools[key] = self.tracer.start_span(
                "taskloom.tool", context=self._parent(agent_id), attributes={"tool": call.name}
            )
            return
        span = self._tools.pop(key, None)
        if span is not None:
            span.set_attribute("is_error", bool(getattr(result, "is_error", False)))
            span.end()

    def agent_message(self, agent_id: str, event: Any) -> None:
        """Not traced (its requests and tool calls are)."""

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Not traced."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: Any) -> None:
        """Not traced."""

    async def aclose(self) -> None:
        """End every open span (the session's last) and send what is left (5 s at most)."""
        self._stop_listening()
        for span in [*self._tools.values(), *self._requests.values(), *self._agents.values()]:
            span.end()
        self._tools.clear()
        self._requests.clear()
        self._agents.clear()
        self.session.end()
        provider = self.provider

        def send() -> None:
            provider.force_flush(timeout_millis=5000)
            provider.shutdown()

        # Off the event loop: a receiver that does not answer must not hold the session up.
        thread = threading.Thread(target=send, name="taskloom-telemetry", daemon=True)
        thread.start()
        await asyncio.to_thread(thread.join, 6.0)


class Tee:
    """Two observers as one: each call goes to both (the stream-json output and telemetry)."""

    def __init__(self, first: EngineObserver, second: Telemetry) -> None:
        """Tell ``first``, then ``second``."""
        self.first, self.second = first, second
        self.partial_messages = first.partial_messages

    def model_event(self, agent_id: str | None, event: Any) -> None:
        """Both."""
        self.first.model_event(agent_id, event)
        self.second.model_event(agent_id, event)

    def agent_message(self, agent_id: str, event: Any) -> None:
        """The first (telemetry does not trace messages)."""
        self.first.agent_message(agent_id, event)

    def tool_event(self, agent_id: str | None, call: Any, result: Any) -> None:
        """Both, if the first hears tool calls."""
        hook = getattr(self.first, "tool_event", None)
        if hook is not None:
            hook(agent_id, call, result)
        self.second.tool_event(agent_id, call, result)

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """The first."""
        self.first.hook_started(hook_id, event, name)

    def hook_finished(self, hook_id: str, event: str, name: str, result: Any) -> None:
        """The first."""
        self.first.hook_finished(hook_id, event, name, result)


def start_telemetry(
    settings: Mapping[str, Any], session_id: str, model: str = ""
) -> Telemetry | None:
    """The session's telemetry if it is configured (None: off, or OpenTelemetry missing)."""
    endpoint = otlp_endpoint(settings, os.environ)
    if endpoint is None:
        return None
    try:
        return Telemetry(endpoint, session_id, model=model)
    except ImportError as exc:
        log.warning(
            "telemetry: %s is set, but OpenTelemetry is not installed (%s): pip install"
            " 'taskloom[otel]'",
            endpoint,
            exc,
        )
        return None


__all__ = ["Tee", "Telemetry", "otlp_endpoint", "start_telemetry"]

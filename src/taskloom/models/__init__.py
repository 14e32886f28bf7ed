"""Language model providers behind one protocol (see :mod:`taskloom.models.base`)."""

import sys
import types

from taskloom.models.base import (
    MessageComplete,
    Model,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSpec,
    ToolUseStart,
)


def _stub_httpx_cli() -> None:
    """Keep ``import httpx`` from loading its command-line module (click + rich, ~20 ms).

    httpx imports ``httpx._main`` only to offer ``httpx.main``; we never use it. A stand-in
    module is registered first, unless httpx is already loaded or someone provided one.
    """
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stub = types.ModuleType("httpx._main")

    def main() -> None:  # pragma: no cover - never called
        raise RuntimeError("httpx's command line is not available inside taskloom")

    stub.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stub


_stub_httpx_cli()  # before any provider module imports httpx


__all__ = [
    "MessageComplete",
    "Model",
    "ModelRequest",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSpec",
    "ToolUseStart",
]

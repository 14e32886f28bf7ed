"""Public test helpers: scripted models and a fake clock.

Use them to drive taskloom deterministically: ``ScriptedModel`` plays scripted turns,
``FunctionModel`` computes each turn from the request, ``FakeClock`` moves time on demand.
The models live in :mod:`taskloom.models.scripted` (``--model scripted:FILE`` resolves to
them); this package gathers what tests need.
"""

from taskloom.models.scripted import FunctionModel, ScriptedModel, ToolCall, Turn, load_turns
from taskloom.testing.clock import FakeClock

__all__ = ["FakeClock", "FunctionModel", "ScriptedModel", "ToolCall", "Turn", "load_turns"]

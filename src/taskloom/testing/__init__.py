"""Public test helpers: scripted models and a fake clock.

Use them to drive taskloom deterministically: ``ScriptedModel`` plays scripted turns,
``FunctionModel`` computes each turn from the request, ``FakeClock`` moves time on demand.
"""

from taskloom.testing.clock import FakeClock
from taskloom.testing.scripted import FunctionModel, ScriptedModel, ToolCall, Turn, load_turns

__all__ = ["FakeClock", "FunctionModel", "ScriptedModel", "ToolCall", "Turn", "load_turns"]

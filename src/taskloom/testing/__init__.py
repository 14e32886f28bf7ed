"""Public test helpers: a fake clock now; scripted models come with the engine."""

from taskloom.testing.clock import FakeClock

__all__ = ["FakeClock"]

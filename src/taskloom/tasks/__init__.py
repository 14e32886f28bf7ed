"""The Task runtime: one abstraction for everything that runs concurrently.

Importing the package registers the built-in task kinds, so that every state, however it was
obtained (run here, or read back from the store), finds its kind.
"""

from taskloom.tasks import agent, dream, mcp_monitor, remote, shell_kind, teammate, workflow

__all__ = ["agent", "dream", "mcp_monitor", "remote", "shell_kind", "teammate", "workflow"]

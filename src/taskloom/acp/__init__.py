"""taskloom as an Agent Client Protocol agent (``taskloom acp``), for editors.

Imported only on the ``taskloom acp`` path: the ACP library is not loaded by any other
command. :func:`run_acp` serves one client on stdio until it closes its input;
:mod:`taskloom.acp.server` is the library's ``Agent``, :mod:`taskloom.acp.sessions` runs each
session's turns, :mod:`taskloom.acp.updates` turns what the engine tells into
``session/update`` notifications, :mod:`taskloom.acp.permission` asks the editor what would
ask, :mod:`taskloom.acp.content` converts prompts and replays transcripts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskloom.options import Options


async def run_acp(options: Options) -> int:
    """Serve ACP on stdin and stdout until the client closes its input; the exit code."""
    from taskloom.acp.server import serve

    return await serve(options)


__all__ = ["run_acp"]

"""What print mode is asked for: :class:`PrintOptions`, filled from the flags' table.

How to render (the output format, what stream-json also shows) and the :class:`Options` of the
session to run; :mod:`taskloom.cli.flags` says which flag fills which field.
"""

from __future__ import annotations

from dataclasses import field

from taskloom._dataclass import dataclass
from taskloom.options import Options


@dataclass
class PrintOptions:
    """The print-mode flags: how to render, and the options of the session to run.

    Attributes:
        prompt: The prompt (None: read stdin).
        session: What the session is built from.
        output_format: ``text``, ``json`` or ``stream-json``.
        verbose: Accepted for compatibility (stream-json is always complete).
        debug: Tracebacks and debug logs on stderr.
        debug_file: The debug log is also appended to this file (``--debug-file``).
        permission_prompt_tool: ``stdio``: calls that need approval are asked of the program
            driving a stream-json session (``can_use_tool``).
        max_budget_usd: Stop a run once the session has cost this much (``--max-budget-usd``).
        include_partial_messages: stream-json also streams the model's events as they come
            (``stream_event``).
        include_hook_events: stream-json also shows hook runs (``hook_started``,
            ``hook_response``).
        replay_user_messages: With stream-json input, user messages read are echoed.
        await_initialize: With stream-json input, the session starts once the program's
            ``initialize`` request came, with what it brings (its MCP servers too).
    """

    prompt: str | None
    session: Options = field(default_factory=Options)
    output_format: str = "text"
    verbose: bool = False
    debug: bool = False
    debug_file: str | None = None
    permission_prompt_tool: str | None = None
    max_budget_usd: float | None = None
    include_partial_messages: bool = False
    include_hook_events: bool = False
    replay_user_messages: bool = False
    await_initialize: bool = False

"""The interactive REPL (``taskloom`` in a terminal), a client of the Harness.

:mod:`taskloom.repl.app` runs it; :mod:`~taskloom.repl.panel` is the live task panel,
:mod:`~taskloom.repl.transcript` what is printed of the conversation,
:mod:`~taskloom.repl.asks` the permission prompts and :mod:`~taskloom.repl.commands` the
slash commands. prompt_toolkit is imported only on this path.
"""

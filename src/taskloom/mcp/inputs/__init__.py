"""Input models of the tools of :mod:`taskloom.mcp`: ``mcp/X.py``'s in ``inputs/X.py``.

Imported only when first used (see :mod:`taskloom.tools.inputs`).
"""

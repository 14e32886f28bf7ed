"""Input models of the tools of :mod:`taskloom.teams`: ``teams/X.py``'s in ``inputs/X.py``.

Imported only when first used (see :mod:`taskloom.tools.inputs`).
"""

"""The input models of the built-in tools, and their base :class:`ToolInput`.

A tool module names its input model by where it is defined (``Tool.input_model``) and never
imports it: these modules, and pydantic with them, are imported only when a call is first
validated or a schema first generated (see :mod:`taskloom.tools.base`). The models of
``tools/X.py`` are in ``tools/inputs/X.py``; a higher layer's tools keep theirs in that
layer's own ``inputs`` package.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ToolInput(BaseModel):
    """Base of every tool's input model: unknown fields are errors.

    Models are built when first used (``defer_build``), not when their module is imported:
    most tools a session offers are never called.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)


__all__ = ["ToolInput"]

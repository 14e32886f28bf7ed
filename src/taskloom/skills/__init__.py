"""Skills and custom slash commands: found under their roots, and run with their arguments.

See :mod:`taskloom.skills.loader` (where they are found, and which wins),
:mod:`taskloom.skills.catalog` (what one is) and :mod:`taskloom.skills.expand` (what the model
is given when one runs). The Skill tool is :mod:`taskloom.tools.skill`.
"""

from taskloom.skills.catalog import PromptCommand, SkillCatalog, SkillRoot
from taskloom.skills.loader import default_roots, load_catalog

__all__ = ["PromptCommand", "SkillCatalog", "SkillRoot", "default_roots", "load_catalog"]

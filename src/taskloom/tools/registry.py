"""The core tool set, in one of two profiles.

``claude`` (default) offers TaskOutput and TaskStop; ``jobs`` (setting ``toolProfile``) offers
the generic job tools ``job_output``, ``job_list`` and ``job_kill`` over the same runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskloom.errors import UserError
from taskloom.tools.base import Tool

if TYPE_CHECKING:
    from taskloom.models.base import Model
    from taskloom.skills import SkillCatalog

PROFILES = ("claude", "jobs")


def core_tools(profile: str = "claude") -> list[Tool[Any]]:
    """The built-in tools for ``profile``.

    Raises:
        UserError: Unknown profile.
    """
    if profile not in PROFILES:
        raise UserError(f"unknown toolProfile {profile!r}; use one of {', '.join(PROFILES)}")
    from taskloom.tools.bash import BashTool
    from taskloom.tools.edit import Edit
    from taskloom.tools.glob import Glob
    from taskloom.tools.grep import Grep
    from taskloom.tools.monitor import MonitorTool
    from taskloom.tools.notebook_edit import NotebookEdit
    from taskloom.tools.read import Read
    from taskloom.tools.todo import TodoWriteTool
    from taskloom.tools.write import Write

    tools: list[Tool[Any]] = [BashTool(), Glob(), Grep(), Read(), Edit(), Write(), MonitorTool()]
    tools.append(TodoWriteTool())
    tools.append(NotebookEdit())
    if profile == "jobs":
        from taskloom.tools.jobs import JobKillTool, JobListTool, JobOutputTool

        tools += [JobOutputTool(), JobListTool(), JobKillTool()]
    else:
        from taskloom.tools.tasks import TaskOutputTool, TaskStopTool

        tools += [TaskOutputTool(), TaskStopTool()]
    return tools


def web_tools(model: Model, settings: Mapping[str, Any]) -> list[Tool[Any]]:
    """WebFetch, and WebSearch when it can search (see :mod:`taskloom.tools.web_search`)."""
    from taskloom.tools.web_fetch import WebFetch
    from taskloom.tools.web_search import WebSearch, web_search_available

    return [WebFetch(), *([WebSearch()] if web_search_available(model, settings) else [])]


def interactive_tools() -> list[Tool[Any]]:
    """The main thread's tools that ask the user: EnterPlanMode, ExitPlanMode, AskUserQuestion."""
    from taskloom.tools.ask_user import AskUserQuestionTool
    from taskloom.tools.plan_mode import EnterPlanModeTool, ExitPlanModeTool

    return [EnterPlanModeTool(), ExitPlanModeTool(), AskUserQuestionTool()]


def skill_tools(catalog: SkillCatalog | None) -> list[Tool[Any]]:
    """The Skill tool, when there is a skill (or described command) the model may invoke."""
    if catalog is None or not catalog.for_model():
        return []
    from taskloom.tools.skill import SkillTool

    return [SkillTool(catalog)]

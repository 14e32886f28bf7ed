"""Permission modes and allow / ask / deny rules, compatible with Claude Code's settings.

Typical use::

    policy = PermissionPolicy.from_settings(
        load_settings(cwd), mode=None, allowed_tools=[], disallowed_tools=[],
        project_root=find_project_root(cwd), skip_permissions=False,
    )
    decision = policy.decide(PermissionRequest("Bash", "execute", "npm test", cwd, {}))
    if not interactive:
        decision = headless(decision)
"""

from taskloom.permissions.matchers import command_matches, path_matches, split_command
from taskloom.permissions.policy import PermissionMode, PermissionPolicy, headless, parse_mode
from taskloom.permissions.prompter import PermissionPrompter, PromptAnswer, PromptError
from taskloom.permissions.rules import (
    Behavior,
    Decision,
    PermissionRequest,
    Rule,
    parse_rule,
    split_rule_list,
)

__all__ = [
    "Behavior",
    "Decision",
    "PermissionMode",
    "PermissionPolicy",
    "PermissionPrompter",
    "PermissionRequest",
    "PromptAnswer",
    "PromptError",
    "Rule",
    "command_matches",
    "headless",
    "parse_mode",
    "parse_rule",
    "path_matches",
    "split_command",
    "split_rule_list",
]

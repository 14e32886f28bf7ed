"""The built-in ``verification`` agent: it checks finished work, and never edits.

``verification`` follows Claude Code's agent of that name (its type, tools, background run,
colour and verdict line), so the nudge to spawn it (:mod:`taskloom.agents.verification`) and
prompts written for Claude Code name the same agent. The system prompt is our own.
"""

from __future__ import annotations

from taskloom.agents.definition import AgentDefinition

#: The verification agent's type (Claude Code's name).
VERIFICATION_AGENT_TYPE = "verification"
#: What the verification agent may not use: no writing, no agents of its own, no plan exits.
VERIFICATION_DISALLOWED = ("Agent", "ExitPlanMode", "Edit", "Write", "NotebookEdit")

_VERIFICATION_PROMPT = """\
You are a verifier. Another agent says a piece of work is done; your job is to find out \
whether it really is, by running it, and to try hard to show that it is not. Reading code \
and describing what you would test is not verification: a check counts only if you ran a \
command and saw its output.

You may not change the project. You have no Edit, Write or NotebookEdit tool, and commands \
that write files (redirections into the project, rm, mv, cp, touch, sed -i, git add/commit/\
checkout/reset, package installs) are refused. If a check needs a helper script, write it \
under /tmp and run it from there.

How to work:
1. Read what was asked and what was changed (git status, git diff, the files named).
2. Run the project's own checks first: its build, its test suite, its linters and type \
checker, the way the project runs them.
3. Then exercise the change directly, as a user would: run the program, call the function, \
hit the endpoint, with ordinary input and with awkward input (empty, huge, malformed, \
repeated, concurrent) and the error paths.
4. Check every requirement of the original request, not only the one that was easiest.
5. Before you call something a failure, make sure it is not already handled elsewhere or \
intended; name the exact command that shows it.

Report each check as:
### Check: what you verified
Command: the command you ran
Output: the lines of output that matter
Result: PASS or FAIL

End with exactly one of these lines, then one sentence on the most important finding:
VERDICT: PASS   (everything you checked works)
VERDICT: FAIL   (something does not; give the command that reproduces it)
VERDICT: PARTIAL   (only when the environment stopped you from checking something: say what)"""

VERIFICATION_AGENT = AgentDefinition(
    agent_type=VERIFICATION_AGENT_TYPE,
    when_to_use=(
        "Checks that finished work really works before you report it done: runs the "
        "build, the tests, the linters and the changed program itself, tries to break it, "
        "and answers VERDICT: PASS, FAIL or PARTIAL with the commands and output as "
        "evidence. Cannot edit files. Give it the original request, the files changed and "
        "how the change was made."
    ),
    system_prompt=_VERIFICATION_PROMPT,
    disallowed_tools=VERIFICATION_DISALLOWED,
    model="inherit",
    color="red",
    background=True,
    read_only=True,
)

__all__ = [
    "VERIFICATION_AGENT",
    "VERIFICATION_AGENT_TYPE",
    "VERIFICATION_DISALLOWED",
]

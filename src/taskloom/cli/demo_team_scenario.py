"""The scripted scenario behind ``taskloom demo --team``: the model's part, by function.

A lead and two teammates split a task list on a small project with two independent bugs:

1. The lead creates one task per bug (TaskCreate), spawns alice and bob in one message
   (Agent with a name) and gives each a task (TaskUpdate with an owner).
2. Each teammate, told by its ``task_assignment`` message, claims its task (TaskUpdate
   in_progress), reads and fixes its file (Read, Edit), runs the file's test (Bash), completes
   the task and reports to ``team-lead`` with SendMessage and a summary.
3. With both reports in, the lead reads the task list (TaskList), asks both to shut down
   (``shutdown_request``); each approves with the request id it was sent; the lead sums up.

Every decision is read from the conversation as it stands — task ids from the TaskCreate
results, the assignment and the request id from the messages received, the working directory
from the system prompt — so the order in which the members' turns interleave does not matter.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.teams.protocol import LEAD_NAME, structured

PROMPT = (
    "Two bugs: `clamp` in mathutil.py ignores its upper bound, and `slugify` in textutil.py "
    "makes empty words of repeated spaces. Split the work in a team of two, one bug each, "
    "and have both fixed and tested."
)
TEAMMATES = ("alice", "bob")
FINAL_PREFIX = "Done."


@dataclass(frozen=True)
class Fix:
    """One bug of the project, as its task and its teammate know it."""

    subject: str
    description: str
    file: str
    test: str
    buggy: str
    fixed: str


FIXES = (
    Fix(
        subject="Fix clamp in mathutil.py",
        description="clamp(value, low, high) ignores `high`: clamp(5, 0, 10) gives 0. "
        "Fix it; `python3 test_mathutil.py` must pass.",
        file="mathutil.py",
        test="python3 test_mathutil.py",
        buggy="    return max(low, min(value, low))\n",
        fixed="    return max(low, min(value, high))\n",
    ),
    Fix(
        subject="Fix slugify in textutil.py",
        description="slugify splits on single spaces: 'a  b' gives 'a--b'. Fix it; "
        "`python3 test_textutil.py` must pass.",
        file="textutil.py",
        test="python3 test_textutil.py",
        buggy='    return "-".join(title.lower().split(" "))\n',
        fixed='    return "-".join(title.lower().split())\n',
    ),
)
_BY_SUBJECT = {fix.subject: fix for fix in FIXES}


def _test_file(module: str, function: str, checks: list[tuple[str, str]]) -> str:
    rows = "".join(f"    ({name!r}, lambda: {expr}),\n" for name, expr in checks)
    return (
        f"import sys\n\nfrom {module} import {function}\n\nchecks = [\n{rows}]\n"
        "failed = 0\nfor name, check in checks:\n    ok = check()\n    failed += not ok\n"
        '    print(f\'{name}: {"ok" if ok else "FAIL"}\')\n'
        "print(f'{len(checks) - failed} passed, {failed} failed')\n"
        "sys.exit(1 if failed else 0)\n"
    )


PROJECT_FILES = {
    "README.md": "# helpers\n\nTwo small modules; test each: `python3 test_<module>.py`.\n",
    "mathutil.py": (
        '"""Number helpers."""\n\n\ndef clamp(value, low, high):\n'
        '    """``value`` limited to the range [low, high]."""\n' + FIXES[0].buggy
    ),
    "test_mathutil.py": _test_file(
        "mathutil",
        "clamp",
        [
            ("inside", "clamp(5, 0, 10) == 5"),
            ("below", "clamp(-3, 0, 10) == 0"),
            ("above", "clamp(42, 0, 10) == 10"),
        ],
    ),
    "textutil.py": (
        '"""Text helpers."""\n\n\ndef slugify(title):\n'
        '    """``title`` as a URL slug: lower case, its words joined by hyphens."""\n'
        + FIXES[1].buggy
    ),
    "test_textutil.py": _test_file(
        "textutil",
        "slugify",
        [
            ("plain", "slugify('Hello World') == 'hello-world'"),
            ("spaces", "slugify('  Agent   Teams ') == 'agent-teams'"),
            ("one word", "slugify('Loom') == 'loom'"),
        ],
    ),
}

SPAWN_PROMPT = (
    "You are on a team fixing two small bugs in this repository. The lead assigns you one "
    "task of the shared task list: claim it, fix it, run its test, mark it completed and "
    "report to team-lead."
)

_LETTER = re.compile(r"<teammate-message ([^>]*)>\n(.*?)\n</teammate-message>", re.S)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_CREATED = re.compile(r"Task #(\d+) created successfully: (.+)")
_CWD = re.compile(r"^Working directory: (.+)$", re.M)


@dataclass(frozen=True)
class Letter:
    """A ``<teammate-message>`` as its recipient reads it."""

    sender: str
    summary: str | None
    body: str
    data: dict[str, Any] | None


def _unescape(text: str) -> str:
    return text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace(
        "&amp;", "&"
    )  # fmt: skip


def letters_in(text: str) -> list[Letter]:
    """The teammate messages ``text`` holds, in order."""
    found = []
    for attributes, body in _LETTER.findall(text):
        attrs = {k: _unescape(v) for k, v in _ATTRIBUTE.findall(attributes)}
        found.append(
            Letter(attrs.get("teammate_id", "?"), attrs.get("summary"), body, structured(body))
        )
    return found


def _letters(request: ModelRequest) -> list[Letter]:
    """Every teammate message the conversation received."""
    return [
        letter
        for m in request.messages
        if m.role == "user"
        for b in m.content
        if isinstance(b, TextBlock)
        for letter in letters_in(b.text)
    ]


def _results(message: Message) -> list[str]:
    return [b.text() for b in message.content if isinstance(b, ToolResultBlock)]


def _all_results(request: ModelRequest) -> list[str]:
    return [t for m in request.messages if m.role == "user" for t in _results(m)]


def _calls(request: ModelRequest) -> list[ToolCall]:
    """The tool calls made so far in the conversation, in order."""
    return [
        ToolCall(c.name, c.input) for m in request.messages if m.role == "assistant"
        for c in m.tool_uses()
    ]  # fmt: skip


def _kinds(letters: list[Letter], kind: str) -> list[Letter]:
    return [letter for letter in letters if letter.data and letter.data.get("type") == kind]


# -- the lead ---------------------------------------------------------------------------------


def _lead(request: ModelRequest) -> Turn:
    names = [c.name for c in _calls(request)]
    letters = _letters(request)
    if not names:
        creates = tuple(
            ToolCall("TaskCreate", {"subject": f.subject, "description": f.description})
            for f in FIXES
        )
        return Turn(text="Two independent fixes: one task each.", tool_calls=creates)
    if "Agent" not in names:
        spawn = tuple(
            ToolCall("Agent", {"description": f"teammate {n}", "name": n, "prompt": SPAWN_PROMPT})
            for n in TEAMMATES
        )
        return Turn(text="Spawning alice and bob, in one message.", tool_calls=spawn)
    if "TaskUpdate" not in names:
        ids = {m[2]: m[1] for r in _all_results(request) if (m := _CREATED.match(r))}
        assign = tuple(
            ToolCall("TaskUpdate", {"taskId": ids[f.subject], "owner": n})
            for f, n in zip(FIXES, TEAMMATES, strict=True)
        )
        return Turn(text="One task each.", tool_calls=assign)
    reports = {x.sender: x for x in letters if x.data is None and x.sender in TEAMMATES}
    approved = {x.sender for x in _kinds(letters, "shutdown_approved")}
    if approved >= set(TEAMMATES):
        done = "; ".join(f"{n}: {reports[n].summary}" for n in TEAMMATES if n in reports)
        return Turn(
            text=f"{FINAL_PREFIX} Both bugs are fixed and tested, each by its own teammate "
            f"({done}); both teammates have shut down."
        )
    if "TaskList" not in names and set(reports) >= set(TEAMMATES):
        return Turn(text="Both report in. The task list:", tool_calls=(ToolCall("TaskList"),))
    if "TaskList" in names and "SendMessage" not in names:
        listed = _all_results(request)[-1]
        if listed.count("[completed]") < len(FIXES):
            return Turn(text=f"Not every task is completed:\n{listed}")
        stop = tuple(
            ToolCall("SendMessage", {"to": n, "message": {"type": "shutdown_request",
                                                          "reason": "Your task is done."}})
            for n in TEAMMATES
        )  # fmt: skip
        return Turn(
            text="Both completed, with their owners. Shutting the team down.", tool_calls=stop
        )
    waiting = [n for n in TEAMMATES if n not in (approved if "SendMessage" in names else reports)]
    return Turn(text=f"Waiting for {' and '.join(waiting)}.")


# -- a teammate -------------------------------------------------------------------------------


def _teammate(request: ModelRequest) -> Turn:
    letters, calls = _letters(request), _calls(request)
    names = [c.name for c in calls]
    answered = any(
        c.name == "SendMessage" and isinstance(c.input.get("message"), dict) for c in calls
    )
    shutdown = _kinds(letters, "shutdown_request")
    if shutdown and not answered:
        answer = {
            "type": "shutdown_response",
            "request_id": shutdown[-1].data["requestId"] if shutdown[-1].data else "",
            "approve": True,
        }
        return Turn(
            text="My task is done: approving.",
            tool_calls=(ToolCall("SendMessage", {"to": LEAD_NAME, "message": answer}),),
        )
    if answered:
        return Turn(text="Shutting down.")
    assignments = _kinds(letters, "task_assignment")
    if not assignments:
        return Turn(text="Ready: waiting for a task.")
    task = assignments[-1].data or {}
    fix, task_id = _BY_SUBJECT[str(task.get("subject"))], str(task.get("taskId"))
    found = _CWD.search(request.system)
    path = str(Path(found.group(1).strip() if found else ".") / fix.file)
    if "TaskUpdate" not in names:
        claim = ToolCall("TaskUpdate", {"taskId": task_id, "status": "in_progress"})
        read = ToolCall("Read", {"file_path": path})
        return Turn(text=f"Task #{task_id} is mine: claiming it.", tool_calls=(claim, read))
    if "Edit" not in names:
        edit = {"file_path": path, "old_string": fix.buggy, "new_string": fix.fixed}
        return Turn(tool_calls=(ToolCall("Edit", edit),))
    if "Bash" not in names:
        run = {"command": fix.test, "description": f"test {fix.file}"}
        return Turn(tool_calls=(ToolCall("Bash", run),))
    if "SendMessage" not in names:
        output = _all_results(request)[-1].strip()
        last = output.splitlines()[-1] if output else "no output"
        if "0 failed" not in output:
            report = f"#{task_id} is not fixed: `{fix.test}` printed:\n{output}"
            send = {"to": LEAD_NAME, "message": report, "summary": f"#{task_id} still fails"}
            return Turn(tool_calls=(ToolCall("SendMessage", send),))
        report = f"Fixed #{task_id} ({fix.subject}) with one Edit; `{fix.test}`: {last}."
        send = {"to": LEAD_NAME, "message": report, "summary": f"#{task_id} fixed, {last}"}
        done = ToolCall("TaskUpdate", {"taskId": task_id, "status": "completed"})
        return Turn(tool_calls=(done, ToolCall("SendMessage", send)))
    return Turn(text="Reported to the lead.")


def respond(request: ModelRequest) -> Turn:
    """The next turn of the lead or of a teammate (its ``name@team`` in the metadata)."""
    if request.metadata.get("teammate"):
        return _teammate(request)
    return _lead(request)


def scenario_model() -> FunctionModel:
    """The model for the team demo."""
    return FunctionModel(respond, name="demo-team")

"""The scripted scenario behind ``taskloom demo --coordinator``: the model's part, by function.

The coordinator plays the four phases on a small project whose ``median`` is wrong for lists
of even length:

1. Research: two workers started in one turn — one finds the bug (Grep, Read), one runs the
   whole test suite, whose integration part takes 30 s. The first report makes the second
   worker pointless: the coordinator stops it (TaskStop).
2. Synthesis: the coordinator writes a self-contained spec from the report.
3. Implementation: it continues the researcher (SendMessage), which has read the file
   already; the researcher makes the change with Edit.
4. Verification: a fresh worker runs the unit tests with Bash and reports what they printed.

Every decision is made from the conversation as it stands — worker ids from the ``agentId:``
lines of the Agent results and the ``<task-id>`` of notifications — so the order in which
notifications arrive does not matter, as for a real model.
"""

from __future__ import annotations

import re
from pathlib import Path

from taskloom.messages import Message, TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn

PROMPT = (
    "`median` in this project gives wrong answers for lists of even length. "
    "Find the bug, fix it and make sure the tests pass."
)

BUGGY_LINE = "    return (ordered[middle] + ordered[middle + 1]) / 2\n"
FIXED_LINE = "    return (ordered[middle - 1] + ordered[middle]) / 2\n"

PROJECT_FILES = {
    "README.md": (
        "# stats\n\nSmall statistics helpers.\n\n"
        "- Unit tests: `python3 test_stats.py` (fast).\n"
        "- Integration suite: `python3 test_integration.py` (slow: about 30 s).\n"
    ),
    "stats.py": (
        '"""Small statistics helpers."""\n\n\n'
        "def mean(values):\n"
        '    """The arithmetic mean of a non-empty list."""\n'
        "    return sum(values) / len(values)\n\n\n"
        "def median(values):\n"
        '    """The middle value; for an even count, the mean of the two middle ones."""\n'
        "    ordered = sorted(values)\n"
        "    middle = len(ordered) // 2\n"
        "    if len(ordered) % 2:\n"
        "        return ordered[middle]\n" + BUGGY_LINE
    ),
    "test_stats.py": (
        "import sys\n\nfrom stats import mean, median\n\n"
        "checks = [\n"
        "    ('mean', lambda: mean([1, 2, 3, 4]) == 2.5),\n"
        "    ('median odd', lambda: median([3, 1, 2]) == 2),\n"
        "    ('median even', lambda: median([4, 1, 3, 2]) == 2.5),\n"
        "    ('median pair', lambda: median([1, 2]) == 1.5),\n"
        "]\n"
        "failed = 0\n"
        "for name, check in checks:\n"
        "    try:\n"
        "        ok = check()\n"
        "    except Exception as exc:\n"
        "        ok = False\n"
        "        name += f' ({type(exc).__name__})'\n"
        "    failed += not ok\n"
        '    print(f\'{name}: {"ok" if ok else "FAIL"}\')\n'
        "print(f'{len(checks) - failed} passed, {failed} failed')\n"
        "sys.exit(1 if failed else 0)\n"
    ),
    "test_integration.py": (
        '"""Replays thirty days of recorded readings through stats: slow on purpose."""\n\n'
        "import time\n\nfrom stats import mean, median\n\n"
        "for day in range(30):\n"
        "    time.sleep(1)  # stands in for loading one day of recorded data\n"
        "    assert mean([day, day]) == day and median([day]) == day\n"
        "print('integration: 30 days ok')\n"
    ),
}

#: The workers' descriptions: the coordinator names them, and the workers' scripts key on them.
RESEARCH = "find the median bug"
SUITE = "run the whole test suite"
VERIFY = "verify the median fix"

SUITE_COMMAND = "python3 test_integration.py"
TEST_COMMAND = "python3 test_stats.py"

RESEARCH_PROMPT = (
    "`median` in the project in the working directory gives wrong answers for lists of even "
    "length. Find the code responsible and the test that covers it. Report the location as "
    "`Location: <absolute path>:<line>` and the cause. Change nothing."
)
SUITE_PROMPT = (
    f"Run the project's whole test suite, the integration suite included (`{SUITE_COMMAND}`), "
    "and report every failure with its output. Change nothing."
)

_LAUNCHED = re.compile(r"agentId: (\w+)")
_NOTE = re.compile(
    r"<task-notification>.*?<task-id>(\w+)</task-id>.*?<status>(\w+)</status>"
    r"(?:.*?<result>(.*?)</result>)?.*?</task-notification>",
    re.S,
)
_LOCATION = re.compile(r"Location: (\S+):(\d+)")


def _user_texts(message: Message) -> list[str]:
    """The texts of a user message: its text blocks and its tool results."""
    found: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            found.append(block.text)
        elif isinstance(block, ToolResultBlock):
            found.append(block.text())
    return found


def _results(request: ModelRequest) -> list[str]:
    """The tool results of the last message."""
    return [b.text() for b in request.messages[-1].content if isinstance(b, ToolResultBlock)]


def _called(request: ModelRequest) -> list[str]:
    """The names of the tools called so far in the conversation, in order."""
    return [c.name for m in request.messages if m.role == "assistant" for c in m.tool_uses()]


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# -- the workers ---------------------------------------------------------------------------


def _researcher(request: ModelRequest) -> Turn:
    """Finds the bug; continued with the spec, fixes it."""
    called = _called(request)
    last = " ".join(_user_texts(request.messages[-1]))
    if not called:
        return Turn(
            text="Looking for median.",
            tool_calls=(ToolCall("Grep", {"pattern": "def median", "output_mode": "content"}),),
        )
    if called[-1] == "Grep":
        # Grep shows paths relative to the working directory; Read wants them absolute.
        path = last.split(":", 1)[0].strip()
        cwd = re.search(r"^Working directory: (.+)$", request.system, re.M)
        if cwd is not None:
            path = str(Path(cwd.group(1).strip()) / path)
        return Turn(tool_calls=(ToolCall("Read", {"file_path": path}),))
    if called[-1] == "Read" and "Edit" not in called:
        path = next(
            c.input["file_path"]
            for m in request.messages
            for c in m.tool_uses()
            if c.name == "Read"
        )
        if "Spec:" in last:  # the coordinator's follow-up arrived: make the change
            return Turn(
                text="Applying the spec.",
                tool_calls=(
                    ToolCall(
                        "Edit",
                        {"file_path": path, "old_string": BUGGY_LINE, "new_string": FIXED_LINE},
                    ),
                ),
            )
        number = next(
            int(row.split("\t", 1)[0])
            for row in last.splitlines()
            if "\t" in row and "middle + 1" in row
        )
        return Turn(
            text=(
                f"Found the bug. Location: {path}:{number}\n"
                f"For an even count `median` returns `{BUGGY_LINE.strip()}`: it averages "
                "the upper middle value and the one after it, instead of the two middle "
                "values (and raises IndexError for two values). test_stats.py covers it "
                "('median even', 'median pair'). I changed nothing."
            )
        )
    if called[-1] == "Edit":
        outcome = _results(request)[-1].split(". ", 1)[0]  # "The file ... has been updated"
        return Turn(text=f"Done: {outcome}; the line is now `{FIXED_LINE.strip()}`.")
    return Turn(text="Nothing more to do.")


def _suite_runner(request: ModelRequest) -> Turn:
    """Runs the whole suite: the integration part takes 30 s (it is stopped long before)."""
    if not _called(request):
        return Turn(
            text="Running the whole suite, integration tests included.",
            tool_calls=(
                ToolCall("Bash", {"command": SUITE_COMMAND, "description": "integration suite"}),
            ),
        )
    return Turn(text=f"The suite finished:\n{_results(request)[-1]}")


def _verifier(request: ModelRequest) -> Turn:
    """Runs the unit tests and reports exactly what they printed."""
    if not _called(request):
        return Turn(
            tool_calls=(ToolCall("Bash", {"command": TEST_COMMAND, "description": "unit tests"}),)
        )
    output = _results(request)[-1].strip()
    verdict = "PASS" if "0 failed" in output else "FAIL"
    return Turn(text=f"Verification {verdict}: `{TEST_COMMAND}` printed:\n{output}")


# -- the coordinator -------------------------------------------------------------------------


def _coordinator(request: ModelRequest) -> Turn:
    ids: list[str] = []
    notes: list[tuple[str, str, str]] = []
    for message in request.messages:
        if message.role == "user":
            for text in _user_texts(message):
                ids += _LAUNCHED.findall(text)
                notes += [(t, s, _unescape(r)) for t, s, r in _NOTE.findall(text)]
    called = _called(request)
    if "Agent" not in called:
        research = {"description": RESEARCH, "prompt": RESEARCH_PROMPT}
        suite = {"description": SUITE, "prompt": SUITE_PROMPT, "subagent_type": "worker"}
        return Turn(
            text="Phase 1 — research. Two workers in parallel: one looks for the bug, one "
            "runs the whole test suite.",
            tool_calls=(ToolCall("Agent", research), ToolCall("Agent", suite)),
        )
    research_id, suite_id = ids[0], ids[1]
    reports = [r for t, s, r in notes if t == research_id and s == "completed"]
    if reports and "TaskStop" not in called:
        return Turn(
            text="The researcher found the cause and the test that covers it: the slow "
            "suite run can only tell us less, later. Stopping it.",
            tool_calls=(ToolCall("TaskStop", {"task_id": suite_id}),),
        )
    if "TaskStop" in called and "SendMessage" not in called:
        spec = _spec(reports[0])
        return Turn(
            text=f"Phase 2 — synthesis. The spec:\n{spec}\n\nPhase 3 — implementation. The "
            "researcher has stats.py in its context already: I continue it with the spec.",
            tool_calls=(ToolCall("SendMessage", {"to": research_id, "message": spec}),),
        )
    if len(reports) >= 2 and called.count("Agent") < 3:
        location = _LOCATION.search(reports[0])
        repo = str(Path(location.group(1)).parent) if location else "."
        verify = {"description": VERIFY, "prompt": _verify_prompt(repo)}
        return Turn(
            text="The researcher reports the fix is in. Phase 4 — verification: a fresh "
            "worker, who did not write the change, runs the tests.",
            tool_calls=(ToolCall("Agent", verify),),
        )
    verdicts = [r for t, s, r in notes if len(ids) > 2 and t == ids[2] and s == "completed"]
    if verdicts:
        passed = verdicts[0].startswith("Verification PASS")
        summary = verdicts[0].splitlines()[-1] if passed else verdicts[0]
        return Turn(
            text=(
                f"Done. `median` averaged the wrong pair for even counts; {research_id} fixed "
                f"stats.py with one Edit and {ids[2]} verified it: {summary}. The slow "
                "integration suite was stopped unrun: run it before a release."
                if passed
                else f"Verification failed; the fix needs another look:\n{summary}"
            )
        )
    if (suite_id, "killed") in {(t, s) for t, s, _ in notes} and not reports[1:]:
        return Turn(text="The suite worker is stopped, as intended. Waiting for the fix.")
    if len(ids) > 2:
        return Turn(text="Waiting for the verification.")
    return Turn(text="Both workers are running: I act on the first report.")


def _spec(report: str) -> str:
    location = _LOCATION.search(report)
    where = f"{location.group(1)}, line {location.group(2)}" if location else "stats.py"
    return (
        f"Spec: in {where}, function `median`, replace the even-count line "
        f"`{BUGGY_LINE.strip()}` with `{FIXED_LINE.strip()}` (the mean of the two middle "
        "values). Use Edit on that line only; change no other file. Do not run the tests: "
        "another worker verifies. Report the edit."
    )


def _verify_prompt(repo: str) -> str:
    return (
        f"In {repo}, `median` of stats.py was just fixed for lists of even length. Run "
        f"`{TEST_COMMAND}` there and report exactly what it printed and whether it passed. "
        "Change no file."
    )


def respond(request: ModelRequest) -> Turn:
    """The next turn of the coordinator or of a worker, by who is asking."""
    if request.agent_id is None:
        return _coordinator(request)
    description = request.metadata.get("description")
    if description == RESEARCH:
        return _researcher(request)
    if description == SUITE:
        return _suite_runner(request)
    if description == VERIFY:
        return _verifier(request)
    return Turn(text=f"No script for the worker {description!r}.")


def scenario_model() -> FunctionModel:
    """The model for the coordinator demo."""
    return FunctionModel(respond, name="demo-coordinator")

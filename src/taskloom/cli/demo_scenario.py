"""The scripted scenario behind ``taskloom demo``: a model's part, played by a function.

It reads the project, starts the tests and a watcher in the background, stops the watcher,
collects the tests' output and answers, then acknowledges the notifications that follow.
Task ids are read from the tool results, as a model would.
"""

from __future__ import annotations

import re
from typing import Any

from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import ToolCall, Turn

PROJECT_FILES = {
    "README.md": "# calc\n\nA tiny calculator. Run the tests with `python3 test_calc.py`.\n",
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
    "test_calc.py": (
        "import time\n\nfrom calc import add, mul\n\n"
        "for name, ok in [('add', add(2, 3) == 5), ('mul', mul(2, 3) == 6)]:\n"
        "    time.sleep(0.4)\n"
        '    print(f\'{name}: {"ok" if ok else "FAIL"}\', flush=True)\n'
        "print('2 passed')\n"
    ),
}

_ID = re.compile(r"with ID: ([bartwmd][0-9a-z]{8})")


def _results(request: ModelRequest) -> list[str]:
    last = request.messages[-1]
    return [b.text() for b in last.content if isinstance(b, ToolResultBlock)]


def _texts(request: ModelRequest) -> str:
    last = request.messages[-1]
    return "".join(b.text for b in last.content if isinstance(b, TextBlock))


def respond(request: ModelRequest) -> Turn:
    """The next turn, from where the conversation stands."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    if turn == 0:
        return Turn(
            text="Let me look at the project first.",
            tool_calls=(
                ToolCall("Glob", {"pattern": "*.py"}),
                ToolCall("Read", {"file_path": _cwd(request) + "/README.md"}),
            ),
        )
    if turn == 1:
        return Turn(
            text="I'll run the tests in the background, and start a file watcher too.",
            tool_calls=(
                ToolCall(
                    "Bash",
                    {
                        "command": "python3 test_calc.py",
                        "description": "run the tests",
                        "run_in_background": True,
                    },
                ),
                ToolCall(
                    "Bash",
                    {
                        "command": "while true; do date +%T; sleep 1; done",
                        "description": "file watcher",
                        "run_in_background": True,
                    },
                ),
            ),
        )
    if turn == 2:
        tests_id, watcher_id = (_ID.search(r).group(1) for r in _results(request))  # type: ignore[union-attr]
        return Turn(
            text="On second thought the watcher is not needed: stopping it, then waiting "
            "for the tests.",
            tool_calls=(
                ToolCall("TaskStop", {"task_id": watcher_id}),
                ToolCall("TaskOutput", {"task_id": tests_id, "timeout": 30000}),
            ),
        )
    if turn == 3:
        output = _results(request)[-1]
        passed = "2 passed" in output
        return Turn(
            text=(
                "The tests pass: add and mul are both correct (2 passed)."
                if passed
                else f"The tests did not pass:\n{output}"
            )
        )
    if "<task-notification>" in _texts(request):
        return Turn(text="Both background tasks are accounted for. Done.")
    return Turn(text="Done.")


def _cwd(request: ModelRequest) -> str:
    match = re.search(r"Working directory: (.+)", request.system)
    return match.group(1).strip() if match else "."


def scenario_model() -> Any:
    """The model for the demo."""
    from taskloom.models.scripted import FunctionModel

    return FunctionModel(respond, name="demo-scenario")

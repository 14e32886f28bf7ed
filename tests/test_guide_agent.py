"""The built-in taskloom-guide: offered, read-only, answering from the docs shipped inside."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import taskloom
from helpers import TIME_FACTOR
from taskloom.agents.builtin_checks import DOCS_DIR, GUIDE_AGENT_TYPE
from taskloom.messages import ToolResultBlock
from taskloom.testing import ScriptedModel, ToolCall, Turn

REPO = Path(__file__).resolve().parent.parent


def ask_guide(docs: Path) -> ScriptedModel:
    """A script: the main thread asks the guide, which greps and reads the docs in ``docs``."""
    spawn = {
        "description": "Ask",
        "prompt": "How is the nudge off?",
        "subagent_type": "taskloom-guide",
    }
    return ScriptedModel(
        [Turn(tool_calls=[ToolCall("Agent", spawn)]), "It says: verificationNudge false."],
        subagents={
            GUIDE_AGENT_TYPE: [
                Turn(
                    tool_calls=[
                        ToolCall("Grep", {"pattern": "verificationNudge", "path": str(docs)})
                    ]
                ),
                Turn(tool_calls=[ToolCall("Read", {"file_path": str(docs / "README.md")})]),
                "Set verificationNudge to false (contracts.md).",
            ]
        },
    )


def tool_results(model: ScriptedModel) -> list[str]:
    return [
        str(block.content)
        for request in model.agent_requests
        for block in request.messages[-1].content
        if isinstance(block, ToolResultBlock)
    ]


async def test_the_guide_is_offered_read_only_and_reads_the_docs(tmp_path: Path) -> None:
    model = ask_guide(DOCS_DIR)
    async with taskloom.Harness(model=model, cwd=tmp_path) as h:
        [e async for e in h.run("How do I turn the verification nudge off?")]
        await h.end()
    agent_tool = next(t for t in model.requests[0].tools if t.name == "Agent")
    assert "taskloom-guide" in agent_tool.description
    offered = {t.name for t in model.agent_requests[0].tools}
    assert offered == {"Glob", "Grep", "Read"}
    found, read = tool_results(model)
    assert "contracts.md" in found
    assert "# taskloom documentation" in read
    # What it was given are the files of this tree's docs/, the ones the package ships.
    assert sorted(p.name for p in DOCS_DIR.glob("*.md")) == sorted(
        p.name for p in (REPO / "docs").glob("*.md")
    )


_INSTALLED = """
import asyncio, json
import taskloom
from taskloom.agents.builtin_checks import DOCS_DIR
from taskloom.messages import ToolResultBlock
from taskloom.testing import ScriptedModel, ToolCall, Turn

async def main():
    spawn = {{"description": "Ask", "prompt": "How?", "subagent_type": "taskloom-guide"}}
    grep = {{"pattern": "verificationNudge", "path": str(DOCS_DIR)}}
    read = {{"file_path": str(DOCS_DIR / "README.md")}}
    model = ScriptedModel(
        [Turn(tool_calls=[ToolCall("Agent", spawn)]), "Done."],
        subagents={{"taskloom-guide": [
            Turn(tool_calls=[ToolCall("Grep", grep)]),
            Turn(tool_calls=[ToolCall("Read", read)]),
            "Answered.",
        ]}},
    )
    async with taskloom.Harness(model=model, cwd={cwd!r}) as h:
        [e async for e in h.run("How?")]
        await h.end()
    results = [
        str(b.content) for r in model.agent_requests for b in r.messages[-1].content
        if isinstance(b, ToolResultBlock)
    ]
    print(json.dumps({{"module": taskloom.__file__, "docs": str(DOCS_DIR),
                      "link": DOCS_DIR.is_symlink(), "results": results}}))

asyncio.run(main())
"""


@pytest.mark.e2e
def test_an_installed_wheel_ships_the_docs_the_guide_reads(tmp_path: Path) -> None:
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q"]
    timeout = 300 * TIME_FACTOR
    subprocess.run(
        [*pip, "wheel", "--no-deps", str(REPO), "-w", str(wheels)], check=True, timeout=timeout
    )
    (wheel,) = wheels.glob("taskloom-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=timeout,
    )
    script = _INSTALLED.format(cwd=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(site), "TASKLOOM_HOME": str(tmp_path / "home")}
    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
        check=True,
    )

    told = json.loads(ran.stdout.strip().splitlines()[-1])
    assert told["module"].startswith(str(site)), told["module"]
    assert told["docs"].startswith(str(site)) and not told["link"]
    found, read = told["results"]
    assert "contracts.md" in found and "# taskloom documentation" in read
    # Small: the documentation is a fraction of the wheel.
    assert wheel.stat().st_size < 1_500_000

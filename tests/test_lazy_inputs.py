"""Built-in tools name their input models (``Tool.input_model``) and import them on first use.

Offering the tools needs only their written-out schemas: a session that makes no call defines
no input model (issue 34). Validation, its error texts and tools given a model directly are as
they were.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import TIME_FACTOR, clean_env
from taskloom.tools.base import Tool, ToolContext, ToolResult, generated_schema, input_key
from taskloom.tools.inputs import ToolInput
from taskloom.tools.registry import core_tools

ROOT = Path(taskloom.__file__).parent
#: The packages that hold built-in tools.
TOOL_PACKAGES = ("tools", "agents", "teams", "mcp")
#: Built-in tools whose schema is generated when offered: the dream agent's own tools, offered
#: in the background long after start-up.
GENERATED = {"MemoryList", "MemoryRead", "MemoryWrite", "MemoryDelete"}

#: Runs a session that offers the main thread's tools (and makes no call), then imports every
#: module of the tool packages named in its arguments but their ``inputs``; prints what each
#: step loaded.
OFFER_EVERY_TOOL = """
import asyncio, builtins, importlib, json, pkgutil, sys
from pathlib import Path

importers = set()
real_import = builtins.__import__

def tracing(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.partition(".")[0] == "pydantic" and globals:
        importers.add(globals.get("__name__", "?"))
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = tracing
import taskloom
from taskloom.testing import ScriptedModel, Turn

model = ScriptedModel([Turn(text="done")])
answer = asyncio.run(taskloom.run("hi", model=model, cwd="."))
offered = sorted(t.name for t in model.requests[0].tools)
after_run = sorted(m for m in sys.modules if ".inputs" in m)
run_importers = sorted(i for i in importers if i.startswith("taskloom"))
root = Path(taskloom.__file__).parent
for package in sys.argv[1:]:
    for info in pkgutil.iter_modules([str(root / package)], f"taskloom.{package}."):
        if not info.name.endswith(".inputs"):
            importlib.import_module(info.name)
print(json.dumps({
    "answer": answer,
    "offered": offered,
    "importers": run_importers,
    "after_run": after_run,
    "after_all": sorted(m for m in sys.modules if ".inputs." in m),
}))
"""


def _tool_classes() -> Iterator[type[Tool[Any]]]:
    """Every concrete built-in tool class that names its input model."""
    for package in TOOL_PACKAGES:
        for info in pkgutil.iter_modules([str(ROOT / package)], f"taskloom.{package}."):
            if not info.name.endswith(".inputs"):
                importlib.import_module(info.name)
    pending = list(Tool.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("taskloom.") and "input_model" in vars(cls):
            yield cls


def test_offering_every_built_in_tool_defines_no_input_model(tmp_path: Path) -> None:
    env = {**clean_env(), "TASKLOOM_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", OFFER_EVERY_TOOL, *TOOL_PACKAGES],
        capture_output=True, text=True, timeout=60 * TIME_FACTOR, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["answer"] == "done"
    assert {"Agent", "Bash", "Read", "SendMessage", "TodoWrite"} <= set(seen["offered"])
    # Not even ToolInput's module: nothing of the run named a model.
    assert seen["after_run"] == []
    # Nothing of taskloom's brings pydantic in on that path (the messages are plain too).
    assert seen["importers"] == []
    # Every tool module imported: still no input model defined.
    assert seen["after_all"] == []


def test_every_named_model_is_in_its_layers_inputs_and_its_static_schema_is_generated() -> None:
    classes = list(_tool_classes())
    assert {"Bash", "Agent", "TaskCreate", "MonitorMcp", "ListPeers"} <= {c.name for c in classes}
    for cls in classes:
        assert cls.input_model is not None
        module, _, name = cls.input_model.partition(":")
        layer = cls.__module__.split(".")[1]
        assert module.startswith(f"taskloom.{layer}.inputs."), cls.input_model
        model = cls.Input
        assert issubclass(model, ToolInput)
        assert (model.__module__, model.__name__) == (module, name)
        if cls.input_schema is not Tool.input_schema:
            continue  # the tool offers a schema of its own (the server's, the caller's)
        if cls.name in GENERATED:
            assert cls.static_schema is None
            continue
        assert cls.static_schema is not None, cls.name
        key, schema = cls.static_schema
        assert key == input_key(cls) == cls.input_model
        # Key order included: the request body is serialised in this order.
        assert json.dumps(schema) == json.dumps(generated_schema(model)), cls.name


def test_a_named_model_validates_and_its_errors_read_as_before() -> None:
    tools = {t.name: t for t in core_tools()}
    glob = tools["Glob"].validate({"pattern": "*.py"})
    assert type(glob).__name__ == "GlobInput" and getattr(glob, "pattern", None) == "*.py"
    refused = {
        "Bash": (
            {"command": "ls", "timeout": 0, "extra": 1},
            "timeout: Input should be greater than or equal to 1; extra: unexpected field",
        ),
        "Glob": ({"path": 3}, "pattern: required field is missing; path: Input should be a valid"),
        "TaskStop": ({}, "input: Value error, task_id is required"),
    }
    for name, (raw, errors) in refused.items():
        result = tools[name].validate(raw)
        assert isinstance(result, ToolResult) and result.is_error
        expected = f"<tool_use_error>InputValidationError: {name}: {errors}"
        assert result.content.startswith(expected), result.content


class _CountInput(ToolInput):
    """Input of the counting tool."""

    n: int


class _Count(Tool[_CountInput]):
    name = "Count"
    description = "Counts."
    Input = _CountInput

    async def call(self, params: _CountInput, ctx: ToolContext) -> ToolResult:
        return ToolResult(str(params.n))


def test_a_tool_given_its_model_directly_works_as_before() -> None:
    tool = _Count()
    assert input_key(_Count) is _CountInput
    assert tool.spec().input_schema == {
        "additionalProperties": False,
        "description": "Input of the counting tool.",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "type": "object",
    }
    assert tool.validate({"n": 2}) == _CountInput(n=2)
    refused = tool.validate({"n": "two"})
    assert isinstance(refused, ToolResult) and "n: Input should be a valid integer" in (
        refused.content
    )


def test_a_subclass_setting_its_own_model_wins_over_the_named_one() -> None:
    bash = type(next(t for t in core_tools() if t.name == "Bash"))

    class Counting(bash):  # type: ignore[misc, valid-type]
        Input = _CountInput

    assert input_key(Counting) is _CountInput and Counting.Input is _CountInput
    assert Counting().spec().input_schema["properties"] == {"n": {"type": "integer"}}


def test_tool_input_is_named_by_the_tool_base_and_a_tool_must_name_a_model() -> None:
    from taskloom.tools import base

    assert base.ToolInput is ToolInput
    with pytest.raises(AttributeError):
        _ = base.NoSuchName  # type: ignore[attr-defined]

    class Nameless(Tool[Any]):
        name = "Nameless"
        description = "No input model."

        async def call(self, params: Any, ctx: ToolContext) -> ToolResult:
            return ToolResult("")

    with pytest.raises(AttributeError, match="neither Input nor input_model"):
        _ = Nameless.Input


def test_the_fork_server_builds_the_named_models_before_it_forks() -> None:
    code = (
        "from taskloom.remote.zygote import preload\n"
        "from taskloom.tools.base import Tool\n"
        "preload()\n"
        "pending, left = list(Tool.__subclasses__()), []\n"
        "while pending:\n"
        "    cls = pending.pop()\n"
        "    pending.extend(cls.__subclasses__())\n"
        "    if 'input_model' in vars(cls) and not cls.Input.__pydantic_complete__:\n"
        "        left.append(cls.name)\n"
        "print(sorted(left))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60 * TIME_FACTOR
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"

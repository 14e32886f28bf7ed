"""The import structure: layers import only downward, and modules import one another in no
cycle, of two modules or more.

Every import counts — at module level, inside functions, and under ``TYPE_CHECKING``: a cycle
hidden by a deferred import is still a cycle.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "taskloom"

#: The layers, bottom up. A module may import from its own layer and the layers below.
LAYERS: list[set[str]] = [
    {"errors", "messages", "_records", "_lazy", "_dataclass", "settings", "clock", "_aio"}
    | {"_version", "signals", "quoting"}
    | {"frontmatter", "workflow_client"},
    {"store"},
    {"process"},
    {"tasks"},
    {"untrusted", "models", "testing"},
    {"permissions", "hooks"},
    {"transcript", "pairing", "prompts", "instructions", "worktrees", "skills"}
    | {"instruction_imports", "instruction_rules"},
    {"tools", "mcp"},
    {"engine", "engine_config", "events", "gate", "telemetry", "context"},
    {"conversation"},
    {"agents", "session", "options", "remote", "plugins"},
    {"teams"},
    {"harness", "main_thread", "started"},
    {"repl"},
    {"cli", "acp", "__main__", "__init__"},
]

#: Known violations, to be removed (each must still exist: fixed ones leave this list).
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_MUTUAL: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.cache
def tree(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per test process (every test here reads the
    whole source tree; the files do not change during a run)."""
    return ast.parse(path.read_text())


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every taskloom module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("taskloom") and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    """Each taskloom module and the taskloom modules it imports (a fresh copy each call)."""
    return {name: set(targets) for name, targets in _graph().items()}


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    known = modules()
    return {name: frozenset(imports_of(name, path, known)) for name, path in known.items()}


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    name = top(module)
    for i, members in enumerate(LAYERS):
        if name in members:
            return i
    raise AssertionError(f"{module} belongs to no layer: add {name!r} to LAYERS")


def test_every_module_has_a_layer() -> None:
    for module in graph():
        layer(module)


def test_layers_import_only_downward() -> None:
    upward = {
        (top(src), top(dst))
        for src, targets in graph().items()
        for dst in targets
        if layer(dst) > layer(src)
    }
    assert upward - KNOWN_UPWARD == set(), "imports from a higher layer"
    assert KNOWN_UPWARD - upward == set(), "fixed: remove these from KNOWN_UPWARD"


def test_no_two_modules_import_each_other() -> None:
    edges = graph()
    mutual = {
        frozenset((a, b)) for a, targets in edges.items() for b in targets if a in edges.get(b, ())
    }
    assert mutual - KNOWN_MUTUAL == set(), "modules that import each other"
    assert KNOWN_MUTUAL - mutual == set(), "fixed: remove these from KNOWN_MUTUAL"


def test_no_package_cycles() -> None:
    packages: dict[str, set[str]] = {}
    for src, targets in graph().items():
        packages.setdefault(top(src), set()).update(top(t) for t in targets if top(t) != top(src))
    cycles = set()
    for start in packages:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in packages.get(node, ()):
                if nxt == start:
                    cycles.add(frozenset(path))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    known = {frozenset(pair) for pair in KNOWN_UPWARD}
    assert {c for c in cycles if not any(k <= c for k in known)} == set()


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``edges``, of any length: its strongly connected components of more than
    one module (Tarjan's algorithm, without recursion), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges.get(root, ()))))]
        while work:
            node, targets = work[-1]
            for nxt in targets:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:  # every target of ``node`` seen: close its component, if it roots one
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges.get(node, ()):
                        found.append(sorted(component))
    return sorted(found)


def test_import_cycles_finds_cycles_of_any_length() -> None:
    edges = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a: no two of them import each other
        "d": {"e"},
        "e": {"f"},
        "f": {"d"},
        "g": {"a", "h"},
        "h": set(),
    }
    assert import_cycles(edges) == [["a", "b", "c"], ["d", "e", "f"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_cycles({"a": {"a"}}) == [["a"]]
    assert a_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def a_cycle(edges: dict[str, set[str]], members: list[str]) -> list[str]:
    """One shortest cycle through ``members[0]`` within ``members`` (a component of edges)."""
    start, inside = members[0], set(members)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        after = []
        for node in frontier:
            for nxt in sorted(edges.get(node, set()) & inside):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came:
                    came[nxt] = node
                    after.append(nxt)
        frontier = after
    raise AssertionError(f"no cycle through {start} in {members}")


def test_no_import_cycles_between_modules() -> None:
    edges = graph()
    known = {frozenset(pair) for pair in KNOWN_MUTUAL}
    new = [c for c in import_cycles(edges) if frozenset(c) not in known]
    assert not new, "modules in an import cycle, each cycle's modules and one path:\n" + "\n".join(
        f"{', '.join(c)}  (e.g. {' -> '.join(a_cycle(edges, c))})" for c in new
    )


def _layer_table(text: str) -> list[set[str]]:
    """The modules column of docs/architecture.md's layer table, row by row."""
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]  # no header
    table = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) != 3:
            break
        table.append({m.strip("`").rstrip("/") for m in cells[1].split(", ")})
    return table


def test_the_documented_layers_are_the_checked_ones() -> None:
    # docs/architecture.md's table of layers says what this test enforces, row for row.
    doc = (SRC.parent.parent / "docs" / "architecture.md").read_text()
    assert _layer_table(doc) == LAYERS


def _documented_hooks(text: str) -> set[str]:
    """The names in the first column of docs/extending.md's table of a kind's hooks."""
    import re

    start = text.index("| method | decides |")
    rows = text[start:].split("\n\n")[0].splitlines()[2:]
    return {
        re.sub(r"\(.*", "", name.strip(" `"))
        for row in rows
        for name in row.strip("|").split("|")[0].split("`, `")
    }


def _kind_hooks() -> set[str]:
    from taskloom.tasks.kinds import TaskKind

    return {name for name in vars(TaskKind) if not name.startswith("_")}


def test_the_documented_kind_hooks_are_the_overridable_ones() -> None:
    # docs/extending.md's table of the hooks a task kind may override names every one of
    # TaskKind's methods and class settings, and nothing else.
    doc = (SRC.parent.parent / "docs" / "extending.md").read_text()
    assert _documented_hooks(doc) == _kind_hooks()


# -- the task-kinds seam ----------------------------------------------------------------------
#
# Outside the task layer a client asks a task's kind (``kind_of(state).progress(state)``),
# never what concrete state it holds: no ``isinstance`` (nor ``issubclass``, a class pattern,
# ``type(s) is``) on a state class, and no ``TaskType`` member compared, mapped or kept, nor a
# type's string value compared. A ``TaskType`` member may appear there only as an argument
# of a call, alone or in a list or tuple that is the argument: ``runtime.new_id(TaskType.X)``
# and ``runtime.list(types=[TaskType.X])`` name a type, they test none. Where a client truly
# needs a kind's own fields, ``taskloom.tasks.narrow`` narrows its state.
# And a ``_private`` module is imported only from inside the package that holds it.

#: The package where task kinds (and so their state classes and types) are known.
KINDS_PACKAGE = "taskloom.tasks"

#: Known bypasses of the kinds, to be removed (each must still exist): (module, what).
KNOWN_KIND_BYPASSES: set[tuple[str, str]] = set()
#: Known imports of another package's private module, to be removed: (importer, imported).
KNOWN_PRIVATE: set[tuple[str, str]] = set()


def state_class_names() -> set[str]:
    """The names of taskloom's task state classes (TaskState and every subclass of it)."""
    import taskloom.tasks  # noqa: F401  (registers the kinds, which bring their state classes)
    from taskloom.tasks.types import TaskState

    found, todo = {"TaskState"}, [TaskState]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("taskloom."):  # not a test's own toy kind
                found.add(sub.__name__)
            todo.append(sub)
    return found


def _in_kinds_package(module: str) -> bool:
    return module == KINDS_PACKAGE or module.startswith(KINDS_PACKAGE + ".")


def _name_of(node: ast.expr) -> str | None:
    """``Name`` or the last part of ``a.b.Name``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _task_type_member(node: ast.AST) -> str | None:
    """``TaskType.X`` (also ``types.TaskType.X``) as written, else None."""
    if not (isinstance(node, ast.Attribute) and node.attr.isupper()):
        return None
    return f"TaskType.{node.attr}" if _name_of(node.value) == "TaskType" else None


def _is_call_argument(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``node`` is an argument of a call, alone or in a list or tuple argument."""
    parent = parents.get(node)
    if isinstance(parent, ast.List | ast.Tuple | ast.Set):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.keyword):
        return isinstance(parents.get(parent), ast.Call)
    return isinstance(parent, ast.Call) and node in parent.args


def kind_bypasses(module: str, source: str, state_classes: set[str]) -> set[str]:
    """What in ``source`` (the text of ``module``) goes around the kinds, one entry a kind.

    Entries: ``TaskType.X`` (a member used other than as a call's argument), ``'value'`` (a
    type's string value compared), ``isinstance Cls`` (a state class tested). Nothing for a
    module of the kinds' package.
    """
    if _in_kinds_package(module):
        return set()
    from taskloom.tasks.types import TaskType

    values = {t.value for t in TaskType}
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()

    def classes(node: ast.expr) -> list[str]:
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        return [n for n in map(_name_of, items) if n in state_classes]

    for node in ast.walk(tree):
        member = _task_type_member(node)
        if member is not None and not _is_call_argument(node, parents):
            found.add(member)
        if isinstance(node, ast.Call) and _name_of(node.func) in ("isinstance", "issubclass"):
            if len(node.args) == 2:
                found.update(f"isinstance {c}" for c in classes(node.args[1]))
        elif isinstance(node, ast.MatchClass):
            found.update(f"isinstance {c}" for c in classes(node.cls))
        elif isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found.update(f"isinstance {c}" for c in classes(operand))  # type(s) is Cls
                items = operand.elts if isinstance(operand, ast.List | ast.Tuple | ast.Set) else []
                for item in [operand, *items]:
                    if isinstance(item, ast.Constant) and item.value in values:
                        found.add(repr(item.value))
    return found


def all_kind_bypasses() -> set[tuple[str, str]]:
    names = state_class_names()
    return {
        (module, what)
        for module, path in modules().items()
        for what in kind_bypasses(module, path.read_text(), names)
    }


def test_clients_ask_the_kind() -> None:
    found = all_kind_bypasses()
    assert found - KNOWN_KIND_BYPASSES == set(), (
        "ask the task's kind (tasks/kinds.py), or narrow with taskloom.tasks.narrow"
    )
    assert KNOWN_KIND_BYPASSES - found == set(), "fixed: remove these from KNOWN_KIND_BYPASSES"


# Nor does it probe a state for a field of some kinds: ``getattr(state, "exit_code", None)``
# or ``hasattr(s, "stopped_reason")`` test the class as surely as ``isinstance`` does. The
# probes looked for are those naming a field that only some state classes have (the fields of
# TaskState itself are on every state and read directly), but for the names other objects
# carry as well (an MCP error's ``error``): checked by the attribute named, not by the name of
# the object probed, which a client may call anything.

#: Fields of some state classes that other objects probed by name also have.
SHARED_FIELD_NAMES = {"error"}
#: Known probes of a state's fields, to be removed (each must still exist): (module, what).
KNOWN_PROBES: set[tuple[str, str]] = set()


def variant_field_names() -> set[str]:
    """The fields the state classes add to TaskState's, less :data:`SHARED_FIELD_NAMES`."""
    import dataclasses

    import taskloom.tasks  # noqa: F401  (registers the kinds, which bring their state classes)
    from taskloom.tasks.types import TaskState

    base = {f.name for f in dataclasses.fields(TaskState)}
    found: set[str] = set()
    todo = [TaskState]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("taskloom."):  # not a test's own toy kind
                found.update(f.name for f in dataclasses.fields(sub))
            todo.append(sub)
    return found - base - SHARED_FIELD_NAMES


def state_probes(module: str, source: str, fields: set[str]) -> set[str]:
    """The ``getattr``/``hasattr`` calls in ``source`` naming one of ``fields`` (as written).

    Nothing for a module of the kinds' package, where the state classes are known.
    """
    if _in_kinds_package(module):
        return set()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _name_of(node.func) in ("getattr", "hasattr")):
            continue
        field = node.args[1] if len(node.args) >= 2 else None
        if isinstance(field, ast.Constant) and field.value in fields:
            found.add(f"{_name_of(node.func)} {field.value}")
    return found


def test_clients_probe_no_state_for_its_fields() -> None:
    fields = variant_field_names()
    found = {
        (module, what)
        for module, path in modules().items()
        for what in state_probes(module, path.read_text(), fields)
    }
    assert found - KNOWN_PROBES == set(), (
        "ask the task's kind (tasks/kinds.py), narrow with taskloom.tasks.narrow, or move a "
        "field every state has to TaskState"
    )
    assert KNOWN_PROBES - found == set(), "fixed: remove these from KNOWN_PROBES"


def private_imports(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The edges ``(importer, imported)`` where ``imported`` is (or is inside) a ``_private``
    module of a package ``importer`` is not in."""
    found = set()
    for src, targets in edges.items():
        for dst in targets:
            parts = dst.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.endswith("__")]
            if not private:
                continue
            package = ".".join(parts[: private[0]])
            if not (src == package or src.startswith(package + ".")):
                found.add((src, dst))
    return found


def test_private_modules_stay_in_their_package() -> None:
    found = private_imports(graph())
    assert found - KNOWN_PRIVATE == set(), "a _private module imported from another package"
    assert KNOWN_PRIVATE - found == set(), "fixed: remove these from KNOWN_PRIVATE"


# -- the checkers themselves, on planted violations --------------------------------------------

_STATES = {"TaskState", "AgentTaskState", "TeammateTaskState"}


def test_the_checker_finds_a_task_type_comparison() -> None:
    planted = (
        "from taskloom.tasks.types import TaskType\n"
        "def f(state):\n"
        "    return state.type == TaskType.LOCAL_AGENT\n"
    )
    assert kind_bypasses("taskloom.cli.x", planted, _STATES) == {"TaskType.LOCAL_AGENT"}
    assert kind_bypasses("taskloom.tasks.x", planted, _STATES) == set()  # the kinds' own
    # Kept in a list to filter by, mapped to a name, compared by its value: each found.
    for planted in (
        "kinds = [TaskType.REMOTE_AGENT]\nok = [s for s in states if s.type in kinds]\n",
        "NAMES = {TaskType.REMOTE_AGENT: 'remote'}\n",
        "ok = state.type in (types.TaskType.REMOTE_AGENT,)\n",
        "match state.type:\n    case TaskType.REMOTE_AGENT:\n        pass\n",
    ):
        assert kind_bypasses("taskloom.cli.x", planted, _STATES) == {"TaskType.REMOTE_AGENT"}
    by_value = "ok = record.get('type') != 'in_process_teammate'\n"
    assert kind_bypasses("taskloom.cli.x", by_value, _STATES) == {"'in_process_teammate'"}
    by_values = "ok = record['type'] in ('local_bash', 'x')\n"
    assert kind_bypasses("taskloom.cli.x", by_values, _STATES) == {"'local_bash'"}
    # Naming a type to a call is a use, not a test.
    uses = (
        "a = runtime.new_id(TaskType.LOCAL_AGENT)\n"
        "b = runtime.list(types=[TaskType.LOCAL_AGENT, TaskType.REMOTE_AGENT])\n"
        "c = kind_for(TaskType('local_bash'))\n"
    )
    assert kind_bypasses("taskloom.cli.x", uses, _STATES) == set()


def test_the_checker_finds_an_isinstance_on_a_state_class() -> None:
    for planted in (
        "ok = isinstance(state, AgentTaskState)\n",
        "ok = isinstance(state, (str, types.AgentTaskState))\n",
        "ok = type(state) is AgentTaskState\n",
        "match state:\n    case AgentTaskState(name=n):\n        pass\n",
    ):
        assert kind_bypasses("taskloom.agents.x", planted, _STATES) == {"isinstance AgentTaskState"}
        assert kind_bypasses("taskloom.tasks.agent", planted, _STATES) == set()
    assert kind_bypasses("taskloom.agents.x", "ok = isinstance(s, Other)\n", _STATES) == set()
    assert "AgentTaskState" in state_class_names()
    assert "TeammateTaskState" in state_class_names()  # brought by its kind, not built in


def test_the_checker_finds_a_probe_of_a_state_field() -> None:
    fields = variant_field_names()
    assert {"exit_code", "tool_uses", "agent_type", "is_idle"} <= fields
    assert not {"id", "description", "stopped_reason", "error"} & fields  # on all, or shared
    planted = (
        "code = getattr(state, 'exit_code', None)\n"
        "ok = hasattr(s, 'tool_uses')\n"
        "n = getattr(self.runtime.get(i), 'total_tokens', 0)\n"
    )
    expected = {"getattr exit_code", "hasattr tool_uses", "getattr total_tokens"}
    assert state_probes("taskloom.cli.x", planted, fields) == expected
    assert state_probes("taskloom.tasks.x", planted, fields) == set()  # the kinds' own
    others = "a = getattr(exc, 'error', None)\nb = getattr(obj, 'flush', None)\n"
    assert state_probes("taskloom.cli.x", others, fields) == set()


def test_the_checker_finds_a_private_module_of_another_package(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from taskloom.tasks._registry import TaskRegistry\n"
        "from taskloom.cli import _run\n"
        "from taskloom.agents._remote_spawn import RemoteSpawner\n"
    )
    known = modules()
    edges = {"taskloom.agents.planted": set(imports_of("taskloom.agents.planted", planted, known))}
    assert private_imports(edges) == {
        ("taskloom.agents.planted", "taskloom.tasks._registry"),
        ("taskloom.agents.planted", "taskloom.cli._run"),
    }  # its own package's private module is its own
    assert private_imports({"taskloom.x": {"taskloom._aio"}}) == set()  # the top package's
    assert private_imports({"taskloom.a.b": {"taskloom.a._c.d"}}) == set()
    assert private_imports({"taskloom.b.x": {"taskloom.a._c.d"}}) == {
        ("taskloom.b.x", "taskloom.a._c.d")
    }


def _without_line(text: str, containing: str) -> str:
    """``text`` without its first line that contains ``containing`` (which must be there)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if containing in line)
    return "\n".join(lines[:at] + lines[at + 1 :])


def test_the_checker_finds_a_layer_the_docs_table_lacks_or_misplaces() -> None:
    doc = (SRC.parent.parent / "docs" / "architecture.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| ") and "`tasks" in line)
    assert _layer_table(_without_line(doc, row)) != LAYERS  # a row dropped
    moved = doc.replace(row, row.replace("`tasks", "`harness`, `tasks", 1), 1)
    assert moved != doc and _layer_table(moved) != LAYERS  # a module in the wrong row


def test_the_checker_finds_a_kind_hook_the_docs_table_lacks_or_invents() -> None:
    doc = (SRC.parent.parent / "docs" / "extending.md").read_text()
    lacking = _without_line(doc, "`progress")
    assert _kind_hooks() - _documented_hooks(lacking) == {"progress"}
    invented = doc.replace("`progress", "`progress`, `planted", 1)
    assert _documented_hooks(invented) - _kind_hooks() == {"planted"}


def test_the_checker_finds_a_flag_or_options_field_the_docs_lack() -> None:
    from test_flag_docs import _FLAG_NAME, DOCS, table_rows

    contracts = (DOCS / "contracts.md").read_text()
    section = "## 4. Command line"
    row = next(r for r in table_rows(contracts, section) if "`--model" in r[0])
    documented = {n for r in table_rows(contracts, section) for n in _FLAG_NAME.findall(r[0])}
    planted = _without_line(contracts, "| " + row[0])
    left = {n for r in table_rows(planted, section) for n in _FLAG_NAME.findall(r[0])}
    assert "--model" in documented - left
    library = (DOCS / "library.md").read_text()
    rows = table_rows(_without_line(library, "| `model`"), "`Options` carries")
    assert not any("`model`" in r[0] for r in rows)

"""The import structure: layers import only downward, and modules import one another in no
cycle, of two modules or more.

Every import counts — at module level, inside functions, and under ``TYPE_CHECKING``: a cycle
hidden by a deferred import is still a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "taskloom"

#: The layers, bottom up. A module may import from its own layer and the layers below.
LAYERS: list[set[str]] = [
    {"errors", "messages", "settings", "clock", "_aio", "_version", "signals", "quoting"},
    {"store"},
    {"process"},
    {"tasks"},
    {"untrusted", "models", "testing"},
    {"permissions", "hooks"},
    {"transcript", "prompts", "worktrees"},
    {"tools", "mcp"},
    {"engine", "engine_config", "events", "gate", "telemetry"},
    {"conversation"},
    {"agents", "session", "options", "remote"},
    {"teams"},
    {"harness", "main_thread", "started"},
    {"repl"},
    {"cli", "__main__", "__init__"},
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


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every taskloom module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
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
    known = modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


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


def test_the_documented_kind_hooks_are_the_overridable_ones() -> None:
    # docs/extending.md's table of the hooks a task kind may override names every one of
    # TaskKind's methods and class settings, and nothing else.
    import re

    from taskloom.tasks.kinds import TaskKind

    doc = (SRC.parent.parent / "docs" / "extending.md").read_text()
    start = doc.index("| method | decides |")
    rows = doc[start:].split("\n\n")[0].splitlines()[2:]
    documented = {
        re.sub(r"\(.*", "", name.strip(" `"))
        for row in rows
        for name in row.strip("|").split("|")[0].split("`, `")
    }
    hooks = {name for name in vars(TaskKind) if not name.startswith("_")}
    assert documented == hooks

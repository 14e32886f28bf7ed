"""Dataclasses written on first use (taskloom._dataclass): the same classes, made later.

Each class here is declared twice from one body, with :func:`dataclasses.dataclass` and with
ours, and the two must behave alike: construction, repr, equality, hashing, ordering,
pickling, copies, ``replace``, ``fields``, frozen assignment, pattern matching.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import threading
from dataclasses import KW_ONLY, FrozenInstanceError, InitVar, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

import taskloom
from helpers import TIME_FACTOR, run_python
from taskloom import _dataclass
from taskloom._dataclass import dataclass as lazy_dataclass
from taskloom._dataclass import declared_frozen

OPTIONS: list[dict[str, Any]] = [
    {},
    {"frozen": True},
    {"slots": True},
    {"frozen": True, "slots": True},
    {"frozen": True, "kw_only": True, "slots": True},
    {"eq": False},
    {"order": True, "slots": True},
    {"unsafe_hash": True},
    {"frozen": True, "slots": True, "weakref_slot": True},
]


#: Every argument, by keyword (kw_only classes take no other).
ARGS: dict[str, Any] = {"x": 1, "y": 2, "tags": ["t"], "scale": 3, "label": "q"}


def _pair(options: dict[str, Any]) -> tuple[type, type]:
    """The same class body declared by dataclasses and by taskloom._dataclass."""

    def body(decorate: Any) -> type:
        @decorate(**options)
        class Point:
            """A point."""

            LIMIT: ClassVar[int] = 10
            x: int
            y: int = 2
            tags: list[str] = field(default_factory=list)
            seen: int = field(default=0, init=False)
            scale: InitVar[int] = 1
            _: KW_ONLY
            label: str = "p"

            def __post_init__(self, scale: int) -> None:
                object.__setattr__(self, "seen", self.x * scale)

            def norm(self) -> int:
                return abs(self.x) + abs(self.y)

        return Point

    return body(dataclasses.dataclass), body(lazy_dataclass)


def _short(shown: str) -> str:
    """A repr without the qualified name's enclosing functions."""
    return shown.rsplit("<locals>.", 1)[-1]


def _stand_in(value: object) -> bool:
    return _dataclass._is_stand_in(value)


def _waiting(cls: type) -> bool:
    return cls in _dataclass._WAITING


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_a_lazy_class_behaves_as_the_dataclass(options: dict[str, Any]) -> None:
    eager, lazy = _pair(options)
    assert _waiting(lazy) and _stand_in(lazy.__dict__["__repr__"])
    assert declared_frozen(lazy) is bool(options.get("frozen"))
    a, b = eager(**ARGS), lazy(**ARGS)
    assert not _waiting(lazy)
    assert repr(a) == repr(b)
    assert _short(repr(b)) == "Point(x=1, y=2, tags=['t'], seen=3, label='q')"
    assert b.norm() == 3 and b.seen == 3
    assert [f.name for f in dataclasses.fields(b)] == [f.name for f in dataclasses.fields(a)]
    assert inspect.signature(lazy) == inspect.signature(eager)
    assert lazy.__doc__ == eager.__doc__ == "A point."
    assert lazy.__match_args__ == eager.__match_args__  # type: ignore[attr-defined]
    assert hasattr(lazy, "__slots__") == hasattr(eager, "__slots__")
    if options.get("slots"):
        assert lazy.__slots__ == eager.__slots__  # type: ignore[attr-defined]
        assert not hasattr(b, "__dict__")
    twin = lazy(**ARGS)
    assert (twin == b) == (eager(**ARGS) == a)
    assert (lazy.__hash__ is None) == (eager.__hash__ is None)
    if lazy.__hash__ is not None and options.get("frozen"):
        hashable = dict(ARGS, tags=("t",))
        assert hash(lazy(**hashable)) == hash(lazy(**hashable)) == hash(eager(**hashable))
    if options.get("order"):
        assert lazy(x=0) < lazy(x=1) and not lazy(x=2) < lazy(x=1)
    changed = dataclasses.replace(b, x=5, scale=1)
    assert (changed.x, changed.seen, changed.label) == (5, 5, "q")
    assert dataclasses.asdict(b) == dataclasses.asdict(a)
    match b:
        case lazy(x=x, y=y):
            assert (x, y) == (1, 2)
        case _:
            raise AssertionError("the positional pattern did not match")


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_frozen_assignment_and_pickling_as_the_dataclass(options: dict[str, Any]) -> None:
    eager, lazy = _pair(options)
    a, b = eager(x=1), lazy(x=1)
    for obj, cls in ((a, eager), (b, lazy)):
        if options.get("frozen"):
            with pytest.raises(FrozenInstanceError):
                obj.x = 3
            with pytest.raises(FrozenInstanceError):
                del obj.y
        else:
            obj.x = 3
            assert obj.x == 3
        for clone in (copy.copy(obj), copy.deepcopy(obj)):
            assert type(clone) is cls and repr(clone) == repr(obj) and clone is not obj
            assert (clone == obj) is options.get("eq", True)


def test_an_instance_unpickled_first_writes_its_class() -> None:
    # A fresh interpreter unpickles instances of classes it never made: each is written
    # before its state is set, and behaves as one made by its constructor.
    made = [
        _records_module().Frozen(1, ("a",)),
        _records_module().Plain(2),
        _records_module().Slotted(3),
    ]
    script = (
        "import pickle, sys; import lazy_records as r; "
        "print([c in r._dataclass._WAITING for c in (r.Frozen, r.Plain, r.Slotted)]); "
        "objs = pickle.loads(sys.stdin.buffer.read()); print([repr(o) for o in objs]); "
        "one = r.Frozen(1, ('a',)); print(objs[0] == one, hash(objs[0]) == hash(one))"
    )
    out = run_python(
        script, input=pickle.dumps(made), text=False, check=True, cwd=Path(__file__).parent
    )
    lines = out.stdout.decode().splitlines()
    assert lines == [
        "[True, True, True]",
        "[\"Frozen(n=1, names=('a',))\", 'Plain(n=2, extra=[])', 'Slotted(n=3)']",
        "True True",
    ]


def _records_module() -> Any:
    return importlib.import_module("lazy_records")


def test_a_waiting_base_is_written_before_its_subclass() -> None:
    @lazy_dataclass(frozen=True, slots=True)
    class Base:
        a: int
        b: str = "b"

    @lazy_dataclass(frozen=True, slots=True, kw_only=True)
    class Sub(Base):
        c: float = 0.5

    class Plain(Sub):
        """Not a dataclass: it inherits Sub's."""

    assert _waiting(Base) and _waiting(Sub)
    assert Sub.__slots__ == ("c",)  # type: ignore[attr-defined]  # a and b are Base's
    made = Plain(1, c=2.0)
    assert not _waiting(Base) and not _waiting(Sub)
    assert _short(repr(made)) == "Plain(a=1, b='b', c=2.0)"
    assert [f.name for f in dataclasses.fields(Sub)] == ["a", "b", "c"]
    assert Base(1) == Base(1) and Base(1) != Sub(1)


def test_asking_about_a_class_writes_it() -> None:
    @lazy_dataclass(frozen=True)
    class Asked:
        n: int = 0

    assert _waiting(Asked)
    assert dataclasses.is_dataclass(Asked)
    assert not _waiting(Asked) and "__repr__" in Asked.__dict__
    assert Asked.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_super_in_a_method_names_the_class_returned() -> None:
    class Root:
        def who(self) -> str:
            return "root"

    @lazy_dataclass(slots=True)
    class Leaf(Root):
        n: int = 0

        def who(self) -> str:
            return "leaf of " + super().who()

    assert Leaf().who() == "leaf of root"


def test_threads_making_a_class_at_once_all_see_it_whole() -> None:
    # Each round a fresh class, made by 8 threads released together: none may find it half
    # written (an __init__ missing, a repr that is object's).
    for _ in range(30):

        @lazy_dataclass(frozen=True, slots=True, kw_only=True)
        class Raced:
            a: int
            b: tuple[int, ...] = ()
            c: str = "c"

        start = threading.Barrier(8)
        seen: list[str] = []

        def make() -> None:
            start.wait(timeout=10 * TIME_FACTOR)  # noqa: B023  # this round's barrier
            seen.append(_short(repr(Raced(a=1))))  # noqa: B023  # this round's class

        threads = [threading.Thread(target=make) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10 * TIME_FACTOR)
        assert seen == ["Raced(a=1, b=(), c='c')"] * 8


def test_a_class_declared_wrong_fails_at_its_first_use() -> None:
    @lazy_dataclass
    class Wrong:
        a: int = 0
        b: int  # a field without a default after one with

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        Wrong()
    with pytest.raises(TypeError, match="weakref_slot is True but slots is False"):
        lazy_dataclass(weakref_slot=True)(type("Weak", (), {"__annotations__": {"a": "int"}}))


def test_a_class_with_its_own_init_is_made_at_once() -> None:
    @lazy_dataclass
    class Own:
        a: int = 0

        def __init__(self) -> None:
            self.a = 5

    assert not _waiting(Own) and "__repr__" in Own.__dict__
    assert _short(repr(Own())) == "Own(a=5)"


_WRITE_ALL = """
import dataclasses, importlib, pkgutil, sys
from pathlib import Path
import taskloom
from taskloom import _dataclass
root = Path(taskloom.__file__).parent
for info in pkgutil.walk_packages([str(root)], "taskloom."):
    if not info.name.endswith("__main__"):
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency not installed
            pass
waiting = list(_dataclass._WAITING)
_dataclass.realize_all()
assert not _dataclass._WAITING
bad = []
for cls in waiting:
    left = [name for name, value in vars(cls).items() if _dataclass._is_stand_in(value)]
    if left:
        bad.append(f"{cls.__qualname__}: stand-ins left {left}")
    if cls.__dataclass_params__.repr and "__repr__" not in cls.__dict__:
        bad.append(f"{cls.__qualname__}: no repr")
    if "__slots__" in cls.__dict__:
        names = {f.name for f in dataclasses.fields(cls)}
        slotted = {n for c in cls.__mro__ for n in c.__dict__.get("__slots__", ())}
        if not names <= slotted:
            bad.append(f"{cls.__qualname__}: fields without a slot {names - slotted}")
print(len(waiting), bad)
"""


def test_every_dataclass_of_taskloom_is_written_whole() -> None:
    # A fresh interpreter imports every module; each class still waiting is written, whole:
    # no stand-in left, and a slotted one has a slot for every field (or its base has).
    out = run_python(_WRITE_ALL, check=True, timeout=120)
    count, bad = out.stdout.split(" ", 1)
    assert int(count) > 50  # most classes are not used by importing their modules
    assert bad.strip() == "[]"


def test_the_source_declares_dataclasses_with_ours() -> None:
    root = Path(taskloom.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "_dataclass.py"
        and (
            "@dataclasses.dataclass" in (text := path.read_text())
            or any(
                line.startswith("from dataclasses import")
                and "dataclass" in line.split("import")[1].replace(" ", "").split(",")
                for line in text.splitlines()
            )
        )
    ]
    assert offenders == []

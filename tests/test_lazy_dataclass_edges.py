"""The edges of taskloom._dataclass: what dataclasses does there, ours does too.

A class used in ways that skip its ``__init__`` (a subclass's own, unpickling, a question
about the class), changed after decoration, declared in ways that resist a remake (keywords,
a base's ``__init_subclass__``, decorators inside), declared wrong, written while another
thread forks, or copied by value before it is written.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import pickle
import signal
import threading
import time
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from helpers import TIME_FACTOR, run_python
from taskloom._dataclass import dataclass as lazy_dataclass

HERE = Path(__file__).parent
#: ``ClassVar`` under another name: dataclasses resolves it in the module; ours reads the text.
CV = ClassVar


def test_an_init_assigned_after_decoration_survives_the_first_use() -> None:
    @lazy_dataclass(frozen=True, slots=True)
    class Scaled:
        x: int = 0

    def init(self: Any, x: int = 0) -> None:
        object.__setattr__(self, "x", x * 10)

    Scaled.__init__ = init  # type: ignore[method-assign]  # as tasks.types._fast_init does
    dataclasses.fields(Scaled)  # any question about the class writes it
    assert Scaled(1).x == 10  # dataclasses: the assigned __init__ stays


_FAST_AFTER_READ_BACK = """
from taskloom.tasks import types
types.state_from_dict({"id": "b00000000", "type": "local_bash", "command": "ls"})
types.ShellTaskState(id="b00000001", command="ls")
print("set0" in types.ShellTaskState.__init__.__code__.co_names)
"""


def test_the_fast_state_init_survives_a_state_read_back_first() -> None:
    # A resumed session (or `taskloom tasks`) reads states back before it makes one: the
    # direct __init__ of tasks.types._fast_init (40 % cheaper) must still be the one used.
    out = run_python(_FAST_AFTER_READ_BACK, check=True)
    assert out.stdout.strip() == "True"


_UNPICKLE_FIRST = """
import json, pickle, sys
import lazy_records
print(json.dumps([repr(o) for o in pickle.loads(sys.stdin.buffer.read())]))
"""


def test_unpickling_first_honours_an_inherited_setstate() -> None:
    import lazy_records as r

    old = [r.EagerVersioned(1), r.LazyVersioned(1)]
    for obj in old:
        del obj.__dict__["added_later"]  # as an older version pickled it
    out = run_python(_UNPICKLE_FIRST, input=pickle.dumps(old), text=False, check=True, cwd=HERE)
    eager, lazy = json.loads(out.stdout)
    assert eager == "EagerVersioned(n=1, added_later='upgraded')"
    assert lazy == "LazyVersioned(n=1, added_later='upgraded')"


class _Root:
    dropped = False

    @property
    def value(self) -> int:
        return 1

    def who(self) -> str:
        return "root"

    def drop(self) -> None:
        _Root.dropped = True


def _logged(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize("how", ["cached_property", "wraps", "deleter"])
def test_super_in_a_decorated_method(how: str) -> None:
    @lazy_dataclass
    class Leaf(_Root):
        n: int = 0

        @functools.cached_property
        def value(self) -> int:  # type: ignore[override]
            return super().value + 1

        @_logged
        def who(self) -> str:
            return "leaf of " + super().who()

        @property
        def gone(self) -> int:
            return 0

        @gone.deleter
        def gone(self) -> None:
            super().drop()

    leaf = Leaf()
    if how == "cached_property":
        assert leaf.value == 2
    elif how == "wraps":
        assert leaf.who() == "leaf of root"
    else:
        del leaf.gone
        assert _Root.dropped


def test_a_field_default_read_on_the_class_before_first_use() -> None:
    @lazy_dataclass
    class Defaults:
        x: int = field(default=3)
        items: list[int] = field(default_factory=list)

    assert Defaults.x == 3
    assert not hasattr(Defaults, "items")


def test_signature_and_match_args_before_first_use() -> None:
    @lazy_dataclass
    class Point:
        x: int
        y: int = 2

    assert str(inspect.signature(Point)) == "(x: 'int', y: 'int' = 2) -> None"
    assert Point.__match_args__ == ("x", "y")  # type: ignore[attr-defined]


def test_a_classvar_under_another_name_with_slots() -> None:
    @lazy_dataclass(slots=True)
    class Limited:
        LIMIT: CV[int] = 5
        x: int = 0

    assert Limited.LIMIT == 5
    assert Limited.__slots__ == ("x",)  # type: ignore[attr-defined]


def test_a_class_declared_wrong_fails_the_same_way_every_time() -> None:
    @lazy_dataclass
    class Wrong:
        a: list[int] = field(default_factory=list)
        b: int  # type: ignore[misc]  # no default after one with a default

    for _ in range(2):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default"):
            Wrong(b=1)


def test_a_subclass_with_its_own_init_has_the_dataclass_methods() -> None:
    @lazy_dataclass
    class Base:
        x: int = 0

    class Own(Base):
        def __init__(self) -> None:  # not the dataclass's, and it does not call it
            self.x = 1

    assert repr(Own()).endswith("Own(x=1)")
    assert Own() == Own()


def test_what_the_class_statement_registers_is_the_class_returned() -> None:
    registered: list[type] = []

    class Registry:
        def __init_subclass__(cls, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            registered.append(cls)

    def register(cls: type) -> type:
        registered.append(cls)
        return cls

    @lazy_dataclass
    @register
    class Plugin(Registry):
        n: int = 0

    assert registered == [Plugin, Plugin]  # __init_subclass__, then the inner decorator


def test_a_class_statement_with_keywords() -> None:
    class Kinded:
        def __init_subclass__(cls, *, kind: str, **kwargs: Any) -> None:
            super().__init_subclass__(**kwargs)
            cls.kind = kind  # type: ignore[attr-defined]

    @lazy_dataclass
    class Shell(Kinded, kind="shell"):
        n: int = 0

    assert Shell().kind == "shell"  # type: ignore[attr-defined]


class _SlowToName:
    """A class attribute whose ``__set_name__`` takes a while once ``slow`` is set: writing a
    slotted class makes a class of the template, which names its attributes again."""

    slow = threading.Event()
    entered = threading.Event()

    def __set_name__(self, owner: type, name: str) -> None:
        if self.slow.is_set():
            self.entered.set()
            time.sleep(0.3 * TIME_FACTOR)  # the work a fork meanwhile must wait for


def test_a_fork_while_another_thread_writes_a_class_waits_for_it() -> None:
    # The fork waits for the class being written; the child has it whole, and a lock that no
    # thread of its own holds (else its first use of any class would hang).
    @lazy_dataclass(slots=True)
    class Written:
        n: int = 0
        marker: ClassVar[_SlowToName] = _SlowToName()

    @lazy_dataclass
    class Other:
        n: int = 0

    _SlowToName.slow.set()
    writer = threading.Thread(target=Written)
    writer.start()
    try:
        assert _SlowToName.entered.wait(timeout=10 * TIME_FACTOR)
        pid = os.fork()
        if pid == 0:  # the child: a bounded first use of each class, then out
            code = 3
            try:
                signal.signal(signal.SIGALRM, signal.SIG_DFL)  # pytest-timeout's is inherited
                signal.alarm(int(5 * TIME_FACTOR))
                ok = repr(Written(1)).endswith("Written(n=1)") and repr(Other(2)).endswith(
                    "Other(n=2)"
                )
                code = 0 if ok else 4
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)  # bounded: the child's alarm ends it
    finally:
        _SlowToName.slow.clear()
        writer.join(timeout=10 * TIME_FACTOR)
    assert os.waitstatus_to_exitcode(status) == 0  # -SIGALRM: it hung on the lock


_BY_VALUE = """
import sys
from ray import cloudpickle
from taskloom._dataclass import dataclass

@dataclass
class Shipped:
    n: int = 0

sys.stdout.buffer.write(cloudpickle.dumps(Shipped))  # of __main__: by value, as Ray sends it
"""
_RECEIVED = "import pickle, sys; print(repr(pickle.loads(sys.stdin.buffer.read())(3)))"


def test_a_class_pickled_by_value_before_it_is_written_says_so() -> None:
    # cloudpickle copies a class of __main__ by value, stand-ins and all, without what they
    # write it from: using it is a clear error, not a recursion.
    pytest.importorskip("ray")
    sent = run_python(_BY_VALUE, text=False, check=True, timeout=120)
    # Another process: one that never wrote the class.
    out = run_python(_RECEIVED, input=sent.stdout, text=False, timeout=120)
    assert out.returncode == 1
    assert "TypeError: Shipped was copied (pickled by value) before its dataclass methods" in (
        out.stderr.decode()
    )

"""More edges of taskloom._dataclass, found by a second review: what dataclasses does there
(or what the first-use classes promise), ours does too.

A class written while another thread makes instances, asked whether it is hashable, whose
methods are wrapped, copied first, without a docstring, with a hook that fails, whose first
write is interrupted, declared with options that cannot go together; and the records of a
turn over a provider's model, written ahead.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import functools
import json
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env, run_python
from taskloom import _dataclass
from taskloom._dataclass import dataclass as lazy_dataclass
from taskloom._dataclass import realize, when_written

HERE = Path(__file__).parent


def test_while_a_class_is_written_instances_are_made_only_through_its_stand_ins() -> None:
    # The module says a thread using a class meanwhile waits for it "rather than seeing half a
    # class": the writer is stopped once the order methods are on the class; __init__ and
    # __setstate__, the ways to an instance, must still be the stand-ins (which wait).
    @lazy_dataclass(order=True)
    class Ranked:
        n: int = 0

    paused, resume = threading.Event(), threading.Event()

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if paused.is_set() or event != "c_call" or arg is not setattr:
            return
        if frame.f_code.co_name == "_put" and "__lt__" in Ranked.__dict__:
            paused.set()  # __lt__ is written; what else is, is being
            resume.wait(timeout=10 * TIME_FACTOR)

    def write() -> None:
        sys.setprofile(profile)
        try:
            realize(Ranked)
        finally:
            sys.setprofile(None)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        if not paused.wait(timeout=10 * TIME_FACTOR):
            raise RuntimeError("the writer never reached the moment after __lt__")
        own = dict(Ranked.__dict__)
    finally:
        resume.set()
        writer.join(timeout=10 * TIME_FACTOR)
    assert _dataclass._is_stand_in(own["__init__"]) and _dataclass._is_stand_in(own["__setstate__"])
    assert Ranked(1) < Ranked(2)


_PROVIDER_TURN = """
import asyncio, json, sys
from pathlib import Path
import taskloom
from taskloom import _dataclass

async def main() -> None:
    work = Path(sys.argv[1])
    async with taskloom.Harness(model="claude-sonnet-4-5", cwd=work, skip_permissions=True) as h:
        h.write_turn_records()
        before = set(_dataclass._WAITING)
        [e async for e in h.run("go")]
        written = before - set(_dataclass._WAITING)
        print(json.dumps(sorted(f"{c.__module__}.{c.__qualname__}" for c in written)))
        await h.end()

asyncio.run(main())
"""


@pytest.mark.e2e  # a program of the SDK, as a process of its own
def test_a_turn_over_a_real_provider_writes_nothing_after_write_turn_records(
    tmp_path: Path,
) -> None:
    # tests/test_harness.py checks write_turn_records with the scripted model; a session's
    # model is a provider's, whose stream parser has records of its own (written in the first
    # answer's stream).
    (tmp_path / "a.txt").write_text("hello\n")
    with FakeAnthropicServer() as server:
        server.add_turn(
            text="Reading", thinking="a thought",
            tool_calls=[("Read", {"file_path": str(tmp_path / "a.txt")})],
        )  # fmt: skip
        server.add_turn(text="Done.")
        out = run_python(
            _PROVIDER_TURN, str(tmp_path), check=True,
            env=clean_env(
                ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test",
                TASKLOOM_HOME=str(tmp_path / "home"), CLAUDE_CONFIG_DIR=str(tmp_path / "cc"),
            ),
        )  # fmt: skip
    written = json.loads(out.stdout.splitlines()[-1])
    assert written == [], written  # taskloom.models.anthropic._Assembly, _Block


def test_hashable_asked_before_first_use() -> None:
    # eq=True, not frozen: dataclasses sets __hash__ to None. The stand-in is a function, and
    # the ABC caches the answer: instances stay "Hashable" after the class is written.
    @lazy_dataclass
    class Mutable:
        n: int = 0

    asked_first = issubclass(Mutable, collections.abc.Hashable)
    assert not isinstance(Mutable(), collections.abc.Hashable)
    assert not asked_first


def test_super_in_an_lru_cached_method() -> None:
    # _repoint follows functions, __wrapped__ of functions and a few descriptors; an
    # lru_cache wrapper is none of them, so the __class__ cell inside stays the template's
    # (unless another method of the class shares that cell).
    class Root:
        def size(self) -> int:
            return 1

    @lazy_dataclass(frozen=True)
    class Leaf(Root):
        n: int = 0

        @functools.lru_cache  # noqa: B019
        def size(self) -> int:
            return super().size() + 1

    try:
        size = Leaf().size()
    except TypeError:  # super(type, obj): obj must be an instance or subtype of type
        size = None
    assert size == 2


def test_the_first_copy_sets_slots_as_copy_does() -> None:
    # copy and pickle set a slotted instance's state with setattr (the class's own
    # __setattr__); the stand-in __setstate__ sets it with object.__setattr__, so the first
    # copy of a class differs from every later one.
    seen: list[str] = []

    @lazy_dataclass(slots=True)
    class Watched:
        n: int = 0

        def __setattr__(self, name: str, value: Any) -> None:
            seen.append(name)
            object.__setattr__(self, name, value)

    original = object.__new__(Watched)  # no __init__: the class is not written yet
    object.__setattr__(original, "n", 5)
    copy.copy(original)
    first = list(seen)
    seen.clear()
    copy.copy(original)
    assert first == seen == ["n"]


def test_the_docstring_of_a_class_without_one() -> None:
    @lazy_dataclass
    class Bare:
        n: int = 0

    assert (Bare.__doc__ or "").startswith("Bare(n: ")  # dataclasses gives its signature


def test_a_hook_that_raises_leaves_the_class_written_and_the_other_hooks_run() -> None:
    @lazy_dataclass
    class Hooked:
        n: int = 0

    ran: list[type] = []

    def failing(cls: type) -> None:
        raise RuntimeError("hook failed")

    when_written(Hooked, failing)
    when_written(Hooked, ran.append)
    try:
        with pytest.raises(RuntimeError, match="hook failed"):
            Hooked()
        Hooked()
        assert Hooked not in _dataclass._WAITING  # it stays waiting, "being written", for ever
        assert ran == [Hooked]
    finally:
        _dataclass._WAITING.pop(Hooked, None)  # not left for a realize_all in this worker


class _Interrupting:
    """A field default whose repr meets a Ctrl-C (dataclasses shows defaults in ``__doc__``)."""

    armed = False

    def __repr__(self) -> str:
        if _Interrupting.armed:
            _Interrupting.armed = False
            raise KeyboardInterrupt  # as a SIGINT left to Python raises it, between two lines
        return "_Interrupting()"

    __hash__ = object.__hash__


def test_a_class_whose_first_write_is_interrupted_can_still_be_used() -> None:
    # realize records an Exception and clears nothing on a BaseException: the class stays
    # waiting with writing=True, so every later use returns early from realize and its
    # stand-in calls itself (RecursionError), in every thread, for the process's life. An
    # SDK program or a notebook interrupted during a first use keeps such a class.
    @lazy_dataclass
    class Interrupted:
        n: object = _Interrupting()

    _Interrupting.armed = True
    try:
        with pytest.raises(KeyboardInterrupt):
            Interrupted(1)
        try:
            shown = repr(Interrupted(2))
        except RecursionError:
            shown = "RecursionError"
        assert shown.endswith("Interrupted(n=2)")
    finally:
        _Interrupting.armed = False
        _dataclass._WAITING.pop(Interrupted, None)  # not left for a realize_all


def test_options_that_cannot_go_together_fail_at_decoration() -> None:
    # dataclasses raises at the class statement; the first-use class raises at its first
    # use (for a record rarely made, in whatever code makes it first).
    def plain() -> type:
        class Plain:
            n: int = 0

        return Plain

    with pytest.raises(ValueError, match="eq must be true if order is true"):
        dataclasses.dataclass(order=True, eq=False)(plain())
    try:
        made: type = lazy_dataclass(order=True, eq=False)(plain())
    except ValueError:
        return
    _dataclass._WAITING.pop(made, None)  # its error is not left for a realize_all
    raise AssertionError("no error at decoration")

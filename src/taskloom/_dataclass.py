"""Dataclasses whose generated methods are written when the class is first used.

:func:`dataclasses.dataclass` writes and compiles a class's ``__init__``, ``__repr__`` and
``__eq__`` (a frozen class's ``__setattr__``, ``__delattr__`` and ``__hash__`` too) when the
class is defined: 0.2 to 0.5 ms a class. Most of taskloom's records are defined on the way to
a session's first request and never made in it (the states of task kinds it does not start,
the rows of tables it does not read), so :func:`dataclass` here, called as that one is, leaves
the work to the class's first use:

- an instance made (``__init__``), unpickled (``__setstate__``), shown, compared or hashed;
- any question about the class: :func:`dataclasses.fields`, :func:`~dataclasses.replace`,
  :func:`~dataclasses.is_dataclass`, :func:`inspect.signature`, ``__match_args__`` and
  whatever else reads ``__dataclass_fields__`` or ``__dataclass_params__``.

The class returned is a new class made from the class statement's namespace, as
``slots=True`` makes one (here whether or not slots are asked for, and with its slots at
once, as slots cannot be added later): a decorator listed below this one sees the class
statement's class, as under ``slots=True``. Until the first use the returned class holds
stand-ins for the methods above, each of which writes the class and then calls what was
written. The class statement's own class is kept as a template: the first use runs
:func:`dataclasses.dataclass` on it, then copies what that added onto the returned class,
under a lock; the class leaves the waiting list last, so that a thread using it meanwhile
waits for it rather than seeing half a class. What was set on the class after decoration (a
faster ``__init__``) is kept. Closure cells that hold the template (``super()`` in a method,
a wrapped one's or a property's, and the class a frozen ``__setattr__`` checks) are pointed at
the returned class.

Made at once, as :mod:`dataclasses` makes it: a class that brings its own ``__init__``,
``__setstate__`` or ``__slots__``, one whose bases take part in its making (a base's
``__init_subclass__``, which may take the class statement's keywords, or a metaclass of
their own). :func:`realize_all` writes every class still waiting (a process about to fork
children that will use them, a test); :func:`when_written` runs code once a class is
written.

Type checkers see :func:`dataclasses.dataclass` itself.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import os
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

_T = TypeVar("_T")
_FIELDS = "__dataclass_fields__"
_PARAMS = "__dataclass_params__"
#: What a class may bring that the first use could not replace or wait in.
_OWN_METHODS = ("__init__", "__setstate__", "__slots__")
#: What an annotation may name that declares no field.
_NOT_FIELDS = (typing.ClassVar, dataclasses.InitVar, dataclasses.KW_ONLY)
#: The namespace entries a class statement's class has that its remake must not copy.
_OWN_DESCRIPTORS = ("__dict__", "__weakref__")
#: Class attributes that stand in, until the first use, for what writing the class sets.
_ASKED = (_FIELDS, _PARAMS, "__match_args__", "__signature__", "__doc__")
#: Bases whose ``__init_subclass__`` may run twice (on the template, then on the remake).
_PLAIN_BASES = (object, typing.Generic)

#: Held while a class is written, and by anything that waits for one being written.
_LOCK = threading.RLock()


def _fresh_lock() -> None:
    global _LOCK
    _LOCK = threading.RLock()  # another thread may have held it when this process forked


# A fork waits for a class being written, and the child gets a lock no thread holds.
os.register_at_fork(
    before=lambda: _LOCK.acquire(),
    after_in_parent=lambda: _LOCK.release(),
    after_in_child=_fresh_lock,
)


class _Waiting:
    """A class whose dataclass methods are not written yet, and how to write them."""

    __slots__ = (
        "before", "error", "fields", "hooks", "made", "options", "set", "stand_ins", "template",
        "writing",
    )  # fmt: skip

    def __init__(
        self,
        made: type,
        template: type,
        options: dict[str, Any],
        fields: list[str],
        stand_ins: dict[str, Any],
    ) -> None:
        self.made = made
        self.template = template
        self.options = options
        #: Every field's name, the bases' first (the slots, for a slotted class).
        self.fields = fields
        #: The template's namespace before :mod:`dataclasses` added to it.
        self.before = dict(template.__dict__)
        #: The remake's own namespace as made (what differs at the first use was set since).
        self.set = dict(made.__dict__)
        #: What runs once the class is written (see :func:`when_written`).
        self.hooks: list[Callable[[type], None]] = []
        #: The stand-ins put on the class, by name.
        self.stand_ins = stand_ins
        #: Being written (by the thread holding the lock: a hook may ask about the class).
        self.writing = False
        #: Why writing it failed, if it did (it fails the same way every time).
        self.error: Exception | None = None


#: The classes waiting for their first use, by class.
_WAITING: dict[type, _Waiting] = {}


class _Asked:
    """Stands for a class attribute that writing the class sets: reading it writes it."""

    __slots__ = ("name", "written")

    def __init__(self, written: list[type], name: str) -> None:
        self.written = written  # the class, once made
        self.name = name

    def __get__(self, obj: object, cls: type | None = None) -> Any:
        owner = _written(self.written)
        for klass in owner.__mro__:  # written now: the class's own, or a base's
            if self.name in klass.__dict__:
                value = klass.__dict__[self.name]
                return None if isinstance(value, _Asked) else value
        raise AttributeError(self.name)


def _deferred(cls: type, options: dict[str, Any]) -> type:
    if not _can_wait(cls):
        return dataclasses.dataclass(cls, **options)
    _check(cls, options)
    fields = _field_names(cls)
    namespace = _namespace(cls, options, fields)
    written: list[type] = []  # the stand-ins' class, once made
    stand_ins = _add_stand_ins(namespace, written, options)
    _settle_hash(namespace, stand_ins, options, explicit=_explicit_hash(cls.__dict__))
    for name in _ASKED:
        if name not in namespace or (name == "__doc__" and namespace[name] is None):
            namespace[name] = stand_ins[name] = _Asked(written, name)
    made: type = type(cls)(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    written.append(made)
    _repoint(cls.__dict__.values(), cls, made)  # the class statement's own functions
    _WAITING[made] = _Waiting(made, cls, options, fields, stand_ins)
    return made


def _check(cls: type, options: dict[str, Any]) -> None:
    """Raise, at the class statement, what dataclasses raises there for these options."""
    own = cls.__dict__
    if options.get("order") and not options.get("eq", True):
        raise ValueError("eq must be true if order is true")
    if options.get("weakref_slot") and not options.get("slots"):
        raise TypeError("weakref_slot is True but slots is False")
    overwritten = [
        *(["__hash__"] if options.get("unsafe_hash") and _explicit_hash(own) else []),
        *(n for n in ("__setattr__", "__delattr__") if options.get("frozen") and n in own),
    ]
    if overwritten:
        raise TypeError(f"Cannot overwrite attribute {overwritten[0]} in class {cls.__name__}")


def _explicit_hash(own: Any) -> bool:
    """Whether a class statement defined ``__hash__`` (not the None that ``__eq__`` implies)."""
    return "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)


def _can_wait(cls: type) -> bool:
    """Whether ``cls`` can be remade and written later (see the module)."""
    own = cls.__dict__
    if any(name in own for name in _OWN_METHODS) or _FIELDS in own:
        return False
    if type(cls) not in (type, abc.ABCMeta):
        return False
    return all(
        "__init_subclass__" not in base.__dict__ or base in _PLAIN_BASES for base in cls.__mro__[1:]
    )


def _namespace(cls: type, options: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """The remake's namespace: the class statement's, with what a written class would have."""
    namespace = {k: v for k, v in cls.__dict__.items() if k not in _OWN_DESCRIPTORS}
    if options.get("slots"):
        inherited = {name for base in cls.__mro__[1:-1] for name in _slots_of(base)}
        wanted = [*fields, *(["__weakref__"] if options.get("weakref_slot") else [])]
        namespace["__slots__"] = tuple(name for name in wanted if name not in inherited)
        for name in fields:
            namespace.pop(name, None)  # a default is the template's; the slot is the made's
        if options.get("frozen"):  # as dataclasses adds them, for pickling
            namespace.setdefault("__getstate__", _frozen_getstate)
            namespace.setdefault("__setstate__", _frozen_setstate)
        return namespace
    for name in fields:  # a field's default on the class, as dataclasses leaves it
        value = namespace.get(name)
        if isinstance(value, dataclasses.Field):
            if value.default is dataclasses.MISSING:
                del namespace[name]
            else:
                namespace[name] = value.default
    return namespace


def _settle_hash(
    namespace: dict[str, Any], stand_ins: dict[str, Any], options: dict[str, Any], *, explicit: bool
) -> None:
    """Leave the ``__hash__`` stand-in only where dataclasses adds a ``__hash__``.

    Where it sets None (``eq`` without ``frozen``) that is set now; where it adds none the
    inherited one is right already: ``issubclass(cls, Hashable)`` answers as it will.
    """
    if explicit or "__hash__" not in stand_ins:
        return
    eq, frozen = options.get("eq", True), options.get("frozen", False)
    if options.get("unsafe_hash") or (eq and frozen):
        return
    del stand_ins["__hash__"]
    if eq:
        namespace["__hash__"] = None
    else:
        del namespace["__hash__"]


def _add_stand_ins(
    namespace: dict[str, Any], written: list[type], options: dict[str, Any]
) -> dict[str, Any]:
    """Methods that write the class (``written[0]`` once made), then call what was written.

    Each is put in ``namespace`` unless the class statement defined that method, or
    dataclasses will not write it (``repr=False``, ``eq=False``, not frozen): what the class
    inherits is right already. ``__init__`` and ``__setstate__``, which make instances, are
    always stood in for. Returns those put, by name.
    """

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _written(written).__init__(self, *args, **kwargs)

    def __repr__(self: Any) -> str:
        shown: str = _written(written).__repr__(self)
        return shown

    def __eq__(self: Any, other: object) -> bool:
        equal: bool = _written(written).__eq__(self, other)
        return equal

    def __hash__(self: Any) -> int:
        written_hash = _written(written).__hash__
        if written_hash is None:
            raise TypeError(f"unhashable type: {type(self).__name__!r}")
        hashed: int = written_hash(self)
        return hashed

    def __setstate__(self: Any, state: Any) -> None:
        _written(written)
        _set_state(self, state)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        _written(written).__setattr__(self, name, value)

    def __delattr__(self: Any, name: str) -> None:
        _written(written).__delattr__(self, name)

    methods: list[Callable[..., Any]] = [__init__, __setstate__]
    if options.get("repr", True):
        methods.append(__repr__)
    if options.get("eq", True):
        methods.append(__eq__)
    if options.get("eq", True) or options.get("unsafe_hash"):  # settled by _settle_hash
        methods.append(__hash__)
    if options.get("frozen"):
        methods += [__setattr__, __delattr__]
    put: dict[str, Any] = {}
    for fn in methods:
        if fn.__name__ not in namespace:
            namespace[fn.__name__] = put[fn.__name__] = fn
    return put


#: The code of every stand-in method (each class has its own functions, of this code).
_STAND_IN_CODE = frozenset(
    c for c in _add_stand_ins.__code__.co_consts if isinstance(c, types.CodeType)
)


def _is_stand_in(value: object) -> bool:
    """Whether a class attribute is one of the stand-ins."""
    return isinstance(value, _Asked) or getattr(value, "__code__", None) in _STAND_IN_CODE


def _written(written: list[type]) -> Any:
    """The stand-ins' class, written (its functions are called unbound, with an instance)."""
    realize(written[0])
    return written[0]


def _set_state(obj: Any, state: Any) -> None:
    """Set an unpickled instance's state, its class written: as :mod:`pickle` would."""
    setstate = getattr(type(obj), "__setstate__", None)
    if setstate is not None and not _is_stand_in(setstate):
        setstate(obj, state)
        return
    inner, slotted = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
    if inner:
        obj.__dict__.update(inner)
    for name, value in (slotted or {}).items():
        setattr(obj, name, value)  # as pickle and copy set slots


def _field_names(cls: type) -> list[str]:
    """Every field of ``cls``, in :mod:`dataclasses` order, without writing any class."""
    names: dict[str, None] = {}
    for base in reversed(cls.__mro__[1:]):
        waiting = _WAITING.get(base)
        if waiting is not None:
            names.update(dict.fromkeys(waiting.fields))
        elif _FIELDS in base.__dict__:
            names.update(dict.fromkeys(f.name for f in dataclasses.fields(base)))
    module = sys.modules.get(cls.__module__)
    scope = vars(module) if module is not None else {}
    for name, annotation in inspect.get_annotations(cls).items():
        if not _declares_no_field(annotation, scope):
            names[name] = None
    return list(names)


def _declares_no_field(annotation: Any, scope: dict[str, Any]) -> bool:
    """Whether an annotation is ``ClassVar``, ``InitVar`` or ``KW_ONLY``.

    One written as text is read as :mod:`dataclasses` reads it: its name looked up in the
    class's module.
    """
    if isinstance(annotation, str):
        head = annotation.split("[", 1)[0].strip()
        first, _, rest = head.partition(".")
        found = scope.get(first)
        for part in rest.split(".") if rest else ():
            found = getattr(found, part, None)
        annotation = found
    if isinstance(annotation, dataclasses.InitVar):
        return True
    return any(annotation is kind for kind in _NOT_FIELDS) or (
        getattr(annotation, "__origin__", None) is typing.ClassVar
    )


def _slots_of(cls: type) -> Iterable[str]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else slots


#: What holds a method's function: the descriptors a class statement may hold functions in.
_HOLDERS = (
    types.FunctionType, staticmethod, classmethod, property, functools.cached_property,
    functools.partialmethod,
)  # fmt: skip


def _functions(values: Iterable[Any]) -> list[types.FunctionType]:
    """The functions of these namespace values: methods, and what wraps or is wrapped."""
    found: list[types.FunctionType] = []
    seen: set[int] = set()
    stack: list[Any] = [value for value in values if isinstance(value, _HOLDERS) or _wraps(value)]
    while stack:
        value = stack.pop()
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, types.FunctionType):
            found.append(value)
            stack.append(getattr(value, "__wrapped__", None))
            for cell in value.__closure__ or ():
                try:
                    inner = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if isinstance(inner, types.FunctionType):
                    stack.append(inner)
        elif isinstance(value, staticmethod | classmethod):
            stack.append(value.__func__)
        elif isinstance(value, property):
            stack.extend((value.fget, value.fset, value.fdel))
        elif isinstance(value, functools.cached_property | functools.partialmethod):
            stack.append(value.func)
        elif _wraps(value):  # functools.lru_cache, and the like
            stack.append(vars(value)["__wrapped__"])
    return found


def _wraps(value: object) -> bool:
    """Whether a callable that is not a function wraps one (``functools.update_wrapper``)."""
    try:
        return callable(value) and "__wrapped__" in vars(value)
    except TypeError:  # no __dict__
        return False


def _repoint(values: Iterable[Any], old: type, new: type) -> None:
    """Point the closure cells of these values' functions that hold ``old`` at ``new``."""
    for fn in _functions(values):
        for cell in fn.__closure__ or ():
            try:
                if cell.cell_contents is old:
                    cell.cell_contents = new
            except ValueError:
                continue


def realize(cls: type) -> None:
    """Write ``cls``'s dataclass methods now, if they are not written yet (thread-safe).

    Raises:
        TypeError: The class is declared wrong (as :func:`dataclasses.dataclass` says), or
            it still has its stand-ins but nothing to write them from (it was pickled by
            value before it was written).
        Exception: What a :func:`when_written` hook raised (the class is written).
    """
    with _LOCK:
        waiting = _WAITING.get(cls)
        if waiting is None:
            if _is_stand_in(cls.__dict__.get("__init__")):
                raise TypeError(
                    f"{cls.__qualname__} was copied (pickled by value) before its dataclass "
                    "methods were written: write them first (taskloom._dataclass.realize)"
                )
            return
        if waiting.error is not None:  # the template is half processed: not tried again
            raise type(waiting.error)(*waiting.error.args)
        if waiting.writing:
            return  # by this thread, which holds the lock: a hook asked about the class
        waiting.writing = True
        try:
            _write(waiting)
        except Exception as exc:
            waiting.error = exc
            raise
        except BaseException:  # a Ctrl-C: the next use writes it from the start
            _restore(waiting)
            raise
        try:
            _run_hooks(waiting)
        finally:
            del _WAITING[waiting.made]  # last: a thread that sees it waiting waits on the lock


def _run_hooks(waiting: _Waiting) -> None:
    """Run the class's :func:`when_written` hooks, each of them; raise the first error."""
    failed: Exception | None = None
    for hook in waiting.hooks:
        try:
            hook(waiting.made)
        except Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed


def _restore(waiting: _Waiting) -> None:
    """Put back the template as the class statement made it, to be written again."""
    template = waiting.template
    for name in list(template.__dict__):
        if name not in waiting.before:
            delattr(template, name)
    for name, value in waiting.before.items():
        if name not in _OWN_DESCRIPTORS and template.__dict__.get(name, _Waiting) is not value:
            setattr(template, name, value)
    waiting.writing = False


def _write(waiting: _Waiting) -> None:
    """Run dataclasses on the template; copy what it added onto the class made.

    ``__setstate__`` and ``__init__`` are set last: until then a thread that makes or
    unpickles an instance reaches their stand-ins, which wait for the lock.
    """
    template, made = waiting.template, waiting.made
    # With slots=True its methods are written for slots (a field set by no argument is set
    # from its default: there is no class attribute to read it from) and a slotted class
    # is made of the template, which is dropped: ``made`` has its slots already.
    dataclasses.dataclass(template, **waiting.options)
    slots = frozenset(made.__dict__.get("__slots__", ()))
    added = {
        name: value
        for name, value in template.__dict__.items()
        if waiting.before.get(name, _Waiting) is not value and name not in slots
    }
    _repoint(added.values(), template, made)
    last = {name: added.pop(name, None) for name in ("__setstate__", "__init__")}
    for name, value in added.items():
        _put(waiting, name, value)
    for name in waiting.before:  # a field's default that dataclasses took off the class
        if name not in template.__dict__ and name not in slots and name in made.__dict__:
            delattr(made, name)
    for name, stand_in in waiting.stand_ins.items():  # those nothing replaces
        if name not in last and made.__dict__.get(name) is stand_in:
            delattr(made, name)
    if isinstance(made, abc.ABCMeta):
        abc.update_abstractmethods(made)  # type: ignore[arg-type]
    for name, value in last.items():
        if value is not None:
            _put(waiting, name, value)
        elif made.__dict__.get(name, _Waiting) is waiting.stand_ins.get(name):
            delattr(made, name)


def _put(waiting: _Waiting, name: str, value: Any) -> None:
    """Set what dataclasses wrote on the class made, unless it was set there since."""
    if waiting.made.__dict__.get(name, _Waiting) is waiting.set.get(name, _Waiting):
        setattr(waiting.made, name, value)  # else kept: a faster __init__, say


def realize_all() -> None:
    """Write the methods of every class still waiting for its first use.

    A class declared wrong is passed over: its first use raises what dataclasses says.
    """
    with _LOCK:
        for cls in list(_WAITING):
            try:
                realize(cls)
            except Exception:  # raised again at the class's first use
                continue


def realize_module(name: str) -> None:
    """Write every class still waiting that module ``name`` defines."""
    with _LOCK:
        for cls in [c for c in _WAITING if c.__module__ == name]:
            realize(cls)


def when_written(cls: type, hook: Callable[[type], None]) -> None:
    """Run ``hook(cls)`` once ``cls``'s dataclass methods are written (now, if they are)."""
    with _LOCK:
        waiting = _WAITING.get(cls)
        if waiting is None:
            hook(cls)
        else:
            waiting.hooks.append(hook)


def declared_frozen(cls: type) -> bool | None:
    """Whether ``cls`` itself is declared a frozen dataclass, without writing it.

    None: ``cls`` is not declared a dataclass (it may inherit from one).
    """
    waiting = _WAITING.get(cls)
    if waiting is not None:
        return bool(waiting.options.get("frozen"))
    params = cls.__dict__.get(_PARAMS)
    return None if params is None else bool(params.frozen)


def _frozen_getstate(self: Any) -> list[Any]:
    """A frozen slotted instance's state: its fields' values (as :mod:`dataclasses` pickles)."""
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _frozen_setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


def _dataclass(cls: type[_T] | None = None, /, **options: Any) -> Any:
    """:func:`dataclasses.dataclass`, its methods written on first use (see the module)."""

    def wrap(cls: type[_T]) -> type[_T]:
        return _deferred(cls, dict(options))

    return wrap if cls is None else wrap(cls)


if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:
    dataclass = _dataclass

__all__ = [
    "dataclass", "declared_frozen", "realize", "realize_all", "realize_module", "when_written",
]  # fmt: skip

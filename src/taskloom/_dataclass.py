"""Dataclasses whose generated methods are written when the class is first used.

:func:`dataclasses.dataclass` writes and compiles a class's ``__init__``, ``__repr__`` and
``__eq__`` (a frozen class's ``__setattr__``, ``__delattr__`` and ``__hash__`` too) when the
class is defined: 0.2 to 0.5 ms a class. Most of taskloom's records are defined on the way to
a session's first request and never made in it (the states of task kinds it does not start,
the rows of tables it does not read), so :func:`dataclass` here, called as that one is, leaves
the work to the class's first use:

- its first instance (its ``__init__``, or unpickling, which calls ``__setstate__``);
- or any question about it: :func:`dataclasses.fields`, :func:`~dataclasses.replace`,
  :func:`~dataclasses.is_dataclass` and whatever else reads ``__dataclass_fields__`` or
  ``__dataclass_params__``.

The class returned is a new class made from the class statement's namespace, as
``slots=True`` makes one (here whether or not slots are asked for, and with its slots at
once, as slots cannot be added later). The class statement's own class is kept as a template:
the first use runs :func:`dataclasses.dataclass` on it, then copies what that added onto the
returned class, ``__init__`` last, under a lock, so that a thread using the class meanwhile
waits for it rather than seeing half a class. Closure cells (``super()`` in a method, and the
class a frozen ``__setattr__`` checks) are pointed at the returned class.

A class that brings its own ``__init__``, ``__setstate__`` or ``__slots__`` has nothing to
wait for and is made at once. :func:`realize_all` makes every class still waiting (a process
about to fork children that will use them, a test).

Type checkers see :func:`dataclasses.dataclass` itself.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

_T = TypeVar("_T")
_FIELDS = "__dataclass_fields__"
_PARAMS = "__dataclass_params__"
#: What a class may bring that the first use could not replace or wait in.
_OWN_METHODS = ("__init__", "__setstate__", "__slots__")
#: Annotations that declare no field (``ClassVar``, ``InitVar``, the ``KW_ONLY`` marker).
_NOT_FIELDS = frozenset({"ClassVar", "InitVar", "KW_ONLY"})
#: The namespace entries a class statement's class has that its remake must not copy.
_OWN_DESCRIPTORS = ("__dict__", "__weakref__")

#: Held while a class is made, and by anything that waits for one being made.
_LOCK = threading.RLock()


class _Waiting:
    """A class whose dataclass methods are not written yet, and how to write them."""

    __slots__ = ("before", "fields", "made", "options", "slots", "template")

    def __init__(
        self, made: type, template: type, options: dict[str, Any], fields: list[str]
    ) -> None:
        self.made = made
        self.template = template
        self.options = options
        #: Every field's name, the bases' first (the slots, for a slotted class).
        self.fields = fields
        self.slots = frozenset(made.__dict__.get("__slots__", ()))
        #: The template's namespace before :mod:`dataclasses` added to it.
        self.before = dict(template.__dict__)


#: The classes waiting for their first use, by class.
_WAITING: dict[type, _Waiting] = {}


class _Realizing:
    """Stands for ``__dataclass_fields__`` or ``__dataclass_params__`` until the class is made."""

    __slots__ = ("name", "owner")

    def __init__(self, owner: type, name: str) -> None:
        self.owner = owner
        self.name = name

    def __get__(self, obj: object, cls: type | None = None) -> Any:
        realize(self.owner)
        return self.owner.__dict__[self.name]


def _deferred(cls: type, options: dict[str, Any]) -> type:
    own = cls.__dict__
    if any(name in own for name in _OWN_METHODS) or _FIELDS in own:
        return dataclasses.dataclass(cls, **options)
    slots = options.get("slots", False)
    weakref_slot = options.get("weakref_slot", False)
    if weakref_slot and not slots:
        raise TypeError("weakref_slot is True but slots is False")
    fields = _field_names(cls)
    namespace = {k: v for k, v in own.items() if k not in _OWN_DESCRIPTORS}
    if slots:
        inherited = {name for base in cls.__mro__[1:-1] for name in _slots_of(base)}
        wanted = [*fields, *(["__weakref__"] if weakref_slot else [])]
        namespace["__slots__"] = tuple(name for name in wanted if name not in inherited)
        for name in fields:
            namespace.pop(name, None)  # a default is the template's; the slot is the made's
        if options.get("frozen"):
            namespace.setdefault("__getstate__", _frozen_getstate)
            namespace.setdefault("__setstate__", _frozen_setstate)
    namespace.setdefault("__setstate__", _setstate_first)
    namespace["__init__"] = _init_first
    made: type = type(cls)(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    for name in (_FIELDS, _PARAMS):
        setattr(made, name, _Realizing(made, name))
    _repoint(namespace.values(), cls, made)
    _WAITING[made] = _Waiting(made, cls, options, fields)
    return made


def _field_names(cls: type) -> list[str]:
    """Every field of ``cls``, in :mod:`dataclasses` order, without making any class."""
    names: dict[str, None] = {}
    for base in reversed(cls.__mro__[1:]):
        waiting = _WAITING.get(base)
        if waiting is not None:
            names.update(dict.fromkeys(waiting.fields))
        elif _FIELDS in base.__dict__:
            names.update(dict.fromkeys(f.name for f in dataclasses.fields(base)))
    for name, annotation in inspect.get_annotations(cls).items():
        if not _declares_no_field(annotation):
            names[name] = None
    return list(names)


def _declares_no_field(annotation: Any) -> bool:
    if isinstance(annotation, str):  # postponed (``from __future__ import annotations``)
        head = annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1]
        return head in _NOT_FIELDS
    if annotation is dataclasses.KW_ONLY or annotation is dataclasses.InitVar:
        return True
    if isinstance(annotation, dataclasses.InitVar):
        return True
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


def _slots_of(cls: type) -> Iterable[str]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else slots


def _repoint(values: Iterable[Any], old: type, new: type) -> None:
    """Point the closure cells of these functions that hold ``old`` at ``new``."""
    for value in values:
        for fn in (value, *(getattr(value, a, None) for a in ("__func__", "fget", "fset"))):
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    if cell.cell_contents is old:
                        cell.cell_contents = new
                except ValueError:  # an empty cell
                    continue


def realize(cls: type) -> None:
    """Write ``cls``'s dataclass methods now, if they are not written yet (thread-safe)."""
    with _LOCK:
        waiting = _WAITING.get(cls)
        if waiting is None:
            return
        template, made = waiting.template, waiting.made
        # With slots=True its methods are written for slots (a field set by no argument is
        # set from its default: there is no class attribute to read it from) and a slotted
        # class made of the template, which is dropped: ``made`` has its slots already.
        dataclasses.dataclass(template, **waiting.options)
        added = {
            name: value
            for name, value in template.__dict__.items()
            if waiting.before.get(name, _Waiting) is not value and name not in waiting.slots
        }
        _repoint(added.values(), template, made)
        init = added.pop("__init__", None)
        for name, value in added.items():
            setattr(made, name, value)
        for name in waiting.before:  # a field's default that dataclasses took off the class
            gone = name not in template.__dict__ and name not in waiting.slots
            if gone and name in made.__dict__:
                delattr(made, name)
        if made.__dict__.get("__setstate__") is _setstate_first:
            delattr(made, "__setstate__")
        if isinstance(made, abc.ABCMeta):
            abc.update_abstractmethods(made)  # type: ignore[arg-type]
        del _WAITING[made]
        # Last: a thread that finds the stand-in waits on the lock, then finds all of it.
        if init is not None:
            made.__init__ = init  # type: ignore[misc]
        else:
            delattr(made, "__init__")


def realize_all() -> None:
    """Write the methods of every class still waiting for its first use."""
    with _LOCK:
        for cls in list(_WAITING):
            realize(cls)


def declared_frozen(cls: type) -> bool | None:
    """Whether ``cls`` itself is declared a frozen dataclass, without making it.

    None: ``cls`` is not declared a dataclass (it may inherit from one).
    """
    waiting = _WAITING.get(cls)
    if waiting is not None:
        return bool(waiting.options.get("frozen"))
    params = cls.__dict__.get(_PARAMS)
    return None if params is None else bool(params.frozen)


def _init_first(self: Any, *args: Any, **kwargs: Any) -> None:
    """Stands for ``__init__`` until the class is made, which it does first."""
    init: Callable[..., None] = _made_for(self).__init__  # type: ignore[misc]
    init(self, *args, **kwargs)


def _setstate_first(self: Any, state: Any) -> None:
    """Unpickles an instance of a class not made yet: makes it, then sets ``state``."""
    cls = _made_for(self)
    setstate = cls.__dict__.get("__setstate__")
    if setstate is not None:
        setstate(self, state)
        return
    inner, slotted = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
    if inner:
        self.__dict__.update(inner)
    for name, value in (slotted or {}).items():
        object.__setattr__(self, name, value)


def _made_for(self: Any) -> type:
    """Make the class whose stand-in was reached through ``self``; that class."""
    for cls in type(self).__mro__:
        if cls in _WAITING or cls.__dict__.get("__init__") is _init_first:
            realize(cls)
            return cls
    raise TypeError(f"{type(self).__qualname__} has no class waiting to be made")


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

__all__ = ["dataclass", "declared_frozen", "realize", "realize_all"]

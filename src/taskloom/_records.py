"""Plain records with a JSON form, and the parser that reads that form back, checked.

The machinery of :mod:`taskloom.messages` (kept apart to keep that module about messages):
a :class:`Record` compares, prints, copies and dumps itself by its declared fields, and keeps
the fields from outside it does not declare in ``extra``; :meth:`Record.from_dict` reads one
from data from outside, checking each field as the pydantic models the messages once were
did (their lax mode: an integral float or a string of digits is a count, ``1`` or ``"true"``
is true), and raises :class:`MessageError` naming the path of each problem in pydantic's
words for the common cases (a union's field gives one problem where pydantic gave one per
member, and a few odd values are worded otherwise).

A record class declares ``_FIELDS`` (its fields in JSON order), ``_CHECKS`` (a check per
field), ``_REQUIRED`` and, for a block, its ``type`` tag as a class attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self, TypeVar

Errors = list[tuple[str, str]]
#: A field's check: its value, its path, where problems go; the value as kept (or BAD).
Check = Callable[[Any, str, Errors], Any]

#: What a check returns for a value it refused (the problem is in ``errors``).
BAD: Any = object()
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class MessageError(ValueError):
    """Data that is not a valid message (or block, or usage): every problem, by field path.

    Attributes:
        errors: ``(path, problem)`` pairs in the order found; a path such as
            ``content[0].source.media_type`` (empty for the value itself).
    """

    def __init__(self, errors: Errors) -> None:
        self.errors = errors
        said = "; ".join(f"{path}: {problem}" if path else problem for path, problem in errors)
        super().__init__(f"invalid message: {said}")


class Record:
    """Equality, repr, dumps and copies by declared field; undeclared ones kept in ``extra``."""

    __slots__ = ("extra",)
    #: The declared fields in their JSON order (a block's ``type`` aside: it is its class's).
    _FIELDS: ClassVar[tuple[str, ...]]
    #: Fields never serialised (taskloom's own marks).
    _HIDDEN: ClassVar[frozenset[str]] = frozenset()
    #: Each declared field's check, and the fields data from outside must give.
    _CHECKS: ClassVar[dict[str, Check]]
    _REQUIRED: ClassVar[frozenset[str]] = frozenset()
    #: False: undeclared fields from outside are dropped (pydantic's ``extra="ignore"``).
    _KEEPS_EXTRA: ClassVar[bool] = True
    extra: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_CHECKS" in cls.__dict__:  # the fields are those checked, in the same order
            cls._FIELDS = tuple(cls._CHECKS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.extra == other.extra and all(
            getattr(self, f) == getattr(other, f) for f in self._FIELDS
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the pydantic models were

    def __repr__(self) -> str:
        shown = [f"{f}={getattr(self, f)!r}" for f in self._FIELDS]
        shown += [f"{k}={v!r}" for k, v in self.extra.items()]
        return f"{type(self).__name__}({', '.join(shown)})"

    def replace(self, **changes: Any) -> Self:
        """A shallow copy with ``changes`` (declared fields only) made.

        Raises:
            TypeError: A name that is not a declared field.
        """
        unknown = changes.keys() - set(self._FIELDS)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        new = object.__new__(type(self))
        for name in self._FIELDS:
            setattr(new, name, changes[name] if name in changes else getattr(self, name))
        new.extra = dict(self.extra)
        return new

    def dump(self) -> dict[str, Any]:
        """The JSON form, fields that are None left out (pydantic's ``exclude_none``)."""
        return self._dump_fields({})

    def _dump_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the fields and extras that are not None added."""
        for name in self._FIELDS:
            value = getattr(self, name)
            if value is not None and name not in self._HIDDEN:
                data[name] = _dumped(value)
        for key, value in self.extra.items():
            if value is not None:
                data[key] = value
        return data

    def checked(self) -> Self:
        """This record, once its fields and those of the records in it pass the checks.

        The checks are :meth:`from_dict`'s: a record built from a provider's stream was never
        read through it.

        Raises:
            MessageError: A field holds what :meth:`from_dict` would refuse; it names each.
        """
        errors: Errors = []
        self._check_into("", errors)
        if errors:
            raise MessageError(errors)
        return self

    def _check_into(self, path: str, errors: Errors) -> None:
        for name, check in self._CHECKS.items():
            value, at = getattr(self, name), _at(path, name)
            if value is None and name not in self._REQUIRED:
                continue
            if isinstance(value, Record):
                value._check_into(at, errors)
            elif isinstance(value, list) and any(isinstance(v, Record) for v in value):
                for i, item in enumerate(value):
                    if isinstance(item, Record):
                        item._check_into(_at(at, i), errors)
                    else:
                        check([item], at, errors)
            else:
                check(value, at, errors)

    @classmethod
    def from_dict(cls, raw: object) -> Self:
        """One read from data from outside (its JSON form), checked; an instance taken as is.

        Raises:
            MessageError: ``raw`` is not a valid one; it names the path of each problem.
        """
        errors: Errors = []
        made = parse_record(cls, raw, "", errors)
        if made is None:
            raise MessageError(errors)
        return made


R = TypeVar("R", bound=Record)


def _dumped(value: Any) -> Any:
    """A field's JSON form: records dumped, the top level of a list or dict copied.

    What the containers hold is shared with the record (a tool call's nested input): a
    caller that changes a dump deeper than its top level copies it first, as the request
    builders do.
    """
    if isinstance(value, Record):
        return value.dump()
    if isinstance(value, list):
        return [v.dump() if isinstance(v, Record) else v for v in value]
    if isinstance(value, dict):
        return dict(value)
    return value


def parse_record(cls: type[R], raw: object, path: str, errors: Errors) -> R | None:
    """``raw`` read as a ``cls`` (an instance of it taken as it is); None when it is not one.

    Args:
        cls: The class to read.
        raw: The data: a dict of the JSON form.
        path: Where ``raw`` is, for the problems' paths (empty at the top).
        errors: Where each problem is added, as ``(path, problem)``.
    """
    if isinstance(raw, cls):
        return raw
    if not isinstance(raw, dict):
        errors.append((path, "Input should be a valid dictionary"))
        return None
    before = len(errors)
    checks = cls._CHECKS
    tag = getattr(cls, "type", None)
    if tag is not None and "type" in raw and raw["type"] != tag:
        errors.append((_at(path, "type"), f"Input should be '{tag}'"))
    fields: dict[str, Any] = {}
    for name, check in checks.items():
        if name in raw:
            value = raw[name]
            if _PLAIN.get(check) is type(value):
                fields[name] = value  # the common case, without a call or a path made
            else:
                fields[name] = check(value, _at(path, name), errors)
        elif name in cls._REQUIRED:
            errors.append((_at(path, name), "Field required"))
    if len(errors) > before:
        return None
    made = cls(**fields)
    if cls._KEEPS_EXTRA:
        # A message's "type" (full() writes "message") is kept as it came, as pydantic did.
        made.extra = {k: v for k, v in raw.items() if k not in checks and (k != "type" or not tag)}
    return made


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _fail(errors: Errors, path: str, problem: str) -> Any:
    errors.append((path, problem))
    return BAD


def string(value: Any, path: str, errors: Errors) -> Any:
    """Check: a string."""
    if isinstance(value, str):
        return value
    return _fail(errors, path, "Input should be a valid string")


def optional_string(value: Any, path: str, errors: Errors) -> Any:
    """Check: a string or None."""
    return None if value is None else string(value, path, errors)


def integer(value: Any, path: str, errors: Errors) -> Any:
    """Check: an integer (a bool, an integral float or a string of one taken)."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        return _fail(
            errors, path, "Input should be a valid integer, got a number with a fractional part"
        )
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return _fail(
                errors,
                path,
                "Input should be a valid integer, unable to parse string as an integer",
            )
    return _fail(errors, path, "Input should be a valid integer")


def boolean(value: Any, path: str, errors: Errors) -> Any:
    """Check: a bool (0 and 1, and words such as "true" and "no", taken)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    return _fail(errors, path, "Input should be a valid boolean")


def mapping(value: Any, path: str, errors: Errors) -> Any:
    """Check: a dict with string keys (kept as it is: the record copies it)."""
    if not isinstance(value, dict):
        return _fail(errors, path, "Input should be a valid dictionary")
    for key in value:
        if not isinstance(key, str):
            return _fail(errors, _at(path, str(key)), "Input should be a valid string")
    return value


def copied_mapping(value: Any, path: str, errors: Errors) -> Any:
    """Check: a dict with string keys, copied."""
    checked = mapping(value, path, errors)
    return checked if checked is BAD else dict(checked)


def list_of(item: Check, *, optional: bool = False) -> Check:
    """Check: a list (or tuple) of what ``item`` checks; None too when ``optional``."""

    def check(value: Any, path: str, errors: Errors) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, list | tuple):
            return _fail(errors, path, "Input should be a valid list")
        before = len(errors)
        items = [item(v, _at(path, i), errors) for i, v in enumerate(value)]
        return BAD if len(errors) > before else items

    return check


def either(kinds: tuple[type, ...], first: Check, second: Check, said: str) -> Check:
    """Check: ``first`` for a value of ``kinds``, else ``second`` for a list or tuple."""

    def check(value: Any, path: str, errors: Errors) -> Any:
        if isinstance(value, kinds):
            return first(value, path, errors)
        if isinstance(value, list | tuple):
            return second(value, path, errors)
        return _fail(errors, path, f"Input should be a valid {said}")

    return check


def literal(*allowed: str) -> Check:
    """Check: one of the strings ``allowed``."""
    quoted = [f"'{a}'" for a in allowed]
    said = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]

    def check(value: Any, path: str, errors: Errors) -> Any:
        if isinstance(value, str) and value in allowed:
            return value
        return _fail(errors, path, f"Input should be {said}")

    return check


def nested(cls: type[Record], *, optional: bool = True) -> Check:
    """Check: a ``cls`` (read from its JSON form); None too when ``optional``."""

    def check(value: Any, path: str, errors: Errors) -> Any:
        if value is None and optional:
            return None
        made = parse_record(cls, value, path, errors)
        return BAD if made is None else made

    return check


def tagged(*classes: type[Record]) -> Check:
    """Check: one of ``classes``, told apart by the ``type`` of its JSON form."""
    by_tag: dict[str, type[Record]] = {getattr(c, "type"): c for c in classes}  # noqa: B009
    tags = ", ".join(f"'{t}'" for t in by_tag)

    def check(value: Any, path: str, errors: Errors) -> Any:
        if isinstance(value, classes):
            return value
        if not isinstance(value, dict):
            return _fail(errors, path, "Input should be a valid dictionary")
        tag = value.get("type")
        if tag is None:
            return _fail(errors, path, "Unable to extract tag using discriminator 'type'")
        cls = by_tag.get(tag) if isinstance(tag, str) else None
        if cls is None:
            return _fail(
                errors,
                path,
                f"Input tag {str(tag)[:80]!r} found using 'type' does not match any of the "
                f"expected tags: {tags}",
            )
        made = parse_record(cls, value, path, errors)
        return BAD if made is None else made

    return check


#: Checks whose value of exactly this type is kept as it is (parse_record's fast path).
_PLAIN: dict[Check, type] = {string: str, integer: int}

"""A table of cluster.toml (or of a JSON document that has the same form, a
supervisor's child) as an attrs record, read through one cattrs converter.

It sits beside the layers, as ``_errors.py`` does, and imports none of them:
cluster.toml's reader (``cluster/config``) and the supervision layer's (a
``[[supervisor]]`` table, or a child ``start_child`` is sent as JSON) read
with the same converter, in the same words.

A table's schema is a frozen attrs class: its fields are the keys the table
may have (a field without a default is a key it must have), each field's
type says what its value is, and :func:`key` gives a field the words of its
error (what was expected) and, where the type is not enough, the check its
value must pass. :func:`read_table` checks the table's keys (``TableReader.keys``:
a missing key names its misspelling, an unknown one the nearest known key),
then structures it with :data:`converter`: a wrong value is a ``ConfigError``
naming the file, the key's path, what was expected and what it got, in the
words every reader of the file uses.

The converter is strict where TOML is: a string is a string (non-empty, or
any for :data:`Text`), true is not 1, a whole number is not a boolean; a list
(and only a list) becomes a ``tuple[X, ...]`` of its items each read as X, a
table (and only a table) a ``Mapping[str, X]``; a field that takes a program
or its command line is ``str | tuple[str, ...]``. An application on
the runtime gives its own tables' schemas the same way (``AppTable.schema``).
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, NewType, Protocol, TypeVar

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ClassValidationError

from ._errors import ConfigError

__all__ = [
    "Expected",
    "FieldError",
    "FileReader",
    "TableReader",
    "Text",
    "converter",
    "key",
    "read_table",
    "schema_keys",
    "schema_required",
]

T = TypeVar("T", bound=attrs.AttrsInstance)

#: A string that may be empty (an argument of a command line, an
#: environment variable's value): ``str`` is a non-empty one.
Text = NewType("Text", str)

#: The words of an error for a value of each plain type.
_TYPE_WORDS: Final = {
    str: "a non-empty string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
}


class TableReader(Protocol):
    """What reading a table needs of its reader (cluster.toml's:
    ``cluster/config/_reader.py``; a tree's: ``supervision/_declare.py``)."""

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        """Check the table's keys (raises ``ConfigError``)."""
        ...

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        """The error for a wrong value of ``key``."""
        ...


#: Makes the error for a field of a table whose value is wrong: (the field's
#: name, what was expected, what it got). ``read_table``'s own names the key's
#: path (``key 'node[0].listen': expected ..., got ...``); a table whose errors
#: have words of their own gives its own.
FieldError = Callable[[str, str, object], ConfigError]


class FileReader(TableReader, Protocol):
    """A reader of a file's tables (cluster.toml's: ``cluster/config/_reader.py``),
    for the checks whose errors name the file or whose paths start at its
    directory."""

    @property
    def path(self) -> Path:
        """The file."""
        ...


class Expected(ValueError):
    """A value that is not what its key takes: what was expected (and the
    key, when a field's check found it)."""

    def __init__(self, expected: str, key: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.key = key


def _string(value: object, _: type) -> str:
    if not isinstance(value, str) or not value:
        raise Expected(_TYPE_WORDS[str])
    return value


def _boolean(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise Expected(_TYPE_WORDS[bool])
    return value


def _whole(value: object, _: type) -> int:
    if type(value) is not int:
        raise Expected(_TYPE_WORDS[int])
    return value


def _number(value: object, _: type) -> float:
    if type(value) not in (int, float):
        raise Expected(_TYPE_WORDS[float])
    return float(value)  # type: ignore[arg-type]


def _text(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise Expected("a string")
    return value


def _is_tuple(kind: Any) -> bool:
    """``tuple[X, ...]``."""
    args = typing.get_args(kind)
    return typing.get_origin(kind) is tuple and len(args) == 2 and args[1] is Ellipsis


def _is_mapping(kind: Any) -> bool:
    """``Mapping[str, X]`` or ``dict[str, X]``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    return origin in (Mapping, dict) and len(args) == 2 and args[0] is str


def _tuple_hook(made: cattrs.Converter) -> Callable[[Any], Callable[[object, type], object]]:
    def factory(kind: Any) -> Callable[[object, type], object]:
        item = typing.get_args(kind)[0]

        def structure(value: object, _: type) -> tuple[object, ...]:
            if not isinstance(value, list | tuple):  # a string is not a list of its letters
                raise Expected("a list")
            return tuple(_item(made, part, item) for part in value)

        return structure

    return factory


def _mapping_hook(made: cattrs.Converter) -> Callable[[Any], Callable[[object, type], object]]:
    def factory(kind: Any) -> Callable[[object, type], object]:
        item = typing.get_args(kind)[1]

        def structure(value: object, _: type) -> dict[str, object]:
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise Expected("a table")
            return {name: _item(made, part, item) for name, part in value.items()}

        return structure

    return factory


def _item(made: cattrs.Converter, value: object, kind: Any) -> object:
    """An item of a list or a table, read as ``kind``: any error of it is the
    field's (its words say what the items are)."""
    if kind is Any:
        return value
    try:
        return made.structure(value, kind)
    except (ValueError, TypeError, cattrs.BaseValidationError):
        raise Expected("items of their type") from None


def _command(made: cattrs.Converter) -> Callable[[object, type], object]:
    """``str | tuple[str, ...]``: a program, or a list of a program and its arguments."""

    def structure(value: object, _: type) -> object:
        if isinstance(value, str):
            return _string(value, str)
        return made.structure(value, tuple[str, ...])

    return structure


def _converter() -> cattrs.Converter:
    # a field with a reader (key(read=...)) gets the value as the table has it
    made = cattrs.Converter(detailed_validation=True, prefer_attrib_converters=True)
    made.register_structure_hook(str, _string)
    made.register_structure_hook(Text, _text)
    made.register_structure_hook(bool, _boolean)
    made.register_structure_hook(int, _whole)
    made.register_structure_hook(float, _number)
    made.register_structure_hook_factory(_is_tuple, _tuple_hook(made))
    made.register_structure_hook_factory(_is_mapping, _mapping_hook(made))
    made.register_structure_hook(str | tuple[str, ...], _command(made))
    return made


#: The converter every table of cluster.toml is read with (strict scalars).
converter: Final = _converter()


def key(
    expected: str,
    check: Callable[[Any], bool] | None = None,
    *,
    default: Any = attrs.NOTHING,
    type_words: str | None = None,
    read: Callable[[Any], Any] | None = None,
) -> Any:
    """A field of a table's schema: ``expected`` is what the error for a wrong
    value says was expected (it may name other keys of the table, as
    ``{name!r}``); ``check``, a test the value must pass besides its type;
    ``type_words``, what the error says for a value of the wrong type, when
    not ``expected``; ``default``, its value when the key is absent (none:
    the key is required); ``read``, what makes the field's value (its type)
    of the value as the table has it, when the converter cannot (a rate's
    text into its record): it raises ``ValueError`` or ``ConfigError`` for a
    value it does not take."""

    def validate(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if check is None or value is None or value == attribute.default:
            return  # the default (the key is absent) is taken as it is
        if not check(value):
            raise Expected(expected, attribute.name)

    def convert(value: object, field: attrs.Attribute[Any]) -> object:
        if read is None or value is None or value is field.default:
            return value  # the default (the key is absent) is taken as it is
        try:
            return read(value)
        except (ValueError, ConfigError):
            raise Expected(expected, field.name) from None

    return attrs.field(
        default=default,
        validator=validate,
        converter=attrs.Converter(convert, takes_field=True) if read is not None else None,
        metadata={"expected": expected, "type_words": type_words or expected, "check": check},
    )


def schema_keys(schema: type[attrs.AttrsInstance]) -> frozenset[str]:
    """The keys a table of ``schema`` may have."""
    return frozenset(f.name for f in attrs.fields(schema))


def schema_required(schema: type[attrs.AttrsInstance]) -> tuple[str, ...]:
    """The keys a table of ``schema`` must have, in order."""
    return tuple(f.name for f in attrs.fields(schema) if f.default is attrs.NOTHING)


def read_table(
    reader: TableReader,
    table: Mapping[str, Any],
    prefix: str,
    kind: str,
    schema: type[T],
    *,
    error: FieldError | None = None,
) -> T:
    """The table ``table`` at ``prefix`` (e.g. ``router[0]``), of ``kind``
    (its name in ``KNOWN_KEYS`` or an application's table), as a ``schema``
    record: its keys checked, then each value. ``error`` makes the error for
    a wrong value (default: the reader's, naming the key's path).

    Raises:
        ConfigError: naming the file, the key's path, what was expected and
            what it got (or the missing key's misspelling, or the unknown
            key's nearest known one).
    """
    reader.keys(table, prefix, kind)
    if error is None:
        dot = f"{prefix}." if prefix else ""

        def error(name: str, expected: str, got: object) -> ConfigError:
            return reader.error(f"{dot}{name}", expected, got)

    attrs.resolve_types(schema)
    fields = {f.name: f for f in attrs.fields(schema)}
    given = {name: value for name, value in table.items() if name in fields}
    try:
        return converter.structure(given, schema)
    except ClassValidationError as exc:  # a value of the wrong type, or a field's check
        failed = {_field_of(error): error for error in exc.exceptions}
        order = list(fields)  # the first in the table's order is named
        first = min((f for f in failed if f in fields), key=order.index, default=order[0])
        if first not in failed:  # an error of no field (none is known): its own words
            raise reader.error(prefix or kind, f"a table its schema reads ({exc})", None) from None
        _check_before(error, table, fields, order[: order.index(first)], given)
        wrong = failed[first]
        words = wrong.expected if isinstance(wrong, Expected) and wrong.key else None
        raise _error(error, fields[first], table, words) from None
    except Expected as exc:  # a field's check (attrs runs them in the fields' order)
        raise _error(error, fields[exc.key], table, exc.expected) from None


def _check_before(
    error: FieldError,
    table: Mapping[str, Any],
    fields: Mapping[str, attrs.Attribute[Any]],
    names: list[str],
    given: Mapping[str, Any],
) -> None:
    """Raise the error of the first of ``names`` (fields whose values are of
    their types) whose check fails: a table's first wrong value is named,
    whether its type or its check is wrong."""
    for name in names:
        check = fields[name].metadata.get("check")
        value = given.get(name)
        if check is not None and value is not None and not check(value):
            raise _error(error, fields[name], table, fields[name].metadata["expected"])


def _field_of(error: Exception) -> str:
    """The field an error of the converter is about: its check's key, else
    the attribute its note names."""
    if isinstance(error, Expected) and error.key:
        return error.key
    notes = [n for n in getattr(error, "__notes__", ()) if isinstance(n, AttributeValidationNote)]
    return notes[0].name if notes else ""


def _error(
    error: FieldError,
    field: attrs.Attribute[Any],
    table: Mapping[str, Any],
    expected: str | None,
) -> ConfigError:
    words = expected or field.metadata.get("type_words") or _TYPE_WORDS.get(field.type, "")  # type: ignore[arg-type]
    shown = {k: v for k, v in table.items() if isinstance(k, str)}
    # a template whose other key is absent or wrong stays as it is written
    with contextlib.suppress(KeyError, IndexError, ValueError):
        words = words.format_map(shown)
    return error(field.name, words, table.get(field.name))

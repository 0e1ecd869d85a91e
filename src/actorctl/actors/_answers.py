"""An actor's answer read back into its record, with the error for a malformed one.

A document that crosses a module boundary (a node's status, a control
command's answer) is a frozen attrs record where it is made and where it is
read; it is a dict only on the wire, where a handler's reply carries it. Each
such record has one function per direction: ``wire()`` (the record as the
reply's body) and ``from_wire(value, where)`` (a reply's body as the record),
which reads through :func:`read_answer`.

The other side of the wire may be another release, or may lie: a value of the
wrong type, a missing field, a list where an object was expected. Each is a
:class:`~actorctl.WireFormatError` naming where the answer came from, the
field's path and what was expected, never a traceback. A field the record
does not know is ignored (a newer release may add one); scalars are strict
(true is not 1, a whole number is not a boolean, a string is not a list).
"""

from __future__ import annotations

import enum
import typing
from collections import abc
from collections.abc import Mapping
from typing import Any, Final, TypeVar, overload

import attrs
import cattrs
from cattrs import cols

from .._errors import WireFormatError

__all__ = ["answer_converter", "explain", "read_answer"]

T = TypeVar("T")

#: The words of an error for a value of each plain type.
_WORDS: Final = {
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
}


def _string(value: object, _: type) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected {_WORDS[str]}, got {value!r:.60}")
    return value


def _boolean(value: object, _: type) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected {_WORDS[bool]}, got {value!r:.60}")
    return value


def _whole(value: object, _: type) -> int:
    if type(value) is not int:
        raise ValueError(f"expected {_WORDS[int]}, got {value!r:.60}")
    return value


def _number(value: object, _: type) -> float:
    if type(value) not in (int, float):
        raise ValueError(f"expected {_WORDS[float]}, got {value!r:.60}")
    return float(value)  # type: ignore[arg-type]


def _member(value: object, kind: type[enum.Enum]) -> enum.Enum:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"expected one of {known}, got {value!r:.60}") from None


def _origin(kind: Any) -> Any:
    return typing.get_origin(kind)


def _converter() -> cattrs.Converter:
    made = cattrs.Converter(detailed_validation=True)
    made.register_structure_hook(str, _string)
    made.register_structure_hook(bool, _boolean)
    made.register_structure_hook(int, _whole)
    made.register_structure_hook(float, _number)
    made.register_structure_hook(enum.Enum, _member)
    made.register_structure_hook(enum.StrEnum, _member)  # before str, in its MRO

    def guarded(make: Any, expected: Any, words: str) -> Any:
        def factory(kind: Any) -> Any:
            inner = make(kind, made)

            def structure(value: object, _: type) -> Any:
                if not isinstance(value, expected):
                    raise ValueError(f"expected {words}, got {value!r:.60}")
                return inner(value, kind)

            return structure

        return factory

    # cattrs' own hooks for lists and objects, behind a check of what came:
    # a string is not a list of its letters.
    made.register_structure_hook_factory(
        lambda kind: _origin(kind) is tuple,
        guarded(cols.homogenous_tuple_structure_factory, list | tuple, "a list"),
    )
    made.register_structure_hook_factory(
        lambda kind: _origin(kind) is list,
        guarded(cols.list_structure_factory, list | tuple, "a list"),
    )
    made.register_structure_hook_factory(
        lambda kind: _origin(kind) in (dict, abc.Mapping),
        guarded(cols.mapping_structure_factory, Mapping, "an object"),
    )
    return made


#: The converter answers are read with (strict scalars, lists and objects checked).
answer_converter: Final = _converter()


@overload
def read_answer(value: object, record: type[T], where: str) -> T: ...


@overload
def read_answer(value: object, record: Any, where: str) -> Any: ...


def read_answer(value: object, record: Any, where: str) -> Any:
    """``value`` (a reply's body) as a ``record`` (an attrs class, or a
    typed list or mapping of them: ``tuple[Row, ...]``, ``dict[str, int]``).

    Args:
        where: what answered what, for the error (``"node n1's answer to
            'fill'"``).

    Raises:
        WireFormatError: it is not such a record: naming ``where``, each
            field that is wrong (its path) and what was expected.
    """
    if attrs.has(record) and not isinstance(value, Mapping):
        raise WireFormatError(f"{where} is malformed: expected an object, got {value!r:.80}")
    try:
        return answer_converter.structure(value, record)
    except cattrs.BaseValidationError as exc:
        raise WireFormatError(f"{where} is malformed: {explain(exc, '$')}") from None
    except (ValueError, TypeError) as exc:  # a field's own check
        raise WireFormatError(f"{where} is malformed: {exc}") from None


def explain(exc: Exception, path: str) -> str:
    """What is wrong, said by cattrs' error ``exc`` (or a hook's own), each
    with its path from ``path``."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, path=path, format_exception=_words))
    return f"{exc} @ {path}"


def _words(exc: BaseException, kind: type | None) -> str:
    if isinstance(exc, KeyError):
        return "missing"
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    name = getattr(kind, "__name__", None) or str(kind)
    return f"expected {name} ({type(exc).__name__}: {exc})"

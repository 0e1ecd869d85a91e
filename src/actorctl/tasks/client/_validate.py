"""Checks made when something is sent, so that a mistake is the sender's error
and never only a line in a worker's log: a task's arguments can be sent as
JSON, every pool and data sink a task names resolves, and an event's fields
are of its class's types.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import attrs
import cattrs

from ..._errors import ConfigError
from ...actors import BadArguments, converter, to_wire
from ...mailbox import json_dumps
from ..protocol._protocol import CHAIN_SEPARATOR, sink_list, unpack_chain
from ..protocol._send_options import SendOptions
from ._client import Directory

__all__ = ["check_event", "check_fields", "check_references", "wire_body"]

#: The field types checked exactly (a JSON value of another type is refused,
#: where a subscriber's conversion might have let it through as another value).
_EXACT: Final = MappingProxyType({int: (int,), float: (int, float), str: (str,), bool: (bool,)})

#: Whole numbers inside this bound always encode (a longer one may pass
#: Python's limit on the digits of an int's text).
_INT_BOUND: Final = 2**63


def wire_body(args: Sequence[Any], kwargs: Mapping[str, Any], *, check: bool) -> list[Any]:
    """A task message's body, ``[args, kwargs]`` in wire form (``to_wire``);
    with ``check``, known to encode as JSON (for a caller whose send is
    encoded in another thread, where the error could not reach it).

    Arguments that are all plain scalars (whole numbers, finite floats, ASCII
    strings, booleans, None) are their own wire form and always encode: they
    are neither converted nor encoded here (issue 30: most calls, once per task
    in the caller's thread).

    Raises:
        WireFormatError: (with ``check``) an argument that cannot be sent as JSON.
    """
    if _plain(args) and (not kwargs or _plain_keywords(kwargs)):
        return [list(args), dict(kwargs)]
    body = [to_wire(list(args)), to_wire(dict(kwargs))]
    if check:
        json_dumps(body)  # raises WireFormatError
    return body


def _plain(values: Iterable[Any]) -> bool:
    """Whether every value is a JSON scalar that always encodes (in a loop
    that calls nothing for the common kinds)."""
    for value in values:
        kind = type(value)
        if kind is int:
            if not -_INT_BOUND < value < _INT_BOUND:
                return False
        elif kind is float:
            if value - value != 0:  # inf or nan: not JSON
                return False
        elif kind is str:
            if not value.isascii():
                return False
        elif value is not None and kind is not bool:
            return False
    return True


def _plain_keywords(kwargs: Mapping[str, Any]) -> bool:
    return all(type(key) is str for key in kwargs) and _plain(kwargs.values())


def check_references(directory: Directory, sender: str, pool: str, options: SendOptions) -> None:
    """Every pool and sink that the options of a send (by ``sender``: "task
    NAME", "event NAME") name (its
    ``sinks``, its ``link`` and ``link_error`` callbacks, its chain's steps)
    is one the directory knows.

    Raises:
        ConfigError: naming the sender, the name that does not resolve, and the
            names the directory knows.
    """

    def resolve(what: str, name: str) -> None:
        try:
            directory.resolve(name)
        except ConfigError as exc:
            raise ConfigError(f"{sender}: {what} {name!r} does not resolve: {exc}") from None

    def signature(sig: Any, default: str) -> str:
        if not isinstance(sig, dict) or not isinstance(sig.get("t"), str):
            return default  # malformed: the worker reports it as it always did
        sig_pool = str(sig.get("p", default))
        resolve(f"the pool of {sig['t']}", sig_pool)
        sig_options = sig.get("o")
        if isinstance(sig_options, dict):
            for sink in sink_list(sig_options.get("sinks")):
                resolve(f"a sink of {sig['t']}", sink)
        return sig_pool

    for sink in options.sinks:
        resolve("sink", sink)
    for sig in (*options.link, *options.link_error):
        signature(sig, pool)
    chain = options.chain
    if chain:
        try:
            steps = [json.loads(line) for line in unpack_chain(chain).split(CHAIN_SEPARATOR)]
        except ValueError:
            return
        previous = pool
        for step in reversed(steps):  # the next step is written last
            previous = signature(step, previous)


def check_event(event: Any, name: str, cls: type) -> Any:
    """``event``'s fields in wire form, once they are checked against ``cls``
    (:func:`check_fields`); ``event`` must be an instance of it.

    Raises:
        BadArguments: naming the event, the field, and what it should be.
    """
    if not isinstance(event, cls):
        raise BadArguments(f"event {name}: expected a {cls.__name__}, got {event!r:.80}")
    fields = to_wire(event)
    check_fields(fields, name, cls)
    return fields


def check_fields(fields: Any, name: str, cls: type) -> None:
    """Check an event's fields (wire form) as every subscriber reads them: each
    of a plain type (int, float, str, bool) holds a value of that type, and
    the whole converts to ``cls``.

    Raises:
        BadArguments: naming the event, the field, and what it should be.
    """
    if not isinstance(fields, dict):
        raise BadArguments(f"event {name}: its fields must be an object, got {fields!r:.80}")
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # annotations that do not resolve: the conversion below checks
        hints = {}
    for field in _field_names(cls):
        hint = hints.get(field)
        accepted = _EXACT.get(hint) if isinstance(hint, type) else None
        if accepted is None or field not in fields:
            continue
        value = fields[field]
        if not isinstance(value, accepted) or (isinstance(value, bool) and hint is not bool):
            raise BadArguments(
                f"event {name}, field {field!r}: expected {hint.__name__}, got "  # type: ignore[union-attr]
                f"{type(value).__name__} {value!r:.60}"
            )
    try:
        converter.structure(fields, cls)  # what each subscriber does with it
    except Exception as exc:
        detail = "; ".join(cattrs.transform_error(exc, path=name))
        raise BadArguments(f"event {name}: {detail}") from None


def _field_names(cls: type) -> list[str]:
    if attrs.has(cls):
        return [a.name for a in attrs.fields(cls)]
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return []

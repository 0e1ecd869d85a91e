"""The options of one task send (``apply_async``, ``send_task``), as one record.

:class:`SendOptions` is built once, where the options enter (``apply_async``'s
keywords, a signature's ``o`` read from a header, a periodic task's entry):
every option is checked there, and an unknown one is refused naming the
nearest known one. Past that edge the send reads typed fields, never a dict.

How it is delivered (:meth:`SendOptions.delivery`) has one rule, written
here and in docs/celery.md: ``acks_late=False`` (at-most-once) is sent
pre-settled, so it is never confirmed and never held by the node's backlog.
A caller that asks to confirm such a send is refused (it cannot be done); a
caller that asks for a durable send of it (a worker's follow-up, an event's
fan-out, a periodic firing: sends made for whatever task comes) gets the
at-most-once send, by that documented precedence.
"""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError, MisuseError

__all__ = ["Delivery", "SendOptions", "sink_list"]


def sink_list(value: object) -> list[str]:
    """A ``sinks`` value: an array, or one comma-separated string (§14.2, §14.3)."""
    if isinstance(value, str):
        return [s for s in value.split(",") if s]
    if isinstance(value, list | tuple):
        return [str(s) for s in value]
    return []


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value: object) -> bool:
    return _number(value) or isinstance(value, datetime.datetime)


def _signatures(value: object) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(s, dict) for s in value)


def _sinks(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(s, str) for s in value)
    )


#: Each option: what a value must be (as a check) and the fix its error says.
_CHECKS: Final[Mapping[str, tuple[Callable[[object], bool], str]]] = MappingProxyType(
    {
        "countdown": (_number, "give seconds from now (a number)"),
        "eta": (_time, "give a datetime or seconds since the epoch"),
        "expires": (_time, "give seconds from now (a number) or a datetime"),
        "priority": (_whole, "give a whole number (0 to 9, highest first)"),
        "time_limit": (_number, "give seconds (a number)"),
        "soft_time_limit": (_number, "give seconds (a number)"),
        "link": (_signatures, "give task signatures (task.s(...))"),
        "link_error": (_signatures, "give task signatures (task.s(...))"),
        "sinks": (_sinks, "give sink names or addresses (a list, or one comma-separated string)"),
        "chain": (lambda v: isinstance(v, str), "give a chain's header text"),
        "retries": (_whole, "give a whole number"),
        "map": (lambda v: v in ("map", "starmap"), 'give "map" or "starmap"'),
        "track_started": (lambda v: isinstance(v, bool), "give True or False"),
        "acks_late": (lambda v: isinstance(v, bool), "give True or False"),
        "retry_policy": (
            lambda v: isinstance(v, str),
            "give a RetryPolicy or a dict of its fields",
        ),
    }
)


def _timestamp(value: float | datetime.datetime) -> float:
    if isinstance(value, datetime.datetime):
        return (value if value.tzinfo else value.astimezone()).timestamp()
    return float(value)


@final
@attrs.frozen
class Delivery:
    """How one send goes out: pre-settled (at-most-once), else confirmed
    (wait for the receiver to settle it) or durable (the node's backlog holds
    it until it is taken)."""

    presettled: bool
    confirm: bool | None  #: None: as the directory says of the receiver
    durable: bool


@final
@attrs.frozen(kw_only=True)
class SendOptions:
    """The options of one task send, checked (docs/protocol.md §14.2 says
    which header each one becomes).

    ``eta`` is seconds since the epoch; ``expires`` is seconds from the send
    (a number) or a moment (a datetime); ``link`` and ``link_error`` are
    signatures in wire form; ``retry_policy`` is the header's JSON text.
    """

    countdown: float | None = None
    eta: float | None = None
    expires: float | datetime.datetime | None = None
    priority: int | None = None
    time_limit: float | None = None
    soft_time_limit: float | None = None
    link: tuple[dict[str, Any], ...] = ()
    link_error: tuple[dict[str, Any], ...] = ()
    sinks: tuple[str, ...] = ()
    chain: str | None = None
    retries: int | None = None
    map: str | None = None
    track_started: bool = False
    acks_late: bool = True
    retry_policy: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any] | None, where: str) -> SendOptions:
        """The options ``options`` (in wire form: ``wire_options``) of a send
        by ``where`` ("task NAME"); None and missing values are the defaults.

        Raises:
            ConfigError: naming ``where``, the option, its value and the fix;
                for an unknown option, the nearest known one.
        """
        given = {k: v for k, v in (options or {}).items() if v is not None}
        for key, value in given.items():
            if key not in _CHECKS:
                near = difflib.get_close_matches(key, list(_CHECKS), n=1)
                hint = f" (did you mean {near[0]}=?)" if near else ""
                raise ConfigError(
                    f"{where}: unknown send option {key}={value!r:.60}{hint}; "
                    f"known: {', '.join(_CHECKS)}"
                )
            check, fix = _CHECKS[key]
            if key in ("link", "link_error") and isinstance(value, dict):
                value = given[key] = [value]  # one signature
            if not check(value):
                raise ConfigError(f"{where}: {key}={value!r:.60}: {fix}")
        return cls(
            countdown=_float(given.get("countdown")),
            eta=_timestamp(given["eta"]) if "eta" in given else None,
            expires=given.get("expires"),
            priority=given.get("priority"),
            time_limit=_float(given.get("time_limit")),
            soft_time_limit=_float(given.get("soft_time_limit")),
            link=tuple(given.get("link", ())),
            link_error=tuple(given.get("link_error", ())),
            sinks=tuple(sink_list(given.get("sinks"))),
            chain=given.get("chain") or None,
            retries=given.get("retries"),
            map=given.get("map"),
            track_started=given.get("track_started", False),
            acks_late=given.get("acks_late", True),
            retry_policy=given.get("retry_policy"),
        )

    @classmethod
    def from_wire(cls, options: object, where: str) -> SendOptions:
        """The options of a signature or a message as they came over the wire
        (a signature's ``o``, a retry's headers), checked as :meth:`of` does.

        Raises:
            ValueError: they are not an object of send options (the message
                of :meth:`of`'s error): bad data from the wire, which fails
                the send it was for.
        """
        if not isinstance(options, Mapping):
            raise ValueError(f"{where}: send options must be an object, got {options!r:.60}")
        try:
            return cls.of(options, where)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def expiry_time(self, now: float) -> float | None:
        """When it expires, in seconds since the epoch, for a send at ``now``."""
        if self.expires is None:
            return None
        if isinstance(self.expires, datetime.datetime):
            return _timestamp(self.expires)
        return now + self.expires

    def due(self, now: float) -> float | None:
        """When it is due (its ``countdown`` from ``now``, else its ``eta``)."""
        return now + self.countdown if self.countdown is not None else self.eta

    def delivery(self, task: str, *, confirm: bool | None, durable: bool) -> Delivery:
        """How a send of it goes out, given what its caller asked: ``confirm``
        (None: the caller's default, decided later), ``durable``.

        ``acks_late=False`` takes precedence over ``durable`` (module docstring).

        Raises:
            MisuseError: ``confirm=True`` for an at-most-once send (it is
                pre-settled: nothing settles it later), saying what to do.
        """
        if self.acks_late:
            return Delivery(presettled=False, confirm=confirm, durable=durable)
        if confirm:
            raise MisuseError(
                f"task {task}: acks_late=False is sent pre-settled (at-most-once), so it "
                "cannot be confirmed: send it with confirm=None, or with acks_late=True "
                "to have it confirmed"
            )
        return Delivery(presettled=True, confirm=False, durable=False)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)

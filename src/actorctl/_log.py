"""Structured logging: thin helpers over eliot that every layer may use.

Nothing here prints: a process's composition root (the CLI) chooses where eliot
writes (JSON lines on stdout by default for a node) and how much: a one-shot
command shows warnings only, so the events below, the routine ones, are left
out unless it is asked for everything (``-v``).

A task's run is a trace's action (``Traced``: docs/operations.md), and what
it logs and sends nests under it, across nodes (``trace_here``,
``continue_trace``). Its places are kept here, as a level list and a count,
by a small action of our own (``_Place``) that eliot's own code can nest
under (it is an ``eliot.Action`` to eliot's ``start_action``, ``log_message``
and ``preserve_context``); its lines are written as eliot's ``Logger`` would,
field for field, to eliot's destinations, without eliot's generic path: a
task's trace costs its two lines and a count, no uuid4 and no ``TaskLevel``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, final

from eliot import Action, Logger, add_destinations, log_message

# Private names of eliot (as of 1.18). The module that holds eliot's default
# logger, which eliot's own testing tools swap for theirs (read per line:
# ``_send``), and what its ``send`` logs when a destination fails
# (``_destination_failed``).
from eliot import _output as _eliot_output

# The context variable that holds the current action (read on every trace,
# set by an action and a continued trace: eliot's public ``current_action``
# and ``Action.__enter__`` would cost a call each), and the level type its
# own actions are built with (for a child that eliot's ``start_action`` asks
# of ours). tests/cluster/test_trace.py checks that the lines written with
# them are eliot's own, so an eliot that changes them fails there.
from eliot._action import _ACTION_CONTEXT, TaskLevel

__all__ = [
    "MAX_TRACE_DEPTH",
    "ROUTINE",
    "TRACE",
    "Traced",
    "add_only_destination",
    "continue_trace",
    "current_action_or",
    "is_routine",
    "log",
    "new_trace_uuid",
    "trace_here",
]

#: The application property that carries the eliot trace id (``UUID@/LEVEL``).
TRACE: Final = "trace"
#: The deepest a trace nests before a hop joins it at its root (``trace_here``).
MAX_TRACE_DEPTH: Final = 32
#: The current eliot action (``current_action_or(None)``: None outside any): the
#: context variable's own look-up, for a hot path that most often runs outside
#: any trace (a caller's send: ``trace_here`` only when there is one).
current_action_or: Final = _ACTION_CONTEXT.get
#: eliot's destinations (its ``Destinations``, the object whose ``add``
#: ``add_destinations`` is). Two of its private fields are read per line
#: (as of eliot 1.18): the list of destinations and the global fields.
#: tests/cli/test_logfile.py checks that a line written straight is the one
#: eliot's path writes, so an eliot that changes them fails there.
_DESTINATIONS: Final = add_destinations.__self__
#: Every line goes to eliot's destinations through this: what eliot's
#: ``Logger.write`` does after its copy of the line (each line here is a dict
#: of its own): the global fields added, each destination called, and a
#: destination's failure logged as eliot logs it.
_destinations_send: Final = _DESTINATIONS.send
#: eliot's default logger as eliot made it: while it is the one in place,
#: lines go straight to the destinations; a test that swapped in its own
#: (``eliot.testing.swap_logger``, ``capture_logging``) gets them through it.
_EXPECTED_LOGGER: Final = _eliot_output._DEFAULT_LOGGER
#: The destination lines go to straight (``add_only_destination``), as a
#: list of it, to compare with eliot's list: while they are equal (it is
#: eliot's only destination), a line is handed to ``_only[0]``. (None: no
#: such destination; eliot's list never holds None.)
_only: list[Callable[[dict[str, Any]], None] | None] = [None]


def add_only_destination(destination: Callable[[dict[str, Any]], None]) -> None:
    """Add ``destination`` to eliot's (``eliot.add_destinations``), and hand
    it this module's lines straight while it is eliot's only destination."""
    global _only  # set once per process, by the CLI's log_to; read per line
    add_destinations(destination)
    _only = [destination]


def _send(fields: dict[str, Any]) -> None:
    """Write one line, a dict of its own, as eliot's default logger would."""
    if (
        _DESTINATIONS._destinations == _only
        and not _DESTINATIONS._globalFields
        and _eliot_output._DEFAULT_LOGGER is _EXPECTED_LOGGER
    ):
        try:
            _only[0](fields)  # type: ignore[misc]  # (not None: eliot's list holds it)
        except Exception as failure:
            _destination_failed(fields, failure)
        return
    logger = _eliot_output._DEFAULT_LOGGER
    if logger is _EXPECTED_LOGGER:
        _destinations_send(fields)
    else:
        logger.write(fields)


def _destination_failed(fields: dict[str, Any], exc: Exception) -> None:
    """What eliot's ``send`` does when a destination raises on a line: a
    line that says so (none for a line that says so itself), and nothing
    raised to the code that logged."""
    if fields.get("message_type") == _eliot_output.DESTINATION_FAILURE:
        return
    with contextlib.suppress(Exception):  # (logging must not break the code that logs)
        log_message(
            message_type=_eliot_output.DESTINATION_FAILURE,
            reason=_eliot_output.safeunicode(exc),
            exception=f"{exc.__class__.__module__}.{exc.__class__.__name__}",
            message=_eliot_output._safe_unicode_dictionary(fields),
        )


#: Where a line that names its own logger or serializer goes (eliot's
#: ``write_traceback`` and ``Message.write`` do): eliot's generic path.
_LOGGER: Final = Logger()

#: Events that say things went as they should (or that a caller is told about
#: anyway, as an error of its own): information, not warnings. Every other event
#: is a warning. A layer that adds a routine event names it here.
ROUTINE: Final = frozenset(
    {
        "actorctl:backlog:resumed",
        "actorctl:task",  # a task's run, as an eliot action (its start and end)
        "actorctl:chord:resumed",
        "actorctl:connection:closed",
        "actorctl:connection:peer-closed",  # it went without closing: no news
        "actorctl:controller:down",
        "actorctl:controller:stop-node",
        "actorctl:credit:reclaimed",
        "actorctl:delivery:duplicate",
        "actorctl:event:delivered",
        "actorctl:foreman:exited",  # a death is said again, as the supervisor's
        "actorctl:keyring:changed",
        "actorctl:leader:elected",
        "actorctl:membership:back",
        "actorctl:membership:deregistered",
        "actorctl:membership:join",
        "actorctl:membership:leave",
        "actorctl:membership:registered",
        "actorctl:membership:reregistered",
        "actorctl:membership:resynced",
        "actorctl:membership:update",
        "actorctl:membership:watching",
        "actorctl:node:ready",
        "actorctl:node:signal",
        "actorctl:node:stopping",
        "actorctl:node:stopped",
        "actorctl:peer:pruned",
        "actorctl:peer:reconnected",
        "actorctl:peer:resending",
        "actorctl:peer:session",
        "actorctl:peer:session-refused",  # what it sends is refused too, saying why
        "actorctl:peer:unreachable",  # a send that waits for it fails, saying why
        "actorctl:process:exited",
        "actorctl:process:started",
        "actorctl:replay:loaded",
        "actorctl:router:adopted",
        "actorctl:scheduler:resumed",
        "actorctl:session:opened",
        "actorctl:store:opened",
        "actorctl:supervisor:child-ended",
        "actorctl:supervisor:stopped-child",
    }
)


def is_routine(message_type: object) -> bool:
    """Whether an event of this type is information rather than a warning."""
    return message_type in ROUTINE


def _draw_prefix() -> str:
    """The first 24 characters of a uuid4 (``8-4-4-4-``): this process's
    trace uuids begin with them."""
    return str(uuid.uuid4())[:24]


#: This process's trace uuids: a uuid4's first 24 characters, drawn once (and
#: again in a forked child), then a count in the last 12 hex digits: unique as
#: a uuid4 is, in a uuid4's shape, without a draw (a system call) per trace.
_prefix = _draw_prefix()
_count = itertools.count(1)


def _redraw() -> None:
    """In a forked child: its own prefix, so that parent and child never make
    the same trace uuid."""
    global _prefix  # reset once per fork, read on every trace
    _prefix = _draw_prefix()


os.register_at_fork(after_in_child=_redraw)


#: The last 12 hex digits of a trace uuid: its count, taken modulo 2**48.
_MASK: Final = 0xFFFF_FFFF_FFFF


def new_trace_uuid() -> str:
    """A trace uuid that no other trace of any process has (eliot's
    ``task_uuid``)."""
    return f"{_prefix}{next(_count) & _MASK:012x}"


def log(message_type: str, **fields: Any) -> None:
    """Write one structured log line of type ``message_type`` (within the
    current action, else as a trace of its own, as eliot's ``log_message``)."""
    action = _ACTION_CONTEXT.get(None)
    if action is not None:
        action.log(message_type, **fields)
        return
    fields["timestamp"] = time.time()
    fields["task_uuid"] = f"{_prefix}{next(_count) & _MASK:012x}"
    fields["task_level"] = [1]
    fields["message_type"] = message_type
    _send(fields)


class _Place(Action):  # type: ignore[misc]  # eliot has no types: its Action is Any
    """A place in a trace that what runs within it nests under: the level
    ``level`` of trace ``task_uuid``, and how many places within it were
    taken (its lines, the actions and messages that nest under it).

    A continued trace (``continue_trace``) is one: it logs nothing of its own.
    To eliot it is the current action, an ``eliot.Action``: its public
    methods (``log``, ``child``, ``serialize_task_id``, ``task_uuid``,
    ``add_success_fields``, ``run``, ``context``) do what eliot's do, here on a
    level list and a count; eliot's ``__init__`` is not run."""

    def __init__(self, task_uuid: str, level: list[int], action_type: str) -> None:
        self._uuid = task_uuid
        self._level = level
        self._count = 0
        self._type = action_type
        self._success: dict[str, Any] = {}
        self._done = False
        self._token: Any = None

    @property
    def task_uuid(self) -> str:
        """The uuid of the trace this place is in."""
        return self._uuid

    def _next(self) -> list[int]:
        """The level of the next line or action within this place."""
        self._count += 1
        return [*self._level, self._count]

    def serialize_task_id(self) -> bytes:
        """A new place within this one, as eliot writes it (``UUID@/LEVEL``)."""
        return _trace_id(self._uuid, self._next()).encode("ascii")

    serializeTaskId = serialize_task_id

    def child(self, logger: Any, action_type: str, serializers: Any = None) -> Any:
        """An eliot action within this place (eliot's ``start_action`` asks
        for it, then writes its start line)."""
        return Action(logger, self._uuid, TaskLevel(self._next()), action_type, serializers)

    def log(self, message_type: str, **fields: Any) -> None:
        """Write a line of type ``message_type`` within this place."""
        logger = fields.pop("__eliot_logger__", None)
        serializer = fields.pop("__eliot_serializer__", None)
        fields["timestamp"] = time.time()
        fields["task_uuid"] = self._uuid
        fields["task_level"] = self._next()
        fields["message_type"] = message_type
        if logger is None and serializer is None:
            _send(fields)
        else:
            (_LOGGER if logger is None else logger).write(fields, serializer)

    def add_success_fields(self, **fields: Any) -> None:
        """Fields for the end line of an action that succeeds."""
        self._success.update(fields)

    addSuccessFields = add_success_fields

    def finish(self, exception: BaseException | None = None) -> None:
        """Nothing: a continued trace logs nothing of its own (``Traced``
        writes an action's end line)."""

    def __enter__(self) -> Any:
        """This place, current until the block ends."""
        self._token = _ACTION_CONTEXT.set(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _ACTION_CONTEXT.reset(self._token)


@final
class Traced(_Place):
    """An eliot action: its start line is written when it is made, its end
    line when the ``with`` block it is entered in ends (or at ``finish``),
    and what is logged or sent within the block nests under it
    (``trace_here``).

    The lines are eliot's own, field for field (those given, then
    ``action_status``, ``timestamp``, ``task_uuid``, ``action_type``,
    ``task_level``; an end line begins with the fields of
    ``add_success_fields``), and go to eliot's destinations as its own do; an
    action ended by an exception is ended by eliot itself (``failed``, with
    the exception). A trace of its own takes a uuid as ``new_trace_uuid``
    makes them; one within an eliot action takes that action's next place."""

    def __init__(self, action_type: str, fields: dict[str, Any]) -> None:
        """Start an action of ``action_type`` within the current one (a trace
        of its own outside any); ``fields`` (taken, not copied) go on its start line."""
        parent: Any = _ACTION_CONTEXT.get(None)
        if parent is None:
            task_uuid = f"{_prefix}{next(_count) & _MASK:012x}"
            level: list[int] = []
        elif parent.__class__ in _OURS:  # (no call: this runs once per task)
            task_uuid = parent._uuid
            level = parent._next()
        else:  # an action of eliot's own: its next place, through its public API
            task_uuid, level = _place_of(parent.serialize_task_id().decode("ascii"))
        self._uuid = task_uuid
        self._level = level
        self._count = 1
        self._type = action_type
        self._success = {}
        self._done = False
        self._token = None
        fields["action_status"] = "started"
        fields["timestamp"] = time.time()
        fields["task_uuid"] = task_uuid
        fields["action_type"] = action_type
        fields["task_level"] = [*level, 1]
        _send(fields)

    def finish(self, exception: BaseException | None = None) -> None:
        """Write the end line (once): ``succeeded``, or ``failed`` with
        ``exception`` as eliot writes it."""
        if self._done:
            return
        self._done = True
        if exception is not None:
            _failed(self._uuid, self._level, self._count, self._type, exception)
            return
        fields = self._success
        fields["action_status"] = "succeeded"
        fields["timestamp"] = time.time()
        fields["task_uuid"] = self._uuid
        fields["action_type"] = self._type
        fields["task_level"] = self._next()
        _send(fields)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _ACTION_CONTEXT.reset(self._token)
        if exc is not None or self._done:
            self.finish(exc)
            return
        # finish's own lines, here: a task's end costs no call of its own
        self._done = True
        fields = self._success
        fields["action_status"] = "succeeded"
        fields["timestamp"] = time.time()
        fields["task_uuid"] = self._uuid
        fields["action_type"] = self._type
        self._count += 1
        fields["task_level"] = [*self._level, self._count]
        _send(fields)


#: The classes of the places kept here (the others are eliot's own actions).
_OURS: Final[frozenset[type[Any]]] = frozenset({_Place, Traced})


def _failed(
    task_uuid: str, level: list[int], taken: int, action_type: str, exc: BaseException
) -> None:
    """The end line of an action ended by ``exc``, written by an eliot action
    at its place (``taken`` places within it already taken): eliot's own
    fields for an exception (``exception``, ``reason`` and what an extractor
    registered with eliot adds)."""
    action = Action(None, task_uuid, TaskLevel(level), action_type)
    for _ in range(taken):
        action.serialize_task_id()  # each takes a place, as the lines written took theirs
    action.finish(exc)


def _trace_id(task_uuid: str, level: list[int]) -> str:
    """``UUID@/LEVEL``, as eliot writes a place (``/1/2``)."""
    return f"{task_uuid}@/{'/'.join(map(str, level))}"


def _place_of(trace: str) -> tuple[str, list[int]]:
    """A trace id's uuid and level (``UUID@/LEVEL``); ValueError if it is not one."""
    task_uuid, at, level = trace.partition("@")
    if not task_uuid or not at or not level.startswith("/"):
        raise ValueError(f"not a trace id: {trace!r}")
    return task_uuid, [int(step) for step in level.split("/") if step]


def trace_here() -> str | None:
    """The trace id a message sent now carries (``UUID@/LEVEL``: a new place
    within the current eliot action, so that what its receiver logs nests
    under it), or None outside any action.

    A trace nests one level deeper at each hop, so a chain of thousands of
    steps would carry (and log) thousands of levels: past ``MAX_TRACE_DEPTH``
    the next hop joins the trace at its root instead, at a level made of the
    time in microseconds (siblings in the order they came)."""
    action: Any = _ACTION_CONTEXT.get(None)
    if action is None:
        return None
    if action.__class__ in _OURS:
        task_uuid, level = action._uuid, action._next()
    else:  # an action of eliot's own
        task_uuid, level = _place_of(action.serialize_task_id().decode("ascii"))
    if len(level) > MAX_TRACE_DEPTH:
        return f"{task_uuid}@/{time.time_ns() // 1000}"
    return _trace_id(task_uuid, level)


#: What a message with no trace, or a malformed one, runs in: nothing is
#: made, and a place with no trace can be entered again and again.
_UNTRACED: Final = contextlib.nullcontext()


def continue_trace(trace: object) -> contextlib.AbstractContextManager[Any]:
    """Run within the trace a message's ``trace`` header names, logging nothing
    of its own: what is logged or sent inside joins that trace's tree. A
    missing or malformed header (it is informative only) changes nothing."""
    if not isinstance(trace, str) or trace.count("@") != 1:
        return _UNTRACED
    try:
        task_uuid, level = _place_of(trace)
    except ValueError:
        return _UNTRACED
    return _Place(task_uuid, level, "actorctl:message")

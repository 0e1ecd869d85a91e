"""One exception root for everything actorctl raises on purpose.

Every layer may import this module; it imports nothing from actorctl.
"""

from __future__ import annotations

__all__ = [
    "ActorctlError",
    "AskTimeout",
    "ConfigError",
    "DeliveryError",
    "MisuseError",
    "Modified",
    "NotSupported",
    "PeerUnavailable",
    "Rejected",
    "RemoteError",
    "SoftTimeLimitExceeded",
    "TaskFailed",
    "TaskRevoked",
    "TimeLimitExceeded",
    "UnknownActor",
    "WireFormatError",
]


class ActorctlError(Exception):
    """The root of every error actorctl raises on purpose."""


class ConfigError(ActorctlError):
    """A command line, a configuration file or an argument is wrong."""


class NotSupported(ConfigError, AttributeError):
    """A Celery API that actorctl does not have (``app.start()``,
    ``app.backend``, ``app.control.purge``): its message says why, and what to
    use instead (docs/celery.md). It is an ``AttributeError`` too, so that
    ``hasattr`` and ``getattr(obj, name, default)`` answer as for any missing
    attribute."""


class MisuseError(ActorctlError):
    """An API called where it cannot work: a blocking call in trio's thread, a
    wait for a result nobody receives (one sent from inside a task, or with
    ``ignore_result``). Its message says what to use instead.

    It is a programming error, not bad luck: another attempt fails the same
    way. A task that raises it is failed at once and never retried, and a task
    worker keeps its message as a dead letter with reason ``poison``.
    """


class WireFormatError(ActorctlError):
    """Bytes that are not a message in the format docs/protocol.md specifies."""


class DeliveryError(ActorctlError):
    """The receiving node answered a delivery with something other than `accepted`.

    Attributes:
        condition: the AMQP error condition, for example ``actorctl:unknown-handler``.
        description: the receiver's words for what was wrong.
        message_id: the id of the message that was refused.
    """

    def __init__(self, condition: str, description: str, message_id: str | None = None) -> None:
        super().__init__(
            f"{condition}: {description}" + (f" (message {message_id})" if message_id else "")
        )
        self.condition = condition
        self.description = description
        self.message_id = message_id


class Rejected(DeliveryError):
    """The receiver settled the delivery `rejected`: bad input, never retried."""


class Modified(DeliveryError):
    """The receiver settled the delivery `modified`: it could not handle it there.

    The message was not executed; the sender may send it elsewhere.
    """


class UnknownActor(DeliveryError):
    """The receiving node hosts no actor at the address (it refused the link)."""


class PeerUnavailable(ActorctlError):
    """No connection to the peer node could be made in the time allowed."""


class AskTimeout(ActorctlError, TimeoutError):
    """No reply to an ``ask`` (or no task result) arrived within its timeout.

    It is a ``TimeoutError`` too, as Celery's ``get(timeout=...)`` error is."""


class RemoteError(ActorctlError):
    """The remote handler raised: this carries its exception type and message.

    The remote exception is never pickled: only its type name and text cross the
    wire, so a client in any language can raise or print it.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


class TaskFailed(RemoteError):
    """A task raised: ``AsyncResult.get()`` raises this with the task's exception
    type name and message.

    When the task raised a built-in exception (``ZeroDivisionError``,
    ``KeyError``, ...), the error raised is also an instance of that built-in, so
    ``except ZeroDivisionError`` works as it does with Celery; nothing is pickled.

    Attributes:
        task_id: the id of the task that failed.
    """

    def __init__(self, type_name: str, message: str, task_id: str | None = None) -> None:
        super().__init__(type_name, message)
        self.task_id = task_id


class TaskRevoked(ActorctlError):
    """The task was revoked, or expired before it ran; it was never executed.

    Attributes:
        task_id: the task's id.
        reason: why (``revoked``, ``expired ...``, ``terminated``).
    """

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"task {task_id} revoked: {reason}")
        self.task_id = task_id
        self.reason = reason


class SoftTimeLimitExceeded(ActorctlError):
    """Raised inside a task that ran past its soft time limit: it may catch it
    and clean up before its hard limit."""


class TimeLimitExceeded(ActorctlError):
    """A task ran past its hard time limit and was stopped."""

"""actorctl: a supervised actor runtime for Python over AMQP 1.0 peer links.

This module pulls together the public API by re-exporting it; everything else is
reachable but private.

The errors are imported at once (they import nothing); every other name is
imported the first time it is used (PEP 562), so that ``import actorctl``, and
the ``actorctl`` command that starts with it, do not load the whole runtime
(trio, proton, cryptography, eliot, the store, the task layer) before they need
it. Type checkers read the same names from the ``TYPE_CHECKING`` imports below;
tests/project/test_exports.py checks that they and ``_LAZY`` agree with ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

from ._errors import ActorctlError as ActorctlError
from ._errors import AskTimeout as AskTimeout
from ._errors import ConfigError as ConfigError
from ._errors import DeliveryError as DeliveryError
from ._errors import MisuseError as MisuseError
from ._errors import Modified as Modified
from ._errors import NotSupported as NotSupported
from ._errors import PeerUnavailable as PeerUnavailable
from ._errors import Rejected as Rejected
from ._errors import RemoteError as RemoteError
from ._errors import SoftTimeLimitExceeded as SoftTimeLimitExceeded
from ._errors import TaskFailed as TaskFailed
from ._errors import TaskRevoked as TaskRevoked
from ._errors import TimeLimitExceeded as TimeLimitExceeded
from ._errors import UnknownActor as UnknownActor
from ._errors import WireFormatError as WireFormatError

if TYPE_CHECKING:
    from . import signals as signals
    from .actors import Actor as Actor
    from .actors import ActorRef as ActorRef
    from .actors import Address as Address
    from .actors import BadArguments as BadArguments
    from .actors import Behaviour as Behaviour
    from .actors import Caller as Caller
    from .actors import NotPermitted as NotPermitted
    from .actors import Terminated as Terminated
    from .actors import caller as caller
    from .actors import handler as handler
    from .cluster import Limits as Limits
    from .cluster import Node as Node
    from .cluster import NodeSecurity as NodeSecurity
    from .cluster import NodeStorage as NodeStorage
    from .cluster import NodeSupervision as NodeSupervision
    from .cluster import TlsFiles as TlsFiles
    from .cluster import open_node as open_node
    from .mailbox import Envelope as Envelope
    from .mailbox import Keyring as Keyring
    from .mailbox import MailboxStatistics as MailboxStatistics
    from .mailbox import Outcome as Outcome
    from .mailbox import Role as Role
    from .supervision import DEFAULT_RETRY_POLICY as DEFAULT_RETRY_POLICY
    from .supervision import ActorSpec as ActorSpec
    from .supervision import BoxedSpec as BoxedSpec
    from .supervision import Breaker as Breaker
    from .supervision import BreakerPolicy as BreakerPolicy
    from .supervision import ChildError as ChildError
    from .supervision import CircuitBreaker as CircuitBreaker
    from .supervision import Health as Health
    from .supervision import HealthCheck as HealthCheck
    from .supervision import ProcessExited as ProcessExited
    from .supervision import ProcessSpec as ProcessSpec
    from .supervision import Restart as Restart
    from .supervision import RetryPolicy as RetryPolicy
    from .supervision import Strategy as Strategy
    from .supervision import SupervisorGaveUp as SupervisorGaveUp
    from .supervision import SupervisorSpec as SupervisorSpec
    from .supervision import optional as optional
    from .supervision import poisonous as poisonous
    from .supervision import retry as retry
    from .tasks import App as App
    from .tasks import AsyncResult as AsyncResult
    from .tasks import Concurrency as Concurrency
    from .tasks import DataSink as DataSink
    from .tasks import Directory as Directory
    from .tasks import GroupResult as GroupResult
    from .tasks import PeriodicTask as PeriodicTask
    from .tasks import RateLimit as RateLimit
    from .tasks import Retry as Retry
    from .tasks import Schedule as Schedule
    from .tasks import Signature as Signature
    from .tasks import Source as Source
    from .tasks import SourceError as SourceError
    from .tasks import Task as Task
    from .tasks import TaskContext as TaskContext
    from .tasks import TaskResult as TaskResult
    from .tasks import chain as chain
    from .tasks import check_soft_time_limit as check_soft_time_limit
    from .tasks import chord as chord
    from .tasks import crontab as crontab
    from .tasks import group as group
    from .tasks import soft_time_limit as soft_time_limit

#: Where each lazily imported name lives, by module (relative to this package).
_LAZY: Final[dict[str, tuple[str, ...]]] = {
    # Celery's signals: a module of this package
    ".": ("signals",),
    # Actors and how to reach them
    ".actors": (
        "Actor",
        "ActorRef",
        "Address",
        "BadArguments",
        "Behaviour",
        "Caller",
        "NotPermitted",
        "Terminated",
        "caller",
        "handler",
    ),
    # Nodes
    ".cluster": (
        "Limits",
        "Node",
        "NodeSecurity",
        "NodeStorage",
        "NodeSupervision",
        "TlsFiles",
        "open_node",
    ),
    # Messages
    ".mailbox": (
        "Envelope",
        "Keyring",
        "MailboxStatistics",
        "Outcome",
        "Role",
    ),
    # Supervision, retries and breakers
    ".supervision": (
        "DEFAULT_RETRY_POLICY",
        "ActorSpec",
        "BoxedSpec",
        "Breaker",
        "BreakerPolicy",
        "ChildError",
        "CircuitBreaker",
        "Health",
        "HealthCheck",
        "ProcessExited",
        "ProcessSpec",
        "Restart",
        "RetryPolicy",
        "Strategy",
        "SupervisorGaveUp",
        "SupervisorSpec",
        "optional",
        "poisonous",
        "retry",
    ),
    # Tasks (the Celery-like API)
    ".tasks": (
        "App",
        "AsyncResult",
        "Concurrency",
        "DataSink",
        "Directory",
        "GroupResult",
        "PeriodicTask",
        "RateLimit",
        "Retry",
        "Schedule",
        "Signature",
        "Source",
        "SourceError",
        "Task",
        "TaskContext",
        "TaskResult",
        "chain",
        "check_soft_time_limit",
        "chord",
        "crontab",
        "group",
        "soft_time_limit",
    ),
}
_HOME: Final[dict[str, str]] = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "Actor",
    "ActorRef",
    "ActorSpec",
    "ActorctlError",
    "Address",
    "App",
    "AskTimeout",
    "AsyncResult",
    "BadArguments",
    "Behaviour",
    "BoxedSpec",
    "Breaker",
    "BreakerPolicy",
    "Caller",
    "ChildError",
    "CircuitBreaker",
    "Concurrency",
    "ConfigError",
    "DataSink",
    "DeliveryError",
    "Directory",
    "Envelope",
    "GroupResult",
    "Health",
    "HealthCheck",
    "Keyring",
    "Limits",
    "MailboxStatistics",
    "MisuseError",
    "Modified",
    "Node",
    "NodeSecurity",
    "NodeStorage",
    "NodeSupervision",
    "NotPermitted",
    "NotSupported",
    "Outcome",
    "PeerUnavailable",
    "PeriodicTask",
    "ProcessExited",
    "ProcessSpec",
    "RateLimit",
    "Rejected",
    "RemoteError",
    "Restart",
    "Retry",
    "RetryPolicy",
    "Role",
    "Schedule",
    "Signature",
    "SoftTimeLimitExceeded",
    "Source",
    "SourceError",
    "Strategy",
    "SupervisorGaveUp",
    "SupervisorSpec",
    "Task",
    "TaskContext",
    "TaskFailed",
    "TaskResult",
    "TaskRevoked",
    "Terminated",
    "TimeLimitExceeded",
    "TlsFiles",
    "UnknownActor",
    "WireFormatError",
    "caller",
    "chain",
    "check_soft_time_limit",
    "chord",
    "crontab",
    "group",
    "handler",
    "open_node",
    "optional",
    "poisonous",
    "retry",
    "signals",
    "soft_time_limit",
]

__version__ = "0.1.0"


def _load(name: str) -> object:
    """Import the public ``name`` on its first use, and keep it here."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module == ".":  # a module of this package
        value: object = importlib.import_module(f".{name}", __name__)
    else:
        value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if not TYPE_CHECKING:
    # Hidden from type checkers, which read the names above: to them a name
    # this package does not export stays an error.
    __getattr__ = _load


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""actorctl: a supervised actor runtime for Python over AMQP 1.0 peer links.

This module pulls together the public API by re-exporting it; everything else is
reachable but private.
"""

from . import signals as signals
from ._errors import ActorctlError as ActorctlError
from ._errors import AskTimeout as AskTimeout
from ._errors import ConfigError as ConfigError
from ._errors import DeliveryError as DeliveryError
from ._errors import MisuseError as MisuseError
from ._errors import Modified as Modified
from ._errors import PeerUnavailable as PeerUnavailable
from ._errors import Rejected as Rejected
from ._errors import RemoteError as RemoteError
from ._errors import SoftTimeLimitExceeded as SoftTimeLimitExceeded
from ._errors import TaskFailed as TaskFailed
from ._errors import TaskRevoked as TaskRevoked
from ._errors import TimeLimitExceeded as TimeLimitExceeded
from ._errors import UnknownActor as UnknownActor
from ._errors import WireFormatError as WireFormatError
from .actors import Actor as Actor
from .actors import ActorRef as ActorRef
from .actors import Address as Address
from .actors import BadArguments as BadArguments
from .actors import Behaviour as Behaviour
from .actors import Terminated as Terminated
from .actors import handler as handler
from .cluster import Node as Node
from .cluster import TlsFiles as TlsFiles
from .cluster import open_node as open_node
from .mailbox import Envelope as Envelope
from .mailbox import Keyring as Keyring
from .mailbox import MailboxStatistics as MailboxStatistics
from .mailbox import Outcome as Outcome
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
from .tasks import group as group
from .tasks import soft_time_limit as soft_time_limit

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
    "MailboxStatistics",
    "MisuseError",
    "Modified",
    "Node",
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
    "chain",
    "check_soft_time_limit",
    "chord",
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

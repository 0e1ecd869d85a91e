"""actorctl: a supervised actor runtime for Python over AMQP 1.0 peer links.

This module pulls together the public API by re-exporting it; everything else is
reachable but private.
"""

from ._errors import ActorctlError as ActorctlError
from ._errors import AskTimeout as AskTimeout
from ._errors import ConfigError as ConfigError
from ._errors import DeliveryError as DeliveryError
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
from .actors import AsyncResult as AsyncResult
from .actors import Behaviour as Behaviour
from .actors import DataSink as DataSink
from .actors import Directory as Directory
from .actors import GroupResult as GroupResult
from .actors import Retry as Retry
from .actors import Signature as Signature
from .actors import Task as Task
from .actors import TaskContext as TaskContext
from .actors import TaskResult as TaskResult
from .actors import Terminated as Terminated
from .actors import chain as chain
from .actors import chord as chord
from .actors import group as group
from .actors import handler as handler
from .cluster import App as App
from .cluster import Node as Node
from .cluster import TlsFiles as TlsFiles
from .cluster import open_node as open_node
from .mailbox import Envelope as Envelope
from .mailbox import MailboxStatistics as MailboxStatistics
from .mailbox import Outcome as Outcome
from .supervision import ActorSpec as ActorSpec
from .supervision import ChildError as ChildError
from .supervision import ProcessExited as ProcessExited
from .supervision import ProcessSpec as ProcessSpec
from .supervision import Restart as Restart
from .supervision import Strategy as Strategy
from .supervision import SupervisorGaveUp as SupervisorGaveUp
from .supervision import SupervisorSpec as SupervisorSpec

__all__ = [
    "Actor",
    "ActorRef",
    "ActorSpec",
    "ActorctlError",
    "Address",
    "App",
    "AskTimeout",
    "AsyncResult",
    "Behaviour",
    "ChildError",
    "ConfigError",
    "DataSink",
    "DeliveryError",
    "Directory",
    "Envelope",
    "GroupResult",
    "MailboxStatistics",
    "Modified",
    "Node",
    "Outcome",
    "PeerUnavailable",
    "ProcessExited",
    "ProcessSpec",
    "Rejected",
    "RemoteError",
    "Restart",
    "Retry",
    "Signature",
    "SoftTimeLimitExceeded",
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
    "chord",
    "group",
    "handler",
    "open_node",
]

__version__ = "0.1.0"

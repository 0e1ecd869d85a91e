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
from ._errors import UnknownActor as UnknownActor
from ._errors import WireFormatError as WireFormatError
from .actors import Actor as Actor
from .actors import ActorRef as ActorRef
from .actors import Address as Address
from .actors import Behaviour as Behaviour
from .actors import handler as handler
from .cluster import Node as Node
from .cluster import TlsFiles as TlsFiles
from .cluster import open_node as open_node
from .mailbox import Envelope as Envelope
from .mailbox import MailboxStatistics as MailboxStatistics
from .mailbox import Outcome as Outcome

__all__ = [
    "Actor",
    "ActorRef",
    "ActorctlError",
    "Address",
    "AskTimeout",
    "Behaviour",
    "ConfigError",
    "DeliveryError",
    "Envelope",
    "MailboxStatistics",
    "Modified",
    "Node",
    "Outcome",
    "PeerUnavailable",
    "Rejected",
    "RemoteError",
    "TlsFiles",
    "UnknownActor",
    "WireFormatError",
    "handler",
    "open_node",
]

__version__ = "0.1.0"

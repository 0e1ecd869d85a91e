"""Actors, handlers, behaviours, ActorRef, ask/tell."""

from ._access import Caller as Caller
from ._access import NotPermitted as NotPermitted
from ._access import caller as caller
from ._access import not_permitted as not_permitted
from ._actor import Actor as Actor
from ._address import Address as Address
from ._cell import ActorCell as ActorCell
from ._counters import LATENCY_BUCKETS as LATENCY_BUCKETS
from ._counters import ActorCounters as ActorCounters
from ._counters import Latency as Latency
from ._counters import NamedCounters as NamedCounters
from ._dedup import REDRIVE as REDRIVE
from ._handlers import BadArguments as BadArguments
from ._handlers import Behaviour as Behaviour
from ._handlers import HandlerSpec as HandlerSpec
from ._handlers import converter as converter
from ._handlers import handler as handler
from ._monitor import TERMINATED as TERMINATED
from ._monitor import Monitors as Monitors
from ._monitor import Terminated as Terminated
from ._ref import ActorRef as ActorRef
from ._ref import Outbox as Outbox
from ._ref import Reroute as Reroute
from ._ref import to_wire as to_wire
from ._replies import REPLIER as REPLIER

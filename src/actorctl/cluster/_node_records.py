"""The records a :class:`Node` is built from, each one concern.

A node takes its name, its actors and where it listens as plain arguments,
and the rest as a few frozen records:

- :class:`NodeSecurity`: its TLS files, its keyring, and how it authenticates
  (the time window, sessions, how often it looks at its keys again);
- :class:`Limits` (``link/_limits.py``): its resource bounds;
- :class:`NodeStorage`: its durable store and its dead letters' bounds;
- :class:`NodeSupervision`: what it does when something fails or goes
  silent (its actors' restart intensity, peers' breakers and timeouts).

The composition root (``ops/_build.py``'s ``build_node``) and the CLI build
these records. :func:`node_records` is the convenient path for tests and
programs: it sorts flat keyword arguments (``tls=...``, ``max_message_size=...``)
into the records they belong to, over records given whole; ``open_node`` takes
both forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from ..mailbox import Keyring
from ..mailbox._signing import DEFAULT_SESSION_LIFETIME, DEFAULT_WINDOW
from ..store._store import Store
from ..supervision import BreakerPolicy
from ._deadletters import DeadLetterBounds
from ._keywatch import KEY_POLL
from .link._limits import Limits
from .link._tls import TlsFiles

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_SECURITY",
    "DEFAULT_STORAGE",
    "DEFAULT_SUPERVISION",
    "INSECURE",
    "NodeSecurity",
    "NodeStorage",
    "NodeSupervision",
    "node_records",
]


@final
@attrs.frozen(kw_only=True)
class NodeSecurity:
    """How a node proves who it is and checks who talks to it.

    Attributes:
        tls: the node's TLS files: every connection it accepts or opens is
            mutual TLS against the cluster CA.
        keyring: the node's identity key (it signs what it sends) and the keys
            it trusts (every message that reaches one of its inboxes must be
            signed by one of them, per message or within a session).
        insecure: allow plain TCP (no ``tls``) and unsigned messages (no
            ``keyring``): for tests and development only; the node logs a
            warning when it starts, and on every unsigned message it accepts.
        auth_window: how far (s) a message's creation time may be from the
            node's clock; ids of accepted messages are remembered that long (in
            its store too, when it is durable: see ``_replays.py``).
        session_lifetime: how long (s) a session the node opens with a peer
            lasts; it opens the next one at 80% of that.
        sessions: open sessions with peers (HMAC per message); with False every
            message the node sends is signed with Ed25519 (slower: for clients
            that must not hold session keys, and for comparison).
        key_poll: seconds between two looks at the keyring's directory (a key
            added or revoked there applies within that time, no restart); None:
            the keys read at start stay as they are.
    """

    tls: TlsFiles | None = None
    keyring: Keyring | None = None
    insecure: bool = False
    auth_window: float = DEFAULT_WINDOW
    session_lifetime: float = DEFAULT_SESSION_LIFETIME
    sessions: bool = True
    key_poll: float | None = KEY_POLL

    def check(self, node: str) -> None:
        """Refuse a node with neither TLS files nor keys unless it is insecure.

        Raises:
            ConfigError: naming what is missing and how to make it.
        """
        if self.tls is None and not self.insecure:
            raise ConfigError(
                f"node {node!r} has no TLS files: give it tls=TlsFiles.from_dir(...) "
                "(`actorctl certs init` makes them), or insecure=True for plain TCP in "
                "tests and development"
            )
        if self.keyring is None and not self.insecure:
            raise ConfigError(
                f"node {node!r} has no keys: give it keyring=Keyring.load(DIR) "
                "(`actorctl keys gen NAME --dir DIR` makes them), or insecure=True to "
                "accept unsigned messages in tests and development"
            )


@final
@attrs.frozen(kw_only=True)
class NodeStorage:
    """What a node keeps.

    Attributes:
        store: the node's durable store (the outgoing backlog, delayed tasks,
            revokes, chord barriers, results); the node runs it, first to start
            and last to stop. None: a memory store (``durable = false``:
            nothing survives the process, for tests and benchmarks).
            ``ClusterConfig.store`` makes a cluster node's (``data/NODE/``).
        dead_letters: how many dead letters it keeps, and for how long
            (``_deadletters.py``; its ``_deadletters`` actor answers for them).
    """

    store: Store | None = None
    dead_letters: DeadLetterBounds = attrs.field(factory=DeadLetterBounds)


@final
@attrs.frozen(kw_only=True)
class NodeSupervision:
    """What a node does when something fails or goes silent.

    Attributes:
        actor_restarts: the restart intensity of the node's actors: at most
            this many restarts within this many seconds, or the node fails.
        peer_breaker: the policy of each peer's circuit breaker
            (docs/fault-tolerance.md); None: the default policy.
        idle_timeout: seconds of silence after which a peer is taken for dead.
        node_lost_after: seconds the connection to a peer node may stay down
            before actors watching actors there are told they terminated.
        connect_timeout: seconds a peer node may stay unreachable before a send
            to it fails with ``PeerUnavailable`` (a durable send waits in the
            backlog instead).
    """

    actor_restarts: tuple[int, float] = (5, 10.0)
    peer_breaker: BreakerPolicy | None = None
    idle_timeout: float = 30.0
    node_lost_after: float = 10.0
    connect_timeout: float = 5.0


DEFAULT_SECURITY: Final = NodeSecurity()
#: A node for tests and development: plain TCP, unsigned messages.
INSECURE: Final = NodeSecurity(insecure=True)
DEFAULT_LIMITS: Final = Limits()
DEFAULT_STORAGE: Final = NodeStorage()
DEFAULT_SUPERVISION: Final = NodeSupervision()

#: Each record argument of ``Node``, with its record's class.
_RECORDS: Final[dict[str, type[Any]]] = {
    "security": NodeSecurity,
    "limits": Limits,
    "storage": NodeStorage,
    "supervision": NodeSupervision,
}
#: Each flat keyword, with the record argument it belongs to.
_FIELDS: Final = {
    field.name: record for record, kind in _RECORDS.items() for field in attrs.fields(kind)
}


def node_records(options: Mapping[str, Any]) -> dict[str, Any]:
    """``Node`` keyword arguments from ``options``, where each record field may
    also be given flat: ``tls=...`` becomes ``security=NodeSecurity(tls=...)``,
    over the ``security`` record if one is given too. Other keywords (``host``,
    ``port``, ``clock``, ``metrics``...) pass as they are.

    Raises:
        TypeError: a keyword that is neither a ``Node`` argument nor a field of
            one of its records (as a call with a wrong keyword would).
        ConfigError: a record field with a wrong value (a resource bound, say).
    """
    sorted_out: dict[str, dict[str, Any]] = {record: {} for record in _RECORDS}
    plain: dict[str, Any] = {}
    for key, value in options.items():
        if key in _FIELDS:
            sorted_out[_FIELDS[key]][key] = value
        else:
            plain[key] = value
    for record, fields in sorted_out.items():
        given = plain.get(record)
        if given is not None and not isinstance(given, _RECORDS[record]):
            raise TypeError(f"{record}={given!r}: expected a {_RECORDS[record].__name__} record")
        if fields:
            plain[record] = (
                attrs.evolve(given, **fields) if given is not None else _RECORDS[record](**fields)
            )
    return plain

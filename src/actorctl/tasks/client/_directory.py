"""Where a cluster's pools and task services are: the :class:`Directory` that
callers and nodes resolve a pool's or a service's name with, once per message
sent. Across hosts, with several services nodes, it follows the node that holds
the services role in etcd (``tasks/client/_services_role.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs
import trio

from ..._errors import ConfigError
from ...actors import Address
from ...mailbox import Outcome
from ..protocol._protocol import CHORDS, CONTROL, EVENTS, SCHEDULER

__all__ = ["Directory", "endpoint_of"]


def endpoint_of(url: str) -> tuple[str, int]:
    """The (host, port) of a node's URL (``amqps://host:port``)."""
    return Address.parse(f"{url}/_node").endpoint


@final
@attrs.frozen
class Directory:
    """Where a cluster's pools and task services are.

    Attributes:
        addresses: pool or service name (``celery``, ``$events``,
            ``$scheduler``, ``$chords``) to the address that takes its messages
            (a router, or one worker), as the cluster file says.
        nodes: pool name to the endpoints (``amqps://host:port``) of the nodes
            that host its workers: revokes go to each.
        accepting: the names whose address takes a message on at once (a
            pool's router, the scheduler, the event hub: they settle it once
            their node's backlog or store holds it), so that a caller's send to
            one of them is confirmed ("sent" means "will run"). A worker reached
            directly settles a task only after running it: a send to it is not.
        services: the services nodes' names to their endpoints, in the file's
            order. Several only across hosts: the one that holds the services
            role in etcd is the one :meth:`resolve` sends the pools' routers',
            the scheduler's and the event hub's messages to (the first until
            :meth:`follow` says otherwise).
        failover: seconds a send to a services node that cannot be reached
            waits for the services role to move before it fails (several
            services nodes only).
        names: each node's endpoint to its name, as the cluster file says
            (``app.control.inspect()`` answers by node name).
    """

    addresses: Mapping[str, str] = attrs.field(factory=dict)
    nodes: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    accepting: frozenset[str] = frozenset()
    services: Mapping[str, str] = attrs.field(factory=dict)
    failover: float = 0.0
    names: Mapping[str, str] = attrs.field(factory=dict)
    # ``addresses`` parsed once, when the directory is made: resolving a pool's
    # name is on the path of every task sent. Only :meth:`follow` changes it.
    _parsed: dict[str, Address] = attrs.field(
        init=False,
        repr=False,
        eq=False,
        default=attrs.Factory(
            lambda self: {k: Address.parse(v) for k, v in self.addresses.items()},
            takes_self=True,
        ),
    )
    # The same, each with its text (``str(address)``, an envelope's ``to``),
    # made once: :meth:`target`. One tuple per name, so that a reader gets an
    # address and its own text together. Only :meth:`follow` changes it.
    _targets: dict[str, tuple[Address, str]] = attrs.field(
        init=False,
        repr=False,
        eq=False,
        default=attrs.Factory(
            lambda self: {k: (a, str(a)) for k, a in self._parsed.items()}, takes_self=True
        ),
    )
    # What :meth:`follow` moves: each services node's address of a name that
    # moves with the role (a pool's router, the scheduler, the event hub, the
    # chord barrier) to that name. New chords open on the holder's barrier;
    # an open chord's results follow the role too, as its barrier does (the
    # holder's store is replicated, and who takes the role over takes its
    # barriers over: tasks/client/_services_role.py).
    _movable: dict[Address, str] = attrs.field(
        init=False,
        repr=False,
        eq=False,
        default=attrs.Factory(lambda self: self._moves(), takes_self=True),
    )
    # [the services node the names resolve to now, set when that changes]
    _holder: list[Any] = attrs.field(
        init=False,
        repr=False,
        eq=False,
        default=attrs.Factory(
            lambda self: [next(iter(self.services), None), trio.Event()], takes_self=True
        ),
    )

    def _moves(self) -> dict[Address, str]:
        if len(self.services) < 2:
            return {}
        first = next(iter(self.services.values()))
        moves: dict[Address, str] = {}
        for name in (*self.nodes, EVENTS, SCHEDULER, CHORDS):
            address = self.addresses.get(name, "")
            if not address.startswith(f"{first}/"):
                continue
            for endpoint in self.services.values():
                moves[Address.parse(endpoint + address[len(first) :])] = name
        return moves

    @property
    def elected(self) -> bool:
        """Whether the services node is elected (several, across hosts)."""
        return bool(self._movable)

    @property
    def holder(self) -> str | None:
        """The services node whose services :meth:`resolve` gives now."""
        holder: str | None = self._holder[0]
        return holder

    def follow(self, holder: str) -> bool:
        """Resolve the names that move with the services role to ``holder``'s
        actors from now on (the services node that holds it). Returns whether
        anything moved: False for the holder it follows already, or a name
        that is not one of its services nodes (logged by the caller)."""
        if holder not in self.services or holder == self._holder[0] or not self._movable:
            return False
        endpoint = endpoint_of(self.services[holder])
        for address, name in self._movable.items():
            if address.endpoint == endpoint:
                self._parsed[name] = address
                self._targets[name] = (address, str(address))
        moved: trio.Event = self._holder[1]
        self._holder[:] = [holder, trio.Event()]
        moved.set()
        return True

    def movable(self) -> frozenset[Address]:
        """The services nodes' addresses that :meth:`elsewhere` may move from."""
        return frozenset(self._movable)

    def elsewhere(self, address: Address, outcome: Outcome | None = None) -> Address | None:
        """Where a message for ``address`` goes instead (a backlog's reroute):
        to the holder's, when ``address`` is an actor of a services node that
        no longer holds the services role and whose name moves with it; else
        None (it stays with its receiver)."""
        name = self._movable.get(address)
        if name is None:
            return None
        if outcome is not None and outcome.state == "rejected":
            return None  # refused for good (bad input, a bad signature): not sent again
        now = self._parsed[name]
        return None if now == address else now

    async def moved_from(self, address: Address) -> Address | None:
        """Wait (at most ``failover`` seconds) until a message for ``address``
        goes elsewhere (the services role moved), and return where; None when
        it did not move in that time, or never can."""
        if address not in self._movable:
            return None
        with trio.move_on_after(self.failover):
            while (elsewhere := self.elsewhere(address)) is None:
                await self._holder[1].wait()
            return elsewhere
        return None

    def resolve(self, name: str) -> Address:
        """The address of a pool, a service, or an address given as such.

        Raises:
            ConfigError: naming the unknown name and the known ones.
        """
        if "://" in name:
            return Address.parse(name)
        parsed = self._parsed
        if name in parsed:  # (a membership test and an index: no call per task sent)
            return parsed[name]
        known = ", ".join(sorted(self.addresses)) or "none"
        raise ConfigError(f"no pool or service named {name!r} in the directory (known: {known})")

    def target(self, name: str) -> tuple[Address, str]:
        """:meth:`resolve`, with the address's text (made once): what a send
        needs, with no call for the text on the path of every task sent.

        Raises:
            ConfigError: as :meth:`resolve`.
        """
        targets = self._targets
        if name in targets:  # (a membership test and an index: no call)
            return targets[name]
        address = self.resolve(name)  # an address given as such, or an unknown name
        return address, str(address)

    def control_addresses(self) -> list[Address]:
        """The task control actor of every node that hosts workers."""
        endpoints = sorted({e for pool in self.nodes.values() for e in pool})
        return [Address.parse(f"{endpoint}/{CONTROL}") for endpoint in endpoints]

    def node_name(self, address: Address) -> str:
        """The name of the node at ``address`` (its endpoint, for a node the
        file does not name)."""
        endpoint = f"{address.scheme}://{address.host}:{address.port}"
        return self.names.get(endpoint, endpoint)

    def endpoints(self) -> list[Address]:
        """Every node that may send a caller a result: the nodes of the pools'
        workers, of every address the directory holds and of every services
        node (``_node`` on each)."""
        found = {a.endpoint: a.scheme for a in [*self._parsed.values(), *self._movable]}
        for where in self.nodes.values():
            for endpoint in where:
                address = Address.parse(f"{endpoint}/_node")
                found[address.endpoint] = address.scheme
        return [
            Address(host, port, "_node", scheme) for (host, port), scheme in sorted(found.items())
        ]

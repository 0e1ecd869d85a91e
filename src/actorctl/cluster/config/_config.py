"""cluster.toml: what a cluster is made of, read with clear errors.

    [cluster]
    name = "demo"
    dev = true              # make certificates and keys if there are none (loopback only: _dev.py)
    certs = "certs"         # paths are relative to this file
    keys = "keys"

    [[node]]
    name = "worker-1"
    listen = "127.0.0.1:5701"
    host = "b"              # which host runs it, with [etcd] (_etcd_config.py, docs/deploy.md)
    actors = "examples.workers:actors"
    durable = true          # its store in data/worker-1/store.sqlite; false: in memory
    shutdown_grace = 20.0   # seconds running handlers get to finish at a stop
      [node.limits]         # resource bounds (the fields of Limits, a Node argument)
      max_message_size = 4194304
      [node.metrics]        # Prometheus /metrics (docs/operations.md)
      listen = "127.0.0.1:9464"

    [[supervisor]]          # a supervision tree on a node (docs/supervision.md; and
                            # [[boxed]] workers in any language, docs/boxed.md)
    name = "pipeline"
    node = "worker-1"
      [[supervisor.child]]
      actor = "examples.workers:WordCounter"

This module holds what the file says, as records (:class:`ClusterConfig`,
:class:`NodeConfig`), and what an application on the runtime declares of it
(:class:`ClusterApp`). The file is read by :func:`load_cluster` (``_load.py``),
a table at a time (``_reader.py``; a ``[[node]]`` or ``[[router]]`` table by
``_node_table.py``). Which keys each table may have, and must have, is said in
one place (``KNOWN_KEYS``, ``REQUIRED_KEYS``: ``_tables.py``); an
application on the runtime (the task layer) declares the tables it reads
itself, through the :class:`ClusterApp` given to :func:`load_cluster`
(``_app.py``), and they are checked the same way. A missing, wrong or unread
key (a misspelling, or one of an older format) is a ``ConfigError`` naming the
file, the key, what was expected and the key meant. A ``[[node]]`` table's
other keys are its ``settings``, read by the actors factory its ``actors``
names (``_hosting.py``): checked when the node builds its actors and by
``cluster up`` before it starts anything (``_preflight``), not here, where the
Controller and the CLI read the file too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, final

import attrs

from ..._errors import ConfigError
from ...mailbox import Keyring
from ...store._store import Store
from ...supervision import BoxedSpec, SupervisorSpec
from .._deadletters import DeadLetterBounds
from .._node_records import INSECURE, NodeSecurity
from ..link._limits import Limits
from ..link._tls import TlsFiles
from ._app import AppPage, AppReload, AppTable
from ._etcd_config import EtcdSettings
from ._tree_config import supervisor_specs

__all__ = [
    "CONTROLLER_KEY",
    "SHUTDOWN_GRACE",
    "ClusterApp",
    "ClusterConfig",
    "NodeConfig",
]

_Record = TypeVar("_Record", bound=attrs.AttrsInstance)

#: The name of the Controller's key (and certificate) in a cluster's directories.
CONTROLLER_KEY: Final = "controller"
#: Seconds a node's running handlers get to finish when it stops (SIGTERM, the
#: first Ctrl-C): its key shutdown_grace. Celery's warm shutdown waits for them
#: without a bound; this bound fits, with the Foreman's margin, within the 30 s
#: an orchestrator gives by default (Kubernetes' terminationGracePeriodSeconds).
SHUTDOWN_GRACE: Final = 20.0


@final
@attrs.frozen
class NodeConfig:
    name: str
    host: str
    port: int
    actors: str | None  # MODULE:OBJECT
    instances: int = 1  # how many of each actor: NAME, NAME-2, ...
    # routers this node hosts: (logical name, ("node/actor", ...))
    routes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    supervisors: tuple[str, ...] = ()  # the [[supervisor]] trees it hosts, by name
    durable: bool = True  # its store on disk (False: in memory, for tests and benchmarks)
    # resource bounds from [node.limits], as the table sets them (``bounds``: all of them)
    limits: Mapping[str, Any] = attrs.field(factory=dict, eq=False, hash=False)
    # the node table's other keys, for the actors factory its `actors` names
    settings: Mapping[str, Any] = attrs.field(factory=dict, eq=False, hash=False)
    # [node.deadletters]: how many it keeps, and for how long
    deadletters: DeadLetterBounds = attrs.field(factory=DeadLetterBounds)
    # its [[node.health]] tables (``_health_config.py``)
    health: tuple[Mapping[str, Any], ...] = attrs.field(default=(), eq=False, hash=False)
    metrics: str | None = None  # [node.metrics] listen: where it serves /metrics
    runs_on: str = ""  # its key host: the host that runs it ("": the one host)
    # its key shutdown_grace: seconds its running handlers get at a stop
    shutdown_grace: float = SHUTDOWN_GRACE

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def bounds(self) -> Limits:
        """Its resource bounds: ``[node.limits]``'s, the others by default."""
        return Limits(**self.limits)


@final
@attrs.frozen
class ClusterConfig:
    path: Path
    name: str
    nodes: tuple[NodeConfig, ...]
    certs: Path
    keys: Path
    dev: bool
    insecure: bool
    dev_public: bool = False  # development mode on a network (_dev.py): warned at every start
    controller: tuple[str, int] = ("127.0.0.1", 5700)
    web: tuple[str, int] | None = None  # where the Controller serves its web page
    web_window: int | None = None  # rows the page keeps of each window (None: the feed's own)
    supervisor_tables: tuple[Any, ...] = attrs.field(default=(), eq=False)
    # the [[boxed]] workers, each with its node (docs/boxed.md)
    boxed: tuple[tuple[str, BoxedSpec], ...] = attrs.field(default=(), eq=False)
    etcd: EtcdSettings | None = None  # [etcd]: a cluster on several hosts; None: one host
    # the application that declared its own tables (load_cluster's app), and those tables
    app: ClusterApp | None = attrs.field(default=None, eq=False)
    app_tables: Mapping[str, tuple[Mapping[str, Any], ...]] = attrs.field(factory=dict, eq=False)
    # the application's tables that have a schema, each read as its record
    app_records: Mapping[str, tuple[attrs.AttrsInstance, ...]] = attrs.field(factory=dict, eq=False)

    def tables(self, name: str) -> tuple[Mapping[str, Any], ...]:
        """The ``[[name]]`` tables of the application as the file has them
        (their keys checked when the file was read); none if the file has none."""
        return self.app_tables.get(name, ())

    def records(self, name: str, schema: type[_Record]) -> tuple[_Record, ...]:
        """The ``[[name]]`` tables of the application, each read as its
        ``schema`` record (``AppTable.of``) when the file was read, its values
        checked; none if the file has none.

        Raises:
            TypeError: ``[[name]]`` is not registered with ``schema``.
        """
        found = self.app_records.get(name, ())
        if not all(isinstance(record, schema) for record in found):
            raise TypeError(f"[[{name}]] tables are not read as {schema.__qualname__} records")
        return found  # type: ignore[return-value]

    @property
    def hosts(self) -> list[str]:
        """The hosts its nodes' ``host`` keys name (none: the cluster is one host)."""
        return sorted({node.runs_on for node in self.nodes if node.runs_on})

    def boxed_specs(self, node: NodeConfig, *, pools: bool = False) -> list[BoxedSpec]:
        """The boxed workers ``node`` runs: those that serve a task pool
        (``pools=True``; the task app on the node hosts them), or the others
        (the node hosts them as actors of their own)."""
        return [
            spec for on, spec in self.boxed if on == node.name and (spec.pool is not None) == pools
        ]

    def supervisor_specs(self, node: NodeConfig) -> list[SupervisorSpec]:
        """The supervision trees ``node`` hosts, their actor modules imported.

        Raises:
            ConfigError: naming the key that is wrong.
        """
        return supervisor_specs(self.path, list(self.supervisor_tables), node.name)

    def node(self, name: str) -> NodeConfig:
        """The node called ``name``.

        Raises:
            ConfigError: no such node.
        """
        for node in self.nodes:
            if node.name == name:
                return node
        raise ConfigError(
            f"{self.path}: no node named {name!r} (nodes: {[n.name for n in self.nodes]})"
        )

    def url(self, node: NodeConfig) -> str:
        return f"{self.scheme}://{node.listen}"

    @property
    def root(self) -> Path:
        """The directory the file is in: relative paths start here."""
        return self.path.parent

    @property
    def scheme(self) -> str:
        return "amqp" if self.insecure else "amqps"

    def store(self, node: NodeConfig) -> Store:
        """The durable store of ``node``: ``data/NODE/store.sqlite`` beside the
        file, or a memory store for a node with ``durable = false``."""
        if not node.durable:
            return Store.memory(node.name)
        return Store(self.root / "data" / node.name / "store.sqlite", name=node.name)

    def routes(self, node: NodeConfig) -> list[tuple[str, list[str]]]:
        """The routers ``node`` hosts: each logical name with its instances'
        addresses (``NODE/ACTOR`` resolved to ``amqps://host:port/ACTOR``)."""
        where = {n.name: f"{self.scheme}://{n.listen}" for n in self.nodes}
        return [
            (name, [f"{where[i.partition('/')[0]]}/{i.partition('/')[2]}" for i in instances])
            for name, instances in node.routes
        ]

    def security(self, name: str) -> NodeSecurity:
        """The security of a member called ``name``: its TLS files and keyring
        (whose members are the cluster's nodes), or ``insecure=True`` for an
        insecure cluster."""
        if self.insecure:
            return INSECURE
        return NodeSecurity(
            tls=TlsFiles.from_dir(self.certs, name),
            keyring=Keyring.load(
                self.keys, name, members=self.member_names, operators=(CONTROLLER_KEY,)
            ),
        )

    @property
    def member_names(self) -> list[str]:
        """The keys of the cluster's members: its nodes' (docs/protocol.md §11.4).
        Unless the keyring's ``roles`` file says otherwise, their role is
        member, the Controller's key's operator (it relays the operator's
        commands), and every other key's client."""
        return [node.name for node in self.nodes]


class ClusterApp(Protocol):
    """What an application on the runtime declares of cluster.toml (the task
    layer's: ``actorctl.tasks.cluster_app()``). The runtime calls it and knows
    none of its words.
    """

    @property
    def tables(self) -> Sequence[AppTable]:
        """The arrays of tables it reads, with their keys."""
        ...

    @property
    def roles(self) -> Sequence[str]:
        """The roles it holds leases for (``cluster status`` names their holders)."""
        ...

    @property
    def moved_keys(self) -> Mapping[str, str]:
        """Keys of its older formats (``cluster.app``), each with where what
        it said is said now: the error for such a key says so."""
        ...

    @property
    def record_aliases(self) -> Mapping[str, str]:
        """Fields of a node's record in etcd that older releases wrote under
        the application's words: old name to the field's name now. A node
        writes each field under both and reads the old one from a record
        that lacks the new (``NodeRecord.aliases``), so that nodes of the two
        releases mix (docs/deploy.md)."""
        ...

    def check(self, config: ClusterConfig, hosted: Mapping[str, Collection[str]]) -> None:
        """What ``cluster up`` checks before it starts anything, given the actors
        each node would host. Raises ``ConfigError`` naming what is wrong."""
        ...

    def reload(
        self, old: ClusterConfig, new: ClusterConfig, hosted: Mapping[str, Collection[str]]
    ) -> AppReload:
        """What going from ``old`` to ``new`` changes of its tables, given the
        actors each running node hosts."""
        ...

    @property
    def page(self) -> AppPage | None:
        """What it adds to the Controller's web page (None: nothing)."""
        ...

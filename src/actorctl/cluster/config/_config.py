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

Which keys each table may have, and must have, is said in one place
(``KNOWN_KEYS``, ``REQUIRED_KEYS``); an application on the runtime (the task
layer) declares the tables it reads itself, through the :class:`ClusterApp`
given to :func:`load_cluster` (``_app.py``), and they are checked the same
way. A missing, wrong or unread key (a misspelling, or one of an older
format) is a ``ConfigError`` naming the file, the key, what was expected and
the key meant. A ``[[node]]`` table's other keys are its ``settings``, read by
the actors factory its ``actors`` names (``_hosting.py``): checked when the node
builds its actors and by ``cluster up`` before it starts anything
(``_preflight``), not here, where the Controller and the CLI read the file too.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

import attrs

from ..._errors import ConfigError
from ...mailbox import Keyring
from ...store._store import Store
from ...supervision import CHILD_KEYS, SUPERVISOR_KEYS, BoxedSpec, SupervisorSpec
from .._deadletters import DeadLetterBounds
from .._node_records import INSECURE, NodeSecurity
from ..link._limits import LIMIT_NAMES, Limits
from ..link._tls import TlsFiles
from ._app import AppReload, AppTable
from ._boxed_config import BOXED_KEYS, boxed_specs
from ._config_keys import unknown_key
from ._dev import check_dev_listen
from ._etcd_config import ETCD_KEYS, EtcdSettings, check_hosts, etcd_settings
from ._health_tables import HEALTH_KEYS, check_health_tables
from ._tree_config import TARGET, check_supervisors, supervisor_specs
from ._web_config import METRICS_KEYS, metrics_table, web_address

__all__ = [
    "CONTROLLER_KEY",
    "KNOWN_KEYS",
    "NODE_KEYS",
    "REQUIRED_KEYS",
    "ClusterApp",
    "ClusterConfig",
    "NodeConfig",
    "file_keys",
    "load_cluster",
    "unknown_key",
]

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
#: The keys of a [[node]] table this layer reads; an actors factory reads others.
NODE_KEYS: Final = frozenset(
    {"name", "listen", "actors", "instances", "durable", "limits", "deadletters", "health"}
) | {"metrics"}
#: The key of a [[node]] table that says where it runs (read by `host up`, not the node).
HOST_KEY: Final = "host"
#: The name of the Controller's key (and certificate) in a cluster's directories.
CONTROLLER_KEY: Final = "controller"
#: Every table of the file ("" is the top level) with the keys it may have: the one
#: place to add a table or a key. A key that is not here is refused, with the nearest
#: known key; a [[node]] table may also have those its actors factory reads (_hosting).
#: docs/cluster-toml.md describes each (tests/test_cluster_toml_doc.py checks it).
KNOWN_KEYS: Final[dict[str, frozenset[str]]] = {
    "": frozenset(
        {"cluster", "node", "router", "supervisor", "boxed"} | {"etcd"}  # read by _etcd_config.py
    ),
    "cluster": frozenset(
        {"name", "dev", "dev_public", "certs", "keys", "insecure", "controller", "web"}
    ),
    "node": NODE_KEYS | {HOST_KEY},
    "node.limits": frozenset(LIMIT_NAMES),
    "node.metrics": METRICS_KEYS,
    "node.deadletters": frozenset({"max", "ttl"}),
    "node.health": HEALTH_KEYS,  # _health_tables.py
    "router": frozenset({"name", "node", "instances"}),
    "supervisor": SUPERVISOR_KEYS,  # _tree_config.py, with supervision's words
    "supervisor.child": CHILD_KEYS,
    "boxed": BOXED_KEYS,  # _boxed_config.py
    "etcd": ETCD_KEYS,  # a cluster on several hosts (_etcd_config.py)
}
#: The keys a table must have: a missing one is reported as missing, naming a
#: key of the table that looks like a misspelling of it.
REQUIRED_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "node": ("name", "listen"),
    "router": ("name", "node", "instances"),
    "etcd": ("endpoints",),
}
#: Tables that may have keys besides the known ones (read by someone else).
_OPEN: Final = frozenset({"node"})


def file_keys(app: ClusterApp | None = None) -> dict[str, frozenset[str]]:
    """Every table a file read with ``app`` may have, with its keys: the
    runtime's (``KNOWN_KEYS``) and the application's own arrays of tables.
    (A ``[[node]]`` table may also have the keys its actors factory reads.)"""
    known = dict(KNOWN_KEYS)
    for table in app.tables if app is not None else ():
        known[table.name] = table.known
    known[""] = known[""] | {table.name for table in (app.tables if app is not None else ())}
    return known


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
    supervisor_tables: tuple[Any, ...] = attrs.field(default=(), eq=False)
    # the [[boxed]] workers, each with its node (docs/boxed.md)
    boxed: tuple[tuple[str, BoxedSpec], ...] = attrs.field(default=(), eq=False)
    etcd: EtcdSettings | None = None  # [etcd]: a cluster on several hosts; None: one host
    # the application that declared its own tables (load_cluster's app), and those tables
    app: ClusterApp | None = attrs.field(default=None, eq=False)
    app_tables: Mapping[str, tuple[Mapping[str, Any], ...]] = attrs.field(factory=dict, eq=False)

    def tables(self, name: str) -> tuple[Mapping[str, Any], ...]:
        """The ``[[name]]`` tables of the application (their keys checked when
        the file was read); none if the file has none."""
        return self.app_tables.get(name, ())

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


def load_cluster(path: Path | str, app: ClusterApp | None = None) -> ClusterConfig:
    """Read and check a cluster.toml.

    Args:
        app: the application whose own tables the file may have (their keys
            checked too); without one, only the runtime's tables are known.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    where = _Where(path, app)
    where.keys(data, "", "")
    cluster = data.get("cluster", {})
    if not isinstance(cluster, dict):
        raise where.error("cluster", "a table [cluster]", cluster)
    where.keys(cluster, "cluster", "cluster")
    name = where.string(cluster, "cluster.name", default="cluster")
    nodes_data = data.get("node")
    if not isinstance(nodes_data, list) or not nodes_data:
        raise where.error("node", "at least one [[node]] table", nodes_data)
    nodes = tuple(where.node(i, item) for i, item in enumerate(nodes_data))
    check_hosts(path, [(node.name, node.runs_on) for node in nodes])
    if isinstance(data.get("etcd"), dict):
        where.keys(data["etcd"], "etcd", "etcd")
    names = [node.name for node in nodes]
    for duplicate in {n for n in names if names.count(n) > 1}:
        raise ConfigError(f"{path}: node name {duplicate!r} is used twice: names must be unique")
    nodes = where.routers(data.get("router", []), nodes)
    supervisor_tables = data.get("supervisor", [])
    trees = check_supervisors(path, supervisor_tables, [node.name for node in nodes])
    nodes = tuple(attrs.evolve(n, supervisors=trees.get(n.name, ())) for n in nodes)
    ports = [node.port for node in nodes]
    ports.append(where.endpoint(cluster, "cluster.controller", default="127.0.0.1:5700")[1])
    for duplicate_port in {p for p in ports if ports.count(p) > 1}:
        raise ConfigError(
            f"{path}: port {duplicate_port} is used twice (by nodes or the controller)"
        )
    boxed = boxed_specs(path, data.get("boxed", []), names)
    for on, spec in boxed:
        if spec.pool is not None and next(n for n in nodes if n.name == on).actors is None:
            raise ConfigError(
                f"{path}: boxed worker {spec.name!r} serves pool {spec.pool!r}, but node "
                f'{on!r} hosts no task app: add actors = "MODULE:APP" and '
                f'pools = ["{spec.pool}"] to it'
            )
    dev = where.boolean(cluster, "cluster.dev", default=False)
    dev_public = where.boolean(cluster, "cluster.dev_public", default=False)
    controller = where.endpoint(cluster, "cluster.controller", default="127.0.0.1:5700")
    web = web_address(path, cluster.get("web"))
    if dev and not dev_public:
        listens = [(f"node {n.name!r}", n.host, n.port) for n in nodes]
        listens.append(("the controller (cluster.controller)", *controller))
        if web is not None:
            listens.append(("the web page (cluster.web)", *web))
        check_dev_listen(path, listens)
    return ClusterConfig(
        path=path.resolve(),
        name=name,
        nodes=nodes,
        certs=path.parent.resolve() / where.string(cluster, "cluster.certs", default="certs"),
        keys=path.parent.resolve() / where.string(cluster, "cluster.keys", default="keys"),
        dev=dev,
        dev_public=dev_public,
        insecure=where.boolean(cluster, "cluster.insecure", default=False),
        controller=controller,
        web=web,
        supervisor_tables=tuple(supervisor_tables),
        boxed=tuple(boxed),
        etcd=etcd_settings(path, data.get("etcd")),
        app=app,
        app_tables={
            name: where.tables(data[name], name) for name in where.app_tables if name in data
        },
    )


@final
class _Where:
    def __init__(self, path: Path, app: ClusterApp | None = None) -> None:
        self.path = path
        #: The application's tables, by name.
        self.app_tables = {table.name: table for table in app.tables} if app else {}
        #: Every table's keys.
        self.known = file_keys(app)
        #: Keys of the application's older formats, with where they went.
        self.moved = app.moved_keys if app is not None else None

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        """Check the keys of ``table`` (at ``prefix``, e.g. ``node[1]``), a table
        of ``kind`` (a key of KNOWN_KEYS, e.g. ``node``, or an application's
        table): a missing required key is reported as missing (naming the
        misspelling, if there is one), and a key nothing reads is refused."""
        app = self.app_tables.get(kind)
        known = self.known[kind]
        required = app.required if app is not None else REQUIRED_KEYS.get(kind, ())
        dot = f"{prefix}." if prefix else ""
        strangers = [key for key in table if key not in known]
        for key in required:
            if key not in table:
                close = difflib.get_close_matches(key, strangers, n=1)
                hint = (
                    f"{dot}{close[0]} is not a key: a misspelling of {key!r}?"
                    if close
                    else f"every [[{kind}]] table needs one ({key} = ...)"
                )
                raise ConfigError(f"{self.path}: key {dot + key!r} is missing: {hint}")
        for key in strangers:
            if kind not in _OPEN or difflib.get_close_matches(key, known, n=1, cutoff=0.8):
                raise unknown_key(self.path, f"{dot}{key}", table[key], known, moved=self.moved)

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        shown = "nothing" if got is None else f"{got!r}"
        return ConfigError(f"{self.path}: key {key!r}: expected {expected}, got {shown}")

    def string(self, table: dict[str, Any], key: str, *, default: str | None = None) -> str:
        value = table.get(key.rpartition(".")[2], default)
        if not isinstance(value, str) or not value:
            raise self.error(key, "a non-empty string", value)
        return value

    def boolean(self, table: dict[str, Any], key: str, *, default: bool) -> bool:
        value = table.get(key.rpartition(".")[2], default)
        if not isinstance(value, bool):
            raise self.error(key, "true or false", value)
        return value

    def endpoint(self, table: dict[str, Any], key: str, *, default: str) -> tuple[str, int]:
        listen = self.string(table, key, default=default)
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise self.error(key, "HOST:PORT, e.g. 127.0.0.1:5701", listen)
        return host, int(port)

    def node(self, index: int, item: object) -> NodeConfig:
        prefix = f"node[{index}]"
        if not isinstance(item, dict):
            raise self.error(prefix, "a table", item)
        self.keys(item, prefix, "node")
        name = self.string(item, f"{prefix}.name")
        if not _NAME.fullmatch(name):
            raise self.error(f"{prefix}.name", "letters, digits, '.' and '-'", name)
        host, port = self.endpoint(item, f"{prefix}.listen", default="")
        runs_on = self.string(item, f"{prefix}.host", default=None) if "host" in item else ""
        if runs_on and not _NAME.fullmatch(runs_on):
            raise self.error(
                f"{prefix}.host", "a host's name: letters, digits, '.' and '-'", runs_on
            )
        actors = item.get("actors")
        if actors is not None and (not isinstance(actors, str) or not TARGET.fullmatch(actors)):
            raise self.error(
                f"{prefix}.actors", "MODULE:OBJECT, e.g. examples.workers:actors", actors
            )
        instances = item.get("instances", 1)
        if type(instances) is not int or not 1 <= instances <= 1000:
            raise self.error(f"{prefix}.instances", "a whole number from 1 to 1000", instances)
        durable = item.get("durable", True)
        if not isinstance(durable, bool):
            why = f"true or false (whether node {name!r} keeps its store on disk)"
            raise self.error(f"{prefix}.durable", why, durable)
        limits = self.limits(f"{prefix}.limits", item.get("limits", {}))
        deadletters = self.deadletters(f"{prefix}.deadletters", item.get("deadletters", {}))
        try:
            health = check_health_tables(
                f"{prefix}.health",
                item.get("health", []),
                lambda key, value: unknown_key(self.path, key, value, HEALTH_KEYS),
            )
        except ConfigError as exc:
            message = str(exc)
            raise (
                exc
                if message.startswith(str(self.path))
                else ConfigError(f"{self.path}: {message}")
            ) from None
        settings = {key: value for key, value in item.items() if key not in KNOWN_KEYS["node"]}
        for key in settings:  # a misspelt host would be taken for its actors factory's key
            if difflib.get_close_matches(key, [HOST_KEY], cutoff=0.7):
                raise unknown_key(self.path, f"{prefix}.{key}", item[key], KNOWN_KEYS["node"])
        if actors is None and settings:  # no actors factory here to read them
            key, value = next(iter(settings.items()))
            raise unknown_key(
                self.path,
                f"{prefix}.{key}",
                value,
                NODE_KEYS,
                "nothing reads it on a node that names no actors (only an actors "
                'factory that actors = "MODULE:OBJECT" names, such as a task app, '
                "reads a node's other keys)",
            )
        return NodeConfig(
            name,
            host,
            port,
            actors,
            instances,
            durable=durable,
            limits=limits,
            settings=settings,
            deadletters=deadletters,
            health=health,
            metrics=metrics_table(self.path, f"{prefix}.metrics", item.get("metrics")),
            runs_on=runs_on,
        )

    def deadletters(self, key: str, table: object) -> DeadLetterBounds:
        """A node's [node.deadletters] table: ``max`` letters, ``ttl`` seconds."""
        if not isinstance(table, dict):
            raise self.error(key, "a table with max (a count) and ttl (seconds)", table)
        known = KNOWN_KEYS["node.deadletters"]
        for name, value in table.items():
            if name not in known:
                raise unknown_key(self.path, f"{key}.{name}", value, known)
        try:
            return DeadLetterBounds(**table)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: key '{key}': {exc}") from None

    def limits(self, key: str, table: object) -> dict[str, Any]:
        """A node's [node.limits] table: the resource bounds it sets."""
        if not isinstance(table, dict):
            raise self.error(key, f"a table of resource bounds ({', '.join(LIMIT_NAMES)})", table)
        self.keys(table, key, "node.limits")
        for name, value in table.items():
            try:
                Limits(**{name: value})
            except ConfigError as exc:
                raise ConfigError(f"{self.path}: key '{key}.{name}': {exc}") from None
        return dict(table)

    def tables(self, items: object, kind: str) -> tuple[Mapping[str, Any], ...]:
        """The ``[[kind]]`` tables, their keys checked."""
        if not isinstance(items, list):
            raise self.error(kind, f"[[{kind}]] tables", items)
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{kind}[{index}]", "a table", item)
            self.keys(item, f"{kind}[{index}]", kind)
        return tuple(items)

    def routers(self, items: object, nodes: tuple[NodeConfig, ...]) -> tuple[NodeConfig, ...]:
        """Attach each [[router]] to the node that hosts it."""
        if not isinstance(items, list):
            raise self.error("router", "[[router]] tables", items)
        by_name = {node.name: node for node in nodes}
        routes: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for index, item in enumerate(items):
            prefix = f"router[{index}]"
            if not isinstance(item, dict):
                raise self.error(prefix, "a table", item)
            self.keys(item, prefix, "router")
            name = self.string(item, f"{prefix}.name")
            host = self.string(item, f"{prefix}.node")
            if host not in by_name:
                raise self.error(f"{prefix}.node", f"one of the nodes {sorted(by_name)}", host)
            instances = item.get("instances")
            if not isinstance(instances, list) or not instances:
                raise self.error(f"{prefix}.instances", 'a list like ["n1/emails"]', instances)
            for instance in instances:
                node, _, actor = str(instance).partition("/")
                if node not in by_name or not actor:
                    raise self.error(
                        f"{prefix}.instances", "NODE/ACTOR with a known NODE", instance
                    )
            routes.setdefault(host, []).append((name, tuple(str(i) for i in instances)))
        return tuple(attrs.evolve(n, routes=tuple(routes.get(n.name, ()))) for n in nodes)

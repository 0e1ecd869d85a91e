"""cluster.toml's tables read as attrs records through one cattrs converter
(issue 29, item 5): a table's schema says its keys, which it must have and
what each value is; the errors keep the key's path, the nearest known key
and what to write, and an application registers its tables' schemas
through the runtime's ``AppTable.of``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from actorctl import ConfigError
from actorctl._schema import key, schema_keys, schema_required
from actorctl.cluster import AppPage, AppReload, AppTable, ClusterConfig, load_cluster
from actorctl.cluster.config._table_schemas import ClusterTable, NodeTable, RouterTable
from actorctl.cluster.config._tables import KNOWN_KEYS, REQUIRED_KEYS
from actorctl.tasks import cluster_app

NODE = '[[node]]\nname = "n1"\nlisten = "127.0.0.1:5701"\n'


def _load(tmp_path: Path, text: str, app: Any = None) -> ClusterConfig:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return load_cluster(path, app)


def _refused(tmp_path: Path, text: str, app: Any = None) -> str:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, text, app)
    message = str(refused.value)
    assert message.startswith(str(tmp_path / "cluster.toml")), message
    return message


def test_the_runtimes_tables_keys_are_their_schemas_fields() -> None:
    assert KNOWN_KEYS["cluster"] == schema_keys(ClusterTable)
    assert KNOWN_KEYS["router"] == schema_keys(RouterTable) == {"name", "node", "instances"}
    assert KNOWN_KEYS["node"] == schema_keys(NodeTable)
    assert REQUIRED_KEYS["node"] == schema_required(NodeTable) == ("name", "listen")
    assert REQUIRED_KEYS["router"] == ("name", "node", "instances")


def test_a_file_is_read_into_its_records_values(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[cluster]\nname = "c"\ncontroller = "127.0.0.1:5799"\ninsecure = true\n'
        + NODE
        + 'shutdown_grace = 5\ninstances = 2\nhost = "a"\n'
        + '[[router]]\nname = "r"\nnode = "n1"\ninstances = ["n1/a"]\n',
    )
    node = config.nodes[0]
    assert (config.name, config.controller, config.insecure) == ("c", ("127.0.0.1", 5799), True)
    assert (node.host, node.port, node.instances, node.runs_on) == ("127.0.0.1", 5701, 2, "a")
    assert node.shutdown_grace == 5.0  # a whole number of seconds is a float
    assert node.routes == (("r", ("n1/a",)),)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # a value of the wrong type: TOML's true is not 1, 1 is not true
        (
            "[cluster]\ninsecure = 1\n" + NODE,
            "key 'cluster.insecure': expected true or false, got 1",
        ),
        (NODE + "instances = true\n", "key 'node[0].instances': expected a whole number from 1"),
        # a value its check refuses, in words that name the node
        (
            NODE + 'durable = "no"\n',
            "key 'node[0].durable': expected true or false (whether node 'n1' keeps its store "
            "on disk), got 'no'",
        ),
        (NODE + "shutdown_grace = -1\n", "expected seconds from 0 to 86400 that node 'n1' gives"),
        ('[cluster]\ncontroller = "nohost"\n' + NODE, "expected HOST:PORT, e.g. 127.0.0.1:5701"),
        # a misspelt key, and a missing one
        (
            '[cluster]\ncontoller = "127.0.0.1:1"\n' + NODE,
            "no such key 'cluster.contoller' (= '127.0.0.1:1'): did you mean 'controller'?",
        ),
        (
            NODE + '[[router]]\nname = "r"\nnode = "n1"\ninstance = ["n1/a"]\n',
            "key 'router[0].instances' is missing: router[0].instance is not a key: a "
            "misspelling of 'instances'?",
        ),
        (
            NODE + '[[router]]\nname = "r"\nnode = "n1"\ninstances = "n1/a"\n',
            "key 'router[0].instances': expected a list like [\"n1/emails\"], got 'n1/a'",
        ),
    ],
)
def test_a_wrong_value_or_key_is_named_with_its_path_and_fix(
    tmp_path: Path, text: str, says: str
) -> None:
    assert says in _refused(tmp_path, text)


def test_a_boxed_workers_wrong_value_is_named_once_with_its_path(tmp_path: Path) -> None:
    # Given a [[boxed]] table (read as its record) with a negative time limit
    text = NODE + '[[boxed]]\nname = "js"\nnode = "n1"\ncommand = "node"\ntime_limit = -1\n'
    # Then the error names the key once (not wrapped in "a valid boxed worker")
    message = _refused(tmp_path, text)
    assert message.endswith(
        "key 'boxed[0].time_limit': expected a number (seconds, or MiB for memory_limit), got -1"
    )
    assert "valid boxed worker" not in message


def test_the_etcd_tables_first_wrong_value_is_named_whether_type_or_check(
    tmp_path: Path,
) -> None:
    # Given an [etcd] table whose ttl fails its check and whose ca is of the wrong type
    etcd = '[etcd]\nendpoints = ["http://127.0.0.1:2379"]\nttl = 0\nca = 5\n'
    # Then the first in the table's order (ttl) is named, with what to write
    assert "key 'etcd.ttl': expected whole seconds in 1..86400" in _refused(tmp_path, NODE + etcd)
    # And a good table becomes the settings, its files beside the cluster file
    good = '[etcd]\nendpoints = ["http://127.0.0.1:2379"]\ncert = "c.pem"\nkey = "k.pem"\n'
    settings = _load(tmp_path, NODE + good).etcd
    assert settings is not None
    assert (settings.ttl, settings.cert) == (10, (tmp_path / "c.pem").resolve())


@pytest.mark.parametrize(
    ("health", "says"),
    [
        (
            'name = "s"\ncheck = "disk"\ninterval = 0\n',
            "'node[0].health[0].interval': expected a number > 0",
        ),
        ('check = "disk"\n', "key 'node[0].health[0].name': expected a name, got nothing"),
        ('name = "s"\ncheck = "peer"\n', "'node[0].health[0].peer': expected a node name (or host"),
        ('name = "s"\nchek = "disk"\n', "no such key 'node[0].health[0].chek' (= 'disk'): did you"),
    ],
)
def test_a_health_tables_mistake_is_named_with_its_path(
    tmp_path: Path, health: str, says: str
) -> None:
    assert says in _refused(tmp_path, NODE + "[[node.health]]\n" + health)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            NODE + '[node.metrics]\nlisen = "127.0.0.1:0"\n',
            "key 'node[0].metrics.listen' is missing: node[0].metrics.lisen is not a key: a "
            "misspelling of 'listen'?",
        ),
        (
            NODE + '[node.metrics]\nlisten = "127.0.0.1:0"\nport = 1\n',
            "no such key 'node[0].metrics.port' (= 1): use one of ['listen']",
        ),
        (
            NODE + "[node.metrics]\n",
            "key 'node[0].metrics.listen' is missing: every [node.metrics] table needs one",
        ),
        (
            '[cluster]\nweb = "nope"\n' + NODE,
            "key 'cluster.web': expected \"HOST:PORT\", e.g. 127.0.0.1:9464 (0: any port), "
            "got 'nope'",
        ),
        (
            NODE + "[etcd]\nttl = 5\n",
            "key 'etcd.endpoints' is missing: every [etcd] table needs one (endpoints = ...)",
        ),
    ],
)
def test_where_to_listen_is_named_as_any_other_key(tmp_path: Path, text: str, says: str) -> None:
    assert says in _refused(tmp_path, text)


def test_a_good_metrics_table_and_web_address_are_read(tmp_path: Path) -> None:
    text = '[cluster]\nweb = "127.0.0.1:0"\n' + NODE + '[node.metrics]\nlisten = "127.0.0.1:0"\n'
    config = _load(tmp_path, text)
    assert (config.web, config.nodes[0].metrics) == (("127.0.0.1", 0), "127.0.0.1:0")


def test_of_several_wrong_values_the_first_in_the_tables_order_is_named(tmp_path: Path) -> None:
    message = _refused(tmp_path, '[[node]]\nname = 3\nlisten = 5\ndurable = "x"\n')
    assert "key 'node[0].name': expected a non-empty string, got 3" in message


@attrs.frozen
class _Job:
    """An application's table: a name, and a count its check bounds."""

    name: str
    count: int = key("a count from 1 to 9", lambda v: 1 <= v <= 9, default=1)


@attrs.frozen
class _JobsApp:
    """A ClusterApp with one table of its own, ``[[job]]``, registered by schema."""

    tables: Sequence[AppTable] = (AppTable.of("job", _Job),)
    roles: Sequence[str] = ()
    moved_keys: Mapping[str, str] = attrs.field(factory=dict)
    record_aliases: Mapping[str, str] = attrs.field(factory=dict)
    page: AppPage | None = None

    def check(self, config: ClusterConfig, hosted: Mapping[str, Collection[str]]) -> None:
        return None

    def reload(
        self, old: ClusterConfig, new: ClusterConfig, hosted: Mapping[str, Collection[str]]
    ) -> AppReload:
        return AppReload()


def test_an_application_registers_its_tables_schema_and_gets_the_same_errors(
    tmp_path: Path,
) -> None:
    app = _JobsApp()
    # Given its schema, the runtime knows the table's keys and which it needs
    assert (app.tables[0].known, app.tables[0].required) == ({"name", "count"}, ("name",))
    # When a file has a good table, it is read
    config = _load(tmp_path, NODE + '[[job]]\nname = "a"\ncount = 3\n', app)
    assert config.tables("job") == ({"name": "a", "count": 3},)
    # Then a misspelt key, a missing one and a wrong value are named as the runtime's are
    misspelt = _refused(tmp_path, NODE + '[[job]]\nname = "a"\ncuont = 3\n', app)
    assert "no such key 'job[0].cuont' (= 3): did you mean 'count'?" in misspelt
    missing = _refused(tmp_path, NODE + "[[job]]\ncount = 3\n", app)
    assert "key 'job[0].name' is missing: every [[job]] table needs one (name = ...)" in missing
    wrong = _refused(tmp_path, NODE + '[[job]]\nname = "a"\ncount = 12\n', app)
    assert "key 'job[0].count': expected a count from 1 to 9, got 12" in wrong
    typed = _refused(tmp_path, NODE + '[[job]]\nname = "a"\ncount = "3"\n', app)
    assert "key 'job[0].count': expected a count from 1 to 9, got '3'" in typed


def test_the_task_layers_tables_are_registered_by_schema(tmp_path: Path) -> None:
    tables = {table.name: table for table in cluster_app().tables}
    assert all(table.schema is not None for table in tables.values())
    assert tables["periodic"].required == ("name", "task")
    assert tables["source"].required == ("name", "kind")
    # A [[task]] table's name is a string, checked when the file is read
    message = _refused(tmp_path, NODE + "[[task]]\nname = 5\n", cluster_app())
    assert "key 'task[0].name': expected a non-empty string, got 5" in message

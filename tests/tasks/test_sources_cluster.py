"""Data sources on a real cluster (``actorctl cluster up``, real processes):
the services node, which reads a source of each built-in kind (a directory,
an HTTP endpoint, a SQLite table), is SIGKILLed after some of each source's
items ran, and each resumes from its checkpoint: nothing skipped, nothing run
twice (counted from the runs the task records). And ``cluster up`` refuses
a wrong ``[[source]]`` table by name before it starts anything.

The cluster is tests/support/running.py's (a services node, one worker node,
the task app tests/apps/state_app.py), with three ``[[source]]`` tables, each
sending its items as the task ``s.paced``, at most 4 in flight: the lines of
the files in ``inbox/`` beside cluster.toml, the items an HTTP server of the
test's lists (keyed by ``id``), and the rows of a SQLite table (keyed by
``id``).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorctl import ConfigError
from actorctl.cluster import load_cluster
from actorctl.ops import check_references
from actorctl.tasks import cluster_app
from actorctl.tasks.sources._source import item_id
from tests.apps.state_app import runs
from tests.support.cli import run_cli
from tests.support.running import CLUSTER, WAIT, RunningCluster, counted

LINES = 300
ROWS = 200
SOURCE = """
[[source]]
name = "inbox"
kind = "directory"
path = "inbox"
pattern = "*.log"
task = "s.paced"
poll = 0.1
window = 4

[[source]]
name = "feed"
kind = "http"
url = "http://127.0.0.1:{port}/items"
key = "id"
task = "s.paced"
poll = 0.1
window = 4

[[source]]
name = "orders"
kind = "sqlite"
database = "orders.sqlite"
table = "orders"
key = "id"
task = "s.paced"
poll = 0.1
window = 4
"""


class Endpoint(http.server.BaseHTTPRequestHandler):
    """The HTTP source's endpoint: every item, each time (the source keeps only new keys)."""

    body = json.dumps([{"id": n, "v": n * n} for n in range(1, ROWS + 1)]).encode()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: a poll every 0.1 s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("sources"))
    (running.directory / "inbox").mkdir()
    with contextlib.closing(sqlite3.connect(running.directory / "orders.sqlite")) as db, db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        db.executemany("INSERT INTO orders VALUES (?, ?)", [(n, n / 2) for n in range(1, ROWS + 1)])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    with running.path.open("a") as file:
        file.write(SOURCE.format(port=server.server_address[1]))
    try:
        with running:
            yield running
    finally:
        server.shutdown()
        server.server_close()


def test_sources_whose_node_is_killed_resume_from_their_checkpoints(
    cluster: RunningCluster,
) -> None:
    # Given a file of lines, an endpoint's items and a table's rows, which the
    # sources send a few at a time
    written = [f"line {n}\n".encode() for n in range(LINES)]
    (cluster.directory / "inbox" / "a.log").write_bytes(b"".join(written))
    ids, at = [], 0
    for line in written:
        at += len(line)
        ids.append(item_id("inbox", ["a.log", at]))
    ids += [item_id("feed", n) for n in range(1, ROWS + 1)]
    ids += [item_id("orders", n) for n in range(1, ROWS + 1)]

    def ran(source: str) -> int:
        return sum(1 for i in set(runs(cluster.records)) if i.startswith(f"source:{source}@"))

    cluster.wait_until(
        "20 items of each source ran", lambda: min(map(ran, ("inbox", "feed", "orders"))) >= 20
    )
    # When the node that reads them is killed mid-way, and started again
    cluster.kill("services")
    ran_before = {source: ran(source) for source in ("inbox", "feed", "orders")}
    # (what each resumes from: a committed checkpoint past every item that ran)
    checkpoint = json.loads(json.loads(cluster.rows("services", "sources")["inbox"])["position"])
    assert checkpoint[1] >= sum(map(len, written[:20]))
    assert ran_before["inbox"] < LINES, "the source had finished before the kill: not tested"
    assert max(ran_before["feed"], ran_before["orders"]) < ROWS, "all sent before the kill"
    # Then each resumes from its checkpoint: every item ran, none twice (the
    # node's restart and its catching up are given two waits: on a loaded
    # machine at the end of the suite one was seen not to be enough, once)
    cluster.wait_until(
        f"all {len(ids)} items ran",
        lambda: set(ids) <= set(runs(cluster.records)),
        timeout=2 * WAIT,
    )
    lost, twice = counted(cluster, ids)
    print(f"ran before the kill: {ran_before}; lost: {len(lost)}; ran twice: {len(twice)}")
    assert lost == []
    assert twice == {}
    # and the directory source's checkpoint is the end of the file
    cluster.wait_until(
        "the checkpoint reached the end",
        lambda: (
            json.loads(cluster.rows("services", "sources").get("inbox", b"{}")).get("position")
            == json.dumps(["a.log", at], separators=(",", ":"))
        ),
    )


def write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "cluster.toml"
    cluster = CLUSTER.format(controller=1, services=2, worker=3, app="tests.apps.state_app:app")
    path.write_text(cluster + source)
    return path


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('url = "x"\npaht = "inbox"', r"source\[0\]\.paht'.*did you mean 'path'\?"),
        ('path = "inbox"\nwindw = 1', r"source\[0\]\.windw'.*did you mean 'window'\?"),
    ],
)
def test_a_misspelt_source_key_is_refused_by_name(tmp_path: Path, table: str, error: str) -> None:
    body = '\n[[source]]\nname = "x"\nkind = "directory"\ntask = "s.note"\n' + table + "\n"
    with pytest.raises(ConfigError, match=error):
        load_cluster(write(tmp_path, body), cluster_app())


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('kind = "directory"\npath = "in"\ntask = "s.nte"', r"no task named 's.nte': did you mean"),
        ('kind = "folder"\npath = "in"\ntask = "s.note"', r"no source kind 'folder'"),
        ('kind = "http"\nurl = "http://a/"\nkey = "id"\npath = "in"\ntask = "s.note"', "a http"),
        ('kind = "directory"\npath = "in"\nactor = "sinkk"', r"no pool or service named 'sinkk'"),
        ('kind = "directory"\npath = "in"\ntask = "s.note"\nnode = "wroker"', r"mean 'worker'"),
        ('kind = "tests.apps.state_app:note"\ntask = "s.note"', "expected a Source class"),
    ],
)  # fmt: skip
def test_a_wrong_source_is_refused_before_anything_starts(
    tmp_path: Path, table: str, error: str
) -> None:
    config = load_cluster(write(tmp_path, f'\n[[source]]\nname = "x"\n{table}\n'), cluster_app())
    with pytest.raises(ConfigError, match=error):
        check_references(config)


def test_cluster_up_refuses_a_source_of_an_unknown_task(tmp_path: Path) -> None:
    path = write(
        tmp_path, '\n[[source]]\nname = "x"\nkind = "directory"\npath = "in"\ntask = "s.nope"\n'
    )
    done = run_cli("cluster", "up", path, timeout=60)
    assert done.returncode != 0
    assert "no task named 's.nope'" in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()  # no node started

"""A data source on a real cluster (``actorctl cluster up``, real processes):
the services node, which reads the source, is SIGKILLed after some of its
items ran, and resumes from its checkpoint: nothing skipped, nothing run
twice (counted from the runs the task records). And ``cluster up`` refuses
a wrong ``[[source]]`` table by name before it starts anything.

The cluster is tests/test_task_state.py's (a services node, one worker node,
the task app tests/state_app.py), with a ``[[source]]`` table: the lines of
the files in ``inbox/`` beside cluster.toml, each sent as the task
``s.paced``, at most 4 in flight.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorctl import ConfigError
from actorctl.cluster import check_references, load_cluster
from actorctl.tasks._source import item_id
from tests.state_app import runs
from tests.test_task_state import ACTORCTL, ROOT, RunningCluster, counted, wait_until

LINES = 300
SOURCE = """
[[source]]
name = "inbox"
kind = "directory"
path = "inbox"
pattern = "*.log"
task = "s.paced"
poll = 0.1
window = 4
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("sources"))
    (running.directory / "inbox").mkdir()
    with running.path.open("a") as file:
        file.write(SOURCE)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def test_a_source_whose_node_is_killed_resumes_from_its_checkpoint(
    cluster: RunningCluster,
) -> None:
    # Given a file of lines that the source sends, a few at a time
    written = [f"line {n}\n".encode() for n in range(LINES)]
    (cluster.directory / "inbox" / "a.log").write_bytes(b"".join(written))
    ids, at = [], 0
    for line in written:
        at += len(line)
        ids.append(item_id("inbox", ["a.log", at]))
    wait_until("40 items ran", lambda: len(set(runs(cluster.records))) >= 40)
    # When the node that reads it is killed mid-way, and started again
    cluster.kill("services")
    ran_before = len(set(runs(cluster.records)))
    # (what it resumes from: a committed checkpoint past every item that ran)
    checkpoint = json.loads(json.loads(cluster.rows("services", "sources")["inbox"])["position"])
    assert checkpoint[1] >= sum(map(len, written[:40]))
    assert ran_before < LINES, "the source had finished before the kill: nothing was tested"
    # Then it resumes from its checkpoint: every line ran, none twice
    wait_until(f"all {LINES} items ran", lambda: set(ids) <= set(runs(cluster.records)))
    lost, twice = counted(cluster, ids)
    print(f"ran before the kill: {ran_before}; lost: {len(lost)}; ran twice: {len(twice)}")
    assert lost == []
    assert twice == {}
    # and its checkpoint is the end of the file
    wait_until(
        "the checkpoint reached the end",
        lambda: (
            json.loads(cluster.rows("services", "sources").get("inbox", b"{}")).get("position")
            == json.dumps(["a.log", at], separators=(",", ":"))
        ),
    )


def write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "cluster.toml"
    text = (ROOT / "tests" / "test_task_state.py").read_text()
    cluster = text.split('CLUSTER = """\\\n', 1)[1].split('"""', 1)[0]
    path.write_text(cluster.format(controller=1, services=2, worker=3) + source)
    return path


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('url = "x"\npaht = "inbox"', r"source\[0\]\.paht'.*'path' \(a misspelling\?\)"),
        ('path = "inbox"\nwindw = 1', r"source\[0\]\.windw'.*'window' \(a misspelling\?\)"),
    ],
)
def test_a_misspelt_source_key_is_refused_by_name(tmp_path: Path, table: str, error: str) -> None:
    body = '\n[[source]]\nname = "x"\nkind = "directory"\ntask = "s.note"\n' + table + "\n"
    with pytest.raises(ConfigError, match=error):
        load_cluster(write(tmp_path, body))


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('kind = "directory"\npath = "in"\ntask = "s.nte"', r"no task named 's.nte': did you mean"),
        ('kind = "folder"\npath = "in"\ntask = "s.note"', r"no source kind 'folder'"),
        ('kind = "http"\nurl = "http://a/"\nkey = "id"\npath = "in"\ntask = "s.note"', "a http"),
        ('kind = "directory"\npath = "in"\nactor = "sinkk"', r"no pool or service named 'sinkk'"),
        ('kind = "directory"\npath = "in"\ntask = "s.note"\nnode = "wroker"', r"mean 'worker'"),
        ('kind = "tests.state_app:note"\ntask = "s.note"', "expected a Source class"),
    ],
)  # fmt: skip
def test_a_wrong_source_is_refused_before_anything_starts(
    tmp_path: Path, table: str, error: str
) -> None:
    config = load_cluster(write(tmp_path, f'\n[[source]]\nname = "x"\n{table}\n'))
    with pytest.raises(ConfigError, match=error):
        check_references(config)


def test_cluster_up_refuses_a_source_of_an_unknown_task(tmp_path: Path) -> None:
    path = write(
        tmp_path, '\n[[source]]\nname = "x"\nkind = "directory"\npath = "in"\ntask = "s.nope"\n'
    )
    done = subprocess.run(
        [*ACTORCTL, "cluster", "up", str(path)], capture_output=True, text=True, cwd=ROOT,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "no task named 's.nope'" in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()  # no node started

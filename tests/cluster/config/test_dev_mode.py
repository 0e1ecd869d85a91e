"""Development mode is for one machine: a ``dev = true`` cluster listens on
loopback only, unless its file says ``dev_public = true`` (warned at every
start); and an address on every interface is never shown as 0.0.0.0."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from actorctl import ConfigError
from actorctl.cluster import INSECURE, Node, load_cluster
from actorctl.tasks import cluster_app

ROOT = Path(__file__).resolve().parents[3]

FILE = """[cluster]
name = "dev"
dev = true
{extra}
[[node]]
name = "worker"
listen = "{listen}"
actors = "tests.apps.actors:Calculator"
"""


def _write(tmp_path: Path, listen: str = "127.0.0.1:5931", extra: str = "") -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(FILE.format(listen=listen, extra=extra))
    return path


@pytest.mark.parametrize(
    ("listen", "extra", "who"),
    [
        ("0.0.0.0:5931", "", "node 'worker' would listen on 0.0.0.0:5931"),
        ("192.0.2.7:5931", "", "node 'worker' would listen on 192.0.2.7:5931"),
        ("127.0.0.1:5931", 'controller = "0.0.0.0:5930"', "the controller"),
        ("127.0.0.1:5931", 'web = "0.0.0.0:8080"', "the web page (cluster.web)"),
    ],
    ids=["every-interface", "other-address", "controller", "web"],
)
def test_dev_mode_off_loopback_is_refused_with_the_reason_and_the_fixes(
    tmp_path: Path, listen: str, extra: str, who: str
) -> None:
    path = _write(tmp_path, listen, extra)
    with pytest.raises(ConfigError) as caught:
        load_cluster(path, cluster_app())
    said = str(caught.value)
    assert said.startswith(f"{path}: {who}")
    assert "dev = true" in said
    assert "loopback only" in said
    assert "real CA" in said
    assert "dev_public = true" in said


@pytest.mark.parametrize("listen", ["127.0.0.1:5931", "localhost:5931", "[::1]:5931"])
def test_dev_mode_on_loopback_is_accepted(tmp_path: Path, listen: str) -> None:
    config = load_cluster(_write(tmp_path, listen), cluster_app())
    assert config.dev
    assert not config.dev_public


def test_dev_public_allows_a_network_and_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, "0.0.0.0:5931", "dev_public = true")
    config = load_cluster(path, cluster_app())
    assert config.dev_public
    assert config.node("worker").host == "0.0.0.0"


ARGS = ("--name", "worker", "--cluster")


def test_node_run_refuses_listen_off_loopback_for_a_dev_cluster(tmp_path: Path) -> None:
    path = _write(tmp_path)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "actorctl",
            "node",
            "run",
            "tests.apps.actors:Calculator",
            "--name",
            "worker",
            "--cluster",
            str(path),
            "--listen",
            "0.0.0.0:5931",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    said = run.stderr.decode()
    assert said.startswith(f"error: {path}: --listen would listen on 0.0.0.0:5931"), said
    assert "Traceback" not in said


def test_an_address_on_every_interface_is_shown_as_this_machine() -> None:
    # (not served: the node is only asked where others would dial it)
    every = Node("n", host="0.0.0.0", port=5931, security=INSECURE)
    assert every.url == f"amqp://{socket.gethostname()}:5931"
    assert Node("n", host="127.0.0.1", port=5931, security=INSECURE).url == "amqp://127.0.0.1:5931"

"""The deployment examples (examples/deploy/) say what the runtime reads.

The systemd units pass ``systemd-analyze verify`` (skipped, naming the tool,
where it is missing); the Kubernetes manifests parse (PyYAML). In both, every
command line is a real ``actorctl`` command whose options exist (each is run
with ``--help``), and names, paths and ports agree with the cluster file they
ship with.
"""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from actorctl.cli.run._host import LEAVE_TIMEOUT
from actorctl.cluster import load_cluster
from actorctl.ops import check_references, host_nodes
from actorctl.ops._foreman import STOP_MARGIN
from actorctl.tasks import cluster_app
from tests.support.cli import run_cli
from tests.support.tls import make_tls

DEPLOY = Path(__file__).resolve().parents[3] / "examples" / "deploy"
SYSTEMD = DEPLOY / "systemd"
KUBERNETES = DEPLOY / "kubernetes"
HOSTS = DEPLOY / "hosts"
ETCD = DEPLOY / "etcd"
ACTORCTL = "/usr/local/bin/actorctl"  # where the units expect the console script


def unit(path: Path) -> dict[str, str]:
    """``Key=value`` lines of a unit file (the last of a key wins)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs if not key.startswith("#")}


def env_file(path: Path) -> dict[str, str]:
    return unit(path)


def check_command(argv: list[str]) -> None:
    """``argv`` (``actorctl SUB ... ARGS --options``) is a command whose every
    ``--option`` its ``--help`` lists."""
    words = [word for word in argv[1:] if not word.startswith("-")]
    options = [word for word in argv[1:] if word.startswith("--")]
    helped = None
    for depth in (3, 2, 1):  # the longest command path that exists: node run, cluster up
        done = run_cli(*words[:depth], "--help", timeout=60)
        if done.returncode == 0 and "Usage: " in done.stdout and "Commands:" not in done.stdout:
            helped = done.stdout
            break
    assert helped is not None, f"not an actorctl command: {argv}"
    for option in options:
        assert re.search(rf"(^|[\s,]){re.escape(option)}\b", helped), (option, argv)


# -- systemd --------------------------------------------------------------------------------


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package has it)")
    actorctl = shutil.which("actorctl") or str(Path(sys.executable).parent / "actorctl")
    units = ("actorctl-controller.service", "actorctl-node-controller.service")
    for name in (*units, "actorctl-node@.service", "actorctl-host@.service"):
        text = (SYSTEMD / name).read_text().replace(ACTORCTL, actorctl)
        text = text.replace("/etc/actorctl/node-%i.env", str(SYSTEMD / "node-%i.env"))
        (tmp_path / name).write_text(text)
    (tmp_path / "actorctl-node@worker-1.service").write_text(
        (tmp_path / "actorctl-node@.service").read_text()
    )
    (tmp_path / "actorctl-host@b.service").write_text(
        (tmp_path / "actorctl-host@.service").read_text()
    )
    for name in (*units, "actorctl-node@worker-1.service", "actorctl-host@b.service"):
        done = subprocess.run(
            [analyze, "verify", "--man=no", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "actorctl" not in done.stderr, done.stderr  # no warning about our units


def test_the_controller_unit_is_type_notify_and_runs_cluster_up_on_the_shipped_file() -> None:
    service = unit(SYSTEMD / "actorctl-controller.service")
    assert service["Type"] == "notify"  # run_cluster says READY=1 on NOTIFY_SOCKET
    assert service["NotifyAccess"] == "main"  # from cluster up's own process
    argv = shlex.split(service["ExecStart"])
    assert argv[:3] == [ACTORCTL, "cluster", "up"]
    config = load_cluster(DEPLOY / "cluster.toml")
    assert Path(argv[3]).name == "cluster.toml"
    assert Path(argv[3]).parent == Path(service["WorkingDirectory"])
    assert config.certs == Path("/etc/actorctl/certs")
    assert config.keys == Path("/etc/actorctl/keys")
    check_command(argv)
    # SIGTERM to `cluster up` alone: its Foremen stop the nodes warm (one SIGTERM each)
    assert service["KillMode"] == "mixed"
    longest = max(node.shutdown_grace for node in config.nodes)
    assert longest + STOP_MARGIN < float(service["TimeoutStopSec"])


def test_the_node_controller_unit_runs_cluster_controller_beside_independent_node_units() -> None:
    service = unit(SYSTEMD / "actorctl-node-controller.service")
    assert service["Type"] == "notify"  # run_controller says READY=1 on NOTIFY_SOCKET
    assert service["NotifyAccess"] == "main"
    # Never with the unit of `cluster up`: both are the Controller, on one port
    assert service["Conflicts"] == "actorctl-controller.service"
    argv = shlex.split(service["ExecStart"])
    assert argv[:3] == [ACTORCTL, "cluster", "controller"]
    assert Path(argv[3]) == Path(service["WorkingDirectory"]) / "cluster.toml"
    check_command(argv)
    # The node units it watches read the same file, and need nothing of it
    node = unit(SYSTEMD / "actorctl-node@.service")
    assert f"--cluster {argv[3]} " in node["ExecStart"]
    assert "actorctl-node-controller" not in (SYSTEMD / "actorctl-node@.service").read_text()


def test_the_node_unit_runs_each_node_where_the_cluster_file_says() -> None:
    service = unit(SYSTEMD / "actorctl-node@.service")
    config = load_cluster(DEPLOY / "cluster.toml")
    for path in sorted(SYSTEMD.glob("node-*.env")):
        name = path.stem.removeprefix("node-")
        values = {"ACTORS": service["Environment"].split("=", 1)[1], **env_file(path)}
        line = re.sub(r"\$\{(\w+)\}", lambda m, v=values: v[m.group(1)], service["ExecStart"])
        argv = shlex.split(line.replace("%i", name))
        check_command(argv)
        given = dict(itertools.pairwise(argv))
        node = config.node(name)
        assert given["--listen"] == node.listen
        assert given["--name"] == node.name
        assert argv[3] == node.actors
        assert Path(given["--cluster"]).name == "cluster.toml"
        assert Path(given["--certs"]) == config.certs
        assert Path(given["--keys"]) == config.keys
        assert float(given["--grace"]) < float(service["TimeoutStopSec"])


# -- several hosts: host up, etcd ------------------------------------------------------


def test_the_host_unit_runs_host_up_for_its_instance_and_stops_it_warm() -> None:
    service = unit(SYSTEMD / "actorctl-host@.service")
    assert service["Type"] == "notify"  # run_host says READY=1 on NOTIFY_SOCKET
    assert service["NotifyAccess"] == "main"
    argv = shlex.split(service["ExecStart"])
    assert argv[:3] == [ACTORCTL, "host", "up"]
    assert Path(argv[3]) == Path(service["WorkingDirectory"]) / "cluster.toml"
    assert argv[4:] == ["--host", "%i"]
    check_command(argv)
    # systemd signals `host up` alone: its Foremen stop each node warm, once
    assert service["KillMode"] == "mixed"
    assert service["KillSignal"] == "SIGTERM"
    config = load_cluster(HOSTS / "cluster.toml", cluster_app())
    longest = max(node.shutdown_grace for node in config.nodes)
    assert longest + STOP_MARGIN + LEAVE_TIMEOUT < float(service["TimeoutStopSec"])


def test_the_hosts_cluster_file_loads_and_each_of_its_three_hosts_runs_a_node(
    tmp_path: Path,
) -> None:
    config = load_cluster(HOSTS / "cluster.toml", cluster_app())
    assert config.hosts == ["a", "b", "c"]
    assert [node.name for node in host_nodes(config, "a")] == ["services"]
    assert [node.name for node in host_nodes(config, "b")] == ["worker-b"]
    assert [node.name for node in host_nodes(config, "c")] == ["worker-c"]
    assert [node.settings.get("services", False) for node in config.nodes] == [True, False, False]
    assert config.certs == Path("/etc/actorctl/certs")
    assert config.keys == Path("/etc/actorctl/keys")
    assert config.etcd is not None
    assert config.etcd.user == "actorctl"
    assert all(url.startswith("https://") for url in config.etcd.endpoints)
    # And what `cluster up` and `host up` check before they start anything
    # holds, its etcd files where the file says (here, beside a copy of it)
    text = (HOSTS / "cluster.toml").read_text().replace("/etc/actorctl/", f"{tmp_path}/")
    make_tls(tmp_path / "etcd", "client")  # etcd's CA, and a client certificate of it
    (tmp_path / "etcd" / "password").write_text("secret\n")
    (tmp_path / "cluster.toml").write_text(text)
    check_references(load_cluster(tmp_path / "cluster.toml", cluster_app()))


def members() -> dict[str, dict[str, str]]:
    """Each etcd member file of examples/deploy/etcd/, by its ETCD_NAME."""
    found = {}
    for path in sorted(ETCD.glob("member-*.env")):
        values = env_file(path)
        found[values["ETCD_NAME"]] = values
    return found


def test_the_three_etcd_members_name_one_cluster_over_tls_and_the_cluster_file_names_them() -> None:
    found = members()
    assert sorted(found) == ["etcd-1", "etcd-2", "etcd-3"]
    # Each names the same initial cluster, which is every member at its peer URL
    clusters = {values["ETCD_INITIAL_CLUSTER"] for values in found.values()}
    assert len(clusters) == 1
    initial = dict(pair.split("=", 1) for pair in clusters.pop().split(","))
    assert initial == {n: v["ETCD_INITIAL_ADVERTISE_PEER_URLS"] for n, v in found.items()}
    assert {v["ETCD_INITIAL_CLUSTER_TOKEN"] for v in found.values()} == {"actorctl-prod"}
    for name, values in found.items():
        # it listens where it says it is, over TLS, for peers and clients alike
        assert values["ETCD_LISTEN_PEER_URLS"] == values["ETCD_INITIAL_ADVERTISE_PEER_URLS"]
        assert values["ETCD_LISTEN_CLIENT_URLS"] == values["ETCD_ADVERTISE_CLIENT_URLS"]
        for key in ("ETCD_LISTEN_PEER_URLS", "ETCD_LISTEN_CLIENT_URLS"):
            assert values[key].startswith("https://"), (name, key)
        assert values["ETCD_CLIENT_CERT_AUTH"] == "true"
        assert values["ETCD_PEER_CLIENT_CERT_AUTH"] == "true"
        for key in ("CERT_FILE", "KEY_FILE", "TRUSTED_CA_FILE"):
            assert values[f"ETCD_{key}"] == values[f"ETCD_PEER_{key}"], (name, key)
        assert values["ETCD_INITIAL_CLUSTER_STATE"] == "new"
    # And the cluster file's endpoints are the members' client URLs, a member
    # on each host (at the address its host's node listens on)
    config = load_cluster(HOSTS / "cluster.toml", cluster_app())
    assert config.etcd is not None
    clients = [found[name]["ETCD_ADVERTISE_CLIENT_URLS"] for name in sorted(found)]
    assert list(config.etcd.endpoints) == clients
    host_addresses = {node.host for node in config.nodes}
    member_addresses = {url.split("//")[1].split(":")[0] for url in clients}
    assert member_addresses == host_addresses


def test_the_auth_script_turns_on_etcds_auth_with_a_user_for_actorctl_only() -> None:
    script = (ETCD / "auth.sh").read_text()
    config = load_cluster(HOSTS / "cluster.toml", cluster_app())
    assert config.etcd is not None
    assert f"etcdctl user add {config.etcd.user} " in script
    assert "readwrite /actorctl/\n" in script
    assert str(config.etcd.password_file) in script
    assert script.rstrip().endswith("etcdctl auth enable")


# -- Kubernetes -----------------------------------------------------------------------------


def as_shell_would(script: str, env: dict[str, Any]) -> str:
    """``script`` with ``$NAME`` and ``$((N + NAME))`` expanded from ``env``."""
    script = re.sub(r"\$\(\((\d+) \+ (\w+)\)\)", lambda m: str(int(m[1]) + int(env[m[2]])), script)
    return re.sub(r"\$(\w+)", lambda m: str(env[m[1]]), script)


def manifests() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found[f"{document['kind']}/{document['metadata']['name']}"] = document
    return found


def test_the_statefulset_runs_each_node_of_its_cluster_file_at_its_stable_name() -> None:
    found = manifests()
    nodes = found["StatefulSet/actorctl-node"]
    service = found["Service/actorctl-nodes"]
    config = load_cluster(KUBERNETES / "cluster.toml")
    spec = nodes["spec"]
    assert spec["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"  # headless: a DNS name per pod
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    [container] = spec["template"]["spec"]["containers"]
    shell, dash_c, script = container["command"]
    assert (shell, dash_c) == ("sh", "-c")
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "POD_NAME": "metadata.name",
        "POD_INDEX": "metadata.labels['apps.kubernetes.io/pod-index']",
    }
    # Pod N is node actorctl-node-N of the file, listening where the file says
    pods = [f"{nodes['metadata']['name']}-{n}" for n in range(spec["replicas"])]
    assert pods == [node.name for node in config.nodes]
    for index, pod in enumerate(pods):
        argv = shlex.split(as_shell_would(script, {"POD_NAME": pod, "POD_INDEX": index}))
        assert argv[:2] == ["exec", "actorctl"]
        argv = argv[1:]
        check_command(argv)
        given = dict(itertools.pairwise(argv))
        assert given["--name"] == pod
        assert given["--listen"] == config.node(pod).listen
        assert argv[3] == config.node(pod).actors
        port = int(given["--listen"].rpartition(":")[2])
        assert port in [p["port"] for p in service["spec"]["ports"]]
    # The files it reads are mounted where the command and the file say
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert mounts["cluster"] == given["--cluster"]
    assert volumes["cluster"]["configMap"]["name"] == "actorctl-cluster"
    assert Path(mounts["certs"]) == Path(given["--certs"]) == config.certs
    assert Path(mounts["keys"]) == Path(given["--keys"]) == config.keys
    assert volumes["certs"]["secret"]["secretName"] == "actorctl-certs"
    assert volumes["keys"]["secret"]["secretName"] == "actorctl-keys"
    assert Path(mounts["data"]) == Path(given["--cluster"]).parent / "data"  # its store
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(given["--grace"]) < grace


def test_the_controller_deployment_runs_cluster_controller_where_the_file_says() -> None:
    found = manifests()
    deployment = found["Deployment/actorctl-controller"]
    service = found["Service/actorctl-controller"]
    nodes = found["StatefulSet/actorctl-node"]
    config = load_cluster(KUBERNETES / "cluster.toml")
    spec = deployment["spec"]
    assert spec["replicas"] == 1  # one Controller: it grants the scheduler lease
    assert spec["strategy"]["type"] == "Recreate"  # not two during a rollout
    labels = spec["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"] == labels
    [container] = spec["template"]["spec"]["containers"]
    argv = container["command"]
    assert argv[:3] == ["actorctl", "cluster", "controller"]
    check_command(argv)
    given = dict(itertools.pairwise(argv))
    # The nodes and the CLI reach it where the file says: its Service, its port
    host, port = config.controller
    assert host == service["metadata"]["name"]
    listen_host, _, listen_port = given["--listen"].rpartition(":")
    assert (listen_host, int(listen_port)) == ("0.0.0.0", port)  # every address of the pod
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    served = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports["amqps"] == served["amqps"]["port"] == port
    assert served["amqps"]["targetPort"] == "amqps"
    assert ports["web"] == int(given["--web"].rpartition(":")[2])
    assert served["web"]["targetPort"] == "web"
    # It dials the nodes at the StatefulSet's stable names, on their ports
    node_ports = [p["port"] for p in found["Service/actorctl-nodes"]["spec"]["ports"]]
    for node in config.nodes:
        assert node.host.startswith(f"{node.name}.{nodes['spec']['serviceName']}")
        assert node.port in node_ports
    # Its files are mounted where the command and the file say, from the
    # nodes' ConfigMap and Secrets
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert mounts["cluster"] == argv[3]
    assert Path(mounts["certs"]) == config.certs
    assert Path(mounts["keys"]) == config.keys
    node_volumes = {v["name"]: v for v in nodes["spec"]["template"]["spec"]["volumes"]}
    for name in ("cluster", "certs", "keys"):
        assert volumes[name] == node_volumes[name]

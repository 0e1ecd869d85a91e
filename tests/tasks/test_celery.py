"""Celery habits, against a real cluster (``tests/apps/celery.toml``: a services node
and one worker node, mutual TLS and signed messages), and the callers that are
not actorctl's task client: ``actorctl call`` and a client in another language.

The app (``tests/apps/celery_app.py``) is written with Celery's option and setting
names and connects signal receivers that record each signal they get.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from examples._cluster import running_cluster
from proton import Message

from actorctl import (
    Address,
    App,
    AsyncResult,
    BadArguments,
    ConfigError,
    Envelope,
    NotSupported,
    Rejected,
    TaskFailed,
    open_node,
)
from actorctl.cluster import load_cluster
from actorctl.mailbox import KIND_DOCUMENT, KIND_EVENT
from tests.apps.celery_app import SIGNALS, WAKE, SignedUp, add, app, fails, retries_once
from tests.support.cli import run_cli
from tests.support.foreign import (
    ClientTls,
    Identity,
    foreign_call,
    json_command,
    reply_signature_holds,
)

APPS = Path(__file__).resolve().parents[1] / "apps"
ROOT = Path(__file__).resolve().parents[2]
WAIT = 20.0  # seconds any one result may take on a loaded 2-core machine


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the worker's signal receivers record what they get."""
    return tmp_path_factory.mktemp("signals")


@pytest.fixture(scope="module")
def cluster(records: Path) -> Iterator[Path]:
    with running_cluster(APPS / "celery.toml", echo=False, env={SIGNALS: str(records)}) as path:
        yield path


def _env() -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _port(cluster: Path, node: str) -> int:
    return load_cluster(cluster).node(node).port


def _signals(records: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(records.glob("signals-*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return found


async def _until(records: Path, what: str, done: Callable[[list[dict[str, Any]]], bool]) -> None:
    """Wait (woken by each receiver's datagram) until the records satisfy ``done``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
        path = records / WAKE
        path.unlink(missing_ok=True)
        wake.bind(str(path))
        wake.setblocking(False)
        sock = trio.socket.from_stdlib_socket(wake)
        with trio.move_on_after(WAIT):
            while not done(_signals(records)):
                await sock.recv(16)
            return
    raise AssertionError(f"timed out waiting for {what}: {_signals(records)}")


# -- signals ------------------------------------------------------------------------------


async def test_signals_fire_once_per_event_with_celerys_arguments(
    cluster: Path, records: Path
) -> None:
    # Given a task that succeeds, one that fails and one that retries once
    async with app.aconnect(cluster):
        good = await add.adelay(2, 3)
        bad = await fails.adelay("no such key")
        again = await retries_once.adelay("done")
        assert await good.aget(timeout=WAIT) == 5
        with pytest.raises(TaskFailed):
            await bad.aget(timeout=WAIT)
        assert await again.aget(timeout=WAIT) == "done"
    ids = {good.id, bad.id, again.id}

    def postruns(records: list[dict[str, Any]]) -> bool:
        ended = [r for r in records if r["signal"] == "task_postrun" and r["task_id"] in ids]
        return len(ended) >= 4

    await _until(records, "every task_postrun", postruns)
    seen = _signals(records)

    def of(signal: str, task_id: str | None = None, sender: str | None = None) -> list[Any]:
        return [
            r
            for r in seen
            if r["signal"] == signal
            and (task_id is None or r.get("task_id") in (task_id, None))
            and (sender is None or r.get("sender") == sender)
        ]

    # Then the worker sent each signal once per event, with Celery's arguments
    [prerun] = of("task_prerun", good.id)
    assert prerun["sender"] == prerun["task"] == "c.add"
    assert (prerun["args"], prerun["kwargs"]) == ([2, 3], {})
    [success] = [r for r in of("task_success", sender="c.add") if r["result"] == 5]
    assert success["keys"] == ["signal"]  # besides sender and result, as in Celery
    [postrun] = of("task_postrun", good.id)
    assert (postrun["retval"], postrun["state"], postrun["args"]) == (5, "SUCCESS", [2, 3])
    # the failure, with the exception, the worker's traceback and einfo
    [failure] = of("task_failure", bad.id)
    assert failure["exception"] == "KeyError"
    assert failure["has_traceback"]
    assert "_deep" in failure["einfo"]
    assert "celery_app.py" in failure["einfo"]
    assert (failure["args"], failure["kwargs"]) == (["no such key"], {})
    [failed] = of("task_postrun", bad.id)
    assert (failed["state"], failed["retval"]) == ("FAILURE", "KeyError")
    # the retry: two runs, one retry (with its request and reason), one success
    assert len(of("task_prerun", again.id)) == 2
    [retry] = [r for r in seen if r["signal"] == "task_retry" and r["request_id"] == again.id]
    assert retry["retries"] == 0
    assert "first try" in retry["reason"]
    assert retry["has_einfo"]
    assert [r["state"] for r in of("task_postrun", again.id)] == ["RETRY", "SUCCESS"]
    # and worker_ready came once, from the worker node (the services node runs no task)
    assert [r["sender"] for r in seen if r["signal"] == "worker_ready"] == ["worker"]


async def test_worker_ready_and_shutdown_are_sent_once_per_node() -> None:
    # Given receivers, and a node with two workers (instances) of the app's pool
    from actorctl import signals
    from actorctl.tasks import Directory, TaskWorker, WorkerState

    heard: list[tuple[str, object]] = []

    def ready(sender: object = None, **kw: Any) -> None:
        heard.append(("ready", sender))

    def shutdown(sender: object = None, **kw: Any) -> None:
        heard.append(("shutdown", sender))

    signals.worker_ready.connect(ready)
    signals.worker_shutdown.connect(shutdown)
    try:
        state = WorkerState()
        workers = {f"celery-{n}": TaskWorker(app, "celery", Directory(), state) for n in (1, 2)}
        # When the node starts and stops
        async with open_node("w", workers, host="127.0.0.1", insecure=True):
            assert heard == [("ready", "w")]
    finally:
        signals.worker_ready.disconnect(ready)
        signals.worker_shutdown.disconnect(shutdown)
    # Then each was sent once
    assert heard == [("ready", "w"), ("shutdown", "w")]


# -- results by id, and the worker's traceback --------------------------------------------

FETCH = """\
import json, sys
from tests.apps.celery_app import app
with app.connect(sys.argv[1]):
    good, bad = app.AsyncResult(sys.argv[2]), app.AsyncResult(sys.argv[3])
    value = good.get(timeout=20)
    try:
        bad.get(timeout=20)
        print(json.dumps(["no error", value]))
    except Exception as exc:
        print(json.dumps([value, type(exc).__name__, bad.state, bad.traceback]))
"""


async def test_app_async_result_gets_a_result_and_its_traceback_from_another_process(
    cluster: Path,
) -> None:
    # Given a task that succeeded and one that failed, sent by this process
    async with app.aconnect(cluster):
        good, bad = await add.adelay(20, 22), await fails.adelay("missing")
        assert await good.aget(timeout=WAIT) == 42
        with pytest.raises(KeyError):
            await bad.aget(timeout=WAIT)
        # (the sender has the worker's traceback too)
        assert bad.traceback is not None
        assert "_deep" in bad.traceback
    # When another process asks for them by id alone
    done = await trio.run_process(
        [sys.executable, "-c", FETCH, str(cluster), good.id, bad.id],
        env=_env(),
        cwd=ROOT,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    value, error, state, traceback = json.loads(done.stdout.decode().splitlines()[-1])
    # Then it gets the value, the error, and the worker's frames
    assert (value, error, state) == (42, "KeyError", "FAILURE")
    assert "in _deep" in traceback
    assert "raise KeyError(text)" in traceback
    assert isinstance(AsyncResult(good.id).id, str)


# -- callers that are not actorctl's task client ------------------------------------------


def _cli(cluster: Path, *args: str) -> subprocess.CompletedProcess[str]:
    where = cluster.parent
    return run_cli(
        *("call", *args, "--timeout", str(WAIT)),
        *("--certs", where / "certs", "--keys", where / "keys"),
        env=_env(),
        timeout=WAIT + 10,
    )


@pytest.mark.parametrize("node", ["services", "worker"])
def test_actorctl_call_to_a_pool_or_a_worker_prints_the_tasks_result(
    cluster: Path, node: str
) -> None:
    # Given the pool's address (its router, on the services node) or a worker's
    target = f"amqps://127.0.0.1:{_port(cluster, node)}/celery"
    # When actorctl calls a task there
    done = _cli(cluster, target, "c.add", "2", "40")
    # Then it prints the task's result
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr[-2000:]
    # and a task that fails is an error that names the task's exception
    failed = _cli(cluster, target, "c.fails", "gone")
    assert failed.returncode == 1
    assert "KeyError" in failed.stderr
    assert "Traceback" not in failed.stderr


def _foreign_identity(cluster: Path) -> tuple[Identity, ClientTls]:
    """The client's key and TLS files: the cluster's own `cli` member's, as a
    client of the cluster is given them (docs/protocol.md §11.10)."""
    where = cluster.parent
    key = serialization.load_pem_private_key((where / "keys" / "cli.key").read_bytes(), None)
    assert isinstance(key, Ed25519PrivateKey)
    certs = where / "certs"
    tls = ClientTls(
        ca=str(certs / "ca.pem"), cert=str(certs / "cli.pem"), key=str(certs / "cli.key")
    )
    return Identity(key), tls


@pytest.mark.parametrize("node", ["services", "worker"])
async def test_a_foreign_client_sending_to_a_pool_gets_the_result_document(
    cluster: Path, node: str
) -> None:
    # Given a client that knows only docs/protocol.md, with the cluster's TLS and key
    identity, tls = _foreign_identity(cluster)
    port = _port(cluster, node)

    def make_message(reply_to: str, container: str) -> Message:
        command = json_command(
            container,
            "celery",
            "c.add",
            [5, 6],
            {},
            correlation_id="foreign-task-1",
            to=f"amqps://127.0.0.1:{port}/celery",
        )
        command = dataclasses.replace(command, reply_to=reply_to)
        return command.message(identity.signature_properties(command.canonical(), container))

    # When it sends a task command to the pool (§14.2) and waits on its reply link
    result = await foreign_call(port, "celery", make_message, tls=tls)
    # Then the task's SUCCESS document comes back on it (§14.4)
    assert result.failure is None, (result.failure, result.events)
    assert result.outcome == "accepted", (result.condition, result.description)
    reply = result.reply
    assert reply is not None
    assert reply.body == 11
    assert reply.correlation_id == "foreign-task-1"
    assert reply.application_properties["state"] == "SUCCESS"
    assert reply.subject == "c.add"
    # signed by the node it called (which relayed it from the worker, for the pool)
    public = serialization.load_pem_public_key(
        (cluster.parent / "keys" / f"{node}.pub").read_bytes()
    ).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert reply.message is not None
    assert result.reply_address is not None
    assert reply_signature_holds(reply.message, result.reply_address, node_public_raw=public)


async def test_only_the_clusters_nodes_may_have_a_result_relayed(cluster: Path) -> None:
    # Given a client (a key the cluster trusts, but not one of its nodes)
    security = load_cluster(cluster).security("cli")
    async with open_node("cli", host=None, security=security) as client:
        relay = Address("127.0.0.1", _port(cluster, "services"), "_relay", "amqps")
        forged = Envelope(
            message_id=client.outbox.new_message_id(),
            to=str(relay),
            subject="c.add",
            body=666,
            kind=KIND_DOCUMENT,
            reply_to="$reply/someone-else",
            correlation_id="theirs",
            creation_time=client.outbox.now(),
            headers={"state": "SUCCESS"},
        )
        # When it asks the services node to relay a result to another caller
        with pytest.raises(Rejected) as refused:
            await client.outbox.send(relay, forged, presettled=False, confirm=True)
    # Then it is refused
    assert refused.value.condition == "amqp:unauthorized-access"


# -- mistakes are the sender's errors -------------------------------------------------------


async def test_an_event_with_a_wrongly_typed_field_is_refused_at_publish(cluster: Path) -> None:
    async with app.aconnect(cluster):
        # When an event is published with a field of the wrong type
        with pytest.raises(BadArguments, match=r"SignedUp, field 'user_id': expected int"):
            await app.apublish(SignedUp(user_id="seven", email="a@example.com"))  # type: ignore[arg-type]
        with pytest.raises(BadArguments, match="field 'email': expected str"):
            await SignedUp.adelay(user_id=7, email=None)  # type: ignore[attr-defined]
        # or to a sink that does not resolve, it is refused, naming it
        with pytest.raises(ConfigError, match="sink 'nowhere' does not resolve"):
            await app.apublish(SignedUp(user_id=7, email="a@example.com"), sinks=["nowhere"])
        # and a right one is published
        await app.apublish(SignedUp(user_id=7, email="a@example.com"))


async def test_the_event_hub_refuses_a_wrongly_typed_event_to_its_publisher(
    cluster: Path,
) -> None:
    # Given a publisher that does not check (a client in any language)
    security = load_cluster(cluster).security("cli")
    async with open_node("cli", host=None, security=security) as client:
        hub = Address("127.0.0.1", _port(cluster, "services"), "events", "amqps")
        event = Envelope(
            message_id=client.outbox.new_message_id(),
            to=str(hub),
            subject="SignedUp",
            body=[[], {"user_id": "seven", "email": "a@example.com"}],
            kind=KIND_EVENT,
            creation_time=client.outbox.now(),
            headers={"event": "SignedUp"},
        )
        # When it publishes an event whose field has the wrong type
        with pytest.raises(Rejected) as refused:
            await client.outbox.send(hub, event, presettled=False, confirm=True)
    # Then the hub refuses it to the publisher, naming the field
    assert refused.value.condition == "actorctl:bad-arguments"
    assert "field 'user_id': expected int" in refused.value.description


async def test_a_task_whose_sink_or_callback_pool_does_not_resolve_is_refused_at_send(
    cluster: Path,
) -> None:
    async with app.aconnect(cluster):
        with pytest.raises(ConfigError, match=r"task c.add: sink 'totals' does not resolve"):
            await add.aapply_async((1, 2), sinks=["totals"])
        # (a callback in wire form, docs/protocol.md §14.3, naming a pool nobody hosts)
        with pytest.raises(ConfigError, match=r"the pool of c\.add 'nope' does not resolve"):
            await add.aapply_async((1, 2), link={"t": "c.add", "p": "nope"})


def test_the_worker_keeps_results_as_long_as_result_expires_says(cluster: Path) -> None:
    # Given tasks that ran (tests/apps/celery_app.py sets result_expires = 3600)
    with app.connect(cluster):
        assert add.delay(1, 1).get(timeout=WAIT) == 2
    # Then the worker's node keeps its results for an hour, not the default day
    store = cluster.parent / "data" / "worker" / "store.sqlite"
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        ends = [e for (e,) in db.execute("SELECT expires FROM entries WHERE tbl = 'results'")]
    assert ends
    assert all(0 < end - time.time() <= 3600 for end in ends)


# -- Celery's names, checked where they are written -----------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"compression": "zlib"}, "Celery's compression= is not supported: messages are JSON"),
        ({"acks_late": "no"}, "acks_late='no': give True (the default: at-least-once)"),
        ({"queue": "a", "pool": "b"}, "Celery's queue is actorctl's pool: give pool= only"),
        ({"max_retry": 3}, "unknown option max_retry=3 (did you mean max_retries=?)"),
        ({"serializer": "pickle"}, "messages are JSON"),
    ],
)
def test_a_task_option_actorctl_does_not_take_is_answered_with_what_it_takes(
    options: dict[str, Any], says: str
) -> None:
    mine = App("mine")
    with pytest.raises(ConfigError) as refused:

        @mine.task(**options)
        def job() -> None: ...

    assert says in str(refused.value)
    assert "@app.task on job" in str(refused.value)
    if "unknown" in says:
        assert "pool (Celery: queue)" in str(refused.value)


def test_queue_and_acks_late_are_celerys_names_for_what_actorctl_does() -> None:
    mine = App("mine")

    @mine.task(queue="emails", acks_late=True)
    def send() -> None: ...

    assert send.pool == "emails"
    assert "emails" in mine.pools


def test_acks_late_false_makes_a_task_at_most_once_and_app_conf_sets_the_default() -> None:
    # Given tasks defined with and without acks_late, before and after the
    # setting (docs/celery.md: acks_late=False is at-most-once)
    mine = App("mine")

    @mine.task(acks_late=False)
    def once() -> None: ...

    @mine.task
    def before() -> None: ...

    @mine.task(acks_late=True)
    def late() -> None: ...

    assert (once.acks_late, before.acks_late, late.acks_late) == (False, True, True)
    # When app.conf says task_acks_late=False
    mine.conf.task_acks_late = False

    @mine.task
    def after() -> None: ...

    # Then every task follows it, except one that set acks_late itself
    assert (before.acks_late, after.acks_late, late.acks_late) == (False, False, True)
    # And an at-most-once task's signature carries it wherever it is sent from
    # (a chord's header, a worker sending a chain step or a callback); another
    # task's does not
    assert once.s().options == {"acks_late": False}
    assert once.s().to_wire()["o"] == {"acks_late": False}
    assert "o" not in late.s().to_wire()


def test_app_conf_takes_celerys_settings_for_tasks_defined_before_and_after() -> None:
    # Given a task defined before the settings, and one that sets its own limit
    mine = App("mine")

    @mine.task
    def before() -> None: ...

    @mine.task(time_limit=1)
    def own() -> None: ...

    # When the settings are given, as Celery's app.conf takes them
    mine.conf.update(task_time_limit=30, task_track_started=True)
    mine.conf.task_soft_time_limit = datetime.timedelta(seconds=20)
    mine.conf["task_default_queue"] = "work"

    @mine.task
    def after() -> None: ...

    # Then every task follows them, except where it set the option itself
    assert (before.time_limit, own.time_limit, after.time_limit) == (30, 1, 30)
    assert before.soft_time_limit == after.soft_time_limit == 20
    assert before.track_started
    assert after.track_started
    assert before.pool == after.pool == "work"
    assert set(mine.pools) == {"work"}
    assert mine.conf.result_expires == 86400


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("broker_url", "amqp://", "Celery's broker_url does not apply: there is no broker"),
        ("task_time_limt", 3, "unknown setting task_time_limt; did you mean task_time_limit?"),
        ("CELERY_TASK_TIME_LIMIT", 3, "supported: task_default_queue, task_time_limit"),
        ("TASK_TIME_LIMIT", 3, "write Celery's new lowercase name task_time_limit"),
        ("task_acks_late", "no", "task_acks_late='no': give True or False"),
        ("task_time_limit", "soon", "give seconds (a number) or None"),
        ("enable_utc", False, "enable_utc=False: only True (Celery's default) is supported"),
    ],
)
def test_a_setting_that_does_not_apply_is_refused_with_the_reason(
    setting: str, value: object, says: str
) -> None:
    mine = App("mine")
    with pytest.raises(ConfigError, match=re.escape(says)):
        mine.conf.update({setting: value})
    assert mine.conf.task_time_limit is None  # nothing of a refused update was set


def test_enable_utc_true_is_taken_as_celery_projects_set_it() -> None:
    mine = App("mine")
    mine.conf.enable_utc = True
    mine.conf.update(ENABLE_UTC=True)
    assert mine.conf.enable_utc is True


def test_config_from_object_reads_a_celeryconfig_module(tmp_path: Path) -> None:
    mine = App("mine")
    config = types.SimpleNamespace(task_ignore_result=True, result_expires=60, _private=1)
    mine.config_from_object(config)
    assert (mine.conf.task_ignore_result, mine.conf["result_expires"]) == (True, 60)
    with pytest.raises(ConfigError, match="result_backend does not apply"):
        mine.config_from_object(types.SimpleNamespace(result_backend="redis://"))


def test_a_receiver_that_raises_is_logged_and_the_others_still_run() -> None:
    from actorctl import signals

    heard: list[object] = []
    signal = signals.Signal("example", ["value"])

    @signal.connect
    def broken(**kw: Any) -> None:
        raise RuntimeError("receiver bug")

    @signal.connect(sender="only-this")
    def picky(sender: object = None, value: object = None, **kw: Any) -> None:
        heard.append(value)

    answers = signal.send("only-this", value=1)
    signal.send("another", value=2)
    assert heard == [1]
    assert isinstance(answers[0][1], RuntimeError)
    assert signal.disconnect(broken)
    assert not signal.disconnect(broken)


async def test_a_worker_refuses_a_task_whose_sink_does_not_resolve(cluster: Path) -> None:
    # Given a sender that does not check (a client in any language)
    security = load_cluster(cluster).security("cli")
    async with open_node("cli", host=None, security=security) as client:
        worker = Address("127.0.0.1", _port(cluster, "worker"), "celery", "amqps")
        task = Envelope(
            message_id=client.outbox.new_message_id(),
            to=str(worker),
            subject="c.add",
            body=[[1, 2], {}],
            creation_time=client.outbox.now(),
            headers={"task_id": "sunk", "sinks": "nowhere"},
        )
        # When it sends a task whose sink the cluster does not know
        with pytest.raises(Rejected) as refused:
            await client.outbox.send(worker, task, presettled=False, confirm=True)
    # Then the worker refuses it, naming the sink, and never runs it
    assert refused.value.condition == "actorctl:unknown-sink"
    assert "sink 'nowhere' does not resolve" in refused.value.description


def test_celerys_app_arguments_are_answered_with_what_takes_their_place() -> None:
    with pytest.raises(ConfigError) as refused:
        App("proj", broker="amqp://guest@localhost//", backend="redis://")
    says = str(refused.value)
    assert "broker= is not taken: there is no broker" in says
    assert "backend= is not taken: each worker node keeps the results it sends" in says


async def test_a_chord_whose_body_pool_does_not_resolve_is_refused_before_anything_is_sent(
    cluster: Path,
) -> None:
    from actorctl import Signature, chord

    elsewhere = Signature(types.SimpleNamespace(name="c.add", pool="nowhere"), (1,))
    async with app.aconnect(cluster):
        with pytest.raises(ConfigError, match=r"chord: the pool of c\.add 'nowhere' does not"):
            await chord([add.s(1, 1), add.s(2, 2)], elsewhere).aapply_async()


# -- docs/celery.md's "Other Celery calls", row by row -------------------------------------

#: What the table's rows call the task, and the name each stands for here.
_NAMES = {"proj.tasks.add": f"{add.fn.__module__}.add", "proj.add": add.name}
_TABLE = "## Other Celery calls"


def _table_rows() -> list[tuple[str, str]]:
    """The rows of the table: (the Celery code, what actorctl does)."""
    text = (ROOT / "docs" / "celery.md").read_text()
    section = text.split(_TABLE, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = re.fullmatch(r"\| `(.+?)` \| (.+) \|", line)
        if cells is not None:
            rows.append((cells[1], cells[2]))
    return rows


def _setup(sender: App, source: object = None, **kwargs: Any) -> None:
    _CONFIGURED.append((sender, source))


_CONFIGURED: list[tuple[object, object]] = []


def _run(code: str, where: dict[str, Any]) -> Any:
    """Run a row's code as written: an expression's value, or a statement's None."""
    try:
        compiled = compile(code, "docs/celery.md", "eval")
    except SyntaxError:
        exec(compile(code, "docs/celery.md", "exec"), where)
        return None
    return eval(compiled, where)


def _works(code: str, result: Any) -> None:
    """What each row that works must have done (a row without a check fails)."""
    nodes = {"worker"}
    if code.startswith("app.on_after_configure"):
        assert result is _setup
        fresh = App("fresh")
        fresh.on_after_configure.connect(_setup)
        fresh.periodics  # noqa: B018 - reading them configures the app
        assert [(fresh, fresh.conf)] == _CONFIGURED
    elif code.startswith("app.add_periodic_task"):
        assert result == "add every 10"
        assert app.periodics["add every 10"].args == (2, 2)
    elif code.startswith("app.conf.beat_schedule"):
        periodic = app.periodics["every-30s"]
        assert (periodic.task, periodic.schedule.every) == (add.name, 30.0)
        app.conf.beat_schedule = {}
    elif code.startswith("app.conf.update"):
        assert app.conf.result_expires == 7200
    elif code.startswith("app.send_task"):
        assert result.get(timeout=WAIT) == 4
    elif code.startswith("app.signature"):
        assert (result.task.name, result.args) == (add.name, (2, 2))
    elif code in ("app.control.inspect().active()", "app.control.inspect().reserved()"):
        assert set(result) == nodes
        assert isinstance(result["worker"], list)
    elif code == "app.control.inspect().scheduled()":
        assert set(result) == {"services"}
        assert isinstance(result["services"], list)
    elif code == "app.control.inspect().stats()":
        assert result["worker"]["pid"] > 0
    elif code == "app.control.inspect().registered()":
        assert add.name in result["worker"]
    elif code == "app.control.inspect().ping()":
        assert result == {"worker": {"ok": "pong"}}
    elif code == "app.control.ping()":
        assert result == [{"worker": {"ok": "pong"}}]
    elif code.startswith("app.control.rate_limit"):
        assert result is None
        with pytest.raises(ConfigError, match=re.escape("no task 'c.nope' here")):
            app.control.rate_limit("c.nope", "1/s")
        app.control.rate_limit(add.name, None)  # lifted again
    else:
        raise AssertionError(f"docs/celery.md's row `{code}` has no check here: add one")


def test_every_row_of_the_other_celery_calls_table_works_or_is_refused_as_written(
    cluster: Path,
) -> None:
    rows = _table_rows()
    assert len(rows) >= 20
    expires = app.conf.result_expires
    try:
        with app.connect(cluster):
            for written, says in rows:
                code = written
                for celery_name, ours in _NAMES.items():
                    code = code.replace(f'"{celery_name}"', repr(ours))
                where = {"app": app, "add": add, "setup": _setup}
                if says.startswith("refused: "):
                    words = re.fullmatch(r'refused: "(.*)"', says)
                    assert words is not None, f"row `{written}`: quote the refusal's words"
                    with pytest.raises(NotSupported) as refused:
                        _run(code, where)
                    assert words[1] in str(refused.value), written
                    continue
                assert says.startswith("works: "), f"row `{written}`: works or refused"
                _works(written, _run(code, where))
    finally:
        app.conf.result_expires = expires
        app.conf.beat_schedule = {}

"""``App``: Celery's app object, on actors.

The definitions (``@app.task``, ``@app.event``, ``app.pool``) are those of
:class:`TaskRegistry`; ``App`` adds connecting a caller to a cluster, and is the
actors factory a node of the cluster names to host the app's pools
(``actors = "myapp:app"`` in cluster.toml).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import FrameType, MappingProxyType
from typing import Any, ClassVar, Final

from ..._errors import ConfigError, NotSupported
from ...actors import Actor
from ...cluster import ClusterConfig, NodeConfig
from ...supervision import BoxedSpec, RetryPolicy, importing_for_node
from .._hosting import TASK_SETTINGS, node_pools, task_actors
from ..client import _results
from ..client._client import TaskClient
from ..client._connect import CLIENT_NAME, ClusterSpec, Connection, open_client
from ._conf import CELERY_ONLY_SETTINGS
from ._registry import TaskRegistry
from ._signature import Signature
from ._task import Task

__all__ = ["APP_REFUSED", "App"]


class App(TaskRegistry):
    """A task app: ``@app.task``, ``@app.event``, and ``app.connect(...)``.

    Args:
        name: the app's name; a task's default name is ``NAME.FUNCTION``.
        default_pool: the pool tasks go to unless they name another.
        retry_policy: every task's retry policy unless it sets its own (a
            ``RetryPolicy`` or a dict of its fields; docs/fault-tolerance.md).
        eager: run tasks inline at ``delay()``, in the caller, for unit tests
            (``app.conf.task_always_eager``; docs/testing.md).

    Example::

        app = App("tasks")

        @app.task
        def add(x, y):
            return x + y

        with app.connect("cluster.toml"):
            assert add.delay(1, 2).get(timeout=10) == 3
    """

    #: The keys of a node's table the app reads, as an actors factory: any
    #: other key there is an error (``actorctl.cluster`` checks).
    settings_keys: ClassVar[frozenset[str]] = TASK_SETTINGS

    def __init__(
        self,
        name: str,
        *,
        default_pool: str = "celery",
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        eager: bool = False,
        **celery: Any,
    ) -> None:
        """Raises ConfigError for Celery's constructor arguments (``broker=``,
        ``backend=``, ``include=``, ...), saying what takes their place."""
        if celery:
            raise ConfigError(f"App({name!r}, ...): {_celery_arguments(celery)}")
        super().__init__(name, default_pool=default_pool, retry_policy=retry_policy)
        if eager:
            self.conf.task_always_eager = True

    def connect(
        self, cluster: ClusterSpec, *, name: str = CLIENT_NAME, **node_options: Any
    ) -> Connection:
        """Connect for the duration of a ``with`` block, from plain (non-trio)
        code: a client node runs in a thread of its own, and the block's tasks
        and events go through it.

        Args:
            cluster: a cluster.toml (its security, with the ``name`` member's
                certificate and key), or a Directory (then pass the node options:
                ``tls``/``keyring`` or ``insecure=True``).
            name: whose certificate and key to use.
            node_options: more ``Node`` arguments, and ``reach_timeout``: the
                seconds it waits at most for the cluster's nodes to answer, all
                together (a node that does not is logged; default 10).

        Raises:
            ConfigError: called as a node imports the module (its top-level
                code): the nodes import the app's module, and a node must not
                connect to the cluster it is part of as it starts.
        """
        _not_while_a_node_imports("connect")
        self.configure()
        return Connection(cluster, name, node_options)

    def aconnect(
        self, cluster: ClusterSpec, *, name: str = CLIENT_NAME, **node_options: Any
    ) -> AbstractAsyncContextManager[TaskClient]:
        """Connect for the duration of an ``async with`` block in trio code
        (the arguments of :meth:`connect`, and its errors)."""
        _not_while_a_node_imports("aconnect")
        self.configure()
        return open_client(cluster, name=name, **node_options)

    def config_from_object(self, obj: object | str, namespace: str | None = None) -> None:
        """Celery's ``app.config_from_object``: ``app.conf`` from the settings of
        a module (or its import name, ``"module:attribute"``) or object: its
        lowercase names and Celery's old uppercase ones; with ``namespace``
        (Django's ``"CELERY"``), its ``CELERY_``-prefixed names.

        Raises:
            ConfigError: a setting that is unknown or does not apply (naming
                the supported ones, or why).
        """
        self.conf.from_object(obj, namespace)

    def signature(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Signature:
        """Celery's ``app.signature``: a signature of the task ``name`` (the
        app's, or one it knows by name only) with its arguments and options."""
        return Signature(self.by_name(name), args, kwargs, options=options)

    def __getattr__(self, name: str) -> Any:
        """Celery's app attributes that actorctl does not have are refused
        with why, and what to use instead (NotSupported: an AttributeError)."""
        if name in APP_REFUSED:
            raise NotSupported(f"app.{name}: {APP_REFUSED[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def AsyncResult(self, task_id: str) -> _results.AsyncResult:
        """Celery's ``app.AsyncResult``: the handle on the task ``task_id``, sent
        by this process or another; in a connected process, its result is
        fetched by id from the cluster (in eager mode, the result of a task
        run here)."""
        if self.eager.active:
            return self.eager.result(task_id)
        return _results.AsyncResult(task_id)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        pool: str | None = None,
        **options: Any,
    ) -> _results.AsyncResult:
        """Celery's ``app.send_task``: send a task by name, such as one that only
        a boxed worker in another language serves (docs/boxed.md), to ``pool``
        (default: the task's own pool, or the app's default pool); the options
        of ``Task.apply_async``."""
        return self.by_name(name, pool).apply_async(args, kwargs, **options)

    async def asend_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        pool: str | None = None,
        **options: Any,
    ) -> _results.AsyncResult:
        """:meth:`send_task` for trio code."""
        return await self.by_name(name, pool).aapply_async(args, kwargs, **options)

    def by_name(self, name: str, pool: str | None = None) -> Task:
        """The task ``name``: the app's own, or one it only knows by name (its
        signatures, ``.s()``, ``.delay()``, work as for any task)."""
        task = self.find(name)
        if task is not None and pool in (None, task.pool):
            return task
        elsewhere = Task(_elsewhere, name=name, pool=pool or self.default_pool)
        elsewhere.eager = self.eager  # eager mode runs the app's task of that name
        return elsewhere

    def actors_for(
        self, cluster: ClusterConfig | None, node: NodeConfig
    ) -> Mapping[str, Actor | BoxedSpec]:
        """The actors a node of ``cluster`` hosts for this app, as its settings
        say (``pools = [...]`` or ``services = true``): the actors factory
        interface of ``actorctl.cluster``."""
        return task_actors(self, cluster, node)

    def pools_for(self, cluster: ClusterConfig | None, node: NodeConfig) -> dict[str, list[str]]:
        """The pools a node of ``cluster`` serves, each with its workers' names
        there: what the node's record in etcd says (``actorctl.cluster``'s
        ``PoolsFactory``)."""
        return node_pools(cluster, node)


_COMMAND_LINE = (
    "it is Celery's command line: start the cluster with `actorctl cluster up "
    "cluster.toml` (its beat runs on the services node), or one node with "
    "`actorctl node run MODULE:app --cluster cluster.toml --name NODE`"
)
_NO_BACKEND = "each worker node keeps the results it sends: app.AsyncResult(id) fetches them"
_NO_BROKER = CELERY_ONLY_SETTINGS["broker_url"]
#: Celery's app attributes that actorctl does not have: why, and what instead.
APP_REFUSED: Final = MappingProxyType(
    {
        "start": _COMMAND_LINE,
        "worker_main": _COMMAND_LINE,
        "Worker": _COMMAND_LINE,
        "WorkController": _COMMAND_LINE,
        "Beat": "the beat is an actor on the services node, started by `actorctl cluster up` "
        "(docs/scheduling.md)",
        "autodiscover_tasks": 'a node imports the module its `actors = "MODULE:APP"` names: '
        "import the modules that define tasks from there",
        "backend": _NO_BACKEND,
        "amqp": _NO_BROKER,
        "connection": _NO_BROKER,
        "connection_for_read": _NO_BROKER,
        "connection_for_write": _NO_BROKER,
        "producer_or_acquire": _NO_BROKER,
        "producer_pool": _NO_BROKER,
        "events": "task events are the nodes' structured logs: `actorctl logs`",
        "loader": "settings come from app.conf and app.config_from_object(...)",
        "set_current": "there is no current app: tasks send through the connected client",
        "set_default": "there is no default app: tasks send through the connected client",
        "setup_security": "messages are always signed (docs/security.md): `actorctl keys`",
    }
)


def _celery_arguments(given: Mapping[str, Any]) -> str:
    """Why each of Celery's constructor arguments in ``given`` is not taken."""
    instead = {
        "broker": CELERY_ONLY_SETTINGS["broker_url"],
        "backend": CELERY_ONLY_SETTINGS["result_backend"],
        "include": 'a node imports the module its `actors = "MODULE:APP"` names: '
        "import the task modules from there",
        "config_source": "use app.config_from_object(...)",
        "set_as_current": "there is no current app: tasks send through the connected client",
    }
    reasons = [
        f"{key}= is not taken: {instead[key]}"
        if key in instead
        else f"unknown argument {key}= (App takes name, default_pool, retry_policy and eager)"
        for key in given
    ]
    return "; ".join(reasons)


def _elsewhere(*args: Any, **kwargs: Any) -> Any:
    """Stands for a task known by name only: it runs where its pool runs it."""
    raise TypeError("a task known by name only runs in its pool: send it (.delay())")


def _not_while_a_node_imports(method: str) -> None:
    """Refuse ``app.connect``/``app.aconnect`` in the top-level code of the
    module a node is importing (``actors = "tasks:app"`` names it): the README's
    snippet put in one module as written. Without this, the node would connect
    to the cluster it is starting, and fail in ways that do not say why.

    Raises:
        ConfigError: naming the module, the line, and where the call belongs.
    """
    target = importing_for_node()
    if target is None:
        return
    where = f"module {target.partition(':')[0]!r}"
    frame: FrameType | None = sys._getframe(2)  # the caller's
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back  # called in a function: the module code that called it
    if frame is not None:
        where = f"{frame.f_code.co_filename}, line {frame.f_lineno}"
    raise ConfigError(
        f"{where}: app.{method}(...) runs as the module is imported, and the nodes "
        f"import this module to host {target!r}: each would connect to the cluster it "
        f"is starting. Put the `with app.{method}(...)` block under "
        '`if __name__ == "__main__":`, or in another module (the code that sends '
        "the tasks)"
    )

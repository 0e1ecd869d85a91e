"""``app.control``'s calls across the cluster, with Celery's names:
``inspect()`` (``active``, ``reserved``, ``scheduled``, ``stats``,
``registered``, ``ping``), ``ping()`` and ``rate_limit()``.

They ask what ``actorctl inspect`` and ``actorctl control`` ask: the ``_tasks``
actor of every node that hosts task workers (``scheduled``: the services
node's scheduler), all at once, through the connected client, as its identity
(an operator's for ``active``, ``reserved``, ``scheduled`` and ``rate_limit``:
docs/security.md). As in Celery, an answer maps each node that answered
within ``timeout`` seconds to its reply, and is None when none did; a node
that did not answer is logged (``actorctl:control:unanswered``).

What Celery's ``app.control`` and ``inspect()`` have and actorctl does not is
refused (:class:`~actorctl.NotSupported`) with why and what to use instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar, final

import trio

from ..._errors import ActorctlError, AskTimeout, ConfigError, NotSupported, PeerUnavailable
from ..._log import log
from ...actors import ActorRef, Address
from ..client._client import TaskClient, current_client
from ..protocol._protocol import SCHEDULER

__all__ = [
    "CONTROL_REFUSED",
    "INSPECT_REFUSED",
    "Inspect",
    "answers_list",
    "ask_nodes",
    "rate_of",
    "refuse_control",
]

T = TypeVar("T")

#: Celery's ``inspect()`` methods that actorctl does not have: why, and what instead.
INSPECT_REFUSED: Final = MappingProxyType(
    {
        "revoked": "revokes are kept by every node for a day and not listed: "
        "app.AsyncResult(id).state says REVOKED",
        "active_queues": "there are no queues: a task runs in the pool its definition names; "
        "registered() gives each task's pool",
        "query_task": "use app.AsyncResult(id).state, or `actorctl logs --task ID`",
        "conf": "a node's settings are its app's app.conf and cluster.toml",
        "report": "use stats(), or `actorctl cluster status`",
        "memdump": "use stats(), or the node's /metrics",
        "memsample": "use stats(), or the node's /metrics",
        "objgraph": "not offered: run the node under a profiler",
        "clock": "there is no logical clock: message times are seconds since the Unix epoch",
    }
)
#: Celery's ``app.control`` calls that actorctl does not have: why, and what instead.
CONTROL_REFUSED: Final = MappingProxyType(
    {
        "shutdown": "use `actorctl control shutdown cluster.toml [NODE]`",
        "pool_grow": "use `actorctl control pool-grow cluster.toml POOL N`",
        "pool_shrink": "use `actorctl control pool-shrink cluster.toml POOL N`",
        "pool_restart": "use `actorctl cluster reload cluster.toml`",
        "purge": "tasks are held by the nodes' backlogs until a worker ran them: revoke them",
        "discard_all": "tasks are held by the nodes' backlogs until a worker ran them: revoke them",
        "add_consumer": "there are no queues: cluster.toml says which nodes host each pool",
        "cancel_consumer": "there are no queues: cluster.toml says which nodes host each pool",
        "time_limit": "set time_limit= on the task (or app.conf.task_time_limit) and redeploy",
        "enable_events": "task events are the nodes' structured logs (`actorctl logs`)",
        "disable_events": "task events are the nodes' structured logs (`actorctl logs`)",
        "broadcast": "use the named calls (inspect(), ping(), rate_limit(), revoke())",
        "terminate": "use revoke(id, terminate=True)",
        "election": "the scheduler role is held by a lease (docs/scheduling.md)",
        "heartbeat": "nodes' links carry AMQP heartbeats; use ping()",
        "autoscale": "give the pool a budget range: app.pool(NAME, concurrency=(MIN, MAX))",
    }
)


async def ask_nodes(
    client: TaskClient,
    op: str,
    args: Sequence[Any] = (),
    *,
    timeout: float,
    destination: Sequence[str] | None = None,
    scheduler: bool = False,
) -> dict[str, Any]:
    """``op`` asked of every node's ``_tasks`` actor (``scheduler``: of the
    services node's scheduler) at once: each node's answer by its name (an
    error it answered, as the exception), those that answered within
    ``timeout`` only. ``destination``: only the nodes of these names."""
    directory = client.directory
    if scheduler:
        targets = [directory.resolve(SCHEDULER)] if SCHEDULER in directory.addresses else []
    else:
        targets = directory.control_addresses()
    if destination is not None:
        wanted = {destination} if isinstance(destination, str) else set(destination)
        targets = [t for t in targets if directory.node_name(t) in wanted]
    answers: dict[str, Any] = {}

    async def ask(target: Address) -> None:
        name = directory.node_name(target)
        ref = ActorRef(target, client.outbox, timeout=timeout)
        try:
            answers[name] = await ref.ask(op, *args)
        except ActorctlError as exc:
            if _answered(exc):
                answers[name] = exc
            else:
                log("actorctl:control:unanswered", node=name, op=op, error=str(exc))

    async with trio.open_nursery() as nursery:
        for target in targets:
            nursery.start_soon(ask, target)
    return answers


def _answered(exc: ActorctlError) -> bool:
    """Whether ``exc`` is the node's answer (its handler refused), not the
    node's silence (no answer in time, not reachable)."""
    return not isinstance(exc, AskTimeout | PeerUnavailable)


def rate_of(rate: object) -> str | None:
    """Celery's rate limit (``"10/m"``, or a number of tasks per second; 0 or
    None: no limit) as the ``limit`` handler takes it.

    Raises:
        ConfigError: anything else.
    """
    if rate is None or rate == 0:
        return None
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        return f"{rate:g}/s"
    if isinstance(rate, str) and rate.strip():
        return rate.strip()
    raise ConfigError(
        f"rate_limit={rate!r}: give '10/s', '100/m', '5/h', a number per second, or 0"
    )


@final
class Inspect:
    """Celery's ``app.control.inspect()``: what the cluster's task workers run,
    hold and know. Each method answers a dict of node name to its reply, or
    None when no node answered within ``timeout``; ``a``-prefixed twins
    (``aactive``) are for trio code.

    Args:
        app_name: the app, for the error of a process that is not connected.
        destination: only these nodes (names from cluster.toml).
        timeout: seconds to wait at most for the answers: it answers as soon
            as every node did (Celery waits its whole timeout, default 1).
    """

    def __init__(
        self, app_name: str, destination: Sequence[str] | None = None, timeout: float = 10.0
    ) -> None:
        self._app_name = app_name
        self.destination = destination
        self.timeout = timeout

    def __getattr__(self, name: str) -> Any:
        if name in INSPECT_REFUSED:
            raise NotSupported(f"app.control.inspect().{name}(): {INSPECT_REFUSED[name]}")
        raise AttributeError(name)

    async def _ask(self, op: str, scheduler: bool = False) -> dict[str, Any] | None:
        client = current_client(f"app {self._app_name!r}")
        found = await ask_nodes(
            client, op, timeout=self.timeout, destination=self.destination, scheduler=scheduler
        )
        refused = {node: exc for node, exc in found.items() if isinstance(exc, Exception)}
        if refused:
            said = "; ".join(f"{node}: {exc}" for node, exc in refused.items())
            raise ConfigError(f"inspect().{op}(): refused by {said}")
        return found or None

    def _wait(self, fn: Callable[[], Awaitable[T]]) -> T:
        return current_client(f"app {self._app_name!r}").wait_in_client_thread(fn)

    async def aactive(self) -> dict[str, Any] | None:
        """The tasks each node's workers run now: id, name, args, kwargs,
        worker, pool, received and started times."""
        return await self._ask("active")

    def active(self) -> dict[str, Any] | None:
        """:meth:`aactive` from plain code."""
        return self._wait(self.aactive)

    async def areserved(self) -> dict[str, Any] | None:
        """The tasks each node's workers took and have not started."""
        return await self._ask("reserved")

    def reserved(self) -> dict[str, Any] | None:
        """:meth:`areserved` from plain code."""
        return self._wait(self.areserved)

    async def ascheduled(self) -> dict[str, Any] | None:
        """The delayed tasks (countdown, eta, retries) the services node's
        scheduler holds, with their eta: by the services node's name."""
        return await self._ask("scheduled", scheduler=True)

    def scheduled(self) -> dict[str, Any] | None:
        """:meth:`ascheduled` from plain code."""
        return self._wait(self.ascheduled)

    async def astats(self) -> dict[str, Any] | None:
        """Per node its pid and uptime, per worker its pool, budget, active and
        reserved tasks, per task how many runs ended there."""
        return await self._ask("stats")

    def stats(self) -> dict[str, Any] | None:
        """:meth:`astats` from plain code."""
        return self._wait(self.astats)

    async def aregistered(self) -> dict[str, list[str]] | None:
        """The names of the tasks each node's workers run (Celery's shape: a
        list of names per node)."""
        found = await self._ask("registered")
        return None if found is None else {node: sorted(tasks) for node, tasks in found.items()}

    def registered(self) -> dict[str, list[str]] | None:
        """:meth:`aregistered` from plain code."""
        result: dict[str, list[str]] | None = self._wait(self.aregistered)
        return result

    async def aping(self) -> dict[str, Any] | None:
        """``{"ok": "pong"}`` from each node that answers."""
        return await self._ask("ping")

    def ping(self) -> dict[str, Any] | None:
        """:meth:`aping` from plain code."""
        return self._wait(self.aping)


def refuse_control(name: str) -> AttributeError:
    """The error of Celery's ``app.control.NAME``: NotSupported, saying what
    to use instead, or a plain AttributeError for a name Celery has not."""
    if name in CONTROL_REFUSED:
        return NotSupported(f"app.control.{name}(): {CONTROL_REFUSED[name]}")
    return AttributeError(name)


def answers_list(found: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Celery's reply shape: one ``{node: reply}`` per node."""
    return [{node: reply} for node, reply in sorted(found.items())]

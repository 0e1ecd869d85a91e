"""How a user declares a boxed worker: an external process, in any language,
that serves handlers over the protocol of docs/boxed.md.

A :class:`BoxedSpec` builds; it never holds a running thing. The node makes of
it an addressable actor (the *front*: by default a :class:`BoxedActor` whose
handlers the process implements) and a supervisor of ``instances`` processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._errors import ConfigError
from ._child import Restart

if TYPE_CHECKING:
    from ..actors import Actor

__all__ = ["PROTOCOL_VERSION", "BoxedSpec"]

#: The version of docs/boxed.md a runtime speaks (a worker's hello names its own).
PROTOCOL_VERSION: Final = 1


def _command(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _restart(value: Restart | str) -> Restart:
    return value if isinstance(value, Restart) else Restart(value)


@final
@attrs.frozen
class BoxedSpec:
    """A boxed worker: ``instances`` long-lived processes running ``command``.

    Attributes:
        name: the actor it is reachable as (a task pool's name, to serve a pool).
        command: the program and its arguments.
        cwd, env: its working directory, and variables added to the node's.
        instances: processes, each a supervised child.
        concurrency: requests in flight per process (None: what its hello says;
            else at most that).
        time_limit: seconds a request may run (None: the caller's limit only);
            past it the process is killed and restarted.
        memory_limit: MiB of address space per process (``RLIMIT_AS``).
        heartbeat: seconds of silence after which the runtime sends a heartbeat;
            no record within as many again is a hang (0: never).
        grace: seconds between SIGTERM and SIGKILL, and for a clean shutdown.
        start_timeout: seconds the process has to say hello.
        max_record: the longest line either side may write, in bytes.
        redeliveries: how often a request whose process died under it is given
            to another (after that it fails with ``BoxedProcessError``).
        max_restarts, within, backoff, backoff_max: the process supervisor's
            intensity and backoff; past the intensity it fails to its parent.
        restart: its restart type under its parent.
        pool: the task pool it serves (read by a task app), or None.
        front: makes the actor in front of it from its ``Boxed`` (None: a
            ``BoxedActor``).
    """

    name: str
    command: tuple[str, ...] = attrs.field(converter=_command)
    cwd: str | None = None
    env: Mapping[str, str] | None = attrs.field(default=None, hash=False)
    instances: int = 1
    concurrency: int | None = None
    time_limit: float | None = None
    memory_limit: float | None = None
    heartbeat: float = 10.0
    grace: float = 2.0
    start_timeout: float = 15.0
    max_record: int = 16 * 1024 * 1024
    redeliveries: int = 2
    max_restarts: int = 3
    within: float = 5.0
    backoff: float = 0.1
    backoff_max: float = 5.0
    restart: Restart = attrs.field(default=Restart.PERMANENT, converter=_restart)
    pool: str | None = None
    front: Callable[[Any], Actor] | None = attrs.field(default=None, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        where = f"boxed worker {self.name!r}"
        if not self.command or not all(isinstance(p, str) and p for p in self.command):
            raise ConfigError(f"{where}: command must be a non-empty list of strings")
        if self.instances < 1 or (self.concurrency is not None and self.concurrency < 1):
            raise ConfigError(f"{where}: instances and concurrency must be at least 1")
        numbers: dict[str, Any] = {
            "heartbeat": self.heartbeat,
            "grace": self.grace,
            "redeliveries": self.redeliveries,
            "max_restarts": self.max_restarts,
            "backoff": self.backoff,
        }
        for key, value in numbers.items():
            if value < 0:
                raise ConfigError(f"{where}: {key} must be 0 or more, got {value!r}")
        for key, limit in (("time_limit", self.time_limit), ("memory_limit", self.memory_limit)):
            if limit is not None and limit <= 0:
                raise ConfigError(f"{where}: {key} must be above 0, got {limit!r}")
        if self.start_timeout <= 0 or self.within <= 0 or self.max_record < 1024:
            raise ConfigError(
                f"{where}: start_timeout and within must be above 0, max_record at least 1024"
            )

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_limit is None else int(self.memory_limit * 1024 * 1024)

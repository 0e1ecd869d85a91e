"""Groups and chords: tasks in parallel, and a callback once they all succeeded.

(Signatures and chains are in ``_signature.py``.) A chord's barrier is held by
the cluster's chord actor (``_chords.py``), which counts the header's results
as they arrive: no store is polled.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..._errors import ConfigError
from ...mailbox import Envelope
from ..client._client import TaskClient, current_client, send_task
from ..client._group_result import GroupResult
from ..client._results import AsyncResult
from ..client._validate import check_references
from ..protocol._protocol import CHORDS, H_CHORD, new_task_id
from ..protocol._send_options import SendOptions
from ..worker._control import new_result
from ._eager_api import eager_of
from ._signature import Signature, wire_options

__all__ = ["chord", "group"]


class group:
    """Tasks run in parallel; the result is a ``GroupResult`` of theirs, in order."""

    def __init__(self, *tasks: Signature | Iterable[Signature]) -> None:
        items: Iterable[Any] = tasks
        if len(tasks) == 1 and not isinstance(tasks[0], Signature):
            items = list(tasks[0])
        self.tasks = [_signature(item) for item in items]

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> GroupResult:
        if not self.tasks:
            return GroupResult(new_task_id(), [])
        if eager_of(self.tasks[0].task) is not None:  # each member runs here, in turn
            group_id = new_task_id()
            results = []
            for sig in self.tasks:
                sig = sig.clone(args, kwargs, **options)
                results.append(
                    sig.task.apply_async(sig.args, sig.kwargs, _group=group_id, **sig.options)
                )
            return GroupResult(group_id, results)
        client = current_client(f"task {self.tasks[0].task.name}")
        return client.wait_in_client_thread(
            functools.partial(self.aapply_async, args, kwargs, **options)
        )

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> GroupResult:
        group_id = new_task_id()
        results = []
        for sig in self.tasks:
            sig = sig.clone(args, kwargs, **options)
            results.append(
                await sig.task.aapply_async(sig.args, sig.kwargs, _group=group_id, **sig.options)
            )
        return GroupResult(group_id, results)

    def delay(self, *args: Any, **kwargs: Any) -> GroupResult:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> GroupResult:
        return await self.aapply_async(args, kwargs)

    __call__ = delay

    def __or__(self, other: Signature) -> chord:
        return chord(self, other)


def _signature(item: Any) -> Signature:
    if isinstance(item, Signature):
        return item
    raise ConfigError(f"expected a task signature (task.s(...)), got {item!r}")


class chord:
    """A group (the header) and a callback (the body): the body runs once every
    task of the header has succeeded, with the list of their results as its first
    argument. The barrier is held by the cluster's chord actor, which counts the
    results as they arrive (no store is polled)."""

    def __init__(self, header: group | Iterable[Signature], body: Signature | None = None) -> None:
        self.header = header if isinstance(header, group) else group(header)
        self.body = body

    def __call__(self, body: Signature | None = None, **options: Any) -> AsyncResult:
        if body is not None:
            self.body = body
        return self.apply_async(**options)

    def _body(self) -> Signature:
        if self.body is None:
            raise ConfigError("a chord needs a body: chord(header)(body) or chord(header, body)")
        return self.body

    def apply_async(self, **options: Any) -> AsyncResult:
        body = self._body().clone(**options)
        runner = eager_of(body.task)
        if runner is not None:  # the header runs here, then the body
            header = [sig.apply_async() for sig in self.header.tasks]
            chord_id, values = runner.chord_values(header, body.task.name)
            if isinstance(values, AsyncResult):
                return values
            return _body_of(body, values).apply_async(task_id=chord_id)
        client = current_client(f"task {body.task.name}")
        return client.wait_in_client_thread(functools.partial(self.aapply_async, **options))

    async def aapply_async(self, **options: Any) -> AsyncResult:
        body = self._body().clone(**options)
        runner = eager_of(body.task)
        if runner is not None:
            header = [await sig.aapply_async() for sig in self.header.tasks]
            chord_id, values = runner.chord_values(header, body.task.name)
            if isinstance(values, AsyncResult):
                return values
            return await _body_of(body, values).aapply_async(task_id=chord_id)
        client = current_client(f"task {body.task.name}")
        if not self.header.tasks:  # nothing to wait for: the body runs on []
            if not body.immutable:
                body = Signature(body.task, [[], *body.args], body.kwargs, options=body.options)
            return await body.aapply_async()
        # Every pool and sink it names resolves, before anything is sent.
        directory = client.directory
        check_references(directory, "chord", body.task.pool, SendOptions(link=(body.to_wire(),)))
        sent = [_send_options(sig) for sig in self.header.tasks]
        for sig, member in zip(self.header.tasks, sent, strict=True):
            linked = attrs.evolve(member, link=(sig.to_wire(),))
            check_references(directory, f"task {sig.task.name}", sig.task.pool, linked)
        chord_id = new_task_id()
        result = new_result(client, chord_id, body.task.name, tracked=True)
        ids = [new_task_id() for _ in self.header.tasks]
        await _open_barrier(client, chord_id, ids, body, tracked=result.tracked)
        barrier = str(client.directory.resolve(CHORDS))
        for task_id, sig, member in zip(ids, self.header.tasks, sent, strict=True):
            await send_task(
                client,
                task=sig.task.name,
                pool=sig.task.pool,
                args=sig.args,
                kwargs=sig.kwargs,
                task_id=task_id,
                reply_to=barrier,
                correlation_id=chord_id,
                options=member,
                headers={H_CHORD: chord_id},
            )
        return result


def _send_options(sig: Signature) -> SendOptions:
    """A header member's send options, checked.

    Raises:
        ConfigError: naming the task and the option.
    """
    return SendOptions.of(wire_options(sig.options, sig.task.pool), f"task {sig.task.name}")


def _body_of(body: Signature, values: list[Any]) -> Signature:
    """A chord's body with its header's values as its first argument (unless immutable)."""
    if body.immutable:
        return body
    return Signature(body.task, [values, *body.args], body.kwargs, options=body.options)


async def _open_barrier(
    client: TaskClient, chord_id: str, ids: list[str], body: Signature, *, tracked: bool
) -> None:
    """Open the chord's barrier, confirmed: no result may reach it before it exists."""
    outbox = client.outbox
    barrier = client.directory.resolve(CHORDS)
    opening = Envelope(
        message_id=outbox.new_message_id(),
        to=str(barrier),
        subject="open",
        body=[
            [],
            {
                "chord_id": chord_id,
                "tasks": ids,
                "body": body.to_wire(),
                "reply_to": outbox.reply_address(barrier) if tracked else None,
            },
        ],
        creation_time=outbox.now(),
    )
    await outbox.send(barrier, opening, presettled=False, confirm=True)

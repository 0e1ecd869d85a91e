"""Where a process's event-loop thread spends its time, by stage of the task path.

A wall-clock sampler for ``bench/task_cost.py``: ``setitimer(ITIMER_REAL)`` raises
SIGALRM every ``interval`` seconds, and the handler (which Python runs in the main
thread, the event loop's, at the next bytecode) walks the interrupted stack and counts
one sample for the stage its frames belong to. Time blocked in the loop's I/O wait
(epoll) is sampled too, as ``idle``, so that the rows add up to the thread's wall time.
Nothing is installed, and nothing costs anything, until :meth:`Sampler.start`.

A stack is put in one stage by the functions on it, in the priority order of
``STAGES`` (the first that has a frame on the stack wins): a log line written while a
reply is sent counts as ``trace``, the engine's socket write under its read loop counts
as ``write``. Functions are known by their file's name and their own, so the rules
survive a module moving between packages.

In a worker node this module is loaded by ``bench/_task_app.py`` when the environment
has ``ACTORCTL_TASK_COST`` (a directory): on the node's ``worker_ready`` it writes its
pid there, SIGUSR1 then starts sampling, SIGUSR2 stops it and writes ``ledger.json``.
With ``ACTORCTL_TASK_COST_CALLS`` set, the signals run :class:`CallCounter` instead (a
deterministic profile of the main thread: function calls, not samples) and SIGUSR2
writes ``calls.json``.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final

import trio

__all__ = ["STAGES", "CallCounter", "Collections", "Sampler", "install_worker_probe"]

ENV: Final = "ACTORCTL_TASK_COST"
DEFAULT_INTERVAL: Final = 0.001

#: (stage, what it is): the order is the priority order; "other" takes the rest.
STAGES: Final = (
    ("write", "socket writes (the writer's _send_pending, a turn's-end _flush: encode + send)"),
    ("trace", "traces and log lines (eliot, actorctl._log, the task's action)"),
    ("metrics", "metrics (counters, latencies, prometheus)"),
    ("dedup", "dedup and replay journal (replay cache, journal rows, seen window)"),
    ("auth", "authentication (signature/HMAC check of a request)"),
    ("send", "caller's send (apply_async: build, encode, sign, hand to the outbox)"),
    ("run", "the run itself (the task function and its time limits)"),
    ("store", "result storage (store put, commit hand-off and wait)"),
    ("reply", "the reply (build the result document, encode, sign, queue it)"),
    ("settle", "settlement of the request (disposition)"),
    ("read", "the read (socket read, transport, decode, mailbox put)"),
    ("idle", "idle: the event loop waiting for I/O"),
    ("machinery", "the rest of the actor/task machinery (gate, holdings, cells)"),
    ("scheduler", "trio's scheduler (task switches)"),
    ("other", "anything else"),
)
_PRIORITY: Final = {stage: index for index, (stage, _) in enumerate(STAGES)}

# (file name, function name or "*") -> stage
_RULES: Final = {
    ("_engine.py", "_send_pending"): "write",  # before the output half moved to _output.py
    ("_output.py", "_send_pending"): "write",
    ("_output.py", "_flush"): "write",
    # The writer's loop around _send_pending (gathering a turn's output, the
    # transport's pending bytes): write, not trio's scheduler under it.
    ("_output.py", "_write_loop"): "write",
    ("_log.py", "*"): "trace",
    ("_inspect.py", "action"): "trace",
    ("_counters.py", "*"): "metrics",
    ("_metrics.py", "*"): "metrics",
    ("_replay.py", "*"): "dedup",
    ("_replays.py", "*"): "dedup",
    ("_dedup.py", "*"): "dedup",
    ("_inbound.py", "_authenticate"): "auth",  # before issue 29 moved it to mailbox/
    ("_authenticate.py", "*"): "auth",
    ("_inbound.py", "_open_session"): "auth",
    ("_task.py", "aapply_async"): "send",
    ("_task.py", "apply_async"): "send",
    ("_worker.py", "_run_all"): "run",
    ("_store.py", "*"): "store",
    ("_sqlite.py", "*"): "store",
    ("_documents.py", "keep_result"): "store",
    ("_documents.py", "send_document"): "reply",
    ("_outbox.py", "reply"): "reply",
    ("_inbound.py", "_settle"): "settle",  # before it moved to _verdicts.py
    ("_verdicts.py", "settle"): "settle",
    ("_engine.py", "_read_loop"): "read",
    ("_io_epoll.py", "get_events"): "idle",
}
_PACKAGES: Final = (
    ("/eliot/", "trace"),
    ("/prometheus_client/", "metrics"),
    ("/actorctl/tasks/", "machinery"),
    ("/actorctl/actors/", "machinery"),
    ("/actorctl/mailbox/", "machinery"),
    ("/actorctl/supervision/", "machinery"),
    ("/trio/", "scheduler"),
)


def _tag(code: CodeType) -> int:
    """The priority of the stage a function belongs to (len(STAGES): none)."""
    name = os.path.basename(code.co_filename)
    stage = _RULES.get((name, code.co_name)) or _RULES.get((name, "*"))
    if stage is None:
        path = code.co_filename.replace(os.sep, "/")
        stage = next((s for part, s in _PACKAGES if part in path), None)
    return _PRIORITY[stage] if stage is not None else len(STAGES)


class Sampler:
    """Counts wall-clock samples of the main thread by stage (see the module)."""

    def __init__(self, interval: float = DEFAULT_INTERVAL) -> None:
        self.interval = interval
        self.counts: Counter[str] = Counter()
        #: Samples by stage and the function that was running (the stack's leaf).
        self.leaves: Counter[tuple[str, str]] = Counter()
        self.wall = 0.0
        self.loop_cpu = 0.0  # the main thread's CPU time
        self.process_cpu = 0.0  # every thread's
        self._tags: dict[CodeType, int] = {}
        self._started: tuple[float, float, float] | None = None
        self._previous: Any = None

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        tags = self._tags
        best = len(STAGES)
        leaf = frame.f_code if frame is not None else None
        while frame is not None:
            code = frame.f_code
            tag = tags.get(code)
            if tag is None:
                tag = tags[code] = _tag(code)
            if tag < best:
                best = tag
            frame = frame.f_back
        stage = STAGES[best][0] if best < len(STAGES) else "other"
        self.counts[stage] += 1
        if leaf is not None:
            where = f"{os.path.basename(leaf.co_filename)}:{leaf.co_name}"
            self.leaves[stage, where] += 1

    def start(self) -> None:
        """Sample from now on (call it from the main thread)."""
        self._previous = signal.signal(signal.SIGALRM, self._sample)
        self._started = (time.perf_counter(), _loop_cpu(), time.process_time())
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)

    def stop(self) -> None:
        """Stop sampling; the totals add what was sampled since :meth:`start`."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
        assert self._started is not None
        wall, loop, process = self._started
        self.wall += time.perf_counter() - wall
        self.loop_cpu += _loop_cpu() - loop
        self.process_cpu += time.process_time() - process
        self._started = None

    def report(self) -> dict[str, Any]:
        return {
            "counts": dict(self.counts),
            "leaves": [[stage, where, n] for (stage, where), n in self.leaves.most_common()],
            "wall_s": self.wall,
            "loop_cpu_s": self.loop_cpu,
            "process_cpu_s": self.process_cpu,
        }


class _Steps(trio.abc.Instrument):
    """A trio instrument: the steps trio runs (task switches), by task name."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1


class CallCounter:
    """Counts the main thread's function calls with cProfile, by function, and the
    task steps trio runs (each a task switch), by task, when started in a trio run.

    Unlike the sampler's, its figures do not move with the machine's load: the number
    of calls a task makes is the same on a busy machine as on a quiet one, so a change
    on the task path can be judged by it while other work runs.
    """

    def __init__(self) -> None:
        self._profile = cProfile.Profile()
        self._steps = _Steps()
        self._instrumented = False

    def start(self) -> None:
        try:
            trio.lowlevel.add_instrument(self._steps)
            self._instrumented = True
        except RuntimeError:
            pass  # not in a trio run: calls only
        self._profile.enable()

    def stop(self) -> None:
        self._profile.disable()
        if self._instrumented:
            trio.lowlevel.remove_instrument(self._steps)
            self._instrumented = False

    def dump(self, path: str) -> None:
        self._profile.dump_stats(path)

    def report(self) -> dict[str, Any]:
        """Each function's calls (primitive, total), own and inclusive time, by file:line:name."""
        stats = pstats.Stats(self._profile).stats  # type: ignore[attr-defined]
        rows = {}
        for (path, line, name), (primitive, total, own, inclusive, _) in stats.items():
            if path == __file__:
                continue  # its own instrument's calls (the task steps)
            rows[f"{os.path.basename(path)}:{line}:{name}"] = [primitive, total, own, inclusive]
        return {"functions": rows, "steps": dict(self._steps.steps)}


def _loop_cpu() -> float:
    """CPU seconds of the main thread (the event loop's), from any thread."""
    ident = threading.main_thread().ident
    assert ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def io_counters() -> dict[str, int]:
    """Socket writes and bytes of every live ``Engine`` of this process, and the
    commits of every ``Store``: found by their attributes, once, outside sampling.

    A node's process freezes what it made to start (``actorctl node run``), and
    ``gc.get_objects`` lists no frozen object (its store among them): those are
    thawed for the search and frozen again (with what was made since, which a
    frozen process would freeze at its next start anyway)."""
    totals = {"writes": 0, "sent_bytes": 0, "commits": 0, "engines": 0}
    frozen = gc.get_freeze_count() > 0
    if frozen:
        gc.unfreeze()
    try:
        things = gc.get_objects()
    finally:
        if frozen:
            gc.freeze()
    for thing in things:
        kind = type(thing).__name__
        if kind == "Engine" and hasattr(thing, "sent_bytes"):
            totals["engines"] += 1
            totals["writes"] += int(getattr(thing, "writes", 0))
            totals["sent_bytes"] += int(thing.sent_bytes)
        elif kind == "Store" and hasattr(thing, "commits"):
            totals["commits"] += int(thing.commits)
    return totals


class Collections:
    """The garbage collections of this process while it counts, and their time, by
    generation: a collection runs inside whatever code allocated, so the sampler
    counts its time in that code's stage; this says how much of it is the collector's."""

    def __init__(self) -> None:
        self._began = 0.0
        self.runs = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.collected = [0, 0, 0]  # unreachable objects freed (reference cycles)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            generation = info["generation"]
            self.runs[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._began
            self.collected[generation] += info["collected"]

    def start(self) -> None:
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def report(self) -> dict[str, Any]:
        return {"gc": {"runs": self.runs, "seconds": self.seconds, "collected": self.collected}}


def install_worker_probe(directory: str) -> None:
    """In a worker node: once its first task worker is up (in the event loop's
    thread), SIGUSR1 starts a :class:`Sampler` and SIGUSR2 writes what it counted."""
    from actorctl import signals

    where = Path(directory)
    interval = float(os.environ.get(f"{ENV}_INTERVAL", DEFAULT_INTERVAL))
    calls = bool(os.environ.get(f"{ENV}_CALLS"))
    sampler: Sampler | CallCounter = CallCounter() if calls else Sampler(interval)
    collections = Collections()
    before: dict[str, int] = {}

    def start(signum: int, frame: object) -> None:
        before.update(io_counters())
        collections.start()
        sampler.start()
        (where / "started").write_text(str(os.getpid()))

    def stop(signum: int, frame: object) -> None:
        sampler.stop()
        collections.stop()
        if isinstance(sampler, CallCounter) and (keep := os.environ.get(f"{ENV}_PSTATS")):
            sampler.dump(keep)  # the whole profile, for pstats' callers and callees
        after = io_counters()
        counters = {key: after[key] - before.get(key, 0) for key in after}
        counters["engines"] = after["engines"]
        report = {**sampler.report(), **collections.report(), **counters}
        name = "calls.json" if calls else "ledger.json"
        (where / f"{name}.tmp").write_text(json.dumps(report))
        os.replace(where / f"{name}.tmp", where / name)

    def ready(sender: object = None, **_: Any) -> None:
        signal.signal(signal.SIGUSR1, start)
        signal.signal(signal.SIGUSR2, stop)
        (where / "worker.pid").write_text(str(os.getpid()))

    signals.worker_ready.connect(ready, dispatch_uid="bench-task-cost")

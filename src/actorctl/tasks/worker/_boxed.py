"""The Python reference implementation of a boxed worker (docs/boxed.md).

``python -m actorctl.tasks.worker._boxed MODULE [MODULE ...]`` serves every task
declared ``boxed=True`` (or ``boxed="per-call"``) in those modules, by task
name; :func:`serve` serves any mapping of handler names to functions, for a
worker of one's own (examples/boxed/worker.py).

It reads requests on stdin in its main thread and runs each in a thread of a
pool of ``concurrency``, so that it answers heartbeats while handlers run; it
writes each record as one line on stdout, under a lock. Whatever the handlers
print goes to stderr (the runtime logs it): stdout is the protocol's alone.
A handler that runs out of memory ends the process with exit code 3.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Final

__all__ = ["OUT_OF_MEMORY", "PROTOCOL", "main", "serve"]

PROTOCOL: Final = 1
OUT_OF_MEMORY: Final = 3


def serve(
    handlers: Mapping[str, Callable[..., Any]],
    *,
    concurrency: int = 4,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> None:
    """Serve ``handlers`` over stdin and stdout until shutdown or EOF; then
    finish the requests in flight and return."""
    reader = stdin if stdin is not None else sys.stdin
    writer = stdout if stdout is not None else sys.stdout
    sys.stdout = sys.stderr  # a handler's print() must not break the protocol
    lock = threading.Lock()

    def write(record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        with lock:
            writer.write(line + "\n")
            writer.flush()

    def run(request: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"type": "reply", "id": request["id"]}
        try:
            fn = handlers[request["handler"]]
            reply["value"] = fn(*request.get("args", []), **request.get("kwargs", {}))
        except MemoryError:
            print("out of memory", file=sys.stderr, flush=True)
            os._exit(OUT_OF_MEMORY)
        except KeyError as exc:
            if request.get("handler") in handlers:
                reply["error"] = {"type": "KeyError", "message": str(exc)}
            else:
                message = f"no handler {request.get('handler')!r}"
                reply["error"] = {"type": "UnknownHandler", "message": message}
        except Exception as exc:
            reply["error"] = {"type": type(exc).__name__, "message": str(exc)}
        try:
            write(reply)
        except (TypeError, ValueError) as exc:  # a value that is not JSON
            error = {"type": "WireFormatError", "message": f"value is not JSON: {exc}"}
            write({"type": "reply", "id": request["id"], "error": error})

    write({"type": "hello", "protocol": PROTOCOL, "handlers": sorted(handlers),
           "concurrency": concurrency})  # fmt: skip
    with ThreadPoolExecutor(concurrency) as pool:
        for line in reader:
            record = json.loads(line)
            kind = record.get("type")
            if kind == "request":
                pool.submit(run, record)
            elif kind == "heartbeat":
                write({"type": "heartbeat"})
            elif kind == "shutdown":
                break


def boxed_tasks(modules: list[str]) -> dict[str, Callable[..., Any]]:
    """The boxed tasks of ``modules``, by task name."""
    if "" not in sys.path:
        sys.path.insert(0, "")
    found: dict[str, Callable[..., Any]] = {}
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            fn = getattr(value, "fn", None)
            if getattr(value, "boxed", False) and callable(fn) and isinstance(value.name, str):
                found[value.name] = fn
    return found


def main() -> None:
    concurrency = int(os.environ.get("ACTORCTL_BOXED_CONCURRENCY", "4"))
    serve(boxed_tasks(sys.argv[1:]), concurrency=concurrency)


if __name__ == "__main__":
    main()

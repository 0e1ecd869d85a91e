"""A boxed worker for the fault tests (docs/boxed.md), with the standard library
only, so that it starts fast: each handler records its execution in the file
RECORDS names (one line per run: its key and this process's pid).

Handlers: ``note(key)`` records and returns key; ``crash(key)`` records, then
exits 1 the first time a key is seen (it runs again on the restarted process
and returns); ``hold(key)`` records, then the first time says so on the pipe
BOXED_HOLDING names (if any) and blocks until the process is killed (it
returns when run again); ``block(key)`` records and blocks for good;
``request()`` returns the request record it got; ``big(n)`` returns a string
of n bytes; ``spin()`` loops forever; ``garbage()`` writes a
line that is not JSON; ``hog()`` allocates until it cannot and exits 3
(out of memory, as docs/boxed.md asks); ``mute()`` stops reading and writing
(no heartbeat answers) without running any request.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

RECORDS = os.environ.get("BOXED_RECORDS", os.devnull)
#: A named pipe the test reads: ``hold`` says there that it holds (its key, pid).
HOLDING = os.environ.get("BOXED_HOLDING")
lock = threading.Lock()
out = sys.stdout


def write(record: dict[str, object]) -> None:
    with lock:
        out.write(json.dumps(record) + "\n")
        out.flush()


def record(key: str) -> None:
    with open(RECORDS, "a") as f:
        f.write(f"{key} {os.getpid()}\n")


def seen(key: str) -> int:
    with open(RECORDS) as f:
        return sum(1 for line in f if line.split()[0] == key)


def run(request: dict[str, object]) -> None:
    handler, args = request["handler"], list(request["args"])  # type: ignore[call-overload]
    try:
        if handler == "note":
            record(args[0])
            value: object = args[0]
        elif handler == "crash":
            record(args[0])
            if seen(args[0]) == 1:
                os._exit(1)
            value = args[0]
        elif handler == "hold":
            record(args[0])
            if seen(args[0]) == 1:
                print(f"holding {args[0]}", file=sys.stderr, flush=True)
                if HOLDING:
                    with open(HOLDING, "w") as pipe:
                        pipe.write(f"{args[0]} {os.getpid()}\n")
                threading.Event().wait()  # until the test kills this process
            value = args[0]
        elif handler == "request":
            value = request
        elif handler == "big":
            value = "x" * int(args[0])
        elif handler == "block":
            record(args[0])
            print(f"blocking {args[0]}", file=sys.stderr, flush=True)
            threading.Event().wait()
        elif handler == "spin":
            while True:
                pass
        elif handler == "garbage":
            with lock:
                out.write("this is not JSON\n")
                out.flush()
            return
        elif handler == "hog":
            hoard = []
            try:
                while True:
                    hoard.append(bytearray(16 * 1024 * 1024))
            except MemoryError:
                hoard.clear()
                print("out of memory", file=sys.stderr, flush=True)
                os._exit(3)
        elif handler == "mute":
            time.sleep(3600)
        else:
            raise ValueError(f"no handler {handler}")
        write({"type": "reply", "id": request["id"], "value": value})
    except Exception as exc:
        write({"type": "reply", "id": request["id"],
               "error": {"type": type(exc).__name__, "message": str(exc)}})  # fmt: skip


def main() -> None:
    handlers = [
        "note",
        "request",
        "crash",
        "hold",
        "big",
        "block",
        "spin",
        "garbage",
        "hog",
        "mute",
    ]
    write({"type": "hello", "protocol": 1, "handlers": handlers, "concurrency": 4})
    for line in sys.stdin:
        request = json.loads(line)
        if request["type"] == "request":
            if request["handler"] == "mute":
                time.sleep(3600)  # the reader itself stops: no heartbeat answered
            threading.Thread(target=run, args=(request,), daemon=True).start()
        elif request["type"] == "heartbeat":
            write({"type": "heartbeat"})
        elif request["type"] == "shutdown":
            break


if __name__ == "__main__":
    main()

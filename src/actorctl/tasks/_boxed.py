"""Runs one boxed task in this process: ``python -m actorctl.tasks._boxed``.

Reads ``{"module", "function", "args", "kwargs"}`` as JSON on stdin, imports the
module, calls the task's function, and writes ``{"value": ...}`` or ``{"error":
{"type", "message"}}`` as JSON on stdout. The worker that started it kills it
when its hard time limit passes.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


def main() -> None:
    request = json.loads(sys.stdin.read())
    answer: dict[str, Any]
    try:
        if "" not in sys.path:
            sys.path.insert(0, "")
        module = importlib.import_module(request["module"])
        target = getattr(module, request["function"])
        fn = getattr(target, "fn", target)  # the Task, or the function itself
        answer = {"value": fn(*request["args"], **request["kwargs"])}
    except Exception as exc:
        answer = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()

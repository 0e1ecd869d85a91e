"""Run several ``actorctl`` command lines in one process, one after another,
each through the real entry point (``actorctl.cli.main``) with its own argv,
stdout and stderr: the Python start-up is paid once, not per command.

Reads a JSON list of argument lists on stdin; writes a JSON list of
``{"code", "out", "seconds"}`` on stdout. A command that ends with anything
but ``SystemExit`` has its traceback in ``out`` and code -1.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import traceback

from actorctl.cli import main


def run(args: list[str]) -> dict[str, object]:
    out = io.StringIO()
    started = time.monotonic()
    code: object = 0
    sys.argv = ["actorctl", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # what a user would see as a traceback
            traceback.print_exc(file=out)
            code = -1
    return {"code": code, "out": out.getvalue(), "seconds": time.monotonic() - started}


if __name__ == "__main__":
    real_stdout = sys.stdout
    results = [run(args) for args in json.load(sys.stdin)]
    real_stdout.write(json.dumps(results))

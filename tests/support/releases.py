"""The release before this checkout's code, taken from git history, for an
upgrade test that runs two releases side by side (issue 34).

actorctl has no tags yet, so the previous release is a commit: PREVIOUS, the
last merge of the stop before the one this code comes from (stop 37's
``s37-quorum2``), the first commit with everything the upgrade test's cluster
uses (three etcd members, two services nodes replicating, ``host up``) and
138 files of ``src/`` behind this checkout when it was chosen (the wire
encoding, the control answers as records, the link and outbox split).
Bump it when a release is made: the test then runs that release against the
next one.

:func:`previous_release` writes that commit's ``src/`` into a directory (``git
archive``) and compiles it there, so that a process started with PYTHONPATH
naming that ``src/`` first runs the old code (the editable install's path
comes after PYTHONPATH). Where there is no such history (no git, not a
checkout, a shallow clone without the commit) the test fails saying so and
what to do: an upgrade test that silently ran one release twice would prove
nothing.
"""

from __future__ import annotations

import compileall
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support.hosts_cluster import ROOT

__all__ = ["PREVIOUS", "previous_release"]

#: The previous release: the merge that ended stop 37 (``s37-quorum2``).
PREVIOUS = "6e56e99eeb031f469d3717d69a72c14493469c4a"


def previous_release(into: Path) -> Path:
    """Write PREVIOUS's ``src/`` under ``into`` and return that ``src/``.

    Fails the test (never skips it) where the repository's history does not
    hold PREVIOUS, naming what is missing and what to do.
    """
    git = shutil.which("git")
    if git is None:
        pytest.fail(_no_history("git is not installed"))
    found = subprocess.run(
        [git, "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if found.returncode != 0:
        pytest.fail(_no_history(found.stderr.strip() or "the commit is not there"))
    archive = subprocess.run(
        [git, "-C", str(ROOT), "archive", "--format=tar", PREVIOUS, "src"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    src = into / "src"
    # Compiled once here, not by each of the hosts' processes as they start.
    assert compileall.compile_dir(src, quiet=1), f"{src} does not compile"
    return src


def _no_history(why: str) -> str:
    return (
        f"the upgrade test runs the previous release, commit {PREVIOUS[:7]}, taken from "
        f"the git history of {ROOT}: {why}. Run it from a clone with that history "
        "(git fetch --unshallow, or a full clone), or bump PREVIOUS in "
        "tests/support/releases.py to a commit the clone holds"
    )

"""The ids of the reload requests a ``host up`` acted on outlive it (issue 34).

``SeenRequests`` keeps them in a real file beside the host's copy of the
cluster file: read back at start, without the ids whose request is past the
time window (which refuses those anyway), without torn lines, and never more
than the cap. tests/hosts/test_reload_hosts.py shows a replay refused after a
real ``host up`` restarts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actorctl.ops._host_reload import _SEEN, SeenRequests
from actorctl.ops._reload_request import REQUEST_WINDOW

NOW = 1_800_000_000.0


def test_ids_remembered_are_read_back_by_the_next_process(tmp_path: Path) -> None:
    # Given a host that acted on two requests
    path = tmp_path / ".cluster.reload-seen"
    first = SeenRequests(path, NOW)
    first.remember("one", NOW - 10)
    first.remember("two", NOW + 5)  # asked by a clock a little ahead
    # When the host starts again, a minute later
    again = SeenRequests(path, NOW + 60)
    # Then it knows both ids, in the order it saw them
    assert list(again) == ["one", "two"]
    assert "one" in again
    assert "three" not in again


def test_ids_past_the_window_and_torn_lines_are_dropped_at_start(tmp_path: Path) -> None:
    # Given a file with an id asked long ago, one recent, and a torn last line
    path = tmp_path / ".cluster.reload-seen"
    seen = SeenRequests(path, NOW)
    seen.remember("old", NOW - REQUEST_WINDOW - 1)
    seen.remember("recent", NOW - 1)
    path.write_text(path.read_text() + "torn-line-without-a-ti")
    # When it is read at start
    again = SeenRequests(path, NOW)
    # Then only the recent id is kept: the window refuses the old one itself
    assert list(again) == ["recent"]


def test_no_more_ids_than_the_cap_are_kept(tmp_path: Path) -> None:
    path = tmp_path / ".cluster.reload-seen"
    seen = SeenRequests(path, NOW)
    for number in range(_SEEN + 3):
        seen.remember(f"id-{number}", NOW)
    assert len(seen) == _SEEN
    assert "id-0" not in seen
    assert f"id-{_SEEN + 2}" in seen
    assert len(SeenRequests(path, NOW)) == _SEEN


def test_an_id_that_cannot_be_written_is_not_remembered(tmp_path: Path) -> None:
    # Given a folder that is not there (as one the host may not write in)
    path = tmp_path / "gone" / ".cluster.reload-seen"
    seen = SeenRequests(path, NOW)
    # When it remembers an id, the write fails, and the id is not taken as seen
    with pytest.raises(FileNotFoundError):
        seen.remember("one", NOW)
    assert "one" not in seen

"""The web page's task sections, Flower's views (tasks/_page.py, ops/_feeds.py),
on a real cluster (``actorctl cluster up`` in a subprocess, signed messages,
mutual TLS) and in Debian's headless chromium, as tests/ops/test_web.py drives it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from examples._cluster import running_cluster

from actorctl.cluster import load_cluster
from actorctl.cluster._http import http_get
from actorctl.tasks.worker._inspect import RECENT, HeldTask, Holdings
from tests.apps.task_app import add, always_down, app, div
from tests.support.web import CHROMIUM, CHROMIUM_ARGS, client_context, with_web

APPS = Path(__file__).resolve().parents[1] / "apps"
WAIT = 30.0
#: The rows the Controller keeps of the window of runs, in this module's cluster.
WINDOW = 20
NO_CHROMIUM = (
    "no /usr/bin/chromium: Debian's chromium is needed (apt-get install -y chromium, "
    "as .ci/run does); playwright's own browser downloads are not used"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("web-tasks")
    source = with_web(APPS / "tasks.toml", directory)
    text = source.read_text().replace("[cluster]\n", f"[cluster]\nweb_window = {WINDOW}\n", 1)
    source.write_text(text)
    with running_cluster(source, echo=False) as path:
        yield path


async def _get(cluster: Path, path: str) -> Any:
    config = load_cluster(cluster)
    assert config.web is not None
    context = client_context(cluster, operator=False)
    status, body = await http_get(*config.web, path, timeout=10.0, ssl_context=context)
    assert status == 200, (status, body)
    return json.loads(body)


@pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)
async def test_a_failing_task_shows_in_the_failed_list_with_its_error(
    cluster: Path, tmp_path: Path
) -> None:
    config = load_cluster(cluster)
    assert config.web is not None
    url = f"https://{config.web[0]}:{config.web[1]}/"
    seen = await trio.to_thread.run_sync(_browse, url, cluster, tmp_path)
    # The screenshot was taken, and is a picture of a whole page
    shot = tmp_path / "tasks-page.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000, shot.stat().st_size
    failed_id, failed_text = seen["failed"]
    # The failed list shows the task with its error, its name and arguments
    assert failed_id in failed_text
    assert "ZeroDivisionError: division by zero" in failed_text
    assert "tests.apps.task_app.div" in failed_text or "div" in failed_text
    assert "(1, 0)" in failed_text or "[1, 0]" in failed_text
    # The retried list, the recent list, the counts and the pools show the others
    assert seen["retried"] >= 2  # always_down: two retries before it gives up
    assert seen["succeeded_id"] in seen["recent"]
    assert "SUCCESS" in seen["recent"]
    counts = {r[0]: r[1:] for r in seen["counts"]}  # succeeded, failed, retried, rates
    assert counts[div.name] == ["0", "1", "0", "100 %", "100 %"], counts
    assert counts[add.name][:3] == ["1", "0", "0"], counts
    assert counts[always_down.name][1:3] == ["1", "2"], counts
    assert {"worker-1", "worker-2"} <= {r[0] for r in seen["pools"]}, seen["pools"]
    # The charts have a time axis (clock times) and units
    assert any(t.count(":") == 2 for t in seen["axis"]), seen["axis"]
    assert any(t.endswith("/s") for t in seen["axis"]), seen["axis"]
    # An idle cluster's messages done stayed still while the page watched it
    assert seen["idle_before"] == seen["idle_after"], seen
    # A search by the failed task's id finds it; its row's id shows its trace
    assert seen["search"] == [failed_id]
    assert seen["trace_rows"] >= 1
    assert not seen["errors"], seen["errors"]


def _browse(url: str, cluster: Path, tmp_path: Path) -> dict[str, Any]:
    import asyncio  # playwright runs on asyncio: in a thread of its own here

    return asyncio.run(_drive(url, cluster, tmp_path))


async def _drive(url: str, cluster: Path, tmp_path: Path) -> dict[str, Any]:
    import asyncio

    from playwright.async_api import async_playwright

    seen: dict[str, Any] = {"errors": []}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(
                ignore_https_errors=True, viewport={"width": 1400, "height": 900}
            )
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on(
                "console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None
            )
            await page.goto(url)
            await _idle(page, seen)
            # Work: a task that fails, one that is retried and gives up, one that succeeds
            ids = await asyncio.get_running_loop().run_in_executor(None, _send, cluster)
            await _lists(page, ids, seen)
            await _search_and_trace(page, ids, seen)
            await page.screenshot(path=str(tmp_path / "tasks-page.png"), full_page=True)
        finally:
            await browser.close()
    return seen


async def _idle(page: Any, seen: dict[str, Any]) -> None:
    """Once the pools show, an idle cluster's messages done over three updates."""
    await page.wait_for_function(
        "document.querySelectorAll('#tasks-pools tbody tr').length >= 4", timeout=20000
    )
    version = await _version(page)
    seen["idle_before"] = await _done(page)
    await page.wait_for_function(f"{_VERSION} >= {version + 3}", timeout=20000)
    seen["idle_after"] = await _done(page)


def _rows_of(table: str, task_id: str) -> str:
    return (
        f"[...document.querySelectorAll('{table} tbody tr')]"
        f".filter(r => r.textContent.includes('{task_id}'))"
    )


async def _lists(page: Any, ids: dict[str, str], seen: dict[str, Any]) -> None:
    """The failed, retried and recent lists, the counts, the pools and the axes."""
    failed = _rows_of("#tasks-failed", ids["div"])
    await page.wait_for_function(
        f"{failed}.some(r => r.textContent.includes('ZeroDivisionError'))", timeout=15000
    )
    seen["failed"] = (ids["div"], await page.evaluate(f"{failed}[0].textContent"))
    retried = _rows_of("#tasks-retried", ids["always_down"])
    await page.wait_for_function(f"{retried}.length >= 2", timeout=15000)
    seen["retried"] = await page.evaluate(f"{retried}.length")
    await page.wait_for_function(f"{_rows_of('#tasks-recent', ids['add'])}.length", timeout=15000)
    seen["succeeded_id"] = ids["add"]
    seen["recent"] = await page.evaluate("document.querySelector('#tasks-recent').textContent")
    await page.wait_for_function(  # its failure rate over the last minute
        f"{_rows_of('#tasks-counts', div.name)}.some(r => r.children[4].textContent === '100 %')",
        timeout=15000,
    )
    await page.wait_for_function(  # each task's runs and failure rate over time, drawn
        "document.querySelectorAll('#tasks-rate polyline').length >= 3"
        " && document.querySelectorAll('#tasks-failures polyline').length >= 3",
        timeout=15000,
    )
    seen["counts"] = [r.split("\t") for r in await _cells(page, "#tasks-counts")]
    seen["pools"] = [r.split("\t") for r in await _cells(page, "#tasks-pools")]
    seen["axis"] = await page.evaluate(
        "[...document.querySelectorAll('#rate text, #tasks-rate text')].map(t => t.textContent)"
    )


async def _search_and_trace(page: Any, ids: dict[str, str], seen: dict[str, Any]) -> None:
    """Search by the failed task's id; then its trace, from its row's id."""
    await page.fill("#tasks-q", ids["div"])
    await page.click("#tasks-search button")
    await page.wait_for_function(
        "document.querySelector('#tasks-found').textContent.includes('found')", timeout=10000
    )
    seen["search"] = await page.evaluate(
        "[...new Set([...document.querySelectorAll('#tasks-results a.id')]"
        ".map(a => a.textContent))]"
    )
    await page.click(f"#tasks-failed a.id:text('{ids['div']}')")
    await page.wait_for_function(
        "document.querySelectorAll('#trace tbody tr').length >= 1", timeout=15000
    )
    seen["trace_rows"] = await page.evaluate("document.querySelectorAll('#trace tbody tr').length")


_VERSION = (
    "Number((document.querySelector('#status').textContent.match(/update (\\d+)/) || [0, 0])[1])"
)


async def _version(page: Any) -> int:
    return int(await page.evaluate(_VERSION))


async def _done(page: Any) -> list[str]:
    value: list[str] = await page.evaluate(
        "[...document.querySelectorAll('#nodes .done')].map(e => e.dataset.value)"
    )
    return value


async def _cells(page: Any, table: str) -> list[str]:
    rows: list[str] = await page.evaluate(
        f"[...document.querySelectorAll('{table} tbody tr')]"
        ".map(r => [...r.children].map(c => c.textContent).join('\\t'))"
    )
    return rows


def _send(cluster: Path) -> dict[str, str]:
    """Run the three tasks to their end, from a client (in this thread's own trio run)."""
    return trio.run(_tasks, cluster)


async def _tasks(cluster: Path) -> dict[str, str]:
    with trio.fail_after(WAIT):
        async with app.aconnect(cluster):
            failing = await div.adelay(1, 0)
            with pytest.raises(Exception, match="division by zero"):
                await failing.aget(timeout=WAIT)
            retried = await always_down.adelay()
            with pytest.raises(Exception, match=r"ConnectionError|gave up"):
                await retried.aget(timeout=WAIT)
            ok = await add.adelay(2, 3)
            assert await ok.aget(timeout=WAIT) == 5
    return {"div": str(failing.id), "always_down": str(retried.id), "add": str(ok.id)}


async def _snapshot_until(cluster: Path, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first snapshot of the page's ``/events`` stream for which ``done`` holds."""
    config = load_cluster(cluster)
    assert config.web is not None
    host, port = config.web
    context = client_context(cluster, operator=False)
    stream = trio.SSLStream(await trio.open_tcp_stream(host, port), context, server_hostname=host)
    try:
        await stream.send_all(f"GET /events HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        buffer = b""
        while True:
            chunk = await stream.receive_some(65536)
            assert chunk, "the page's event stream ended"
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        snapshot: dict[str, Any] = json.loads(line[6:])
                        if done(snapshot):
                            return snapshot
    finally:
        await trio.aclose_forcefully(stream)


async def test_the_controller_keeps_a_window_of_the_last_runs(cluster: Path) -> None:
    with trio.fail_after(WAIT):
        # Given more runs than the window holds
        sent = WINDOW + 10
        async with app.aconnect(cluster):
            results = [await add.adelay(i, 1000) for i in range(sent)]
            assert [await r.aget(timeout=WAIT) for r in results] == [i + 1000 for i in range(sent)]
        last = str(results[-1].id)
        # When the page's snapshot (its server-sent events) holds the last one
        state = await _snapshot_until(
            cluster, lambda s: any(r["id"] == last for r in s["app"]["tasks"]["newest"])
        )
        found = await _get(cluster, f"/api/feed/tasks?q={last}")
    # Then the Controller keeps the window's last rows only
    tasks = state["app"]["tasks"]
    assert tasks["window"] == WINDOW
    assert tasks["kept"] == WINDOW
    (row,) = found["rows"]
    assert row["name"] == add.name
    assert row["state"] == "SUCCESS"
    assert row["result"] == repr(sent - 1 + 1000)
    assert row["args"] == repr([sent - 1, 1000])
    assert row["node"] in {"worker-1", "worker-2"}
    assert row["runtime"] >= 0
    # and a search by name finds only what the window holds, newest first
    by_name = await _get(cluster, f"/api/feed/tasks?q={add.name}&limit=100")
    assert 0 < len(by_name["rows"]) <= WINDOW
    finished = [r["finished"] for r in by_name["rows"]]
    assert finished == sorted(finished, reverse=True)


async def test_the_page_answers_an_unknown_window_and_a_bad_limit_with_an_error(
    cluster: Path,
) -> None:
    config = load_cluster(cluster)
    assert config.web is not None
    context = client_context(cluster, operator=False)
    with trio.fail_after(WAIT):
        status, body = await http_get(
            *config.web, "/api/feed/nope?q=x", timeout=10.0, ssl_context=context
        )
        assert status == 404
        assert "no window 'nope'" in json.loads(body)["error"]
        status, body = await http_get(
            *config.web, "/api/feed/tasks?limit=many", timeout=10.0, ssl_context=context
        )
        assert status == 400
        assert "limit='many'" in json.loads(body)["error"]


def test_a_node_keeps_its_last_runs_and_answers_from_a_cursor() -> None:
    holdings = Holdings(clock_start=0.0)
    held = HeldTask("t", "job", [1], {}, "w", "celery", 0.0, 0.0)
    for i in range(RECENT + 5):
        holdings.end(held, "SUCCESS", i, 0.001, 0, float(i))
    # The window holds the last RECENT runs only
    assert len(holdings.ended) == RECENT
    first = holdings.recent(None)
    assert first["rows"][0]["result"] == "5"
    # An answer's cursor asks for what came after it, and only that
    rest = holdings.recent(first["cursor"])
    assert rest["rows"][0]["seq"] == first["rows"][-1]["seq"] + 1
    holdings.end(held, "FAILURE", ZeroDivisionError("division by zero"), 0.002, 1, 9e9)
    cursor = rest["cursor"]
    while True:  # page through to the end
        answer = holdings.recent(cursor)
        if not answer["rows"]:
            break
        cursor, last = answer["cursor"], answer["rows"][-1]
    assert last["state"] == "FAILURE"
    assert last["error"] == "ZeroDivisionError: division by zero"
    assert last["result"] is None
    assert last["retries"] == 1
    # A cursor of another incarnation of the node starts from the oldest kept
    assert holdings.recent(["another-run", 10**9])["rows"][0]["result"] == "6"

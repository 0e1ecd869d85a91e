"""The etcd client and leader election, against a real etcd (Debian's etcd-server).

Each test runs a real etcd member on 127.0.0.1 (tests/support/etcd_server.py), keys under
a prefix of its own. Waits are on events (a watch's delete, a leader's block
entered), each bounded by ``trio.fail_after``; no test sleeps to synchronise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._etcd_data import Compare, Get, Put
from actorctl.etcd._etcd_wire import EtcdCompacted, EtcdError, EtcdUnavailable
from tests.support.etcd_server import EtcdServer, running_etcd
from tests.support.harness import free_port


@pytest.fixture
def tls_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd that serves its clients over TLS only (a trustme CA's certificate)."""
    with running_etcd(tmp_path, tls=True) as server:
        yield server


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return f"/test/{request.node.name}/"


async def _wait_for_delete(client: EtcdClient, key: str, revision: int) -> int:
    """Wait until ``key`` is deleted (a change after ``revision``): the delete's revision."""
    async with client.watch(key, start_revision=revision + 1) as watch:
        async for event in watch:
            if event.kind == "delete":
                return event.mod_revision
    raise AssertionError("the watch ended")


# -- keys --------------------------------------------------------------------------------


async def test_keys_are_put_read_listed_by_prefix_and_deleted(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    with trio.fail_after(10):
        # Given keys under a prefix, and one whose name merely starts like it
        first = await client.put(prefix + "a", b"1")
        second = await client.put(prefix + "b", "two")
        await client.put(prefix[:-1] + "x", b"outside")

        # Then each reads back with its revisions, and the prefix lists exactly its keys
        a = await client.get(prefix + "a")
        assert a is not None
        assert (a.value, a.create_revision, a.mod_revision) == (b"1", first, first)
        assert second > first
        assert await client.get(prefix + "missing") is None
        listed = await client.get_prefix(prefix)
        assert [(kv.key, kv.value) for kv in listed.kvs] == [
            (prefix + "a", b"1"),
            (prefix + "b", b"two"),
        ]
        assert listed.revision >= second

        # When one key is written again and the prefix is deleted
        third = await client.put(prefix + "a", b"3")
        again = await client.get(prefix + "a")
        assert again is not None
        assert (again.create_revision, again.mod_revision, again.version) == (first, third, 2)
        assert await client.delete(prefix, prefix=True) == 2

        # Then the prefix is empty and the key outside it is still there
        assert (await client.get_prefix(prefix)).kvs == ()
        assert await client.get(prefix[:-1] + "x") is not None
        assert await client.delete(prefix + "a") == 0


async def test_a_transaction_runs_one_branch_and_put_if_absent_has_one_winner(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    key = prefix + "role"
    with trio.fail_after(10):
        # Given a key created if absent, under a lease
        lease = await client.grant(10)
        won, held = await client.put_if_absent(key, b"first", lease=lease)
        assert won
        assert (held.value, held.lease) == (b"first", lease)

        # Then another caller loses and learns the holder; the same caller again
        # (its answer lost, say) is recognised by its lease
        lost, holder = await client.put_if_absent(key, b"second")
        assert not lost
        assert (holder.value, holder.create_revision) == (b"first", held.create_revision)
        assert (await client.put_if_absent(key, b"first", lease=lease))[0]

        # And a transaction guarded by the key's create revision runs its success
        # branch only while that key lives
        guard = Compare.created(key, held.create_revision)
        done = await client.txn([guard], [Put(prefix + "state", b"s1"), Get(key)])
        assert done.succeeded
        assert [kv.value for kv in done.ranges[0]] == [b"first"]
        await client.revoke(lease)
        refused = await client.txn([guard], [Put(prefix + "state", b"s2")], [Get(key)])
        assert not refused.succeeded
        assert refused.ranges == ((),)
        state = await client.get(prefix + "state")
        assert state is not None
        assert state.value == b"s1"


# -- leases ------------------------------------------------------------------------------


async def test_a_key_under_a_lease_is_deleted_when_the_lease_is_revoked(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    key = prefix + "node"
    with trio.fail_after(10):
        # Given a key under a lease that is kept alive
        lease = await client.grant(10)
        revision = await client.put(key, b"addr", lease=lease)
        assert await client.keepalive(lease) == 10

        # When the lease is revoked
        await client.revoke(lease)

        # Then the key is deleted, the lease is gone, and revoking again is fine
        assert await _wait_for_delete(client, key, revision) > revision
        assert await client.get(key) is None
        assert await client.keepalive(lease) == 0
        assert await client.time_to_live(lease) == 0
        await client.revoke(lease)
        # And a key cannot be put under it any more, etcd says why
        with pytest.raises(EtcdError, match="lease not found"):
            await client.put(key, b"addr", lease=lease)


async def test_a_key_under_a_lease_is_deleted_when_the_lease_expires(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    key = prefix + "node"
    # Given a key under a lease of one second that nobody keeps alive
    lease = await client.grant(1)
    revision = await client.put(key, b"addr", lease=lease)
    start = trio.current_time()

    # Then etcd deletes it once the lease runs out (and not before a second)
    with trio.fail_after(5):
        await _wait_for_delete(client, key, revision)
    assert trio.current_time() - start > 0.5
    assert await client.keepalive(lease) == 0


# -- watches -----------------------------------------------------------------------------


async def test_a_watch_sees_puts_and_deletes_in_order_and_resumes_from_its_revision(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    with trio.fail_after(10):
        # Given a watch of the prefix, from now
        async with client.watch_prefix(prefix) as watch:
            # When keys are put, changed and deleted
            await client.put(prefix + "a", b"1")
            await client.put(prefix + "b", b"2")
            await client.put(prefix + "a", b"3")
            await client.delete(prefix + "b")
            await client.put(prefix[:-1] + "x", b"outside")

            # Then the watch sees each change under the prefix, in order
            seen = [await anext(watch) for _ in range(4)]
            resume = watch.next_revision
        assert [(e.kind, e.key, e.value) for e in seen] == [
            ("put", prefix + "a", b"1"),
            ("put", prefix + "b", b"2"),
            ("put", prefix + "a", b"3"),
            ("delete", prefix + "b", b""),
        ]
        assert [e.mod_revision for e in seen] == sorted({e.mod_revision for e in seen})
        assert resume == seen[-1].mod_revision + 1

        # When more changes happen while nobody watches
        await client.put(prefix + "c", b"4")
        await client.delete(prefix + "a")

        # Then a watch from the revision the first one reached sees exactly them
        async with client.watch_prefix(prefix, resume) as watch:
            missed = [await anext(watch) for _ in range(2)]
        assert [(e.kind, e.key) for e in missed] == [
            ("put", prefix + "c"),
            ("delete", prefix + "a"),
        ]

        # And a watch from the first revision replays the whole history
        async with client.watch_prefix(prefix, seen[0].mod_revision) as watch:
            history = [await anext(watch) for _ in range(6)]
        assert history == seen + missed


async def test_a_quiet_watch_opens_a_new_stream_and_misses_nothing(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    with trio.fail_after(10):
        # Given a watch that checks its connection after 0.2 s of quiet
        async with client.watch_prefix(prefix, idle=0.2) as watch:
            with trio.move_on_after(0.7):  # several quiet periods pass
                await anext(watch)
                raise AssertionError("no change was made")
            # When a change comes after that
            await client.put(prefix + "late", b"1")
            # Then it is seen once
            event = await anext(watch)
        assert (event.kind, event.key) == ("put", prefix + "late")


async def test_a_watch_from_a_compacted_revision_says_to_read_again(
    etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    with trio.fail_after(10):
        # Given a history compacted up to a revision
        old = await client.put(prefix + "a", b"1")
        now = await client.put(prefix + "a", b"2")
        etcd.post("/v3/kv/compaction", {"revision": str(now)})

        # Then watching from before it raises EtcdCompacted, naming where history starts
        with pytest.raises(EtcdCompacted, match="read the keys") as caught:
            async with client.watch_prefix(prefix, old) as watch:
                await anext(watch)
        assert caught.value.compact_revision == now


# -- failures ----------------------------------------------------------------------------


async def test_a_client_of_an_endpoint_where_nothing_listens_raises_within_its_timeout() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = EtcdClient([dead], timeout=1)
    start = trio.current_time()
    with pytest.raises(EtcdUnavailable, match=rf"tried {dead} \(Connection refused\)"):
        await client.get("/k")
    assert trio.current_time() - start < 1.5


async def test_an_endpoint_that_never_answers_costs_its_share_then_the_next_one_answers(
    etcd: EtcdServer, prefix: str
) -> None:
    # Given an endpoint that accepts connections and never answers, listed first
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    silent = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
    async with listener, trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, _never_answer, [listener])
        with trio.fail_after(5):
            # Then a call alone against it raises within its timeout, naming it
            with pytest.raises(EtcdUnavailable, match="no answer within"):
                await EtcdClient([silent], timeout=0.5).get("/k")
            # And with the live endpoint next, a call is answered within one timeout
            client = EtcdClient([silent, etcd.url], timeout=2)
            start = trio.current_time()
            await client.put(prefix + "k", b"1")
            assert trio.current_time() - start < 2
            # And the next call goes to the endpoint that answered, at once
            start = trio.current_time()
            assert await client.get(prefix + "k") is not None
            assert trio.current_time() - start < 0.5
        nursery.cancel_scope.cancel()


async def _never_answer(stream: trio.SocketStream) -> None:
    async with stream:
        await trio.sleep_forever()


async def test_etcd_killed_and_restarted_fails_calls_and_breaks_watches_then_works_again(
    own_etcd: EtcdServer, prefix: str
) -> None:
    client = EtcdClient([own_etcd.url], timeout=1)
    with trio.fail_after(20):
        await client.put(prefix + "a", b"1")
        # Given a watch
        async with client.watch_prefix(prefix) as watch:
            # When etcd is killed
            own_etcd.kill()
            # Then the watch breaks, saying where to watch again from
            with pytest.raises(EtcdUnavailable, match="watch again from revision"):
                await anext(watch)
            resume = watch.next_revision
        # And a call fails within its timeout, naming the endpoint
        start = trio.current_time()
        with pytest.raises(EtcdUnavailable, match=own_etcd.url):
            await client.put(prefix + "b", b"2")
        assert trio.current_time() - start < 1.5

        # When etcd is started again on its data
        await trio.to_thread.run_sync(own_etcd.start)

        # Then calls work, what was written is there, and a watch resumes
        a = await client.get(prefix + "a")
        assert a is not None
        assert a.value == b"1"
        async with client.watch_prefix(prefix, resume) as watch:
            await client.put(prefix + "b", b"2")
            event = await anext(watch)
        assert (event.kind, event.key) == ("put", prefix + "b")


async def test_an_etcd_that_asks_for_client_certificates_takes_a_client_with_one_only(
    tmp_path: Path, prefix: str
) -> None:
    with running_etcd(tmp_path, client_auth=True) as etcd:
        files = etcd.client_tls
        assert files is not None
        with trio.fail_after(10):
            # Given etcd run with --client-cert-auth, a client with a certificate of its CA works
            client = EtcdClient(
                [etcd.url], timeout=2, ca_file=files.ca, cert_file=files.cert, key_file=files.key
            )
            await client.put(prefix + "k", b"v")
            assert await client.get(prefix + "k") is not None
            # And one without a certificate is refused
            with pytest.raises(EtcdUnavailable):
                await EtcdClient([etcd.url], timeout=2, ca_file=files.ca).get(prefix + "k")


async def test_a_client_reaches_etcd_over_tls_with_its_ca(
    tls_etcd: EtcdServer, prefix: str
) -> None:
    assert tls_etcd.tls is not None
    with trio.fail_after(10):
        # Given the CA that signed etcd's certificate, a client works
        client = EtcdClient([tls_etcd.url], timeout=2, ca_file=tls_etcd.tls.ca)
        await client.put(prefix + "k", b"v")
        assert await client.get(prefix + "k") is not None
        # Without it (the system's CAs), it refuses etcd, saying why
        with pytest.raises(EtcdUnavailable, match="TLS failed"):
            await EtcdClient([tls_etcd.url], timeout=2).get(prefix + "k")


# -- a user, when etcd's auth is enabled ---------------------------------------------------


async def test_a_user_given_before_etcds_auth_is_enabled_is_not_in_the_way(
    etcd: EtcdServer, prefix: str
) -> None:
    # Given an etcd whose auth is not enabled (yet), and a client given a user
    client = EtcdClient([etcd.url], timeout=2, user="actorctl", password="s3cret")
    with trio.fail_after(10):
        # Then it reads and writes as any client (etcd has no token to give)
        await client.put(prefix + "a", b"1")
        a = await client.get(prefix + "a")
    assert a is not None
    assert a.value == b"1"


async def test_a_user_that_may_use_only_actorctls_keys_holds_a_key_under_a_lease_and_watches(
    own_etcd: EtcdServer,
) -> None:
    # Given an etcd whose auth is enabled, and a user that may read and write
    # /actorctl/ only (as docs/deploy.md makes it)
    own_etcd.enable_auth("s3cret")
    client = EtcdClient([own_etcd.url], timeout=2, user="actorctl", password="s3cret")
    prefix = "/actorctl/auth-test/"
    with trio.fail_after(20):
        # Then it does all a node does there: a key under a lease, a transaction,
        # a watch, the lease revoked
        lease = await client.grant(5)
        won, _ = await client.put_if_absent(prefix + "holder", "me", lease=lease)
        assert won
        async with client.watch_prefix(prefix) as watch:
            await client.revoke(lease)
            event = await anext(watch)
        assert (event.kind, event.key) == ("delete", prefix + "holder")
        # ... and nothing outside its prefix
        with pytest.raises(EtcdError, match="permission denied"):
            await client.put("/elsewhere", b"x")


async def test_with_auth_enabled_a_user_gets_a_token_and_a_new_one_after_etcd_restarts(
    own_etcd: EtcdServer, prefix: str
) -> None:
    # Given an etcd whose auth is enabled
    own_etcd.enable_auth("s3cret")
    user = EtcdClient([own_etcd.url], timeout=2, user="root", password="s3cret")
    with trio.fail_after(20):
        # Then the configured user reads, writes and watches
        await user.put(prefix + "a", b"1")
        async with user.watch_prefix(prefix) as watch:
            await user.put(prefix + "b", b"2")
            event = await anext(watch)
        assert (event.kind, event.key) == ("put", prefix + "b")
        # ... but a client without a user is refused, told what to give
        anonymous = EtcdClient([own_etcd.url], timeout=2)
        with pytest.raises(EtcdError, match=r"auth is enabled: give a user.*\[etcd\] user"):
            await anonymous.get(prefix + "a")
        # ... and one with a wrong password is refused, naming its user
        wrong = EtcdClient([own_etcd.url], timeout=2, user="root", password="guess")
        with pytest.raises(EtcdError, match=r"etcd refused user 'root'.*password_file"):
            await wrong.get(prefix + "a")

        # When etcd restarts (the tokens it gave are gone with it)
        own_etcd.kill()
        await trio.to_thread.run_sync(own_etcd.start)
        # Then the user gets a new token and goes on, as if nothing happened
        a = await user.get(prefix + "a")
        assert a is not None
        assert a.value == b"1"

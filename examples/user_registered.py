"""The design draft's domain event, on actorctl: UserRegistered.

An event is a class; services subscribe tasks to it; publishing it delivers it
once to every subscribing service (the emails service and the CRM here), and
once only within a service however many instances it runs (each service below
runs two). Run it with ``python -m examples.user_registered``: it starts the
cluster that examples/user_registered.toml describes (a services node with the
event hub, an ``emails`` node and a ``crm`` node), publishes three events as the
draft does, asks each service what it did, and stops the cluster.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs

from actorctl import App

app = App("accounts")
app.pool("emails", concurrency=4)
app.pool("crm", concurrency=4)


@app.event
@attrs.define
class UserRegistered:
    user_id: int
    email: str


# What each service did, in the process that runs it (both instances of a
# service live in one node process here, so this is the whole service's record).
_done: list[str] = []
_changed = threading.Condition()


def _record(what: str) -> None:
    with _changed:
        _done.append(what)
        _changed.notify_all()


@app.task(pool="emails")
def send_welcome_email(event: UserRegistered) -> None:
    _record(f"welcome email to {event.email}")


@app.task(pool="crm")
def add_to_crm(event: UserRegistered) -> None:
    _record(f"CRM contact for user {event.user_id}")


@app.task(pool="emails", name="accounts.emails_done")
def emails_done(at_least: int) -> list[str]:
    """What the emails service did, once it did at least that much (10 s at most)."""
    with _changed:
        _changed.wait_for(lambda: len(_done) >= at_least, timeout=10)
        return list(_done)


@app.task(pool="crm", name="accounts.crm_done")
def crm_done(at_least: int) -> list[str]:
    """What the CRM service did, once it did at least that much (10 s at most)."""
    with _changed:
        _changed.wait_for(lambda: len(_done) >= at_least, timeout=10)
        return list(_done)


UserRegistered.subscribe(send_welcome_email)  # type: ignore[attr-defined]
UserRegistered.subscribe(add_to_crm)  # type: ignore[attr-defined]


def main() -> None:
    from examples._cluster import running_cluster

    users = [(1, "ada@example.com"), (2, "grace@example.com"), (3, "alan@example.com")]
    with running_cluster(Path(__file__).with_suffix(".toml")) as cluster, app.connect(cluster):
        for user_id, email in users:
            UserRegistered.delay(user_id=user_id, email=email)  # type: ignore[attr-defined]
        print(f"published {len(users)} UserRegistered events")
        for service, done in (("emails", emails_done), ("crm", crm_done)):
            record = done.delay(len(users)).get(timeout=20)
            assert len(record) == len(users), record  # once per service, no more
            for line in sorted(record):
                print(f"  {service}: {line}")
    print("cluster stopped")


if __name__ == "__main__":
    main()

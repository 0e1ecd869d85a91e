"""What a peer's connection reports, and what the peer does with it: the
settlement of what it sent (accepted, refused, or given back unrun to be sent
again), credit and drain on its sender links, the peer's answer to its reply
link, and the end of the connection (what was left unsettled waits for the next
one). The sending side and the connection's life are ``_peer.py``; the events
come from the ``Engine`` (``cluster/link/_engine.py``), as raw proton pointers on
the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import trio
from proton import Condition, Delivery, Endpoint, Link

from ....mailbox import ACCEPTED, NOT_FOUND, Envelope, Outcome
from .. import _raw as raw
from .._engine import Engine, EngineHandler
from .._pending import OutLink, PeerSettings, Pending
from .._reply_auth import ReplyCheck, certificate_names
from .._reply_claims import REPLY_CAPABILITY
from ._given_back import GivenBack, given_back
from ._peer_dial import Dialer
from ._unsettled import UnsettledBytes

__all__ = ["PeerEvents", "drain_if_idle"]

ACCEPTED_STATE: Final = raw.ACCEPTED
MODIFIED: Final = raw.MODIFIED
_STATES: Final[dict[int, str]] = {
    raw.ACCEPTED: "accepted",
    raw.REJECTED: "rejected",
    raw.MODIFIED: "modified",
    raw.RELEASED: "released",
}
lib = raw.lib
_delivery_link = lib.pn_delivery_link
_is_receiver = lib.pn_link_is_receiver
_remote_settled = lib.pn_delivery_settled
_remote_state = lib.pn_delivery_remote_state
_settle_delivery = lib.pn_delivery_settle
_link_credit = lib.pn_link_credit
remote_condition = raw.remote_condition


class PeerEvents(EngineHandler):
    """The event handlers of a ``Peer`` (``_peer.py``), the one class that
    derives from it: the state they read and change is the peer's, set up by
    ``Peer.__init__`` and declared here."""

    settings: PeerSettings
    name: str
    engine: Engine | None
    dialer: Dialer[Engine]
    unsettled: UnsettledBytes
    given_back: GivenBack
    _links: dict[str, OutLink]
    _outs: dict[Any, OutLink]
    _resend: list[Pending]
    _ready: trio.Event
    _ready_now: bool  # _ready.is_set(), kept beside it: a send reads it with no call
    _linked: trio.Event
    _linked_once: bool
    _reattach: bool
    _reply_receiver: Link | None
    _reply_refusal: tuple[str, str] | None
    _replies: ReplyCheck
    _on_reply_document: Callable[[Envelope, str], None]
    _on_state: Callable[[str, bool, str | None], None] | None

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        if link.state & Endpoint.LOCAL_UNINIT:
            # We accept no links from a peer we connected to: refuse politely.
            link.open()
            link.condition = Condition("amqp:not-allowed", "this connection only carries replies")
            link.close()
            engine.wake()
            return
        if link.name == f"{self.settings.node_id}-replies" and not link.state & link.REMOTE_CLOSED:
            # TLS is done by now: replies signed ed25519 must be by its identity.
            self._replies.connected(certificate_names(engine)[1])
            self._linked.set()
            self._linked_once = True

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        out = self._outs.get(link._impl)
        if out is None:
            if link == self._reply_receiver:
                # Why, for the error a send gets if the connection ends for it.
                condition = link.remote_condition
                if condition is not None and not self._linked_once:
                    self._reply_refusal = (str(condition.name), str(condition.description or ""))
                self._replies.link_closed(link)
                self._reply_refused(engine)
            return
        condition = link.remote_condition
        out.failure = Outcome(
            "rejected",
            condition.name if condition else NOT_FOUND,
            condition.description
            if condition
            else f"{self.name} closed the link to {link.target.address!r}",
        )
        path = out.sender.target.address or ""
        if self._links.get(path) is out:
            del self._links[path]
        out.lot.unpark_all()

    def _reply_refused(self, engine: Engine) -> None:
        """The peer refused the reply link. A peer that takes reply proofs holds
        this node's address for nobody else: go on (each message gets its own
        outcome, such as ``actorctl:unknown-key``) and attach it again before
        the next send. Any other may have given the address to another
        identity: send nothing on this connection; the next one tries again."""
        offered = engine.connection.remote_offered_capabilities or ()
        if self.settings.identity is None or REPLY_CAPABILITY not in offered:
            engine.connection.close()
            return
        self._reply_receiver = None
        self._reattach = True
        if not self._linked.is_set():
            self._replies.connected(certificate_names(engine)[1])
            self._linked.set()
            self._linked_once = True

    def on_link_flow(self, engine: Engine, link: Any) -> None:
        out = self._outs.get(link)
        if out is None:
            return
        # Drain before waking anyone: a sender woken by this credit has not run
        # yet, so the lot looks empty, and draining now would take its credit away.
        drain_if_idle(engine, out)
        credit = _link_credit(link)
        if credit > 0:
            out.lot.unpark(count=credit)

    def on_delivery(self, engine: Engine, delivery: Any) -> None:
        link = _delivery_link(delivery)
        # Membership tests and indexing, not calls (get, pop, pn_link_is_receiver):
        # this runs for every settlement and every reply. A link of ``_outs``
        # is one of its senders; any other is asked.
        outs = self._outs
        if link in outs:
            unsettled: dict[Any, Pending] | None = outs[link].unsettled
        elif _is_receiver(link):
            # A reply, authenticated first (docs/protocol.md §8.1): what fails
            # is logged and dropped. (Inline: this runs for every reply.)
            envelope = self._replies.receive(engine, link, delivery)
            if envelope is not None:
                self._on_reply_document(envelope, self.name)
            return
        else:
            unsettled = None  # a sender link it no longer keeps
        if not _remote_settled(delivery):
            return
        if unsettled is None or delivery not in unsettled:
            _settle_delivery(delivery)
            return
        pending = unsettled[delivery]
        del unsettled[delivery]
        state = _remote_state(delivery)
        if state == ACCEPTED_STATE:
            _settle_delivery(delivery)
            self.unsettled.free(pending)
            pending.resolve(ACCEPTED)
            return
        name, description = remote_condition(delivery)
        if name is None and state == MODIFIED:
            wrapped = Delivery.wrap(delivery)  # type: ignore[no-untyped-call]
            notes: dict[Any, Any] = dict(wrapped.remote.annotations or {})
            name = str(notes.get("actorctl-condition") or "amqp:modified")
            description = str(
                notes.get("actorctl-description") or "the receiver could not handle it"
            )
        _settle_delivery(delivery)
        outcome = Outcome(_STATES.get(state, "released"), name, description)  # type: ignore[arg-type]
        if pending.again and given_back(outcome) and self.given_back.take(pending, outcome):
            return  # a plain tell the peer gave back unrun: sent again later
        self.unsettled.free(pending)
        pending.resolve(outcome)

    def on_closed(self, engine: Engine) -> None:
        if self.engine is engine:
            # A fresh event only for one that was set: senders waiting on one
            # that never was (a connection that closed before it was ready)
            # must be woken by the next connection.
            if self._ready.is_set():
                self._ready = trio.Event()
                self._ready_now = False
            self._linked = trio.Event()
            self.dialer.closed()
            if self._on_state is not None:
                self._on_state(self.name, False, None)
        for path, out in list(self._links.items()):
            if out.engine is engine:
                del self._links[path]
                out.lot.unpark_all()
        # Deliveries this connection never saw settled go out again on the next one.
        for link, out in list(self._outs.items()):
            if out.engine is engine:
                del self._outs[link]
                for pending in out.unsettled.values():
                    self.unsettled.free(pending)  # counted again when sent again
                self._resend.extend(p for p in out.unsettled.values() if p.outcome is None)
                out.unsettled.clear()


def drain_if_idle(engine: Engine, out: OutLink) -> None:
    """At a flow from the receiver: note whether it asks for its unused credit
    back (AMQP drain, ``OutLink.draining``) and if so, give back what no
    waiting sender is about to use. (A send calls it only while that is so.)"""
    link = out.link
    out.draining = draining = bool(lib.pn_link_get_drain(link))
    if draining and not len(out.lot) and _link_credit(link) > 0:
        lib.pn_link_drained(link)
        engine.wake()

"""The incoming side: what a node does with a connection a peer opened.

A peer attaches a sender link whose target is an actor's name; the node answers
with credit from that actor's mailbox. A peer attaches a receiver link (dynamic,
or with a ``$reply/...`` source) to get replies, or one whose source is
``$identity`` to read the node's container id (``_identity.py``). Every delivery
is decoded, queued in the actor's mailbox, and settled when the actor has
finished with it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio
from proton import Endpoint, Link

from ..._errors import WireFormatError
from ..._log import log
from ...actors import ActorCell
from ...mailbox import (
    DECODE_ERROR,
    FOREIGN_REPLY_TO,
    NOT_FOUND,
    ORIGIN_KEY,
    OVER_CREDIT,
    SESSION_ADDRESS,
    STOPPING,
    AuthError,
    Outcome,
    UnsignableMessage,
    Verified,
    Verifier,
    authenticate,
    canonical_of,
    decode,
    from_sections,
    read_message,
    to_ms,
)
from ._credit import CreditKeeper, InboxCredit
from ._engine import Engine, EngineHandler
from ._identity import IDENTITY_ADDRESS, NOT_ALLOWED, IdentityLinks, read_only
from ._limits import ConnectionLimits, Limits
from ._raw import lib, recv
from ._reply_auth import UNAUTHORIZED, ReplySigning, certificate_names
from ._reply_claims import REPLY_PREFIX, reply_address_refusal, reply_to_refusal
from ._reply_routes import ReplyRoutes
from ._starting import StartingLinks
from ._verdicts import refuse as _refuse
from ._verdicts import refuse_delivery as _refuse_delivery
from ._verdicts import settle as _settle

__all__ = ["InboundHandler", "actor_name"]

_delivery_link = lib.pn_delivery_link
_is_receiver = lib.pn_link_is_receiver
_readable = lib.pn_delivery_readable
_partial = lib.pn_delivery_partial
_pending = lib.pn_delivery_pending
_settled = lib.pn_delivery_settled
_settle_delivery = lib.pn_delivery_settle
_link_credit = lib.pn_link_credit
_link_flow = lib.pn_link_flow

_SESSION_CREDIT: Final = 4


def actor_name(target: str | None) -> str:
    """The actor name in a link target: ``name``, ``/name`` or ``amqp://h:p/name``."""
    if not target:
        return ""
    if "://" in target:
        target = target.split("://", 1)[1].partition("/")[2]
    return target.lstrip("/")


@final
class InboundHandler(EngineHandler):
    """Events of one connection that a peer opened to this node.

    Args:
        node_name, node_id: the node's name (for errors) and container id.
        cells: the node's actors, by name.
        verifier: authenticates its messages (its sessions die with it); None: no keys.
        routes: where the reply links that callers attach are recorded.
        signing: how the replies sent on this connection are signed (it learns
            of the sessions opened here); None: unsigned.
        keeper: shares each actor's credit fairly among its links.
        limits: the node's bounds on a connection's links and messages.
        starting: whether the node's actors have started; until then a link
            to an actor not hosted yet is held, not refused (``_starting.py``).
            None: refused at once.
    """

    def __init__(
        self,
        node_name: str,
        node_id: str,
        cells: Mapping[str, ActorCell],
        verifier: Verifier | None,
        routes: ReplyRoutes,
        *,
        signing: ReplySigning | None = None,
        keeper: CreditKeeper | None = None,
        limits: Limits | None = None,
        starting: StartingLinks | None = None,
    ) -> None:
        self._node_name = node_name
        self._node_id = node_id
        self._cells = cells
        self._routes = routes
        self._keeper = keeper or CreditKeeper(node_name, Limits().credit_deadline)
        self._limits = ConnectionLimits(node_name, limits or Limits())
        self._max_size = self._limits.max_message_size
        self._inboxes: dict[Any, tuple[ActorCell, InboxCredit]] = {}  # by raw pn_link_t
        self._verifier = verifier
        self._session_links: dict[Any, Link] = {}
        self._unauthenticated: list[str] = []  # ids accepted unsigned since the last warning
        self._reply_addresses: list[tuple[str, bool]] = []  # (address, dynamic)
        self._signing = signing
        self._identity = IdentityLinks(node_name, node_id)
        self._starting = starting

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        if self._limits.refuse_link(engine, link):
            engine.wake()
            return
        if link.is_receiver:
            self._attach_inbox(engine, link)
        else:
            self._attach_replies(engine, link)
        engine.wake()

    def _attach_inbox(self, engine: Engine, link: Link) -> None:
        target = link.remote_target.address or ""
        name = actor_name(target)
        if name == IDENTITY_ADDRESS:  # read-only, and never an actor's inbox
            link.open()
            _refuse(link, NOT_ALLOWED, read_only(self._node_name))
            log("actorctl:link:refused", peer=engine.peer, target=target, reason="read-only")
            return
        if name == SESSION_ADDRESS and self._verifier is not None:
            link.target.address = target
            link.open()
            link.flow(_SESSION_CREDIT)
            self._session_links[link._impl] = link
            return
        cell = self._cells.get(name)
        starting = self._starting
        if cell is None and starting is not None and not starting.started:
            starting.hold(self, engine, link, target)  # answered once the actors started
            return
        if cell is not None:
            link.target.address = target
        link.open()
        self.answer(engine, link)

    def answer(self, engine: Engine, link: Link) -> None:
        """Feed the mailbox of the actor ``link`` (opened) targets, or refuse
        it: no such actor."""
        target = link.remote_target.address or ""
        name = actor_name(target)
        cell = self._cells.get(name)
        if cell is None:
            hosted = ", ".join(sorted(self._cells)) or "none"
            _refuse(
                link,
                NOT_FOUND,
                f"no actor named {name!r} on node {self._node_name!r} (it hosts: {hosted})",
            )
            log("actorctl:link:refused", peer=engine.peer, target=target, reason="unknown actor")
            return
        credit = InboxCredit(engine, link, cell.mailbox, self._keeper)
        self._inboxes[link._impl] = (cell, credit)
        credit.attach()

    def _attach_replies(self, engine: Engine, link: Link) -> None:
        source = link.remote_source
        asked = source.address or ""
        if not source.dynamic and actor_name(asked) == IDENTITY_ADDRESS:
            self._identity.attach(engine, link, asked)
            return
        if source.dynamic:
            address = f"{REPLY_PREFIX}{uuid.uuid4().hex}"
        elif asked.startswith(REPLY_PREFIX):
            address = asked
        else:
            link.open()
            _refuse(
                link,
                NOT_FOUND,
                f"node {self._node_name!r} offers no source {asked!r}: attach a "
                "dynamic receiver (or one whose source starts with $reply/) to get replies, "
                f"or one whose source is {IDENTITY_ADDRESS} to read its container id",
            )
            return
        # Only its own address: proven to be its key's, on a node with keys (§8).
        refusal = reply_address_refusal(
            address,
            engine.connection.remote_container or "",
            certificate_names(engine)[0],
            dynamic=source.dynamic,
            node=self._node_id,
            verifier=self._verifier,
            properties=link.remote_properties,
            claim=self._routes.claim,
        )
        if refusal is not None:
            link.open()
            _refuse(link, UNAUTHORIZED, refusal)
            log("actorctl:link:refused", peer=engine.peer, source=address, reason=refusal)
            return
        link.source.address = address
        link.source.dynamic = source.dynamic
        link.snd_settle_mode = Link.SND_SETTLED  # the reply is the acknowledgement
        link.open()
        self._routes.add(address, engine, link, self._signing)
        self._reply_addresses.append((address, source.dynamic))

    def on_link_flow(self, engine: Engine, link: Any) -> None:
        inbox = self._inboxes.get(link)
        if inbox is not None:
            inbox[1].sender_flowed()
        else:
            self._identity.flowed(engine, link)

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        self._limits.link_closed()
        if link.is_receiver:
            inbox = self._inboxes.pop(link._impl, None)
            if inbox is not None:
                inbox[1].detach()
        elif self._identity.detached(link._impl):
            return
        else:
            address = link.source.address or ""
            self._routes.remove(address, link=link, release=bool(link.source.dynamic))

    def on_delivery(self, engine: Engine, delivery: Any) -> None:
        link = _delivery_link(delivery)
        if not _is_receiver(link):
            return  # a reply we sent pre-settled: nothing to do
        if lib.pn_delivery_aborted(delivery):
            lib.pn_delivery_settle(delivery)  # the sender gave up on it mid-way
            self._refused(link)
            return
        if not _readable(delivery):
            return
        size = _pending(delivery)
        if size > self._max_size:  # refused as it arrives, not once it is whole
            self._too_large(engine, link, delivery, size)
            return
        if _partial(delivery):
            return
        data = recv(link, size)
        presettled = bool(_settled(delivery))
        settle = None
        if presettled:
            _settle_delivery(delivery)  # nothing to answer: free it now
        else:
            lib.pn_incref(delivery)  # held until the actor settles it
            settle = functools.partial(_settle, engine, delivery)
        if link in self._session_links:
            self._open_session(engine, link, data, settle)
            return
        inbox = self._inboxes.get(link)
        if inbox is None:  # a link we refused: nothing should arrive on it
            if settle is not None:
                settle(Outcome.rejected(NOT_FOUND, "the link to this address was refused"))
            return
        self._take(engine, inbox[0], data, settle)

    def _take(
        self,
        engine: Engine,
        cell: ActorCell,
        data: bytes,
        settle: Callable[[Outcome], None] | None,
    ) -> None:
        verifier = self._verifier
        verified = None
        try:
            if verifier is None:
                envelope = decode(data)
                self._unauthenticated.append(envelope.message_id)
            else:
                # Authenticate before anything looks at the body or the handler.
                sections, verified = authenticate(verifier, cell.name, data, self._node_id)
                sender = verified.key_id
                if ORIGIN_KEY in sections[1]:  # a router asserts whom it forwards for
                    sender = verifier.origin(verified, sections[1]) or _no_origin(engine, verified)
                    role = verifier.role(verified, sender)
                else:  # its signer's own: the role looked up without a call (per message)
                    roles = verifier.signer_roles
                    role = roles[sender] if sender in roles else verifier.role(verified, sender)
                envelope = from_sections(sections, sender, role)
                reply_to = envelope.reply_to
                if reply_to is not None and reply_to.startswith(REPLY_PREFIX):
                    # Not another key's reply address (§8): checked once, here.
                    refusal = reply_to_refusal(reply_to, sender, verified.key_id, verifier)
                    if refusal is not None:
                        error = AuthError(FOREIGN_REPLY_TO, refusal)
                        raise error.about(envelope.message_id, sender)
        except AuthError as exc:
            _refuse_delivery(
                engine, cell, settle, exc.condition, exc.description, exc.message_id, exc.key_id
            )
            cell.mailbox.refused()  # the credit it used is granted again
            return
        except WireFormatError as exc:
            message_id = exc.message_id if isinstance(exc, UnsignableMessage) else None
            _refuse_delivery(engine, cell, settle, DECODE_ERROR, str(exc), message_id)
            cell.mailbox.refused()
            return
        try:
            cell.mailbox.put_nowait(envelope, settle)
        except trio.WouldBlock:
            outcome = Outcome.rejected(
                OVER_CREDIT,
                f"actor {cell.name!r} granted no credit for message {envelope.message_id}: "
                "the sender must wait for link credit",
            )
        except trio.ClosedResourceError:
            why = cell.stopped_why
            outcome = Outcome.modified(
                STOPPING,
                f"actor {cell.name!r} is stopping"
                if why is None
                else f"actor {cell.name!r} is stopped ({why}); it may be started again",
            )
            # The credit it used is granted again: a sender that sends it
            # again (a plain tell, within its resend window) gets an answer
            # each time, not a link without credit until the actor returns.
            cell.mailbox.refused()
        else:
            return
        if verified is not None and verifier is not None:  # not run: the same bytes may come again
            verifier.forget(verified, envelope.message_id, to_ms(envelope.creation_time))
        cell.refused(outcome.state, outcome.condition)
        log(
            f"actorctl:delivery:{outcome.state}",
            actor=cell.name,
            message_id=envelope.message_id,
            condition=outcome.condition,
            description=outcome.description,
        )
        if settle is not None:
            settle(outcome)

    def _too_large(self, engine: Engine, link: Any, delivery: Any, size: int) -> None:
        inbox = self._inboxes.get(link)
        if inbox is not None:
            target = inbox[0].name
        else:
            target = SESSION_ADDRESS if link in self._session_links else "(a refused link)"
        self._limits.too_large(engine, delivery, size, target)
        self._refused(link)

    def _refused(self, link: Any) -> None:
        """A delivery on ``link`` used its credit and ended before a mailbox
        took it (too large, aborted): grant that credit again, as for a settled
        message (docs/protocol.md §4.1)."""
        inbox = self._inboxes.get(link)
        if inbox is not None:
            inbox[0].mailbox.refused()
        elif link in self._session_links:
            _link_flow(link, 1)

    def after_events(self, engine: Engine) -> None:
        self._keeper.rebalance()  # grants for the links this batch attached
        # An insecure node warns about every unauthenticated message it accepts:
        # one line per batch of deliveries that arrived together, naming each.
        if self._unauthenticated:
            log(
                "actorctl:delivery:unauthenticated",
                peer=engine.peer,
                message_ids=self._unauthenticated,
                warning="accepted without authentication: this node is insecure",
            )
            self._unauthenticated = []

    def _open_session(
        self,
        engine: Engine,
        link: Any,
        data: bytes,
        settle: Callable[[Outcome], None] | None,
    ) -> None:
        """A peer hands this connection a session key (docs/protocol.md §11)."""
        verifier = self._verifier
        assert verifier is not None
        _link_flow(link, 1)
        try:
            sections = read_message(data)
            if sections is None:
                raise WireFormatError("a session message must be a data-section message")
            properties, app, body = sections
            properties = properties + [None] * (10 - len(properties))
            message_id = str(properties[0])
            session = verifier.accept_session(
                app,
                canonical_of(SESSION_ADDRESS, properties, app, body, self._node_id),
                message_id=message_id,
                creation_ms=properties[9],
                body=body,
                node=self._node_id,
            )
        except AuthError as exc:
            refuse = (exc.condition, exc.description, exc.message_id, exc.key_id)
            _refuse_delivery(engine, SESSION_ADDRESS, settle, *refuse)
            return
        except (WireFormatError, ValueError) as exc:
            _refuse_delivery(engine, SESSION_ADDRESS, settle, DECODE_ERROR, str(exc))
            return
        if self._signing is not None:
            self._signing.session_opened(session)  # replies here are signed with it
        log(
            "actorctl:session:opened",
            peer=engine.peer,
            session=session.id,
            key=session.issuer_key_id,
            expires=session.expires,
        )
        if settle is not None:
            settle(Outcome("accepted"))

    def on_closed(self, engine: Engine) -> None:
        for _cell, credit in self._inboxes.values():
            credit.detach()
        self._inboxes.clear()
        self._keeper.rebalance()
        for address, dynamic in self._reply_addresses:
            self._routes.remove(address, engine=engine, release=dynamic)
        self._reply_addresses.clear()
        self._identity.clear()


def _no_origin(engine: Engine, verified: Verified) -> str:
    log(
        "actorctl:delivery:origin-ignored",
        peer=engine.peer,
        key=verified.key_id,
        reason="only a cluster member (a key the keyring's members file names) may "
        "assert an origin: the message counts as its signer's",
    )
    return verified.key_id

"""The shapes of the messages that recur, each encoded once.

An actor's replies to one caller, or one caller's requests to one handler,
are the same message again and again but for a few values: the ids, the
times, the body, and perhaps a header that repeats the correlation id. The
rest (the addresses, the subject, the kind, the other headers, the session
that signs it, the actor and node it is signed for) is the message's *shape*.
A shape's bytes, on the wire and in the canonical form a signature covers
(docs/protocol.md §11.2), are made once; per message the encoder writes only
what varies, between them.

A shape is made at its second message, and used from then on only if the bytes
it gives for that message are exactly the ones the general encoder
(``_encoding.py``) wrote: otherwise, or if it is not one this module writes
(a signer other than a session's, a header that is not a str or an int, a
header named as the encoder's own: ``kind``, ``lang``, ``sig_*``), its
messages take the general path, errors and all. At most twice ``MAX_SHAPES``
shapes are kept (the older generation forgotten when the newer is full: see
``_shapes``), a shape met once is only noted, and one that holds over
``MOST_TEXT`` characters of text is not even noted.
"""

from __future__ import annotations

from typing import Final, Literal, final

import attrs

from ._auth import (
    _ABSENT,
    _LENGTH,
    _UNCOVERED,
    HMAC_SHA256,
    PREFIX,
    SIG,
    SIG_ALG,
    SIG_KEY,
    _json_string,
    _u32,
    canonical_time,
)
from ._envelope import Envelope
from ._session import SessionSigner
from ._wire import (
    APP_PROPERTIES,
    DATA,
    JSON_SYMBOL,
    KIND_LANG,
    LANG,
    LENGTHS,
    NULL,
    PROPERTIES,
    SIG_NODE_KEY,
    pack_list32,
    pack_long,
    pack_size32,
    string,
)

__all__ = ["MAX_SHAPES", "MOST_TEXT", "Shape", "learn", "shape_of"]

#: How many shapes are kept (and how many met once are noted) at most.
MAX_SHAPES: Final = 1024


@final
class _Correlation:
    """In a shape's key and parts: the place of the message's correlation id."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the correlation id>"


_CORRELATION: Final = _Correlation()

#: A message's shape, as its key: the envelope's fixed fields, the actor and
#: node it is signed for, the session's id (None: unsigned), which of its times
#: and correlation id it lacks, then its headers' names and values, in order,
#: in one tuple (``_CORRELATION`` for a value that is the correlation id).
Key = tuple[object, ...]


@final
@attrs.frozen(slots=True)
class Shape:
    """The bytes of one shape of message, the parts that do not vary: the
    correlation id goes between the parts of ``rest`` (as the canonical bytes
    frame it) and of ``app`` (as an AMQP string).

    Attributes:
        head: the canonical bytes up to the message id (node, actor, subject).
        reply: the canonical reply address (absent: ``_ABSENT``).
        rest: the canonical kind and headers (before the body).
        middle: the properties between the message id and the correlation id.
        content: the properties after the correlation id, to the times.
        fixed: the list32 size of the properties but for the message id, the
            correlation id and the times.
        count: how many properties the list holds (the null ones at its end left out).
        app: the application properties, to the signature.
        app_count: how many items the application properties map holds.
        sig: the signature's properties up to the digest; None: unsigned.
        sig_node: the ``sig_node`` property after the digest.
        sig_size: the size of those and of the digest.
    """

    head: bytes
    reply: bytes
    rest: tuple[bytes, ...]
    middle: bytes
    content: bytes
    fixed: int
    count: int
    app: tuple[bytes, ...]
    app_count: int
    sig: bytes | None
    sig_node: bytes
    sig_size: int

    def render(
        self,
        body: bytes,
        times: tuple[int | None, int | None],
        ids: tuple[bytes, bytes | None],
        correlation_id: str | None,
        signer: SessionSigner | None,
    ) -> bytes:
        """One message of this shape, as ``_encoding.encode`` writes it: its
        body, times (ms), ids (UTF-8) and correlation id, signed by ``signer``."""
        # Signed first, as the general encoder does: a bad value fails as it does there.
        sig = self.sig
        if sig is not None and signer is not None:  # (both or neither: the key says)
            mac = signer.keyed.copy()
            mac.update(self.canonical(body, times, ids, correlation_id))
            digest = mac.digest()
        message_id, raw = ids
        creation, expiry = times
        n = len(message_id)
        m = (b"\xa1" + LENGTHS[n] if n < 256 else b"\xb1" + pack_size32(n)) + message_id
        if raw:
            n = len(raw)
            c = (b"\xa1" + LENGTHS[n] if n < 256 else b"\xb1" + pack_size32(n)) + raw
        else:
            c = NULL
        # The times (their presence is the shape's: the null ones at the end are left out).
        if creation is not None:
            ms = (NULL if expiry is None else b"\x83" + pack_long(expiry)) + b"\x83"
            ms += pack_long(creation)
        elif expiry is not None:
            ms = b"\x83" + pack_long(expiry)
        else:
            ms = b""
        size = len(m) + len(c) + len(ms) + self.fixed  # the properties' list32 size
        app = c.join(self.app)  # (one part: that part itself)
        if sig is None or signer is None:
            signature: tuple[bytes, ...] = ()
            app_size = len(app) + 4
        else:
            signature = (sig, digest, self.sig_node)
            app_size = len(app) + self.sig_size + 4
        return b"".join(
            (
                PROPERTIES,
                pack_list32(size, self.count),
                m,
                self.middle,
                c,
                self.content,
                ms,
                APP_PROPERTIES,
                pack_list32(app_size, self.app_count),
                app,
                *signature,
                DATA,
                pack_size32(len(body)),
                body,
            )
        )

    def canonical(
        self,
        body: bytes,
        times: tuple[int | None, int | None],
        ids: tuple[bytes, bytes | None],
        correlation_id: str | None,
    ) -> bytes:
        """The canonical bytes of one message of this shape, as
        ``_auth.canonical_encoded`` writes them."""
        lengths = _LENGTH
        message_id, raw = ids
        m = (lengths[n] if (n := len(message_id)) < 256 else _u32(n)) + message_id
        c = ((lengths[n] if (n := len(raw)) < 256 else _u32(n)) + raw) if raw else _ABSENT
        rest = self.rest
        if len(rest) > 1:  # a header's value is the correlation id: as JSON, framed
            json = _json_string(correlation_id or "").encode()
            rest_bytes = ((lengths[n] if (n := len(json)) < 256 else _u32(n)) + json).join(rest)
        else:
            rest_bytes = rest[0]
        cr, ex = canonical_time(times[0]), canonical_time(times[1])
        b = lengths[n] if (n := len(body)) < 256 else _u32(n)
        return b"".join((self.head, m, c, self.reply, cr, ex, rest_bytes, b, body))


def shape_of(
    envelope: Envelope,
    signer: SessionSigner | None,
    actor: str,
    node: str,
    times: tuple[int | None, int | None],
) -> Shape | Key | None:
    """The message's shape if it is known; else its key, for :func:`learn`
    once the general encoder wrote it; or None: it takes the general path (a
    header that is not a str or an int, a shape found not to be written here).

    ``signer``: the session that signs it, or None (unsigned); ``times``: its
    creation and expiry times in ms, as the encoder writes them."""
    correlation_id = envelope.correlation_id
    marks: tuple[object, ...] = ()
    headers = envelope.headers
    if headers:
        for name, value in headers.items():
            if type(value) is str:
                marks += (
                    name,
                    _CORRELATION if correlation_id and value == correlation_id else value,
                )
            elif type(value) is int:  # (never a bool: True is not 1 here)
                marks += (name, value)
            else:
                return None
    key = (
        envelope.to,
        envelope.subject,
        envelope.reply_to,
        envelope.kind,
        actor,
        node,
        None if signer is None else signer.session.id,
        times[0] is None,
        times[1] is None,
        not correlation_id,
        marks,
    )
    try:
        shape = _shapes.get(key)
        if shape is None:
            shape = _older.get(key)
            if shape is None:
                return key
            _keep(key, shape)  # in use still: kept in the current generation
    except TypeError:  # a field that is not text: the general path says what
        return None
    return shape or None  # False: a shape that takes the general path


#: The shapes made, by key (False: one found to take the general path), in two
#: generations of at most ``MAX_SHAPES`` each: when the current one is full it
#: becomes the older one, and a shape found there is kept in the new current
#: one. Shapes that went out of use (a caller gone, its reply address with it)
#: are forgotten at the second turn and never keep new ones out, while those in
#: use are not made again (more shapes in use than fit cost no rebuilding,
#: but for those beyond ``MAX_SHAPES``). The keys met once, in two generations
#: the same way (so that the second message of a shape is known as such while
#: more shapes than fit come round in turn). A message whose
#: shape holds more than ``MOST_TEXT`` characters of text but its correlation
#: id is neither noted nor kept: a caller's long reply address or header does
#: not pin memory here.
_shapes: dict[Key, Shape | Literal[False]] = {}
_older: dict[Key, Shape | Literal[False]] = {}
_seen: dict[Key, None] = {}
_seen_older: dict[Key, None] = {}

#: The most characters of text (addresses, subject, header names and values) a
#: kept shape holds.
MOST_TEXT: Final = 2048


def _keep(key: Key, shape: Shape | Literal[False]) -> None:
    """Keep ``shape`` in the current generation (turning it when full)."""
    global _shapes, _older
    if len(_shapes) >= MAX_SHAPES:
        _older, _shapes = _shapes, {}
    _shapes[key] = shape


def _text_size(key: Key) -> int:
    """The characters of text in ``key`` (its fields and its headers)."""
    marks = key[10]
    assert isinstance(marks, tuple)
    return sum(len(part) for part in (*key[:7], *marks) if type(part) is str)


def learn(
    key: Key,
    body: bytes,
    times: tuple[int | None, int | None],
    ids: tuple[bytes, bytes | None],
    correlation_id: str | None,
    signer: SessionSigner | None,
    encoded: bytes,
) -> None:
    """Note the shape of a message the general encoder wrote (``encoded``);
    at its second message, make it, and keep it if it writes that message's
    very bytes (else keep that the shape takes the general path). A shape
    with over ``MOST_TEXT`` characters of text is not noted."""
    global _seen, _seen_older
    if key not in _seen and key not in _seen_older:
        if _text_size(key) > MOST_TEXT:
            return
        if len(_seen) >= MAX_SHAPES:
            _seen_older, _seen = _seen, {}
        _seen[key] = None
        return
    shape = _make(key)
    if shape is not None and shape.render(body, times, ids, correlation_id, signer) == encoded:
        _keep(key, shape)
    else:
        _keep(key, False)


def _make(key: Key) -> Shape | None:
    """The shape of ``key``, or None if this module does not write it."""
    to, subject, reply_to, kind, actor, node, session, no_creation, no_expiry = key[:9]
    marks = key[10]
    assert isinstance(marks, tuple)
    names, values = marks[::2], marks[1::2]
    if not (
        type(to) is str
        and type(subject) is str
        and type(kind) is str
        and type(actor) is str
        and type(node) is str
        and (reply_to is None or type(reply_to) is str)
        and (session is None or type(session) is str)
        and all(type(name) is str and name not in _UNCOVERED for name in names)
        and all(type(value) is not int or -(2**63) <= value < 2**63 for value in values)
    ):
        return None
    # The headers, by name (a str each, as told above), in the envelope's order.
    pairs = {name: value for name, value in zip(names, values, strict=True) if type(name) is str}
    try:
        return _build(
            to, subject, reply_to, kind, actor, node, session, no_creation, no_expiry, pairs
        )
    except Exception:  # e.g. text that is not UTF-8: the general path says what is wrong
        return None


def _build(
    to: str,
    subject: str,
    reply_to: str | None,
    kind: str,
    actor: str,
    node: str,
    session: str | None,
    no_creation: object,
    no_expiry: object,
    pairs: dict[str, object],
) -> Shape:
    rest: list[bytes | _Correlation] = [_framed(kind), _u32(len(pairs))]
    app: list[bytes | _Correlation] = [
        KIND_LANG[kind] if kind in KIND_LANG else string("kind") + string(kind) + LANG
    ]
    for name in sorted(pairs):  # canonical: sorted by name (their UTF-8 bytes sort so too)
        rest += (_framed(name), _json(pairs[name]))
    for name, value in pairs.items():  # on the wire: in the envelope's order
        app += (string(name), _amqp(value))
    # Which times it has (0: none, 1: an expiry, 2: a creation time): the null
    # properties at the end of the list are left out.
    form = 0 if no_creation and no_expiry else 1 if no_creation else 2
    sig: bytes | None = None
    sig_node = SIG_NODE_KEY + string(node)
    # The properties between the message id and the correlation id, and after it.
    middle = b"".join(
        (
            NULL,  # user-id
            string(to) if to else NULL,
            string(subject),
            string(reply_to) if reply_to else NULL,
        )
    )
    content = JSON_SYMBOL if form == 0 else JSON_SYMBOL + NULL  # content-type, -encoding
    if session is not None:
        sig = b"".join(
            (string(SIG_ALG), string(HMAC_SHA256), string(SIG_KEY), string(session), string(SIG))
        )
        sig += b"\xa0\x20"  # a vbin8 of 32 bytes: an HMAC-SHA256 digest
    return Shape(
        head=PREFIX + _framed(node) + _framed(actor) + _framed(subject),
        reply=_framed(reply_to) if reply_to else _ABSENT,
        rest=_split(rest),
        middle=middle,
        content=content,
        fixed=len(middle) + len(content) + 4,  # (4: the list32's count)
        count=(7, 9, 10)[form],
        app=_split(app),
        app_count=4 + 2 * len(pairs) + (0 if sig is None else 8),
        sig=sig,
        sig_node=sig_node,
        sig_size=0 if sig is None else len(sig) + 32 + len(sig_node),
    )


def _framed(text: str) -> bytes:
    """A text field of the canonical bytes: its length and its UTF-8 bytes."""
    raw = text.encode()
    return _u32(len(raw)) + raw


def _json(value: object) -> bytes | _Correlation:
    """A header's value in the canonical bytes: its JSON text, framed."""
    if isinstance(value, str):
        raw = _json_string(value).encode()
    elif isinstance(value, int):
        raw = b"%d" % value
    else:  # the place of the correlation id (_make: the rest are str or int)
        return _CORRELATION
    return _u32(len(raw)) + raw


def _amqp(value: object) -> bytes | _Correlation:
    """A header's value in the application properties."""
    if value is _CORRELATION:
        return _CORRELATION
    if type(value) is str:
        return string(value)
    return b"\x81" + pack_long(value)


def _split(parts: list[bytes | _Correlation]) -> tuple[bytes, ...]:
    """``parts`` joined into the runs between the places of the correlation id."""
    runs = [b""]
    for part in parts:
        if part is _CORRELATION:
            runs.append(b"")
        else:
            assert isinstance(part, bytes)
            runs[-1] += part
    return tuple(runs)

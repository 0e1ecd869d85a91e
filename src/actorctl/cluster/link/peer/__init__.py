"""The outgoing side of the link: one connection from this node to one other
node (``Peer``, ``_peer.py``), what that connection reports back
(``_peer_events.py``), dialling it and waiting for it (``_peer_dial.py``), its
breaker (``_peer_breaker.py``), how what goes on it is signed
(``_peer_signing.py``), the plain tells the peer gave back unrun
(``_given_back.py``) and the bytes it holds unsettled (``_unsettled.py``).

Import from the modules: this package runs no code of its own, so that a module
of ``cluster/link`` can use one of them (``_pending`` takes the dialler's
backoff) without importing the whole outgoing side.
"""

__all__: list[str] = []

"""Why a message's signature is refused before any key is looked at: the
errors the verifier (``_signing.py``) raises for a missing or malformed
signature, and for one made for another node (docs/protocol.md §11.6)."""

from __future__ import annotations

from ._auth import ED25519, HMAC_SHA256, SIG_NODE, VERSION, AuthError
from ._conditions import AUTH_VERSION, BAD_SIGNATURE, UNAUTHENTICATED, WRONG_NODE

__all__ = ["unsigned", "wrong_node"]


def wrong_node(message_id: str, signed_for: object, node: str) -> AuthError:
    """Why a message signed for another node (or in version 1) is refused."""
    if signed_for is None:
        return AuthError(
            AUTH_VERSION,
            f"message {message_id} has no {SIG_NODE}: it was signed in an older form "
            f"(actorctl-auth-v1); this node verifies {VERSION} only, whose canonical bytes "
            "begin with the destination node's container id (docs/protocol.md §11.2)",
        )
    return AuthError(
        WRONG_NODE,
        f"message {message_id} was signed for node {signed_for!r}, not this node ({node!r}): "
        "a signed message is valid only at the node it was signed for; sign it for the "
        "container id this node's AMQP open frame gives",
    )


def unsigned(message_id: str, alg: object, sig_key: object, sig: object) -> AuthError:
    """Why a message whose signature properties are missing or malformed is refused."""
    if alg is None or sig_key is None or sig is None:
        return AuthError(
            UNAUTHENTICATED,
            f"message {message_id} is not signed: it needs the application properties "
            "sig_alg, sig_key and sig (docs/protocol.md §11)",
        )
    if alg not in (ED25519, HMAC_SHA256):
        return AuthError(
            UNAUTHENTICATED, f"message {message_id}: sig_alg {alg!r} is not ed25519 or hmac-sha256"
        )
    return AuthError(
        BAD_SIGNATURE,
        f"message {message_id}: sig_key must be a string and sig binary "
        f"(got {type(sig_key).__name__} and {type(sig).__name__})",
    )

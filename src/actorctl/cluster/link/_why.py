"""Why an outgoing connection failed, in words a user can act on: nothing
listening, a TLS certificate the other side would not take, one side
speaking TLS and the other plain TCP (docs/protocol.md §2), or the other node
refusing the connection or our reply link with a condition that says why (a
connection bound, a reply address that is not ours)."""

from __future__ import annotations

import errno

__all__ = ["handshake_failed", "refused", "unreachable"]


def unreachable(address: str, exc: OSError) -> str:
    """Why a TCP connection to ``address`` could not be made."""
    causes = [exc, *(getattr(exc, "__cause__", None), getattr(exc, "__context__", None))]
    codes = {getattr(cause, "errno", None) for cause in causes if cause is not None}
    codes |= {getattr(e, "errno", None) for e in getattr(exc.__cause__, "exceptions", ())}
    if errno.ECONNREFUSED in codes or "refused" in str(exc).lower():
        return f"connection refused: nothing listens on {address} (is the node running there?)"
    return f"cannot connect to {address}: {exc.strerror or exc}"


def handshake_failed(address: str, error: str | None, *, tls: bool) -> str:
    """Why a connection to ``address`` closed before its links opened
    (``error``: what the transport said, if anything)."""
    text = (error or "").lower()
    if "verify failed" in text or "certificate verify" in text:
        return (
            f"TLS: the certificate of {address} did not verify against our CA: it is "
            "signed by another CA (certificates from another `certs init`?) or made "
            f"for another name than {address.rpartition(':')[0]} ({error})"
        )
    if "alert" in text and ("ca" in text or "certificate" in text):
        return (
            f"TLS: {address} refused our certificate: it is signed by another CA than "
            f"the node's (certificates from another `certs init`?) ({error})"
        )
    if tls and ("eof" in text or "ssl" in text or not text):
        return (
            f"TLS: {address} closed the connection during the TLS handshake: it may "
            "speak plain TCP (a node run with --insecure: call it with amqp:// and "
            "--insecure), it refused our certificate, or it takes no more connections "
            "in their handshake now (max_handshakes: see its log)"
            + (f" ({error})" if error else "")
        )
    if not tls and ("protocol header" in text or "ssl" in text or "tls" in text):
        return (
            f"plain TCP against TLS: {address} did not answer in plain AMQP: it expects "
            "TLS (call it with amqps:// and --certs/--keys instead of --insecure)"
        )
    return f"the connection to {address} closed before its links opened" + (
        f" ({error})" if error else ""
    )


def refused(address: str, what: str, condition: tuple[str, str]) -> str:
    """Why ``address`` closed ``what`` (the connection, or our reply link) before
    anything could be sent: the ``condition`` (name, description) it closed it
    with, which names the bound or the reason."""
    name, description = condition
    return f"{address} refused {what}: {description or 'no reason given'} ({name})"

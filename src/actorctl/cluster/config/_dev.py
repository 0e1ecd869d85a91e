"""What development mode (``dev = true``) allows: one machine.

Development mode makes a certificate authority and keys beside the file, and
gives every client one certificate: right for a laptop, wrong for a network.
So a cluster in development mode listens on loopback only (its nodes, its
Controller, its web page), unless the file says ``dev_public = true`` under
``[cluster]``, for a network the user trusts, and then every start says so.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ..._errors import ConfigError

__all__ = ["DEV_PUBLIC_WARNING", "check_dev_listen", "is_loopback"]

#: Said on every start of a cluster whose file has ``dev_public = true``.
DEV_PUBLIC_WARNING: Final = (
    "warning: development mode on a network (dev_public = true): the development "
    "CA's private key sits beside the file and every client shares one certificate; "
    "anyone who can read that directory can join or command this cluster "
    "(docs/deploy.md makes certificates with a real CA)"
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_dev_listen(path: Path | str, listens: Iterable[tuple[str, str, int]]) -> None:
    """Refuse a listen address other than loopback in development mode:
    ``listens`` holds (who, host, port), e.g. ``("node 'worker'", "0.0.0.0", 5701)``.

    Raises:
        ConfigError: naming who listens where, why it is refused, and the two fixes.
    """
    for who, host, port in listens:
        if not is_loopback(host):
            raise ConfigError(
                f"{path}: {who} would listen on {host}:{port}, but [cluster] has "
                "dev = true: development mode is for one machine (its CA's private key "
                "sits beside the file and every client shares one certificate), so it "
                "listens on loopback only (127.0.0.1). To serve other machines, make "
                "certificates with a real CA and remove dev = true (docs/deploy.md); on "
                "a network you trust, dev_public = true under [cluster] allows it, with "
                "a warning at every start"
            )

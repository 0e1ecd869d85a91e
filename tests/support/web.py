"""The Controller's web page as the tests reach it: a cluster file that serves
it, TLS to it (as an operator or not), and Debian's chromium for playwright.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from actorctl.cluster import load_cluster

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "client_context", "with_web"]

CHROMIUM = Path("/usr/bin/chromium")
#: Headless, and nothing that reaches out of this machine.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def with_web(toml: Path, directory: Path) -> Path:
    """A copy of ``toml`` whose [cluster] table serves the web page."""
    text = toml.read_text().replace("[cluster]\n", '[cluster]\nweb = "127.0.0.1:1"\n', 1)
    copy = directory / toml.name
    copy.write_text(text)
    return copy


def client_context(cluster: Path, *, operator: bool) -> ssl.SSLContext:
    """TLS to the web page, trusting the cluster's CA; with ``operator``, the
    operator's (the cli's) certificate too."""
    config = load_cluster(cluster)
    context = ssl.create_default_context(cafile=str(config.certs / "ca.pem"))
    if operator:
        context.load_cert_chain(str(config.certs / "cli.pem"), str(config.certs / "cli.key"))
    return context

"""TLS material for tests, made with trustme (the development CA)."""

from __future__ import annotations

from pathlib import Path

import trustme

from actorctl import TlsFiles


def make_tls(directory: Path, *names: str, ca: trustme.CA | None = None) -> dict[str, TlsFiles]:
    """A CA in ``directory`` and one certificate per name, for 127.0.0.1/localhost."""
    ca = ca or trustme.CA()
    directory.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    files = {}
    for name in names:
        cert = ca.issue_cert("127.0.0.1", "localhost", name, common_name=name)
        cert.private_key_pem.write_to_path(str(directory / f"{name}.key"))
        cert.cert_chain_pems[0].write_to_path(str(directory / f"{name}.pem"))
        for extra in cert.cert_chain_pems[1:]:
            extra.write_to_path(str(directory / f"{name}.pem"), append=True)
        files[name] = TlsFiles.from_dir(directory, name)
    return files

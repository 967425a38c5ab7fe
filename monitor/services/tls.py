"""A throwaway certificate authority for the local servers: a CA, a server certificate, a client one.

For the secured local servers (:class:`~monitor.services.kafka.SecureKafkaServer`,
:class:`~monitor.services.redis_server.SecureRedisServer`) and the tests that run the worker over TLS.
The ``openssl`` command line makes them (no Python package needed), RSA 2048, valid for a week:

* ``ca.pem`` / ``ca.key``: a self-signed CA (``basicConstraints CA:TRUE``, ``keyCertSign``) that clients
  are given as their trust anchor (``MONITOR_KAFKA_SSL_CAFILE``, ``MONITOR_REDIS_SSL_CAFILE``);
* ``server.pem`` / ``server.key``: signed by it, for ``127.0.0.1`` and ``localhost`` (subject alternative
  names, so clients verify the host name), usable for server and client authentication;
* ``client.pem`` / ``client.key``: signed by it, client authentication only (mutual TLS);
* ``server-keystore.pem``: the server key, certificate and CA in one file, Kafka's PEM keystore.

Keys are unencrypted PKCS#8 (``BEGIN PRIVATE KEY``, which Kafka's PEM keystore reads) and readable by
their owner only. The files are made once per folder and reused, so a restarted server keeps its identity.
"""

from __future__ import annotations

import secrets
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

from monitor.services.install import require_binary
from monitor.services.ports import LOOPBACK
from monitor.services.process import ServiceError

DAYS = 7

_CONFIG = f"""\
# Written by monitor.services.tls: extensions of the throwaway CA and its certificates.
[req]
distinguished_name = dn
prompt = no
[dn]
CN = monitor
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:{LOOPBACK},DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one throwaway CA (see the module docstring)."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def keystore(self) -> Path:
        """Server key, certificate and CA certificate in one PEM file (Kafka's ``ssl.keystore.type=PEM``)."""
        return self.folder / "server-keystore.pem"

    def client_context(self) -> ssl.SSLContext:
        """A client's context: trusts this CA (chain and host name) and presents the client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.ca, self.cert, self.key, self.client_cert, self.client_key,
                                         self.keystore))


def _openssl(folder: Path, *args: str) -> None:
    done = subprocess.run([require_binary("openssl"), *args], cwd=folder, capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed (exit status {done.returncode}): {done.stderr.strip()}")


def _signed(folder: Path, name: str, subject: str, extensions: str) -> None:
    """``<name>.key`` and ``<name>.pem``, signed by the folder's CA with the ``extensions`` section."""
    _openssl(folder, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-config", "openssl.cnf", "-subj", subject)
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), "-days", str(DAYS), "-sha256",
             "-extfile", "openssl.cnf", "-extensions", extensions, "-out", f"{name}.pem")
    (folder / f"{name}.csr").unlink()


def make_tls_files(folder: Path) -> TlsFiles:
    """The CA, server and client certificates in ``folder``: made now, or the ones made there before."""
    files = TlsFiles(folder)
    if files.complete():
        return files
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    (folder / "openssl.cnf").write_text(_CONFIG)
    _openssl(folder, "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.pem", "-days", str(DAYS), "-sha256", "-config", "openssl.cnf", "-extensions", "ca",
             "-subj", "/CN=monitor local test CA")
    _signed(folder, "server", f"/CN={LOOPBACK}", "server")
    _signed(folder, "client", "/CN=monitor-client", "client")
    for key in ("ca.key", "server.key", "client.key"):
        (folder / key).chmod(0o600)
    files.keystore.write_text(files.key.read_text() + files.cert.read_text() + files.ca.read_text())
    files.keystore.chmod(0o600)
    return files

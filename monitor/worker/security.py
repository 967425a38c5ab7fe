"""How the worker's clients authenticate and encrypt: Kafka (SASL, TLS) and Redis (ACL user, TLS).

:class:`KafkaSecurity` is the Kafka half of the settings (``MONITOR_KAFKA_SECURITY_PROTOCOL`` and the
``MONITOR_KAFKA_SASL_*`` / ``MONITOR_KAFKA_SSL_*`` variables, docs/worker.md) turned into what each
client library takes: keyword arguments for aiokafka's producer, consumer and admin client
(``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``/``_password``, ``ssl_context``) and
Faust's ``broker_credentials`` (``faust.SASLCredentials`` or ``faust.SSLCredentials``, which Faust hands
to the same aiokafka arguments). :func:`redis_options` does the same for redis-py's ``Redis.from_url``.

Passwords are fields with ``repr=False``; nothing here logs. aiokafka logs every request at DEBUG,
and a SASL PLAIN request holds the password, so a client with SASL gets :class:`HideSaslPayloads` on
aiokafka's connection logger first.
"""

from __future__ import annotations

import logging
import re
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


class HideSaslPayloads(logging.Filter):
    """Replaces the bytes of SASL requests and responses (``sasl_auth_bytes=b'...'``: with PLAIN, the
    username and password) in a log record by ``<hidden>``; every record still passes."""

    PAYLOAD = re.compile(r"""sasl_auth_bytes=b(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "sasl_auth_bytes" in message:
            # args (), not None: Faust's (mode's) formatter wraps a non-tuple in one and formats again
            record.msg, record.args = self.PAYLOAD.sub("sasl_auth_bytes=<hidden>", message), ()
        return True


def hide_sasl_payloads() -> None:
    """Install :class:`HideSaslPayloads` on ``aiokafka.conn`` (once)."""
    logger = logging.getLogger("aiokafka.conn")
    if not any(isinstance(f, HideSaslPayloads) for f in logger.filters):
        logger.addFilter(HideSaslPayloads())


def _no_passphrase() -> str:
    raise ValueError("the key file is encrypted; give an unencrypted key (keep it in a Secret)")


def client_ssl_context(cafile: str | None = None, certfile: str | None = None,
                       keyfile: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server (certificate chain and host name) against ``cafile``
    (or the system's CAs when ``None``) and, with ``certfile`` (and ``keyfile``), presents a client
    certificate. Raises :class:`ssl.SSLError`, :class:`OSError` or :class:`ValueError` (an encrypted
    key) when a file cannot be used; it never prompts for a passphrase."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile, password=_no_passphrase)
    return context


@dataclass(frozen=True)
class KafkaSecurity:
    """The security settings of every Kafka client of one process (the defaults: plaintext, no SASL)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in {"SSL", "SASL_SSL"}

    @property
    def sasl(self) -> bool:
        return self.protocol in {"SASL_PLAINTEXT", "SASL_SSL"}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the connections (``None`` without TLS)."""
        return client_ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile) if self.tls else None

    def aiokafka_options(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaProducer``, ``AIOKafkaConsumer`` and ``AIOKafkaAdminClient``."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl:
            hide_sasl_payloads()
            options.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                           sasl_plain_password=self.sasl_password)
        return options

    def faust_credentials(self) -> Any:
        """``broker_credentials`` for ``faust.App``: SASL (over TLS when the protocol says so), TLS alone,
        or ``None`` (plaintext)."""
        import faust

        context = self.ssl_context()
        if self.sasl:
            hide_sasl_payloads()
            return faust.SASLCredentials(username=self.sasl_username, password=self.sasl_password,
                                         ssl_context=context, mechanism=self.sasl_mechanism)
        if context is not None:
            return faust.SSLCredentials(context)
        return None


def redis_options(url: str, password: str | None = None, cafile: str | None = None,
                  certfile: str | None = None, keyfile: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``monitor.store.client.connect(url, ...)``: the password when it is not in
    the URL, and for a ``rediss://`` or ``rediss+cluster://`` URL the CA to verify the server with and the
    client certificate, when given."""
    options: dict[str, Any] = {}
    if password is not None:
        options["password"] = password
    if urlsplit(url).scheme in {"rediss", "rediss+cluster"}:
        for name, value in (("ssl_ca_certs", cafile), ("ssl_certfile", certfile), ("ssl_keyfile", keyfile)):
            if value is not None:
                options[name] = value
    return options

"""Local real services for development, tests and CI: Kafka (KRaft), Redis, Prometheus, Alertmanager.

An adapter, not core: it starts real server processes on loopback, in a working folder of its own, so the
parts of the monitor that talk to Kafka, Redis and Prometheus can be run and tested on machines without a
Docker engine. ``monitor services up | down | status | install`` is the command line (:mod:`.cli`); the
pytest fixtures in ``tests/fixtures/services.py`` use the same classes on free ports.

One module per concern: :mod:`.ports` (free loopback ports), :mod:`.process` (spawning, stopping and
waiting for a server), :mod:`.install` (Debian packages and the Kafka jars), one module per server
(:mod:`.kafka`, :mod:`.redis_server`, :mod:`.prometheus`, :mod:`.alertmanager`; the first two also in a
secured form, SASL/TLS and ACL/TLS, with certificates from :mod:`.tls`), clusters of them as one service
(:mod:`.group`: :mod:`.redis_cluster`, :mod:`.kafka_cluster`) and :mod:`.stack` (the set of servers ``up``
started, recorded in ``state.json``).
"""

from __future__ import annotations

from monitor.services.process import ServiceError

__all__ = ["ServiceError"]

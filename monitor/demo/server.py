"""``/metrics`` on loopback for the demo: a fresh registry holding only the given collectors.

prometheus_client's WSGI server runs in a daemon thread; each scrape calls the collectors, which read
the engine's latest published snapshot (an immutable value swapped in by the main loop), so a scrape
never sees a half-applied event and never blocks the pipeline.
"""

from __future__ import annotations

from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

LOOPBACK = "127.0.0.1"


class MetricsServer:
    def __init__(self, collectors: Iterable[Collector], port: int, host: str = LOOPBACK) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        self.registry = CollectorRegistry()
        for collector in collectors:
            self.registry.register(collector)
        try:
            server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise OSError(f"cannot serve /metrics on {host}:{port}: {error.strerror or error}"
                          + ("; pick another --port, or --port 0 for a free one" if port else "")) from error
        self._server: WSGIServer = server
        self.host, self.port = host, int(server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

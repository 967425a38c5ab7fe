"""A streaming monitor for search relevance.

``monitor.core`` is the pure metric core (no I/O, no clock); ``monitor.offline`` evaluates files with it;
the adapters (Kafka, Redis, HTTP, Prometheus) live beside them and import the core, never the reverse.
"""

__version__ = "0.1.0"
